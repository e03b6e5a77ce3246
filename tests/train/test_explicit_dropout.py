"""Explicit dropout masks (issue 39): off the CPU a train-mode forward draws its masks ahead
(``posym.model.fast.dropout_masks``) and runs attention through SDPA's math path with them, so a single CUDA
run draws what its run in a ``--seeds`` group draws. The rule is ``explicit_dropout``; forced on the CPU here,
where the explicit path must equal the implicit one bit for bit (losses, weights, RNG state). The device's
generator is swapped per run with the CPU's (``posym.train.rng``), checked with CUDA stood in for on the CPU.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from posym.errors import PosymError
from posym.model import fast
from posym.model.arch import arch_config, build_arch_model
from posym.model.fast import _masked_attention, dropout_masks, explicit_dropout, has_dropout, last_token_logits
from posym.model.pe import random_positions
from posym.tasks import get_vocab, make_split
from posym.train import make_config
from posym.train import rng as rng_mod
from posym.train.batched import _own_rng, check_batchable, seed_configs
from posym.train.loop import LastTokenLoss, _optimizer_step, make_optimizer

DROP = dict(embd_pdrop=0.1, resid_pdrop=0.1, attn_pdrop=0.1)
SMALL = dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32)
B = 16


def test_the_rule_is_every_device_but_the_cpu():
    assert not explicit_dropout("cpu") and not explicit_dropout(torch.device("cpu"))
    assert explicit_dropout("cuda") and explicit_dropout("cuda:1") and explicit_dropout("mps")
    mcfg = arch_config("gptj", "quick", get_vocab("number").size, **SMALL)
    assert not has_dropout(build_arch_model(mcfg, seed=0))
    assert has_dropout(build_arch_model(arch_config("gptj", "paper", get_vocab("number").size, n_layer=1), seed=0))


@pytest.mark.parametrize("causal,tq", [(True, 18), (False, 1)])
def test_masked_attention_is_sdpas_math_path_with_its_own_draw(causal, tq):
    """Known answer: SDPA with ``dropout_p`` on the CPU (math path) = ``_masked_attention`` with the mask
    ``F.dropout(ones)`` drawn from the same state, bit for bit (causal layers and the last layer's one query)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 2, t, 16, generator=g) for t in (tq, 18, 18))
    scale = 16**-0.5
    torch.manual_seed(5)
    want = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=causal, scale=scale)
    torch.manual_seed(5)
    got = _masked_attention(q, k, v, causal, scale, F.dropout(torch.ones(4, 2, tq, 18), 0.1, True))
    assert torch.equal(got, want)
    keep = torch.ones(4, 2, tq, 18)  # no dropout: plain attention to float tolerance
    plain = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    torch.testing.assert_close(_masked_attention(q, k, v, causal, scale, keep), plain, rtol=1e-5, atol=1e-6)
    assert math.isclose(scale, math.sqrt(scale) ** 2, rel_tol=1e-15)


def _model(pe: str = "rope", seed: int = 0):
    config = make_config("number", "quick", model_overrides={**SMALL, **DROP}, warmup=5, steps=30, batch_size=B, pe=pe)
    model = build_arch_model(arch_config("gptj", "quick", get_vocab("number").size, pe=pe, **config.model_overrides),
                             seed=seed).train()
    return config, model


