"""``posym train --seeds K`` with dropout (SPEC §2: the paper preset's 0.1): each run's masks are the masks its
own ``--seed k`` run draws (issue 39).

Tolerance as ``test_batched.py`` (fp32, CPU): train loss of every step and metrics to 1e-5 relative, final
weights to 1e-5 of each tensor's largest magnitude; the RNG state of every checkpoint bit for bit (the masks
consume each run's generator exactly as its own forward does), and a resumed group equals an uninterrupted
one bit for bit.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from posym.errors import PosymError
from posym.model.arch import arch_config, build_arch_model
from posym.model.fast import dropout_masks, last_token_logits
from posym.runs import layout
from posym.tasks import get_vocab
from posym.train import make_config
from posym.train.batched import check_batchable, seed_configs, seed_dir, train_batched
from posym.verbs.train import train, train_seeds
from test_batched import RTOL, _assert_weights_close, _metrics, _weights
from train_helpers import Interrupt, interrupt_at

#: The paper preset (12 layers, d 128, dropout 0.1 at every site, lr 1e-4), a few steps on small batches. (At 30x
#: its lr, Adam amplifies the batched matmuls' rounding in rarely updated entries past 1e-5, with or without dropout.)
PAPER = dict(steps=6, eval_every=1, checkpoint_every=3, n_val=16, n_test=16, eval_batch_size=16, batch_size=8,
             warmup=2, track_heads=False)
SEEDS = (0, 3)


def _cfg(**kw):
    return make_config("number", "paper", **{**PAPER, **kw})


@pytest.mark.parametrize("n_layer", [1, 3])
def test_drawn_masks_are_the_forwards_own_draws(n_layer):
    """Known answer: masks drawn ahead (``dropout_masks``) and passed back equal the train-mode forward's own
    draws (SDPA's attention dropout included): same logits to float tolerance, same generator state after."""
    mcfg = arch_config("gptj", "paper", get_vocab("number").size, n_layer=n_layer)
    model = build_arch_model(mcfg, seed=0).train()
    x = torch.randint(0, mcfg.vocab_size, (4, 30), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    own = last_token_logits(model, x)
    after_own = torch.get_rng_state()
    torch.manual_seed(7)
    masks = dropout_masks(model, 4, 30)
    assert torch.equal(torch.get_rng_state(), after_own)
    assert len(masks) == 1 + 3 * n_layer
    given = last_token_logits(model, x, dropout_masks=masks)
    torch.testing.assert_close(given, own, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(given, last_token_logits(model.eval(), x), rtol=1e-3, atol=1e-3)  # dropout is on


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    root = tmp_path_factory.mktemp("batched_dropout")
    cfg = _cfg()
    train_seeds(cfg, SEEDS, root / "group", progress=False)
    for s in SEEDS:
        train(replace(cfg, seed=s, data_seed=s, order_seed=s), root / f"alone{s}", progress=False)
    return root


@pytest.mark.integration  # trains two 12-layer runs twice (each makes its 432,000-sample split: ~1 s)
def test_group_with_dropout_equals_separate_runs(group):
    for s in SEEDS:
        b, a = group / "group" / f"seed{s}", group / f"alone{s}"
        mb, ma = _metrics(b), _metrics(a)  # eval_every 1: the train loss of every step
        assert mb[["split", "step"]].equals(ma[["split", "step"]]) and len(mb) == PAPER["steps"] + 2
        np.testing.assert_allclose(mb.drop(columns="split").to_numpy(float), ma.drop(columns="split").to_numpy(float),
                                   rtol=RTOL, atol=1e-7)
        for step in (3, PAPER["steps"]):
            _assert_weights_close(_weights(b, step), _weights(a, step))
        st_a, st_b = (torch.load(layout.step_dir(r, PAPER["steps"]) / layout.TRAINER_STATE, weights_only=True)
                      for r in (a, b))
        assert torch.equal(st_a["rng_cpu"], st_b["rng_cpu"])  # each run's generator: drawn exactly as alone


@pytest.mark.integration
def test_dropout_group_resumes_exactly(group, tmp_path):
    cfg = _cfg()
    configs, outs = seed_configs(cfg, SEEDS), [seed_dir(tmp_path, s) for s in SEEDS]
    with pytest.raises(Interrupt):
        train_batched(configs, outs, progress=False, callbacks=[[], [interrupt_at(5)]])  # both saved 4
    train_seeds(cfg, SEEDS, tmp_path, resume=True, progress=False)
    for s, out in zip(SEEDS, outs):
        full = group / "group" / f"seed{s}"
        a, b = _weights(out, PAPER["steps"]), _weights(full, PAPER["steps"])
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert _metrics(out).equals(_metrics(full))


def test_dropout_is_refused_only_where_no_generator_is_swapped_per_run():
    """CPU and CUDA draw each run's masks from its own generator state (CUDA: explicit masks, as its single run
    draws them; test_explicit_dropout.py); another device (mps) is refused in one line."""
    check_batchable(seed_configs(_cfg(), SEEDS), "cpu")
    check_batchable(seed_configs(_cfg(), SEEDS), "cuda")
    with pytest.raises(PosymError, match="cpu or cuda only"):
        check_batchable(seed_configs(_cfg(), SEEDS), "mps")
    check_batchable(seed_configs(_cfg(model_overrides={"embd_pdrop": 0.0, "resid_pdrop": 0.0, "attn_pdrop": 0.0}),
                                 SEEDS), "mps")
