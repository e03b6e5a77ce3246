"""The CLI's promise, command by command: a bad value, an unwritable or read-only output, a file
where a folder is needed — each gives exit status 2, one ``posym: error:`` line, no traceback, and
nothing is written or changed. Re-running a verb into an existing output without ``--force``
leaves the files as they were."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from posym.cli import main

TINY = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
        "--set", "n_inner=16", "--set", "rotary_dim=16", "--track-prompts", "8", "--quiet"]


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    """A tiny trained run ``run/``, a plain file ``afile`` and a prompt file, shared by the matrix."""
    root = tmp_path_factory.mktemp("matrix")
    assert main(["train", "--task", "number", "--out", str(root / "run"), *TINY]) == 0
    (root / "afile").write_text("not a folder\n")
    (root / "bad.jsonl").write_text('[1, 2, 3]\n')
    (root / "nul.jsonl").write_bytes(b"\xff\xfe\n")
    (root / "notok.jsonl").write_text('{"label": "a"}\n')
    old_lengthgen = "task,step,extra_rule,extra_tokens,seed,n,acc,acc_hop1,acc_hop2,acc_hop3,acc_hop4,seconds,peak_rss_mb\n"
    (root / "lg_old.csv").write_text(old_lengthgen + "number,4,window,0,0,4,0.5,0,0,1,1,0.1,400\n")
    header = old_lengthgen.replace("step,", "step,weights,").replace("extra_rule,", "extra_rule,distractors,")
    (root / "lg_abc.csv").write_text(header + "number,4,00ff,window,pool,0,0,4,abc,0,0,1,1,0.1,400\n")
    return root


def _run(argv: list[str], root: Path, capsys) -> str:
    before = _snapshot(root)
    rc = main([a.replace("ROOT", str(root)) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2, (argv, err)
    assert len(lines) == 1 and lines[0].startswith("posym: error: "), (argv, err)
    assert "Traceback" not in err
    assert _snapshot(root) == before, argv  # nothing written or changed
    return lines[0]


BAD_VALUES = [
    # malformed lists and numbers (were tracebacks)
    (["scores", "ROOT/run", "--steps", "0,,abc"], "comma-separated integers"),
    (["scores", "ROOT/run", "--steps", "1,a"], "comma-separated integers"),
    (["dynamics", "ROOT/run", "--layers", "0,,abc"], "comma-separated integers"),
    (["llm", "eval", "--lengths", "12,x"], "comma-separated integers"),
    (["llm", "eval", "--lengths", "0,,abc"], "comma-separated integers"),
    (["llm", "eval", "--max-new-tokens", "0"], "must be >= 1"),
    (["llm", "eval", "--n", "0"], "must be >= 1"),
    (["llm", "eval", "--threads", "-1"], "threads must be >= 1"),
    (["llm", "eval", "--device", "foo"], "expected cpu, cuda"),
    (["llm", "eval", "--protocol", "vote"], "invalid choice"),
    (["llm", "eval", "--protocol", "choice", "--api-base", "http://127.0.0.1:9/v1", "--api-model", "m"],
     "log-probability"),
    (["train", "--task", "number", "--out", "ROOT/x", "--threads", "-1"], "threads must be >= 1"),
    (["train", "--task", "number", "--out", "ROOT/x", "--device", "foo"], "expected cpu, cuda"),
    (["train", "--task", "number", "--out", "ROOT/x", "--seed", "-1"], ">= 0"),
    (["train", "--task", "number", "--out", "ROOT/x", "--track-prompts", "-5"], "must be >= 1"),
    (["train", "--task", "number", "--out", "ROOT/x", "--set", "n_head=0"], "n_head must be a positive integer"),
    (["train", "--task", "number", "--out", "ROOT/x", "--set", "n_layer=abc"], "n_layer must be a positive integer"),
    (["train", "--task", "number", "--out", "ROOT/x", "--set", "n_layer=-1"], "n_layer must be a positive integer"),
    (["train", "--task", "number", "--out", "ROOT/x", "--set", "n_embd=30", "--set", "n_head=4"], "not divisible"),
    (["train", "--task", "number", "--out", "ROOT/x", "--steps", "10000000000"], "exceeds"),
    (["train", "--task", "number", "--out", "ROOT/x", "--epochs", "0"], "positive"),
    (["train", "--task", "letter", "--out", "ROOT/run", "--resume"], "is a number run"),
    (["dynamics", "ROOT/run", "--gamma", "5"], "gamma must lie in (0, 0.5)"),
    (["dynamics", "ROOT/run", "--gamma", "nan"], "finite"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--stages", ",,"], "comma-separated list"),
    # --intervene / --layers (docs/interventions.md): every spec checked before any work or write
    (["scores", "ROOT/run", "--out", "ROOT/s.csv", "--intervene", "bogus:x=1"], "unknown intervention"),
    (["scores", "ROOT/run", "--out", "ROOT/s.csv", "--intervene", "none", "--layers", "0"],
     "--layers restricts an intervention"),
    (["scores", "ROOT/run", "--out", "ROOT/s.csv", "--intervene", "temperature:beta=1", "--layers", "7"],
     "layer 7 out of range"),
    (["scores", "ROOT/run", "--out", "ROOT/s.csv", "--layers", "0"], "--layers restricts an intervention"),
    (["freqs", "ROOT/run", "--out", "ROOT/f", "--intervene", "freq-mask:keep=0"], "frequency IDs start at 1"),
    (["freqs", "ROOT/run", "--out", "ROOT/f", "--intervene", "none", "--intervene", "none"], "repeats"),
    (["llm", "eval", "--out", "ROOT/o", "--intervene", "temperature:beta=x"], "not a number"),
    (["llm", "heads", "--out", "ROOT/o", "--intervene", "none", "--layers", "0"],
     "--layers restricts an intervention"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--tasks", ",,"], "comma-separated list"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", "lengthgen_n=-5"], "bad reproduction setting"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", "train.bogus=1"], "bad reproduction setting"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--device", "foo"], "expected cpu, cuda"),
    (["theory", "discrepancy", "--out", "ROOT/th", "--theta-index", "nan"], "finite"),
    (["theory", "discrepancy", "--out", "ROOT/th", "--n-max", "2000"], "Retrieval needs"),
    (["theory", "discrepancy", "--out", "ROOT/th", "--intervene", "temperature:beta=1,layers=0"], "one head"),
    (["theory", "discrepancy", "--out", "ROOT/th", "--intervene", "ntk:kappa=2", "--lengths", "1,17"], ">= 2"),
    (["ablate", "ROOT/run", "--modes", "zero,bogus"], "unknown 'bogus'"),
    (["lengthgen", "ROOT/run", "--grid", "0,-10"], ">= 0"),
    (["lengthgen", "ROOT/run", "--grid", "100000000", "--n", "1", "--out", "ROOT/lg.csv"], "needs about"),
    (["data", "show", "--task", "number", "--n", "5", "--extra-tokens", "1000000000"], "needs about"),
    # corrupt or foreign inputs
    (["scores", "--model", "ROOT/run/checkpoints/step-000004", "--prompts", "ROOT/bad.jsonl", "--out", "ROOT/s.csv"],
     "expected a JSON object"),
    (["scores", "--model", "ROOT/run/checkpoints/step-000004", "--prompts", "ROOT/nul.jsonl", "--out", "ROOT/s.csv"],
     "not UTF-8"),
    (["scores", "--model", "ROOT/run/checkpoints/step-000004", "--prompts", "ROOT/notok.jsonl", "--out", "ROOT/s.csv"],
     "'tokens' list"),
    (["scores", "ROOT/nope", "--task", "number"], "no such run"),
    (["report", "ROOT/run"], "not a reproduction directory"),
    # what --force may replace, and tables that know what they measured (lengthgen --resume)
    (["train", "--task", "number", "--out", "ROOT/run/checkpoints/step-000004", "--force", *TINY], "checkpoint folder"),
    (["train", "--task", "number", "--out", "ROOT/run/checkpoints/best", "--force", *TINY], "checkpoint folder"),
    (["train", "--task", "number", "--out", "ROOT/run/checkpoints", "--force", *TINY], "lies inside the run"),
    (["select", "ROOT/run", "--out", "ROOT/run", "--force"], "overlaps the run"),
    (["select", "ROOT/run", "--out", "ROOT/run/derived", "--force"], "overlaps the run"),
    (["lengthgen", "ROOT/run", "--grid", "0", "--n", "4", "--resume", "--out", "ROOT/lg_old.csv"], "older posym"),
    (["lengthgen", "ROOT/run", "--grid", "0", "--n", "4", "--resume", "--out", "ROOT/lg_abc.csv"],
     "row 1: acc = 'abc' is not a number in [0, 1]"),
]


@pytest.mark.parametrize("argv, needle", BAD_VALUES, ids=[" ".join(a[:3]) + f"-{i}" for i, (a, _) in enumerate(BAD_VALUES)])
def test_bad_value(argv, needle, sandbox, capsys):
    assert needle in _run(argv, sandbox, capsys)


#: One command per verb writing under OUT (a folder placeholder), fast enough for the matrix.
WRITERS = [
    ["data", "export", "--task", "number", "--n", "3", "--out", "OUT/x.jsonl"],
    ["scores", "ROOT/run", "--n", "4", "--out", "OUT/s.csv"],
    ["dynamics", "ROOT/run", "--out", "OUT"],
    ["flow", "ROOT/run", "--out", "OUT"],
    ["ablate", "ROOT/run", "--n", "8", "--out", "OUT"],
    ["freqs", "ROOT/run", "--n", "4", "--out", "OUT"],
    ["lengthgen", "ROOT/run", "--grid", "0", "--n", "4", "--out", "OUT/lg.csv"],
    ["theory", "discrepancy", "--n-max", "10", "--out", "OUT"],
    ["theory", "restricted", "--steps", "1", "--out", "OUT"],
    ["llm", "heads", "--model", "ROOT/nope", "--out", "OUT"],
    ["llm", "eval", "--model", "ROOT/nope", "--out", "OUT"],
    ["select", "ROOT/run", "--out", "OUT/sel"],
    ["train", "--task", "number", "--out", "OUT/run", *TINY],
    ["reproduce", "--preset", "tiny", "--no-llm", "--out", "OUT/r"],
]


@pytest.mark.parametrize("argv", WRITERS, ids=[" ".join(a[:2]) for a in WRITERS])
def test_output_under_a_file(argv, sandbox, capsys):
    line = _run([a.replace("OUT", "ROOT/afile") for a in argv], sandbox, capsys)
    assert "afile" in line


@pytest.fixture(scope="module")
def readonly(tmp_path_factory):
    """A read-only folder (a read-only bind mount: root ignores permission bits)."""
    d = tmp_path_factory.mktemp("ro")
    if os.geteuid() != 0:
        d.chmod(0o555)
        yield d
        d.chmod(0o755)
        return
    ok = subprocess.run(["mount", "--bind", str(d), str(d)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,ro,bind", str(d)], capture_output=True).returncode == 0
    if not ok:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)  # lazy: never leave a mount behind
        pytest.skip("cannot make a read-only folder here (mount --bind needs CAP_SYS_ADMIN)")
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True)  # lazy: never leave a mount behind


@pytest.mark.integration
@pytest.mark.parametrize("argv", WRITERS, ids=[" ".join(a[:2]) for a in WRITERS])
def test_read_only_output(argv, sandbox, readonly, capsys):
    line = _run([a.replace("OUT", str(readonly / "sub")) for a in argv], sandbox, capsys)
    assert str(readonly) in line


RERUNS = [
    ["scores", "ROOT/run", "--n", "4", "--out", "ROOT/again/s.csv"],
    ["dynamics", "ROOT/run", "--out", "ROOT/again"],
    ["flow", "ROOT/run", "--out", "ROOT/again"],
    ["ablate", "ROOT/run", "--n", "8", "--out", "ROOT/again"],
    ["freqs", "ROOT/run", "--n", "4", "--no-scores", "--out", "ROOT/again"],
    ["lengthgen", "ROOT/run", "--grid", "0", "--n", "4", "--out", "ROOT/again/lg.csv"],
    ["theory", "discrepancy", "--n-max", "10", "--out", "ROOT/again"],
    ["data", "export", "--task", "number", "--n", "3", "--out", "ROOT/again/x.jsonl"],
    ["train", "--task", "number", "--out", "ROOT/again/run", *TINY],
]


@pytest.mark.parametrize("argv", RERUNS, ids=[" ".join(a[:2]) for a in RERUNS])
def test_rerun_without_force_changes_nothing(argv, sandbox, capsys):
    cmd = [a.replace("ROOT", str(sandbox)) for a in argv]
    assert main(cmd) == 0
    capsys.readouterr()
    line = _run(argv, sandbox, capsys)
    assert "exists" in line or "--force" in line
    assert main(cmd + ["--force"]) == 0  # and --force replaces


# ------------------------------------------------------------------------------------------------
# llm eval / llm heads: missing and foreign models, the two protocols' folders (docs/llm.md)
# ------------------------------------------------------------------------------------------------
_LLM_SMALL = ["--lengths", "12", "--runs", "1", "--n", "1", "--tasks", "number"]
LLM_MODELS = [
    (["llm", "eval", "--model", "ROOT/nope", "--out", "ROOT/o"], "no such model folder: "),
    (["llm", "eval", "--protocol", "choice", "--model", "ROOT/nope", "--out", "ROOT/o"], "no such model folder: "),
    (["llm", "heads", "--model", "ROOT/nope", "--out", "ROOT/o"], "no such model folder: "),
    (["llm", "heads", "--model", "bogusname", "--out", "ROOT/o"], "no such model folder: bogusname"),
    (["llm", "eval", "--model", "ROOT/run/checkpoints/step-000004", *_LLM_SMALL, "--out", "ROOT/o"],
     "has no tokenizer"),
    (["llm", "eval", "--protocol", "choice", "--model", "ROOT/run/checkpoints/step-000004", *_LLM_SMALL,
      "--out", "ROOT/o"], "has no tokenizer"),
    (["llm", "heads", "--model", "ROOT/run/checkpoints/step-000004", "--out", "ROOT/o"], "has no tokenizer"),
]


@pytest.mark.parametrize("argv, needle", LLM_MODELS, ids=[" ".join(a[:4]) + f"-{i}" for i, (a, _) in enumerate(LLM_MODELS)])
def test_llm_missing_or_foreign_model(argv, needle, sandbox, capsys):
    line = _run(argv, sandbox, capsys)
    assert needle in line and "huggingface.co" not in line


@pytest.mark.parametrize("held, asked", [("choice", "generate"), ("generate", "choice")])
def test_llm_eval_into_the_other_protocols_folder(held, asked, sandbox, capsys):
    from posym.runs import layout

    d = sandbox / f"llm-{held}"
    if not d.exists():
        d.mkdir()
        (d / layout.LLM_TABLE).write_text(f"task,length,mean,sd,runs,n,model,protocol\nnumber,12,0.1,,1,1,m,{held}\n")
    line = _run(["llm", "eval", "--protocol", asked, "--model", "ROOT/nope", "--out", f"ROOT/llm-{held}"], sandbox,
                capsys)
    assert f"holds the tables of the {held} protocol" in line


# --- reproduce driver, training options, data export, sensitivity, memory checks (cli-misc) ---------
@pytest.fixture(scope="module")
def misc_sandbox(sandbox) -> Path:
    """``sandbox`` plus ``badcfg/``: an unfinished copy of ``run/`` whose posym.json has ``steps: "many"``."""
    import json
    import shutil

    bad = sandbox / "badcfg"
    if not bad.exists():
        shutil.copytree(sandbox / "run", bad)
        (bad / "results.json").unlink()
        meta = json.loads((bad / "posym.json").read_text())
        meta["config"]["steps"] = "many"
        (bad / "posym.json").write_text(json.dumps(meta))
    return sandbox


MISC_BAD_VALUES = [
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--set", "n_positions=16"], "n_positions=16 is shorter"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--seed", "1180591620717411303424"], "seed must be"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--set", "activation_function=bogus"],
     "unknown activation_function"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--set", "layer_norm_epsilon=-1"],
     "layer_norm_epsilon must be a finite positive"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--set", "initializer_range=nan"],
     "initializer_range must be a finite positive"),
    (["train", "--task", "number", "--out", "ROOT/badcfg", "--resume"], "config.steps must be an integer"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--pe", "alibi"], "unknown positional encoding"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--pe", "p-rope:2"], "fraction F must be in [0, 1]"),
    (["train", "--task", "number", "--out", "ROOT/x", *TINY, "--pe", "randomized:10"], "L must be >= the training"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", "train.pe=rope-base:0.5"], "base must be > 1"),
    (["train", "--task", "number", "--out", "ROOT/run", "--resume", "--force", *TINY], "exclude each other"),
    (["sensitivity", "a=ROOT/nope", "--out", "ROOT/se"], "no such directory: "),
    (["sensitivity", "a=ROOT/run", "b=ROOT/run/", "--out", "ROOT/se"], "are the same"),
    (["pe-study", "a=ROOT/nope", "--out", "ROOT/pe"], "no such directory: "),
    (["pe-study", "a=ROOT/run", "--out", "ROOT/pe"], "holds no finished run"),
    (["data", "export", "--task", "number", "--n", "3", "--out", "ROOT/run"], "is a folder; give a file path"),
    (["data", "export", "--task", "number", "--n", "3", "--out", "ROOT/run", "--force"], "is a folder; give a file"),
    (["data", "show", "--task", "number", "--n", "5", "--extra-tokens", "1000000000"], "needs about"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", "llm.max_new_tokens=0"], "llm.max_new_tokens"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", "llm.device=foo"], "llm.device"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", "llm.dtype=bogus"], "llm.dtype"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", 'llm_models=["ROOT/nope"]'], "no such model folder"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", 'llm_models=["bogusname"]'], "bogusname"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--set", 'llm_models=["ROOT/nope.gguf"]'], "not found"),
    # an error raised while a progress bar is open is printed on its own line
    (["lengthgen", "ROOT/run", "--grid", "0", "--n", "1000000000", "--out", "ROOT/lg.csv"], "needs about"),
]


@pytest.mark.parametrize("argv, needle", MISC_BAD_VALUES,
                         ids=[" ".join(a[:3]) + f"-{i}" for i, (a, _) in enumerate(MISC_BAD_VALUES)])
def test_misc_bad_value(argv, needle, misc_sandbox, capsys):
    assert needle in _run(argv, misc_sandbox, capsys)


def test_data_show_memory_scales_with_rows(monkeypatch, capsys):
    """One long sample needs its own row (24 MB for 3,000,000 tokens), not 1,024 rows of temporaries."""
    import posym.resources

    monkeypatch.setattr(posym.resources, "available_memory", lambda: 4 * 2**30)
    assert main(["data", "show", "--task", "number", "--n", "1", "--extra-tokens", "3000000"]) == 0
    assert "-> " in capsys.readouterr().out
    assert main(["data", "show", "--task", "number", "--n", "5", "--extra-tokens", "1000000000"]) == 2
    assert "needs about" in capsys.readouterr().err


def test_error_after_a_progress_bar_has_its_own_line(sandbox, capsys):
    """stderr not a terminal: an error raised while a bar is drawn starts its own line (no ``\\r``
    fragments, nothing glued to the bar)."""
    assert main(["scores", str(sandbox / "run"), "--task", "letter", "--out", str(sandbox / "sl.csv")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "\r" not in err and lines[-1].startswith("posym: error: ") and "not letter" in lines[-1]
    assert all(line.startswith("scoring checkpoints") for line in lines[:-1]), lines


# --- reproduce --launcher slurm: bad launcher options, refused before anything is submitted ---------
LAUNCHER_BAD_VALUES = [
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "pbs"], "invalid choice: 'pbs'"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--slurm-time", "soon"],
     "--slurm-time 'soon'"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--slurm-cpus", "0"], ">= 1"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--slurm-gpus", "-1"], ">= 0"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--slurm-partition", "a b"],
     "partition name"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--slurm-opt", "output=x.log"],
     "posym sets it for each job"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--slurm-opt", "time=1:00:00"],
     "use --slurm-time"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--launcher-config", "ROOT/nope.toml"],
     "no such file"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--launcher-config", "ROOT/afile"],
     "give a .toml or .json file"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--launcher", "slurm", "--jobs", "2"],
     "--jobs sets the local worker processes"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--detach"], "need --launcher slurm"),
    (["reproduce", "--preset", "tiny", "--out", "ROOT/r", "--slurm-partition", "gpu"], "need --launcher slurm"),
    (["status", "ROOT/run"], "not a reproduction directory"),
]


@pytest.mark.parametrize("argv, needle", LAUNCHER_BAD_VALUES,
                         ids=[" ".join(a[5:8]) + f"-{i}" for i, (a, _) in enumerate(LAUNCHER_BAD_VALUES)])
def test_launcher_bad_value(argv, needle, sandbox, capsys):
    assert needle in _run(argv, sandbox, capsys)
