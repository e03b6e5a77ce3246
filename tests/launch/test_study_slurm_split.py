"""The sensitivity study and a multi-seed lengthgen split into one Slurm job per unit (docs/cluster.md).

A fake ``sbatch`` (tests/launch/test_study_slurm.py) records the plans: one job per unit and a summary
job ``afterok`` on every unit; a re-run resubmits only the units not done. Without Slurm, the unit
commands and then the summary command run here in sequence (the ``posym _unit`` a job runs) and write
the tables a local run writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.launch import fanout
from posym.studies.sensitivity import sensitivity
from posym.verbs.lengthgen import lengthgen
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


# ---------------------------------------------------------------- lengthgen: one job per data seed


def test_lengthgen_one_job_per_data_seed_then_the_summary_equals_a_local_run(tiny_repro, tmp_path, fake,  # noqa: F811
                                                                           monkeypatch):
    run, table = tiny_repro / "number" / "seed0", tmp_path / "split" / "wide.csv"
    kw = dict(grid=[0, 20], n=8, seeds=3, intervene=["none", "ntk:kappa=4"], progress=False)
    lengthgen(run, out=table, launcher="slurm", **kw)
    assert [(n, d) for _, n, d in _submitted(fake)] == [("lengthgen-wide-seed0", []), ("lengthgen-wide-seed1", []),
                                                       ("lengthgen-wide-seed2", []),
                                                       ("lengthgen-wide-summary", ["100", "101", "102"])]
    unit = _job_args(table.parent, "lengthgen-wide-seed1")
    assert unit[:2] == ["lengthgen", str(run)] and unit[unit.index("--data-seed") + 1] == "1" and "--seeds" not in unit
    assert unit[unit.index("--out") + 1] == str(table.parent / "wide_parts" / "seed1.csv") and "--resume" in unit
    summary = _job_args(table.parent, "lengthgen-wide-summary")
    assert summary[summary.index("--seeds") + 1] == "3" and summary[summary.index("--out") + 1] == str(table)
    assert not table.exists() and not (table.parent / "wide_parts").exists()

    # seed 0's job finished, the others were cancelled: a re-run submits seeds 1, 2 and the summary
    fanout.mark_done(table.parent, "lengthgen-wide-seed0", _job_args(table.parent, "lengthgen-wide-seed0"))
    lengthgen(run, out=table, launcher="slurm", **kw)
    assert [(n, d) for _, n, d in _submitted(fake)[4:]] == [("lengthgen-wide-seed1", []), ("lengthgen-wide-seed2", []),
                                                           ("lengthgen-wide-summary", ["104", "105"])]
    (table.parent / "stages" / "lengthgen-wide-seed0.done").unlink()

    # the jobs here in order; the summary measures nothing (the parts' points) and is the table's one writer
    for k in range(3):
        name = f"lengthgen-wide-seed{k}"
        assert main(["_unit", str(table.parent), name, "--", *_job_args(table.parent, name)]) == 0, name
        assert set(pd.read_csv(table.parent / "wide_parts" / f"seed{k}.csv")["seed"]) == {k}
    assert not table.exists()
    import posym.lengthgen.trained as trained

    def no_point(*a, **k):
        raise AssertionError("the summary measured a point again")
    with monkeypatch.context() as m:
        m.setattr(trained, "evaluate_length", no_point)
        assert main(["_unit", str(table.parent), "lengthgen-wide-summary", "--", *summary]) == 0
    local = tmp_path / "local" / "wide.csv"
    lengthgen(run, out=local, **kw)
    _same_csvs(local.parent, table.parent, skip=("slurm", "stages", "wide_parts"))
    assert len(pd.read_csv(table)) == 2 * 2 * 3  # interventions x lengths x data seeds


def test_lengthgen_one_data_seed_is_one_job(tiny_repro, tmp_path, fake):  # noqa: F811
    run, table = tiny_repro / "number" / "seed0", tmp_path / "lg" / "one.csv"
    lengthgen(run, grid=[0, 20], n=8, data_seed=4, out=table, launcher="slurm")
    assert [(n, d) for _, n, d in _submitted(fake)] == [("lengthgen-run", [])]
    args = _job_args(table.parent, "lengthgen-run")
    assert args[args.index("--data-seed") + 1] == "4" and "--seeds" not in args
    with pytest.raises(PosymError, match="give --seeds 2 .* or --data-seed 1 .*, not both"):
        lengthgen(run, grid=[0], n=8, seeds=2, data_seed=1, out=table)
    res = lengthgen(run, grid=[0], n=4, data_seed=1, out=tmp_path / "k1.csv", progress=False)
    assert list(res.table["seed"]) == [1]
    both = lengthgen(run, grid=[0], n=4, seeds=2, out=tmp_path / "k01.csv", progress=False).table
    keep = [c for c in both.columns if c not in TIMING]
    pd.testing.assert_frame_equal(both[both["seed"] == 1][keep].reset_index(drop=True), res.table[keep])
