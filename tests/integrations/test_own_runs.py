"""A researcher's own runs: the one rule for appended score tables (tracker and callback), the
checks before any scoring, load_run and ``posym scores`` on their folders (docs/reliability.md,
"Appended score tables")."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from posym.cli import main
from posym.errors import PosymError
from posym.heads.dynamics import load_scores
from posym.heads.scores import scores_fast
from posym.integrations import PositionalSymbolicCallback, ScoreTracker
from posym.runs import layout, load_run
from posym.tasks import make_split

TASK = "number"
KEY = ["step", "layer", "head", "tau"]


def llama(vocab: int = 137, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def model():
    return llama()


def files_of(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


# ---- the table carries what it measured -----------------------------------------------------------
def test_tracker_writes_a_sidecar_and_keeps_the_schema(tmp_path, model):
    ScoreTracker(TASK, tmp_path / "t", n=8)(model, 0)
    rows = pd.read_csv(tmp_path / "t" / layout.SCORES)
    assert list(rows.columns) == ["step", "layer", "head", "tau", "s_pos", "s_sym", "entropy", "swap_mass", "n_prompts"]
    meta = json.loads((tmp_path / "t" / layout.SCORES_JSON).read_text())
    assert meta["kind"] == "tracker" and meta["task"] == TASK and meta["taus"] == [1e-4] and meta["n_prompts"] == 8
    assert meta["model"] == "LlamaForCausalLM" and (meta["layers"], meta["heads"]) == (2, 2)
    assert len(meta["prompts_sha256"]) == 64


def test_tracker_refuses_a_table_it_did_not_write_before_scoring(tmp_path, model, monkeypatch):
    run = tmp_path / "posym-run"  # a posym run: posym.json + its own scores.csv
    run.mkdir()
    (run / layout.POSYM_JSON).write_text('{"task": "number"}')
    (run / layout.SCORES).write_text("step,layer,head,tau,s_pos,s_sym,entropy,swap_mass,n_prompts\n10,0,0,0.0001,1,1,1,0,8\n")
    before = files_of(run)
    with pytest.raises(PosymError, match="posym run directory"):
        ScoreTracker("letter", run, n=8)
    foreign = tmp_path / "foreign"  # a scores.csv without scores.json (posym scores, a hand-made table)
    foreign.mkdir()
    (foreign / layout.SCORES).write_text((run / layout.SCORES).read_text())
    with pytest.raises(PosymError, match="not written by a ScoreTracker"):
        ScoreTracker(TASK, foreign, n=8)
    assert files_of(run) == before and files_of(foreign) == {layout.SCORES: before[layout.SCORES]}


@pytest.mark.parametrize("other", [dict(n=16), dict(taus=(1e-3,)), dict(seed=1)])
def test_tracker_refuses_a_table_of_another_prompt_set_or_taus(tmp_path, model, other):
    ScoreTracker(TASK, tmp_path, n=8)(model, 0)
    before = files_of(tmp_path)
    with pytest.raises(PosymError, match="another prompt set or taus"):
        ScoreTracker(TASK, tmp_path, **{"n": 8, **other})
    assert files_of(tmp_path) == before


def test_tracker_refuses_another_model_before_scoring(tmp_path, model):
    ScoreTracker(TASK, tmp_path, n=8)(model, 0)
    bigger = LlamaForCausalLM(LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                          num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(PosymError, match="another model"):
        ScoreTracker(TASK, tmp_path, n=8)(bigger, 2)
    assert sorted(pd.read_csv(tmp_path / layout.SCORES)["step"].unique()) == [0]


def test_unwritable_out_is_refused_at_construction(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(PosymError, match="is a file"):
        ScoreTracker(TASK, afile, n=8)
    with pytest.raises(PosymError, match="cannot write"):
        ScoreTracker(TASK, afile / "sub", n=8)
    if os.geteuid() != 0:  # root writes into read-only folders
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            with pytest.raises(PosymError, match="cannot write"):
                ScoreTracker(TASK, ro, n=8)
        finally:
            ro.chmod(0o755)


def test_resume_from_never_truncates_a_foreign_table(tmp_path):
    (tmp_path / layout.SCORES).write_text("step,layer,head,tau,s_pos,s_sym,entropy,swap_mass,n_prompts\n"
                                          "10,0,0,0.0001,1,1,1,0,8\n20,0,0,0.0001,1,1,1,0,8\n")
    before = files_of(tmp_path)
    tracker = ScoreTracker(TASK, None, n=8)
    with pytest.raises(PosymError, match="not written by a ScoreTracker"):
        tracker.bind(tmp_path)
    tracker.out = tmp_path  # even set by hand, resume_from checks the table first
    with pytest.raises(PosymError, match="not written by a ScoreTracker"):
        tracker.resume_from(5)
    assert files_of(tmp_path) == before


def test_same_step_twice_replaces_and_resume_from_cuts(tmp_path, model):
    tracker = ScoreTracker(TASK, tmp_path, n=8)
    for step in (0, 2, 4, 2):
        tracker(model, step)
    rows = pd.read_csv(tmp_path / layout.SCORES)
    assert rows["step"].tolist() == [0] * 4 + [2] * 4 + [4] * 4 and not rows.duplicated(KEY).any()
    assert len(tracker.rows) == 12 and not tracker.rows.duplicated(KEY).any()
    again = ScoreTracker(TASK, tmp_path, n=8)  # a restarted plain loop continues the same table
    again.resume_from(2)
    assert sorted(pd.read_csv(tmp_path / layout.SCORES)["step"].unique()) == [0, 2]
    again(model, 6)
    assert sorted(pd.read_csv(tmp_path / layout.SCORES)["step"].unique()) == [0, 2, 6]
    assert load_run(tmp_path)["scores"].attrs["meta"]["kind"] == "tracker"


# ---- duplicate keys are refused by the readers -----------------------------------------------------
def test_a_table_with_duplicate_keys_is_refused_by_dynamics_and_load_run(tmp_path, capsys):
    row = "10,0,0,0.0001,0.5,0.5,0.9,0.1,8\n"
    (tmp_path / layout.SCORES).write_text("step,layer,head,tau,s_pos,s_sym,entropy,swap_mass,n_prompts\n" + row * 2)
    (tmp_path / layout.SCORES_JSON).write_text('{"kind": "tracker"}')
    with pytest.raises(PosymError, match="has 2 rows for step 10 layer 0 head 0 tau 0.0001"):
        load_scores(tmp_path)
    with pytest.raises(PosymError, match="has 2 rows for step 10"):
        load_run(tmp_path)
    assert main(["dynamics", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has 2 rows for step 10 layer 0 head 0 tau 0.0001" in err[0]


def test_load_run_checks_each_table_against_its_schema(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / layout.POSYM_JSON).write_text('{"task": "number"}')
    (run / layout.METRICS).write_bytes(b"\x00\x01garbage\n,,,\n")
    with pytest.raises(PosymError, match=r"metrics.csv is not a valid metrics.csv table: it lacks the columns split, step"):
        load_run(run)


# ---- validation before any scoring ----------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    (dict(n=0), "n must be"), (dict(n=2.5), "n must be"), (dict(gamma=5), "gamma must"),
    (dict(gamma=float("nan")), "gamma must"), (dict(gamma=0), "gamma must"), (dict(every=2.5), "every must"),
    (dict(every="abc"), "every must"), (dict(every=float("nan")), "every must"), (dict(every=0), "every must"),
    (dict(taus=("x",)), "taus must"), (dict(taus=()), "taus must"), (dict(seed=-1), "seed must"),
    (dict(batch_size=0), "batch_size must"), (dict(task="numbers"), "unknown task 'numbers'"),
])
def test_api_values_are_checked_by_the_tracker_and_the_callback(kwargs, match):
    with pytest.raises(PosymError, match=match):
        ScoreTracker(TASK, None, **kwargs)
    with pytest.raises(PosymError, match=match):
        PositionalSymbolicCallback(TASK, **kwargs)


@pytest.mark.parametrize("make", [ScoreTracker, PositionalSymbolicCallback])
def test_unknown_task_and_bad_prompts(make):
    with pytest.raises(PosymError, match=r"^unknown task 'numbers'; choose number or letter \(or pass a JSONL file\)$"):
        make("numbers")
    with pytest.raises(PosymError, match="prompts must be a task name"):
        make(None)
    with pytest.raises(PosymError, match="prompts must be a task name"):
        make(["a", "b"])


@pytest.mark.parametrize("step", [-5, "abc", 2.5])
def test_bad_steps_and_models_are_refused_before_scoring(tmp_path, model, step):
    tracker = ScoreTracker(TASK, tmp_path, n=8)
    with pytest.raises(PosymError, match="step must be"):
        tracker(model, step)
    with pytest.raises(PosymError, match="model must be a loaded HF causal LM"):
        tracker("runs/my-model", 0)
    assert not (tmp_path / layout.SCORES).exists()


def test_a_vocabulary_too_small_is_refused_before_scoring(tmp_path, model):
    small = llama(vocab=100)
    with pytest.raises(PosymError, match="vocabulary has 100 ids but the number task needs 137"):
        ScoreTracker(TASK, tmp_path / "a", n=8)(small, 0)
    with pytest.raises(PosymError, match="the prompts reach id 500"):
        ScoreTracker(np.full((2, 17), 500), tmp_path / "b")(model, 0)
    with pytest.raises(PosymError, match="lies outside the model's vocabulary of 100 ids"):
        scores_fast(small, make_split(TASK, "val", n=4).input_ids)
    with pytest.raises(PosymError, match="lies outside the model's vocabulary"):
        scores_fast(model, -np.ones((2, 17), dtype=np.int64))
    assert not (tmp_path / "a" / layout.SCORES).exists() and not (tmp_path / "b" / layout.SCORES).exists()
    cb = PositionalSymbolicCallback(TASK, n=8)
    state = SimpleNamespace(global_step=0, is_world_process_zero=True, log_history=[])
    args = SimpleNamespace(output_dir=str(tmp_path / "c"), report_to=[], eval_strategy="steps")
    with pytest.raises(PosymError, match="vocabulary has 100 ids"):
        cb.on_train_begin(args, state, None, model=small)
    assert not (tmp_path / "c" / layout.SCORES).exists()


# ---- a TransformerLens bridge (duck-typed) ---------------------------------------------------------
class FakeBridge(nn.Module):
    """What a TransformerLens >= 4 ``TransformerBridge`` looks like to posym: an nn.Module whose
    ``forward(input)`` is not the HF signature, holding the HF model as ``original_model``."""

    def __init__(self, hf_model):
        super().__init__()
        self.original_model = hf_model

    def forward(self, input):  # noqa: A002 - TransformerBridge's own argument name
        return self.original_model(input_ids=input).logits


def test_a_transformerlens_bridge_is_unwrapped(tmp_path, model):
    ids = make_split(TASK, "val", n=8).input_ids
    plain = scores_fast(model, ids)
    bridged = scores_fast(FakeBridge(model), ids)
    np.testing.assert_array_equal(bridged.s_pos, plain.s_pos)
    np.testing.assert_array_equal(bridged.s_sym, plain.s_sym)
    summary = ScoreTracker(TASK, tmp_path, n=8)(FakeBridge(model), 0)
    assert summary == ScoreTracker(TASK, None, n=8)(model, 0)


# ---- the callback ---------------------------------------------------------------------------------
def _args(out, strategy="steps"):
    return SimpleNamespace(output_dir=str(out), report_to=[], eval_strategy=strategy)


def _state(step=0, rank0=True):
    return SimpleNamespace(global_step=step, is_world_process_zero=rank0, log_history=[])


def test_callback_refuses_a_foreign_table_at_train_begin(tmp_path, model):
    run = tmp_path / "run"
    run.mkdir()
    (run / layout.SCORES).write_text("step,layer,head,tau,s_pos,s_sym,entropy,swap_mass,n_prompts\n10,0,0,0.0001,1,1,1,0,8\n")
    before = files_of(run)
    for step in (0, 20):  # fresh and resumed
        with pytest.raises(PosymError, match="not written by a ScoreTracker"):
            PositionalSymbolicCallback(TASK, n=8).on_train_begin(_args(run), _state(step), None, model=model)
    assert files_of(run) == before
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(PosymError, match="is a file"):
        PositionalSymbolicCallback(TASK, n=8, out=afile).on_train_begin(_args(run), _state(), None, model=model)


def test_callback_fresh_run_moves_the_old_table_aside_and_warns(tmp_path, model, capsys):
    cb = PositionalSymbolicCallback(TASK, n=8)
    cb.on_train_begin(_args(tmp_path), _state(0), None, model=model)
    cb.on_evaluate(_args(tmp_path), _state(10), None, model=model)
    first = pd.read_csv(tmp_path / layout.SCORES)
    err = capsys.readouterr().err
    assert "posym: scored 8 prompts at step 0 in" in err and "posym: scored 8 prompts at step 10 in" in err
    again = PositionalSymbolicCallback(TASK, n=16)  # a fresh training may change the prompts and the model
    deeper = LlamaForCausalLM(LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                          num_attention_heads=2, num_key_value_heads=1))
    again.on_train_begin(_args(tmp_path), _state(0), None, model=deeper)
    err = capsys.readouterr().err.strip().splitlines()
    assert len([e for e in err if "warning" in e]) == 1 and layout.SCORES_PREVIOUS in err[0]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / layout.SCORES_PREVIOUS), first)
    now = pd.read_csv(tmp_path / layout.SCORES)
    assert now["step"].unique().tolist() == [0] and (now["n_prompts"] == 16).all() and now["layer"].max() == 2
    with pytest.raises(PosymError, match="another model"):  # resumed, the table's model is checked
        PositionalSymbolicCallback(TASK, n=16).on_train_begin(_args(tmp_path), _state(10), None, model=model)


def test_callback_resume_cuts_at_the_checkpoint_and_refuses_other_prompts(tmp_path, model):
    cb = PositionalSymbolicCallback(TASK, n=8)
    cb.on_train_begin(_args(tmp_path), _state(0), None, model=model)
    for step in (10, 20, 30):
        cb.on_evaluate(_args(tmp_path), _state(step), None, model=model)
    with pytest.raises(PosymError, match="another prompt set"):
        PositionalSymbolicCallback(TASK, n=16).on_train_begin(_args(tmp_path), _state(20), None, model=model)
    resumed = PositionalSymbolicCallback(TASK, n=8)
    resumed.on_train_begin(_args(tmp_path), _state(20), None, model=model)
    assert sorted(pd.read_csv(tmp_path / layout.SCORES)["step"].unique()) == [0, 10, 20]
    resumed.on_evaluate(_args(tmp_path), _state(20), None, model=model)  # the checkpoint step is not scored again
    resumed.on_evaluate(_args(tmp_path), _state(30), None, model=model)
    rows = pd.read_csv(tmp_path / layout.SCORES)
    assert sorted(rows["step"].unique()) == [0, 10, 20, 30] and not rows.duplicated(KEY).any()


def test_callback_on_other_ranks_writes_nothing(tmp_path, model):
    cb = PositionalSymbolicCallback(TASK, n=8)
    cb.on_train_begin(_args(tmp_path), _state(0), None, model=model)
    before = files_of(tmp_path)
    other = PositionalSymbolicCallback(TASK, n=8)
    other.on_train_begin(_args(tmp_path), _state(0, rank0=False), None, model=model)  # fresh: no move aside
    other.on_evaluate(_args(tmp_path), _state(10, rank0=False), None, model=model)
    assert files_of(tmp_path) == before


def test_callback_warns_when_it_would_score_step_0_only(tmp_path, model, capsys):
    PositionalSymbolicCallback(TASK, n=8, at_start=False).on_train_begin(_args(tmp_path, "no"), _state(), None,
                                                                         model=model)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scores step 0 only; pass every=N or set eval_strategy" in err[0]
    PositionalSymbolicCallback(TASK, n=8, every=5, at_start=False).on_train_begin(_args(tmp_path / "b", "no"),
                                                                                  _state(), None, model=model)
    assert capsys.readouterr().err == ""


# ---- posym scores beside the callback's table ------------------------------------------------------
def _save(model_, folder):
    model_.save_pretrained(folder)
    return folder


def test_scores_defaults_never_clash_and_never_write_into_a_model(tmp_path, model, monkeypatch):
    from posym.verbs.scores import default_out

    hf = tmp_path / "hf"
    for step in (10, 20):
        _save(model, hf / f"checkpoint-{step}")
    (hf / layout.SCORES).write_text("callback table")
    assert default_out(series=[hf]) == hf / layout.CHECKPOINT_SCORES
    monkeypatch.chdir(tmp_path)
    assert main(["scores", "--series", str(hf), "--task", TASK, "--n", "4"]) == 0
    assert (hf / layout.SCORES).read_text() == "callback table"
    assert sorted(pd.read_csv(hf / layout.CHECKPOINT_SCORES)["step"].unique()) == [10, 20]
    mdir = _save(model, tmp_path / "My Model")
    assert main(["scores", "--model", str(mdir), "--task", TASK, "--n", "4"]) == 0
    assert not (mdir / layout.SCORES).exists() and (tmp_path / "runs/scores/my-model/scores.csv").is_file()


def test_scores_series_refuses_mixed_architectures_and_small_vocabularies(tmp_path, model, capsys):
    a = _save(model, tmp_path / "m-1")
    b = _save(LlamaForCausalLM(LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=2)), tmp_path / "m-2")
    out = tmp_path / "s.csv"
    capsys.readouterr()
    assert main(["scores", "--series", str(a), str(b), "--task", TASK, "--n", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the series mixes architectures" in err[0] and not out.exists()
    c = _save(llama(vocab=100), tmp_path / "m-3")
    capsys.readouterr()
    assert main(["scores", "--model", str(c), "--task", TASK, "--n", "4", "--out", str(out)]) == 2
    assert "vocab_size 100 < 137" in capsys.readouterr().err and not out.exists()
