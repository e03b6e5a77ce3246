"""Messages of the API and the CLI that name what is wrong (issue 34): train --resume names the options
it ignores (another --pe was ignored under a generic note); type misuse of the API is a PosymError."""

from __future__ import annotations

from posym import cli

TINY = ["--steps", "2", "--eval-every", "2", "--checkpoint-every", "2", "--no-track-heads", "--quiet",
        "--set", "n_layer=1", "--set", "n_embd=32", "--set", "n_inner=64", "--set", "rotary_dim=32"]


def test_the_resume_note_names_the_ignored_options(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert cli.main(["train", "--task", "number", "--out", out] + TINY) == 0
    capsys.readouterr()
    rc = cli.main(["train", "--task", "number", "--out", out, "--resume", "--pe", "ssmax", "--set", "n_layer=2"])
    err = capsys.readouterr().err
    assert "--resume continues with the run's stored configuration; ignored: --set n_layer=2, --pe ssmax" in err
    assert rc == 2 and "already complete" in err


def test_api_type_misuse_is_a_posym_error(tmp_path):
    """Issue 34: a list where a mapping of variants goes (AttributeError) and a layer 'a' (ValueError)."""
    import pytest

    from posym.errors import PosymError
    from posym.interventions import plan_interventions
    from posym.studies.encodings import pe_study
    from posym.studies.sensitivity import sensitivity

    for call in (lambda: pe_study(["runs/rt"], tmp_path / "p"), lambda: sensitivity(["runs/rt"], tmp_path / "s"),
                 lambda: plan_interventions(["ntk:kappa=2"], layers=["a"]),
                 lambda: plan_interventions(["temperature:beta=1"], layers="01")):
        with pytest.raises(PosymError):
            call()
    assert not list(tmp_path.iterdir())
