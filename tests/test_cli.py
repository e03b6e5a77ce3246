"""CLI: thin verbs over the API; user errors are one line on stderr with exit status 2."""

import json
import subprocess
import sys

import pytest

from posym.cli import main


def _err_lines(capsys):
    return [l for l in capsys.readouterr().err.splitlines() if l.strip()]


@pytest.mark.parametrize("argv, needle", [
    (["train", "--task", "words", "--out", "X"], "argument --task: invalid choice: 'words'"),
    (["train", "--task", "number", "--preset", "huge", "--out", "X"], "argument --preset: invalid choice: 'huge'"),
    (["train", "--task", "number", "--out", "X", "--set", "n_layers=3"], "unknown GPTJConfig field"),
    (["train", "--task", "number", "--out", "X", "--set", "novalue"], "expected KEY=VALUE"),
])
def test_bad_input_is_one_line_error(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("posym: error:") and needle in err[0]
    assert not (tmp_path / "X").exists()


def test_resume_missing_and_corrupt_checkpoint(tmp_path, capsys):
    assert main(["train", "--task", "number", "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "not a posym run directory" in _err_lines(capsys)[0]
    run = tmp_path / "run"
    argv = ["train", "--task", "number", "--out", str(run), "--steps", "4", "--eval-every", "2",
            "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_inner=16", "--set", "rotary_dim=16", "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 2  # exists, no --force: nothing overwritten
    assert "already exists" in _err_lines(capsys)[0]
    assert main(["train", "--task", "number", "--out", str(run), "--resume"]) == 2
    assert "already complete" in _err_lines(capsys)[0]
    (run / "checkpoints/step-000004/model.safetensors").write_bytes(b"\0" * 10)
    assert main(["train", "--task", "number", "--out", str(run), "--resume"]) == 2
    assert "corrupt checkpoint" in _err_lines(capsys)[0]
    (run / "checkpoints/step-000004/trainer_state.pt").write_bytes(b"junk")
    assert main(["train", "--task", "number", "--out", str(run), "--resume"]) == 2
    assert "corrupt trainer state" in _err_lines(capsys)[0]


def test_unwritable_output(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["train", "--task", "letter", "--out", str(blocker / "run"), "--steps", "2"]) == 2
    assert "cannot write" in _err_lines(capsys)[0]


def test_data_export_and_show(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["data", "export", "--task", "letter", "--split", "val", "--n", "7", "--extra-tokens", "3", "--out", str(out)]) == 0
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(rows) == 7
    for r in rows:
        assert {"tokens", "label", "hops", "answer_pos"} <= set(r)
        assert r["tokens"][r["answer_pos"]] == r["label"] and len(r["tokens"]) == 3 + 17
    assert main(["data", "export", "--task", "letter", "--n", "2", "--out", str(out)]) == 2  # no overwrite
    assert len(out.read_text().splitlines()) == 7
    capsys.readouterr()
    assert main(["data", "show", "--task", "number", "--n", "3"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 3


def test_console_script_exit_status():
    r = subprocess.run([sys.executable, "-m", "posym.cli", "train", "--task", "nope", "--out", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_theory_discrepancy_and_llm_errors(tmp_path, capsys):
    import pandas as pd

    assert main(["theory", "discrepancy", "--out", str(tmp_path), "--n-max", "30"]) == 0
    t = pd.read_csv(tmp_path / "discrepancy.csv")
    assert {"mechanism", "n", "delta", "bound"} <= set(t.columns) and set(t["mechanism"]) == {"index", "retrieval"}
    assert (t["delta"] >= 0).all() and t["n"].max() == 30
    capsys.readouterr()
    assert main(["llm", "eval", "--api-base", "http://127.0.0.1:9", "--n", "2"]) == 2
    assert "--api-model" in _err_lines(capsys)[0]


def test_quick_reproduction_time_is_one_text_in_readme_and_help(capsys):
    """The README and ``reproduce --help`` quote one measured cost of the quick reproduction
    (CPU-minutes beside wall time), ``posym.resources.QUICK_REPRODUCTION_TIME``."""
    from pathlib import Path

    from posym.resources import QUICK_REPRODUCTION_TIME

    assert "CPU-minutes" in QUICK_REPRODUCTION_TIME and "wall" in QUICK_REPRODUCTION_TIME
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert QUICK_REPRODUCTION_TIME in readme
    assert main(["reproduce", "--help"]) == 0
    assert " ".join(QUICK_REPRODUCTION_TIME.split()) in " ".join(capsys.readouterr().out.split())
