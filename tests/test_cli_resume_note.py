"""``posym train --resume`` with options names the ones it ignores (issue 34: another ``--pe`` was
ignored under a generic note)."""

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
