"""The sensitivity study and a multi-seed lengthgen split into one Slurm job per unit (docs/cluster.md).

A fake ``sbatch`` (tests/launch/test_study_slurm.py) records the plans: one job per unit and a summary
job ``afterok`` on every unit; a re-run resubmits only the units not done. Without Slurm, the unit
commands and then the summary command run here in sequence (the ``posym _unit`` a job runs) and write
the tables a local run writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from posym.cli import main
from posym.launch import fanout
from posym.studies.sensitivity import sensitivity
from test_study_slurm import TIMING, _job_args, _submitted, fake  # noqa: F401  (fake: a fixture)


def _same_csvs(local: Path, split: Path, skip: tuple[str, ...] = ("slurm", "stages")) -> None:
    """Every CSV (and Markdown table) of the local output equals the split run's, timing columns aside."""
    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.suffix in (".csv", ".md")
                and not set(p.relative_to(root).parts) & set(skip)}
    assert files(local) and files(local) == files(split) - {f for f in files(split) if f.split("/")[0] in skip}
    for name in sorted(files(local)):
        if name.endswith(".md"):
            assert (local / name).read_text() == (split / name).read_text(), name
            continue
        a, b = pd.read_csv(local / name), pd.read_csv(split / name)
        keep = [c for c in a.columns if c not in TIMING]
        assert list(a.columns) == list(b.columns), name
        pd.testing.assert_frame_equal(a[keep], b[keep], check_exact=True, obj=name)
        if not set(a.columns) & TIMING:
            assert (local / name).read_bytes() == (split / name).read_bytes(), name


# ---------------------------------------------------------------- sensitivity: one job per variant


def test_sensitivity_one_job_per_variant_then_the_summary_equals_a_local_run(tiny_repro, tmp_path, fake,  # noqa: F811
                                                                           monkeypatch):
    b = tmp_path / "b"
    shutil.copytree(tiny_repro, b, symlinks=True)
    variants = {"A": tiny_repro, "B b": b}
    out = tmp_path / "split"
    sensitivity(variants, out, n=8, launcher="slurm")
    assert [(n, d) for _, n, d in _submitted(fake)] == [("sensitivity-predict-A", []), ("sensitivity-predict-B-b", []),
                                                       ("sensitivity-summary", ["100", "101"])]
    unit = _job_args(out, "sensitivity-predict-B-b")
    assert unit == ["sensitivity", f"B b={b}", "--out", str(out / "units" / "predict-B-b"), "--n", "8", "--force"]
    assert not (out / "sensitivity.csv").exists() and not (out / "units").exists()

    # A's job finished, B's was cancelled: a re-run submits B's and the summary again
    fanout.mark_done(out, "sensitivity-predict-A", _job_args(out, "sensitivity-predict-A"))
    sensitivity(variants, out, n=8, launcher="slurm")
    assert [(n, d) for _, n, d in _submitted(fake)[3:]] == [("sensitivity-predict-B-b", []),
                                                           ("sensitivity-summary", ["103"])]
    (out / "stages" / "sensitivity-predict-A.done").unlink()

    # the jobs here in order; the summary measures no model (it reads the variants' prediction.csv)
    for name in ("sensitivity-predict-A", "sensitivity-predict-B-b"):
        assert main(["_unit", str(out), name, "--", *_job_args(out, name)]) == 0, name
    import posym.theory.trained as trained

    def no_model(*a, **k):
        raise AssertionError("the summary measured a model again")
    with monkeypatch.context() as m:
        m.setattr(trained, "trained_discrepancy", no_model)
        assert main(["_unit", str(out), "sensitivity-summary", "--", *_job_args(out, "sensitivity-summary")]) == 0
    assert (out / "stages" / "sensitivity-summary.done").is_file() and (out / "sensitivity.html").is_file()
    local = tmp_path / "local"
    sensitivity(variants, local, n=8, progress=False)
    _same_csvs(local, out, skip=("slurm", "stages", "units"))
    assert len(pd.read_csv(out / "prediction.csv")) == 2 * 2 * 2
    # every job done: nothing submitted; other settings (n) are other work: every unit again
    res = sensitivity(variants, out, n=8, launcher="slurm", force=True)
    assert "skip  sensitivity-predict-A (done)" in res.summary
    assert [n for _, n, _ in _submitted(fake)[5:]] == ["sensitivity-summary"]
    sensitivity(variants, out, n=4, launcher="slurm", force=True)
    assert [n for _, n, _ in _submitted(fake)[6:]] == ["sensitivity-predict-A", "sensitivity-predict-B-b",
                                                      "sensitivity-summary"]