def test_the_forced_explicit_forward_equals_the_implicit_one_bit_for_bit(monkeypatch):
    _, model = _model()
    x = torch.randint(0, model.config.vocab_size, (4, 18), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(7)
    implicit = last_token_logits(model, x)
    after = torch.get_rng_state()
    monkeypatch.setattr(fast, "explicit_dropout", lambda device: True)
    torch.manual_seed(7)
    explicit = last_token_logits(model, x)
    assert torch.equal(explicit, implicit) and torch.equal(torch.get_rng_state(), after)
    torch.manual_seed(7)
    assert torch.equal(last_token_logits(model, x, dropout_masks=dropout_masks(model, 4, 18)), implicit)
    torch.manual_seed(8)
    assert not torch.equal(last_token_logits(model, x), implicit)  # it does draw
    with torch.no_grad():  # eval mode draws nothing
        state = torch.get_rng_state()
        last_token_logits(model.eval(), x)
        assert torch.equal(torch.get_rng_state(), state)


def _train_30(explicit: bool, monkeypatch) -> tuple[list[float], list[torch.Tensor], torch.Tensor]:
    monkeypatch.setattr(fast, "explicit_dropout", lambda device: explicit)
    config, model = _model("randomized:64")
    optimizer, scheduler = make_optimizer(model, config)
    split = make_split("number", "train", seed=0, n=B * config.steps)
    x, y = torch.from_numpy(split.input_ids), torch.from_numpy(split.labels)
    objective, params = LastTokenLoss(model), list(model.parameters())
    torch.manual_seed(11)
    losses = []
    for s in range(config.steps):
        pos = random_positions(B, x.shape[1], 64, 0, s)
        losses.append(_optimizer_step(objective, params, optimizer, scheduler, x[s * B:(s + 1) * B],
                                      y[s * B:(s + 1) * B], config.max_grad_norm, positions=pos).item())
    return losses, [p.detach().clone() for p in params], torch.get_rng_state()


@pytest.mark.medium  # 30 training steps twice: about a second
def test_the_explicit_path_trains_as_the_implicit_one_bit_for_bit(monkeypatch):
    """30 steps of a tiny GPT-J, dropout 0.1 at every site, ``randomized:64`` positions: losses, weights and
    the generator state after equal bit for bit (the CPU keeps the implicit path; a CUDA run takes this one)."""
    torch.set_num_threads(1)
    implicit = _train_30(False, monkeypatch)
    explicit = _train_30(True, monkeypatch)
    assert explicit[0] == implicit[0] and len(set(implicit[0])) == len(implicit[0])
    assert all(torch.equal(a, b) for a, b in zip(explicit[1], implicit[1]))
    assert torch.equal(explicit[2], implicit[2])


class _FakeCudaRng:
    """The default CUDA generator stood in for by a CPU ``torch.Generator`` (get/set_rng_state of ``torch.cuda``)."""

    def __init__(self, monkeypatch, seed: int = 0):
        self.gen = torch.Generator().manual_seed(seed)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": self.gen.get_state())
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": self.gen.set_state(state))

    def draw(self) -> torch.Tensor:
        return torch.rand(3, generator=self.gen)


def test_each_run_of_a_group_keeps_its_own_cpu_and_device_streams(monkeypatch):
    """What the batched engine does per run on CUDA (CUDA stood in for): swap in run k's CPU and device
    generator states, draw, store them; each run's streams continue as if it ran alone, the caller's are kept."""
    cuda = _FakeCudaRng(monkeypatch)
    alone = []
    for seed in (0, 3):  # each run alone: its CPU and "CUDA" draws of three steps
        torch.manual_seed(seed)
        cuda.gen.manual_seed(100 + seed)
        alone.append([(torch.rand(2), cuda.draw()) for _ in range(3)])
    states = []
    for seed in (0, 3):
        torch.manual_seed(seed)
        cuda.gen.manual_seed(100 + seed)
        states.append(rng_mod.process_rng("cuda"))
        assert set(states[-1]) == {"rng_cpu", "rng_cuda"}
    torch.manual_seed(99)
    cuda.gen.manual_seed(99)
    caller = rng_mod.process_rng("cuda")
    for step in range(3):  # interleaved, as the group's steps are
        for k in range(2):
            with _own_rng(states, k, "cuda"):
                cpu, dev = torch.rand(2), cuda.draw()
            assert torch.equal(cpu, alone[k][step][0]) and torch.equal(dev, alone[k][step][1])
    rng_mod.set_process_rng(caller, "cuda")
    assert all(torch.equal(a, b) for a, b in zip(rng_mod.process_rng("cuda").values(), caller.values()))
    assert set(rng_mod.process_rng("cpu")) == {"rng_cpu"}


def test_a_checkpoints_rng_entries_round_trip_on_the_device(monkeypatch):
    """``_rng_states`` (what a checkpoint stores) and ``_restore_rng`` (resume) carry the device generator."""
    cuda = _FakeCudaRng(monkeypatch, seed=4)
    torch.manual_seed(1)
    st = rng_mod._rng_states("cuda")
    want = (torch.rand(2), cuda.draw())
    torch.manual_seed(2)
    cuda.gen.manual_seed(2)
    rng_mod._restore_rng(st, 0, 1, "cuda", fallback_seed=0)
    assert torch.equal(torch.rand(2), want[0]) and torch.equal(cuda.draw(), want[1])


def test_dropout_groups_train_on_cuda_and_are_refused_elsewhere_in_one_line():
    cfg = make_config("number", "paper", steps=6)
    for device in ("cpu", "cuda", "cuda:1"):
        check_batchable(seed_configs(cfg, (0, 1)), device)
    with pytest.raises(PosymError, match=r"trains on cpu or cuda only .*on mps train each seed alone") as exc:
        check_batchable(seed_configs(cfg, (0, 1)), "mps")
    assert "\n" not in str(exc.value)
    check_batchable(seed_configs(make_config("number", "paper", model_overrides={k: 0.0 for k in DROP}), (0, 1)), "mps")
