"""A researcher's own run end to end: a tiny Llama trained twice into one output_dir with the HF
Trainer and the callback, then ``posym dynamics``, ``posym scores --series`` (no --out) and
``load_run`` on that folder; and a resumed Trainer run (docs/reliability.md, "Appended score tables")."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from posym.cli import main
from posym.integrations import PositionalSymbolicCallback
from posym.runs import layout, load_run

from test_hf_callback import AnswerDataset

pytestmark = pytest.mark.integration

KEY = ["step", "layer", "head", "tau"]


def train(out, steps=20, resume=None):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, max_position_embeddings=64, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, learning_rate=3e-3,
                             eval_strategy="steps", eval_steps=10, save_strategy="steps", save_steps=10,
                             logging_steps=10, report_to=[], use_cpu=True, seed=0, data_seed=0,
                             dataloader_num_workers=0, disable_tqdm=True, per_device_eval_batch_size=64)
    trainer = Trainer(model=LlamaForCausalLM(cfg), args=args, train_dataset=AnswerDataset("train", 320),
                      eval_dataset=AnswerDataset("val", 32), callbacks=[PositionalSymbolicCallback("number", n=16)])
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def test_two_trainings_into_one_output_dir_then_the_verbs(tmp_path, capsys):
    out = tmp_path / "hf-run"
    train(out)
    first = pd.read_csv(out / layout.SCORES)
    train(out)  # HF overwrites output_dir; the callback starts a new table and keeps the old one aside
    err = capsys.readouterr().err
    assert err.count("posym: warning:") == 1 and layout.SCORES_PREVIOUS in err
    assert "posym: scored 16 prompts at step 20 in" in err
    rows = pd.read_csv(out / layout.SCORES)
    assert sorted(rows["step"].unique()) == [0, 10, 20] and len(rows) == 3 * 2 * 4
    assert not rows.duplicated(KEY).any()
    pd.testing.assert_frame_equal(pd.read_csv(out / layout.SCORES_PREVIOUS), first)

    assert main(["dynamics", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "panel A: HF Trainer evaluation (eval_loss" in printed and "left out" not in printed  # no empty panel
    assert (out / "figures" / "fig2_gamma0.1.png").is_file()
    assert main(["scores", "--series", str(out), "--task", "number", "--n", "16"]) == 0
    series = pd.read_csv(out / layout.CHECKPOINT_SCORES)
    assert sorted(series["step"].unique()) == [10, 20] and not series.duplicated(KEY).any()
    pd.testing.assert_frame_equal(pd.read_csv(out / layout.SCORES), rows)  # the callback's table is untouched

    tables = load_run(out)
    assert {"scores", "checkpoint_scores", "purity_gamma0.1", "pure_counts_gamma0.1"} <= set(tables)
    assert tables["scores"].attrs["meta"]["kind"] == "tracker"
    pd.testing.assert_frame_equal(tables["scores"], rows)
    # the series' rows at each checkpoint equal the callback's at that step (same prompts, same engine)
    at20 = series[series["step"] == 20].reset_index(drop=True)
    cb20 = rows[rows["step"] == 20].reset_index(drop=True)
    pd.testing.assert_frame_equal(at20[cb20.columns], cb20, check_dtype=False, atol=1e-6, rtol=0)


def test_a_resumed_training_continues_the_table(tmp_path):
    out = tmp_path / "hf-run"
    train(out, steps=30)
    before = pd.read_csv(out / layout.SCORES)
    train(out, steps=30, resume=str(out / "checkpoint-10"))
    after = pd.read_csv(out / layout.SCORES)
    assert sorted(after["step"].unique()) == [0, 10, 20, 30] and not after.duplicated(KEY).any()
    assert not (out / layout.SCORES_PREVIOUS).exists()  # a resumed run moves nothing aside
    pd.testing.assert_frame_equal(after, before, atol=1e-6, rtol=0)  # same steps, same weights
