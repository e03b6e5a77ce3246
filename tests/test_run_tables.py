"""The run-directory schema (docs/runs.md), the CSV + Parquet writer and load_run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.runs import tables
from posym.runs.tables import RUN_TABLES, append_table, load_run, parquet_path, schema_markdown, write_table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "runs.md"


def test_docs_show_the_schema_in_code():
    assert schema_markdown() in DOCS.read_text()


def test_load_run_columns_match_the_schema(tiny_repro):
    """Every table a real (tiny) run and its analyses wrote has exactly the documented columns."""
    run = next(Path(tiny_repro).glob("*/seed0"))
    loaded = load_run(run)
    assert {"metrics", "scores", "lengthgen", "lengthgen_summary", "purity_gamma0.1"} <= set(loaded)
    for label, df in loaded.items():
        name = next(n for n, t in RUN_TABLES.items() if label == n or label.startswith(t.file.split("{")[0]))
        schema = RUN_TABLES[name]  # an optional column (e.g. the tracker's scores.csv has no intervention) may be absent
        assert list(df.columns) == [c for c in schema.columns if c in df.columns or c not in schema.optional], label
        assert df.attrs["meta"]["task"] in ("number", "letter")
    with pytest.raises(PosymError, match="not a posym run"):
        load_run(run / "figures")


def test_parquet_copy_equals_the_csv(tmp_path):
    pytest.importorskip("pyarrow", reason="the [parquet] extra is not installed")
    df = pd.DataFrame({"step": [0, 50], "layer": [0, 1], "s_pos": [0.25, -1.0]})
    written = write_table(df, tmp_path / "t.csv")
    assert written == [tmp_path / "t.csv", tmp_path / "t.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(parquet_path(tmp_path / "t.csv")), pd.read_csv(tmp_path / "t.csv"))
    append_table(df.assign(step=[100, 150]), tmp_path / "t.csv")
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert list(back["step"]) == [0, 50, 100, 150]
    pd.testing.assert_frame_equal(back, pd.read_csv(tmp_path / "t.csv"))


def test_without_pyarrow_only_the_csv_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "parquet_available", lambda: False)
    assert write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.csv") == [tmp_path / "t.csv"]
    assert not (tmp_path / "t.parquet").exists()


def test_a_run_and_a_verb_write_parquet_copies(tmp_path):
    """Training (appended tables) and an analysis verb (Outputs) both leave Parquet equal to the CSV."""
    pytest.importorskip("pyarrow", reason="the [parquet] extra is not installed")
    from posym.train import make_config
    from posym.verbs.dynamics import dynamics
    from posym.verbs.train import train

    cfg = make_config("number", "quick", steps=6, eval_every=3, n_val=32, n_test=32, eval_batch_size=32,
                      track_prompts=8, warmup=2, checkpoint_every=6,
                      model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))
    train(cfg, tmp_path / "run", progress=False)
    dynamics(tmp_path / "run")
    for name in ("metrics", "scores", "purity_gamma0.1"):
        csv = tmp_path / "run" / f"{name}.csv"
        pd.testing.assert_frame_equal(pd.read_parquet(parquet_path(csv)), pd.read_csv(csv))
