"""``posym train --seeds K``: K runs trained as one batched model equal K separate runs (issue 39).

Tolerance (fp32, CPU): batched matmuls reduce in another order than single ones, so values are not
bitwise equal; train losses, metrics and head scores agree to 1e-5 relative and final weights to 1e-5
of each tensor's largest magnitude after 20 steps at a high learning rate. A resumed group equals an
uninterrupted one bit for bit.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from posym.cli import main
from posym.errors import PosymError
from posym.runs import layout
from posym.train import make_config
from posym.train.batched import check_batchable, clip_per_run, parse_seeds, seed_configs, seed_dir, train_batched
from posym.verbs.train import head_tracker, train, train_seeds, train_task
from train_helpers import Interrupt, interrupt_at

TINY = dict(steps=20, eval_every=5, n_val=32, n_test=32, checkpoint_every=10, eval_batch_size=32, track_prompts=8,
            batch_size=16, lr=3e-3, warmup=2, model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))
SEEDS = (0, 3)
RTOL = 1e-5


def _cfg(**kw):
    return make_config("number", "quick", **{**TINY, **kw})


def _metrics(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / layout.METRICS).drop(columns=["time_s"])


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(layout.step_dir(run, step) / layout.WEIGHTS))


def _assert_weights_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], rtol: float = RTOL) -> None:
    assert a.keys() == b.keys()
    for k in a:
        scale = max(float(b[k].abs().max()), 1e-3)
        assert float((a[k] - b[k]).abs().max()) <= rtol * scale, k


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """The batched group of SEEDS and each seed trained alone (head tracking on)."""
    root = tmp_path_factory.mktemp("batched")
    cfg = _cfg()
    train_seeds(cfg, SEEDS, root / "group", progress=False)
    for s in SEEDS:
        train(replace(cfg, seed=s, data_seed=s, order_seed=s), root / f"alone{s}", progress=False)
    return root


def test_parse_seeds():
    assert parse_seeds("3") == (0, 1, 2)
    assert parse_seeds(2) == (0, 1)
    assert parse_seeds("4, 1,7") == (4, 1, 7)
    for bad in ("0", "a", "1,1", "-1,2", ""):
        with pytest.raises(PosymError):
            parse_seeds(bad)
    assert seed_dir("OUT", 3) == Path("OUT/seed3")


def test_clip_per_run_is_clip_grad_norm_of_each_run():
    torch.manual_seed(0)
    stacked = [torch.zeros(3, 4, 5, requires_grad=True), torch.zeros(3, 7, requires_grad=True)]
    for p in stacked:
        p.grad = torch.randn_like(p) * torch.tensor([0.01, 1.0, 10.0]).view(-1, *[1] * (p.dim() - 1))
    singles = [[p.grad[k].clone().requires_grad_() for p in stacked] for k in range(3)]
    for k in range(3):
        for t in singles[k]:
            t.grad = t.detach().clone()
        torch.nn.utils.clip_grad_norm_(singles[k], 1.0, foreach=True)
    norms = clip_per_run(stacked, 1.0)
    assert norms[0] < 1 < norms[2]  # one run unclipped, one clipped: the norm is per run
    for k in range(3):
        for p, t in zip(stacked, singles[k]):
            torch.testing.assert_close(p.grad[k], t.grad, rtol=1e-6, atol=0)


@pytest.mark.integration  # trains (each run makes its 432,000-sample split: ~1 s)
def test_group_equals_separate_runs(group):
    for s in SEEDS:
        b, a = group / "group" / f"seed{s}", group / f"alone{s}"
        assert sorted(p.name for p in b.iterdir()) == sorted(p.name for p in a.iterdir())
        assert [p.name for p in (b / "checkpoints").iterdir()] == [p.name for p in (a / "checkpoints").iterdir()]
        mb, ma = _metrics(b), _metrics(a)
        assert list(mb.columns) == list(ma.columns) and mb[["split", "step"]].equals(ma[["split", "step"]])
        np.testing.assert_allclose(mb.drop(columns="split").to_numpy(float), ma.drop(columns="split").to_numpy(float),
                                   rtol=RTOL, atol=1e-7)
        _assert_weights_close(_weights(b, TINY["steps"]), _weights(a, TINY["steps"]))
        sb, sa = pd.read_csv(b / layout.SCORES), pd.read_csv(a / layout.SCORES)  # head tracking, per run
        num = sb.select_dtypes("number").columns
        assert len(sb) == len(sa) and sb.drop(columns=num).equals(sa.drop(columns=num))
        np.testing.assert_allclose(sb[num].to_numpy(float), sa[num].to_numpy(float), rtol=RTOL, atol=1e-6)
        ja, jb = (json.loads((r / layout.POSYM_JSON).read_text()) for r in (a, b))
        assert ja["config"] == jb["config"]
        st_a, st_b = (torch.load(layout.step_dir(r, TINY["steps"]) / layout.TRAINER_STATE, weights_only=True)
                      for r in (a, b))
        assert st_a["optimizer"]["param_groups"] == st_b["optimizer"]["param_groups"]
        assert st_a["scheduler"] == st_b["scheduler"] and torch.equal(st_a["rng_cpu"], st_b["rng_cpu"])
        for i, one in st_a["optimizer"]["state"].items():
            assert torch.equal(one["step"], st_b["optimizer"]["state"][i]["step"])
            for key in ("exp_avg", "exp_avg_sq"):
                scale = float(one[key].abs().max()) or 1.0
                assert float((one[key] - st_b["optimizer"]["state"][i][key]).abs().max()) <= 1e-4 * scale


@pytest.mark.integration  # trains (each run makes its 432,000-sample split: ~1 s)
def test_the_runs_differ_from_each_other(group):
    a, b = (_weights(group / "group" / f"seed{s}", TINY["steps"]) for s in SEEDS)
    assert not torch.equal(a["lm_head.weight"], b["lm_head.weight"])


@pytest.mark.integration  # trains (each run makes its 432,000-sample split: ~1 s)
def test_interrupted_group_resumes_exactly(group, tmp_path):
    cfg = _cfg()
    configs, outs = seed_configs(cfg, SEEDS), [seed_dir(tmp_path, s) for s in SEEDS]
    callbacks = [[head_tracker(c), interrupt_at(15)] if k == 1 else [head_tracker(c)] for k, c in enumerate(configs)]
    with pytest.raises(Interrupt):
        train_batched(configs, outs, progress=False, callbacks=callbacks)
    assert not (outs[0] / layout.RESULTS).exists()
    state = layout.step_dir(outs[1], 10) / layout.TRAINER_STATE  # a kill between two runs' saves: refused
    state.rename(state.with_suffix(".away"))
    with pytest.raises(PosymError, match="different checkpoints"):
        train_seeds(cfg, SEEDS, tmp_path, resume=True, progress=False)
    state.with_suffix(".away").rename(state)
    alone = tmp_path / "alone"  # a group's run directory is an ordinary run: plain --resume continues it
    shutil.copytree(outs[1], alone, ignore=shutil.ignore_patterns(layout.LOCK))
    train(configs[1], alone, resume=True, progress=False)
    _assert_weights_close(_weights(alone, TINY["steps"]), _weights(group / "alone3", TINY["steps"]))
    train_seeds(cfg, SEEDS, tmp_path, resume=True, progress=False)
    for s, out in zip(SEEDS, outs):
        full = group / "group" / f"seed{s}"
        a, b = _weights(out, TINY["steps"]), _weights(full, TINY["steps"])
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert _metrics(out).equals(_metrics(full))


def test_refusals_name_the_problem(tmp_path, monkeypatch):
    with pytest.raises(PosymError, match="dropout"):  # on the CPU and CUDA dropout trains (test_explicit_dropout.py)
        check_batchable(seed_configs(_cfg(model_overrides={**TINY["model_overrides"], "resid_pdrop": 0.1}), SEEDS),
                        "mps")
    with pytest.raises(PosymError, match="fp32"):
        train_seeds(_cfg(precision="bf16"), SEEDS, tmp_path)
    with pytest.raises(PosymError, match="differ in steps"):
        train_batched([_cfg(), _cfg(steps=3, seed=1)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(PosymError, match="--seed"):
        train_task("number", tmp_path, seed=2, seeds=2)
    with pytest.raises(PosymError, match="--force"):
        train_task("number", tmp_path, seeds=2, force=True)
    (seed_dir(tmp_path, 1)).mkdir(parents=True)
    (seed_dir(tmp_path, 1) / "x").write_text("")
    with pytest.raises(PosymError, match="already exists"):
        train_seeds(_cfg(), SEEDS + (1,), tmp_path)
    assert not seed_dir(tmp_path, 0).exists()  # refused before any work
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(PosymError, match="torchrun"):
        train_seeds(_cfg(), SEEDS, tmp_path / "other")


@pytest.mark.integration  # trains (each run makes its 432,000-sample split: ~1 s)
def test_cli_seeds(tmp_path, capsys):
    args = ["train", "--task", "letter", "--out", str(tmp_path), "--steps", "2", "--eval-every", "2", "--n-test", "8",
            "--batch-size", "4", "--no-track-heads", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_inner=16",
            "--set", "rotary_dim=8", "--quiet"]
    assert main(args + ["--seeds", "1,4"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed1", "seed4"]
    assert capsys.readouterr().out.count("test accuracy") == 2
    assert main(args + ["--seeds", "2", "--seed", "1"]) == 2
    assert "argument --seed: not allowed with argument --seeds" in capsys.readouterr().err


@pytest.mark.parametrize("pe", ["randomized:64", "ssmax", "nope"])
def test_engine_step_equals_separate_optimizer_steps(pe):
    """The stacked step (each run's own position ids under ``randomized:L``; SSMax's query parameters) equals
    ``_optimizer_step`` of each model alone, over a few steps with clipping active: losses to 1e-5 relative,
    weights to 1 % of one step's largest update (lr). On random tokens Adam's normalisation amplifies the
    rounding differences of an entry whose gradients are tiny (its update is ≈ ±lr whatever their size)."""
    from types import SimpleNamespace

    from posym.model.arch import arch_config, build_arch_model
    from posym.model.pe import random_positions
    from posym.tasks import get_vocab
    from posym.train.batched import StackedEngine
    from posym.train.loop import LastTokenLoss, _optimizer_step, make_optimizer

    cfg = _cfg(pe=pe, max_grad_norm=0.5)
    vocab = get_vocab(cfg.task).size
    mcfg = arch_config(cfg.arch, cfg.preset, vocab, pe=cfg.pe, **cfg.model_overrides)
    alone = [build_arch_model(mcfg, seed=k) for k in SEEDS]
    runs = []
    for k in SEEDS:
        m = build_arch_model(mcfg, seed=k)
        opt, sched = make_optimizer(m, cfg)
        runs.append(SimpleNamespace(model=m, optimizer=opt, scheduler=sched, config=cfg))
    engine = StackedEngine(runs)
    opts = [make_optimizer(m, cfg) for m in alone]
    gen = torch.Generator().manual_seed(0)
    for step in range(4):
        x = torch.randint(0, vocab, (len(SEEDS), 6, 17), generator=gen)
        y = torch.randint(0, vocab, (len(SEEDS), 6), generator=gen)
        pos = None
        if pe.startswith("randomized"):
            pos = torch.stack([random_positions(6, 17, 64, s, step) for s in SEEDS])
        losses = engine.step(x, y, cfg.max_grad_norm, pos)
        for k, (m, (opt, sched)) in enumerate(zip(alone, opts)):
            one = _optimizer_step(LastTokenLoss(m), list(m.parameters()), opt, sched, x[k], y[k], cfg.max_grad_norm,
                                  positions=None if pos is None else pos[k])
            torch.testing.assert_close(losses[k], one, rtol=RTOL, atol=0)
    engine.unstack()
    for r, m in zip(runs, alone):
        for (name, a), b in zip(r.model.named_parameters(), m.parameters()):
            assert float((a.detach() - b.detach()).abs().max()) <= 1e-2 * cfg.lr, name
