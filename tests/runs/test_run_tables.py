"""The run-directory schema (docs/runs.md), the CSV + Parquet writer and load_run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.runs import tables
from posym.runs.tables import RUN_TABLES, append_table, load_run, parquet_path, schema_markdown, write_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "runs.md"


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


# resume checks (reliability probe 4, C / T5): the rows a resumed writer keeps -----------------------------
SCORES_HEAD = "step,layer,head,tau,s_pos,s_sym,entropy,swap_mass,n_prompts\n"


def test_check_resumed_keeps_the_rows_up_to_the_checkpoint_and_checks_them(tmp_path):
    from posym.runs.tables import check_resumed

    p = tmp_path / "scores.csv"
    p.write_text(SCORES_HEAD + "0,0,0,0.0001,1,1,1,0,8\n10,0,0,0.0001,0.5,-0.5,1,0,8\n20,0,0,0.0001,9,9,1,0,8\n30,0,0")
    kept = check_resumed(p, "scores", 10, "do X", cover=[0, 10])  # rows after step 10 (and a torn line) dropped
    assert kept["step"].tolist() == [0, 10] and kept["s_sym"].tolist() == [1.0, -0.5]
    with pytest.raises(PosymError, match=r"scores.csv row 3: s_pos = '9' is not a score in \[-1, 1\] or empty; "
                                         r"fix or remove the row, or do X"):
        check_resumed(p, "scores", 20, "do X")
    with pytest.raises(PosymError, match=r"scores.csv lacks the rows of step\(s\) 5 \(written before the checkpoint of step 10"):
        check_resumed(p, "scores", 10, "do X", cover=[0, 5, 10])
    p.write_text(SCORES_HEAD + "0,0,0,0.0001,1,1,1,0,8\n0,0,0,0.0001,1,1,1,0,8\n")
    with pytest.raises(PosymError, match="rows 1 and 2 repeat the point step 0, layer 0, head 0, tau 0.0001"):
        check_resumed(p, "scores", 0, "do X")
    m = tmp_path / "metrics.csv"
    with pytest.raises(PosymError, match=r"metrics.csv lacks the val rows of step\(s\) 0"):  # no file: no rows
        check_resumed(m, "metrics", 0, "do X", cover=[0], split="val")
    m.write_text("split,step,train_loss,lr,loss,acc,acc_hop1,acc_hop2,acc_hop3,acc_hop4,time_s\n"
                 "val,0,nan,0.0,4.9,0.01,0.01,0.01,0.01,0.01,0.1\ntrain,10,nan,0.0,4.9,0.01,0.01,0.01,0.01,0.01,0.1\n")
    with pytest.raises(PosymError, match="row 2: split = 'train' is not `val` or `test`"):
        check_resumed(m, "metrics", 10, "do X")


def test_score_tracker_resume_from_checks_the_rows_it_keeps(tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from posym.integrations.tracker import ScoreTracker
    from posym.runs import layout

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                         bos_token_id=None, eos_token_id=None, pad_token_id=None))
    tracker = ScoreTracker("number", tmp_path, n=4)
    for step in (0, 10):
        tracker(model, step)
    path = tmp_path / layout.SCORES
    lines = path.read_text().splitlines(keepends=True)
    cells = lines[1].split(",")
    cells[lines[0].split(",").index("s_pos")] = "7.5"
    path.write_text(lines[0] + ",".join(cells) + "".join(lines[2:]))
    before = path.read_bytes()
    with pytest.raises(PosymError, match="row 1: s_pos = '7.5' is not a score.*give the tracker another folder"):
        ScoreTracker("number", tmp_path, n=4).resume_from(5)
    assert path.read_bytes() == before
