"""The HF Trainer callback and the plain hook (SPEC §3 scores while someone else's loop trains)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from posym.errors import PosymError
from posym.integrations import PositionalSymbolicCallback, ScoreTracker, score_groups
from posym.integrations.tracker import prompt_groups
from posym.tasks import get_vocab, make_split

TASK = "number"


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=get_vocab(TASK).size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return LlamaForCausalLM(cfg)


class AnswerDataset(torch.utils.data.Dataset):
    """Number-task sequences with the answer appended; the loss reads only the answer (Paper A's setup)."""

    def __init__(self, split: str, n: int):
        b = make_split(TASK, split, seed=0, n=n)
        self.ids = torch.as_tensor(np.concatenate([b.input_ids, b.labels[:, None]], axis=1)).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        labels = torch.full_like(self.ids[i], -100)
        labels[-1] = self.ids[i, -1]
        return {"input_ids": self.ids[i], "labels": labels}


def run_trainer(out, callbacks=(), steps=30, report_to=(), resume=None, save_steps=10):
    args = TrainingArguments(output_dir=str(out), max_steps=steps, per_device_train_batch_size=16,
                             learning_rate=3e-3, eval_strategy="steps", eval_steps=10, save_strategy="steps",
                             save_steps=save_steps, logging_steps=10, report_to=list(report_to), use_cpu=True,
                             seed=0, data_seed=0, dataloader_num_workers=0, disable_tqdm=True,
                             per_device_eval_batch_size=64)
    trainer = Trainer(model=tiny_llama(), args=args, train_dataset=AnswerDataset("train", 512),
                      eval_dataset=AnswerDataset("val", 64), callbacks=list(callbacks))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def losses(trainer):
    return [(h["step"], h["loss"]) for h in trainer.state.log_history if "loss" in h]


def test_callback_tracks_every_evaluation_without_changing_training(tmp_path):
    plain = run_trainer(tmp_path / "plain")
    cb = PositionalSymbolicCallback(TASK, n=32)
    tracked = run_trainer(tmp_path / "tracked", [cb])
    assert losses(tracked) == losses(plain) and len(losses(plain)) == 3  # identical loss trajectory

    scores = pd.read_csv(tmp_path / "tracked" / "scores.csv")
    assert sorted(scores["step"].unique()) == [0, 10, 20, 30]
    assert len(scores) == 4 * 2 * 2 and not scores.duplicated(["step", "layer", "head", "tau"]).any()
    assert scores[["s_pos", "s_sym"]].abs().le(1 + 1e-9).all().all() and (scores["n_prompts"] == 32).all()
    logged = [h for h in tracked.state.log_history if "posym/pure_symbolic" in h]
    assert [h["step"] for h in logged] == [0, 10, 20, 30]
    assert {"posym/s_pos/layer_0", "posym/s_sym/layer_1", "posym/pure_positional"} <= set(logged[-1])

    # the rows equal scoring the saved checkpoint on its own (same prompts, same engine)
    ckpt = LlamaForCausalLM.from_pretrained(tmp_path / "tracked" / "checkpoint-20")
    alone = score_groups(ckpt, prompt_groups(TASK, n=32), (1e-4,))
    at20 = scores[scores["step"] == 20].drop(columns="step").reset_index(drop=True)
    pd.testing.assert_frame_equal(at20, alone[at20.columns], check_dtype=False, atol=1e-6, rtol=0)


def test_resume_drops_rows_after_the_checkpoint(tmp_path):
    out = tmp_path / "run"
    run_trainer(out, [PositionalSymbolicCallback(TASK, n=16)], steps=30)
    before = pd.read_csv(out / "scores.csv")
    run_trainer(out, [PositionalSymbolicCallback(TASK, n=16)], steps=30, resume=str(out / "checkpoint-20"))
    after = pd.read_csv(out / "scores.csv")
    assert sorted(after["step"].unique()) == [0, 10, 20, 30] and len(after) == len(before)
    pd.testing.assert_frame_equal(after, before, atol=1e-6, rtol=0)


def test_every_n_steps_and_tensorboard(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "tb-run"
    monkeypatch.delenv("TENSORBOARD_LOGGING_DIR", raising=False)  # the Trainer picks output_dir/runs/<time>
    run_trainer(out, [PositionalSymbolicCallback(TASK, n=16, every=5, at_start=False)], steps=20,
                report_to=["tensorboard"])
    assert sorted(pd.read_csv(out / "scores.csv")["step"].unique()) == [5, 10, 15, 20]
    (tb_dir,) = (out / "runs").iterdir()  # one folder: the Trainer's and posym's scalars together
    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "posym/pure_symbolic" in tags and any(t.startswith("train/loss") or t == "train/loss" for t in tags)
    assert [e.step for e in acc.Scalars("posym/s_pos/layer_1")] == [5, 10, 15, 20]


def test_only_the_main_process_scores(tmp_path):
    cb = PositionalSymbolicCallback(TASK, n=8, out=tmp_path)

    class State:
        global_step, is_world_process_zero, log_history = 10, False, []

    class Args:
        output_dir, report_to = str(tmp_path), []

    cb.on_evaluate(Args(), State(), None, model=tiny_llama())
    assert not (tmp_path / "scores.csv").exists() and State.log_history == []


def test_plain_hook_in_a_hand_written_loop(tmp_path):
    model = tiny_llama()
    tracker = ScoreTracker(TASK, tmp_path / "hook", n=16, every=2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = AnswerDataset("train", 64)
    for step in range(5):
        batch = [data[i] for i in range(step * 8, step * 8 + 8)]
        ids = torch.stack([b["input_ids"] for b in batch])
        labels = torch.stack([b["labels"] for b in batch])
        state = torch.get_rng_state()
        summary = tracker(model, step)
        assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left alone
        assert (summary is None) == (step % 2 == 1)
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    rows = pd.read_csv(tmp_path / "hook" / "scores.csv")
    assert sorted(rows["step"].unique()) == [0, 2, 4] and len(tracker.rows) == len(rows) == 3 * 4
    assert model.training  # the mode is restored


def test_prompt_sources_and_errors(tmp_path):
    ids = make_split(TASK, "val", n=8).input_ids
    assert prompt_groups(ids)[0].ids.shape == (8, ids.shape[1])
    assert prompt_groups(ids, blocks=4)[0].blocks == 4
    with pytest.raises(PosymError, match="need task="):
        prompt_groups(tmp_path / "p.jsonl")
    with pytest.raises(PosymError, match="prompts must be"):
        prompt_groups(np.zeros(3))
    with pytest.raises(PosymError, match="every must be"):
        ScoreTracker(TASK, every=0)
    # block scores of several prompts equal the per-group average
    m = tiny_llama()
    both = score_groups(m, prompt_groups(ids, blocks=4), (1e-4,))
    assert len(both) == 4 and both["swap_mass"].between(0, 1 + 1e-9).all()


def test_llm_prompts_with_their_own_blocks_are_grouped_and_averaged():
    """Prompts with blocks (Paper B's block version): groups of one layout are scored together and the
    result is the prompt-weighted mean of the groups (here: equal to scoring each group alone)."""
    from posym.tasks.llm_prompts import LLMPrompt

    g = torch.Generator().manual_seed(0)
    prompts = []
    for i, (T, blocks) in enumerate([(13, ((0, 4), (4, 8), (8, 12)))] * 3 + [(11, ((0, 5), (5, 10)))] * 2):
        ids = tuple(int(x) for x in torch.randint(3, get_vocab(TASK).size, (T,), generator=g))
        prompts.append(LLMPrompt("binding", i, "", ids, blocks, "", -1))
    groups = prompt_groups(prompts)
    assert [tuple(gr.ids.shape) for gr in groups] == [(3, 13), (2, 11)]
    m = tiny_llama()
    both = score_groups(m, groups, (1e-4,))
    parts = [score_groups(m, [gr], (1e-4,)) for gr in groups]
    expect = (parts[0]["s_pos"] * 3 + parts[1]["s_pos"] * 2) / 5
    np.testing.assert_allclose(both["s_pos"], expect, atol=1e-12)
    assert (both["n_prompts"] == 5).all()


DDP_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from test_hf_callback import PositionalSymbolicCallback, TASK, run_trainer
run_trainer(sys.argv[1], [PositionalSymbolicCallback(TASK, n=8)], steps=20, save_steps=100)
# torch requires it: without it gloo's worker threads can abort the interpreter's shutdown (SIGABRT).
import torch.distributed as dist
if dist.is_initialized():
    dist.destroy_process_group()
"""


@pytest.mark.integration
def test_ddp_only_rank_0_writes_and_a_rerun_starts_a_new_table(tmp_path):
    """Two gloo processes under torchrun: one table (rank 0's), each step once; a second training
    into the same output_dir moves the first table aside once (not once per rank)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "ddp_train.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
    env.pop("WORLD_SIZE", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           str(tmp_path / "run")]
    for _ in range(2):
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stderr.count("posym: warning:") == 1 and proc.stderr.count("scored 8 prompts at step 20") == 1
    rows = pd.read_csv(tmp_path / "run" / "scores.csv")
    assert sorted(rows["step"].unique()) == [0, 10, 20] and not rows.duplicated(["step", "layer", "head", "tau"]).any()
    previous = pd.read_csv(tmp_path / "run" / "scores.previous.csv")
    assert len(previous) == len(rows) and not previous.duplicated(["step", "layer", "head", "tau"]).any()
