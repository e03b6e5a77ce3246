"""``posym reproduce --set train_batched=true``: the seeds of each task trained as one batched model (issue 39).

Tolerance as ``tests/train/test_batched.py`` (fp32, CPU): every table of every stage equals the unbatched
reproduction's (``tiny_repro``) — text columns exactly, numbers to 1e-5 relative (1e-6 absolute) — and final
weights to 1e-5 of each tensor's largest magnitude; only timings, memory and the weights fingerprint differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.runs.layout import read_marker
from posym.verbs.reproduce import plan_stages, preset_settings
from posym.verbs.settings import check_train_batched, validate_settings

ALL = [s.name for s in plan_stages(("number", "letter"), 2, llm=False)]
#: Columns that record how a table was made, not what it holds (seconds, memory, the weights' fingerprint).
MADE = {"time_s", "seconds", "peak_rss_mb", "weights"}
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def batched_repro(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("repro_batched") / "dir"
    argv = ["reproduce", "--preset", "tiny", "--out", str(out), "--seeds", "2", "--no-llm", "--quiet", "--jobs", "2",
            "--set", "train_batched=true"]
    assert main(argv) == 0
    return out


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and "stages" not in p.parts
                  and not p.name.startswith("."))


def _close(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True), where
    else:
        assert a == b, where


@pytest.mark.integration  # two tiny reproductions (~1 min each on 2 cores)
def test_batched_reproduction_equals_the_unbatched_one(tiny_repro, batched_repro):
    from safetensors.torch import load_file

    for name in ALL:
        assert read_marker(batched_repro, name)["status"] == "done", name
    for task in ("number", "letter"):  # s0 trained the task's two seeds as one model; s1 found its run trained
        assert read_marker(batched_repro, f"train-{task}-s0")["info"]["batched"] == [0, 1]
        assert read_marker(batched_repro, f"train-{task}-s1")["info"]["note"] == "already trained"
    meta = json.loads((batched_repro / "reproduce.json").read_text())
    assert meta["settings"] == {**preset_settings("tiny"), "train_batched": True}
    files = _files(tiny_repro)
    assert files == _files(batched_repro)
    n_tables = n_weights = 0
    for rel in files:
        a, b = tiny_repro / rel, batched_repro / rel
        if rel.suffix == ".csv":
            x, y = pd.read_csv(a), pd.read_csv(b)
            assert list(x.columns) == list(y.columns) and len(x) == len(y), rel
            keep = [c for c in x.columns if c not in MADE]
            num = [c for c in keep if pd.api.types.is_numeric_dtype(x[c])]
            text = [c for c in keep if c not in num]
            assert x[text].equals(y[text]), rel
            np.testing.assert_allclose(y[num].to_numpy(float), x[num].to_numpy(float), rtol=RTOL, atol=ATOL,
                                       err_msg=str(rel))
            n_tables += 1
        elif rel.name == "flow.json":
            _close(json.loads(a.read_text()), json.loads(b.read_text()), str(rel))
        elif rel.name == "model.safetensors" and rel.parent.name == "step-000030":
            wa, wb = load_file(str(a)), load_file(str(b))
            for k in wa:
                scale = max(float(wa[k].abs().max()), 1e-3)
                assert float((wa[k] - wb[k]).abs().max()) <= RTOL * scale, (rel, k)
            n_weights += 1
    assert n_weights == 4  # the final weights of the 4 runs
    assert n_tables >= 40  # metrics, scores, purity, ablation, freqs, lengthgen of 4 runs; theory; aggregate


def test_the_plan_and_the_setting():
    plain, batched = plan_stages(("number",), 3, llm=False), plan_stages(("number",), 3, llm=False, batched=True)
    assert [s.name for s in plain] == [s.name for s in batched]  # the same stages and run folders
    deps = {s.name: s.deps for s in batched}
    assert deps["train-number-s0"] == () and deps["train-number-s1"] == deps["train-number-s2"] == ("train-number-s0",)
    with pytest.raises(PosymError, match="train_batched"):
        validate_settings(preset_settings("tiny", {"train_batched": "yes"}), ("number",))
    paper = preset_settings("paper", {"train_batched": True})  # dropout 0.1: exact on the CPU and CUDA
    check_train_batched(paper, ("number", "letter"), 2, "cpu")
    check_train_batched(paper, ("number", "letter"), 2, "cuda")  # explicit masks (posym.model.fast.explicit_dropout)
    check_train_batched(paper, ("number",), 1, "mps")  # one seed: nothing to batch
    with pytest.raises(PosymError, match="cpu or cuda only"):
        check_train_batched(paper, ("number",), 2, "mps")
