"""Hand-built known-answer heads for the head-score tests (imported by the test modules)."""

from __future__ import annotations

import numpy as np
import torch
from transformers import GPTJConfig, GPTJForCausalLM

from posym.model.adapters import get_adapter

V = 40  # vocabulary of the hand-built models
D = 64  # model width = head dim (one head)


def _orthonormal_embeddings(seed: int = 0) -> torch.Tensor:
    """V orthonormal, zero-mean embeddings living on dims 2..D-1 ([V, D]); LayerNorm maps each to 8·e."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(D - 2, V, generator=g, dtype=torch.float64)
    ones = torch.ones(D - 2, 1, dtype=torch.float64) / (D - 2) ** 0.5
    a = a - ones @ (ones.T @ a)  # zero mean
    qmat, _ = torch.linalg.qr(a)
    e = torch.zeros(V, D, dtype=torch.float64)
    e[:, 2:] = qmat.T
    return e


def _one_layer_gptj(rotary_dim: int, seed: int = 0) -> GPTJForCausalLM:
    torch.manual_seed(seed)
    cfg = GPTJConfig(vocab_size=V, n_positions=32, n_embd=D, n_layer=1, n_head=1, rotary_dim=rotary_dim, n_inner=D,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    m = GPTJForCausalLM(cfg).eval()
    with torch.no_grad():
        m.transformer.wte.weight.copy_(_orthonormal_embeddings(seed).float())
        m.transformer.h[0].ln_1.weight.fill_(1.0)
        m.transformer.h[0].ln_1.bias.zero_()
    return m


def relative_head(offset: int = 3, margin: float = 30.0) -> GPTJForCausalLM:
    """A head attending to key ``t - offset`` by RoPE alone, whatever the content.

    ln_1 maps dim 0 to the constant 1 (weight 0, bias 1) and q/k read only dim 0, so q and k are the
    same for every token; k uses the three fastest frequency pairs and ``q = R(offset)^T k``, so the
    logit of the key at distance ``d`` is ``c·Σ_k cos((d - offset)·θ_k)`` — peaked at ``d = offset``.
    """
    m = _one_layer_gptj(rotary_dim=D)
    ad = get_adapter(m)
    k = torch.zeros(D, dtype=torch.float64)
    k[:6] = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    x = torch.arange(-31, 32, dtype=torch.float64)
    f = torch.cos(x[:, None] * ad.inv_freq[:3]).sum(-1)
    gap = (f[x == 0] - f[x != 0].max()).item()
    assert gap > 0.3
    amp = (margin / (gap * ad.scaling)) ** 0.5
    k = k * amp
    q = ad.rotate_t(k[None], [offset])[0]
    with torch.no_grad():
        blk = m.transformer.h[0]
        blk.ln_1.weight[0] = 0.0
        blk.ln_1.bias[0] = 1.0
        blk.attn.q_proj.weight.zero_()
        blk.attn.k_proj.weight.zero_()
        blk.attn.q_proj.weight[:, 0] = q.float()
        blk.attn.k_proj.weight[:, 0] = k.float()
    return m


def content_head(shift: int = 7, strength: float = 2.0) -> GPTJForCausalLM:
    """A NoPE-like head: query token ``v`` attends to the key holding token ``(v + shift) mod V``.

    rotary_dim = 2 rotates only dims 0-1, where q and k are zero; q/k live on the non-rotary dims, so
    positions play no role. Logit of the matching key ``= scaling·64·strength²`` (32 for the
    defaults), every other key 0.
    """
    m = _one_layer_gptj(rotary_dim=2)
    e = _orthonormal_embeddings().float()  # [V, D]
    perm = (torch.arange(V) + shift) % V
    with torch.no_grad():
        blk = m.transformer.h[0]
        blk.attn.k_proj.weight.copy_(strength * e.T @ e)  # projection onto the token subspace
        blk.attn.q_proj.weight.copy_(strength * e[perm].T @ e)  # e_v -> e_{v+shift}
    return m


def uniform_head() -> GPTJForCausalLM:
    """All logits equal (q = 0): uniform attention."""
    m = _one_layer_gptj(rotary_dim=D)
    with torch.no_grad():
        m.transformer.h[0].attn.q_proj.weight.zero_()
    return m


def content_prompts(n: int, length: int = 17, shift: int = 7, query_pos: int | None = None, seed: int = 0):
    """Prompts of distinct tokens in which the query's target token ``(v + shift) mod V`` occurs once
    before the query. Returns (ids [n, length], target positions [n])."""
    rng = np.random.default_rng(seed)
    t = length - 1 if query_pos is None else query_pos
    ids = np.zeros((n, length), dtype=np.int64)
    where = np.zeros(n, dtype=np.int64)
    for r in range(n):
        v = int(rng.integers(0, V))
        tgt = (v + shift) % V
        others = rng.permutation([x for x in range(V) if x not in (v, tgt)])[: length - 2]
        pos = int(rng.integers(0, t))
        before = np.insert(others[: t - 1], pos, tgt)
        ids[r] = np.concatenate((before, [v], others[t - 1:]))[:length]
        where[r] = pos
        assert ids[r, t] == v and (ids[r, :t] == tgt).sum() == 1 and ids[r, pos] == tgt
    return ids, where


def sharpen_qk(model, std: float = 0.3, seed: int = 1):
    """Re-draw the q/k projections with a larger std: attention far from uniform, so head scores are
    not trivially (1, 1) (GPT-J / Llama q_proj, k_proj; GPT-NeoX query_key_value)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(s in name for s in ("q_proj.weight", "k_proj.weight", "query_key_value.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


def sink_head(sink: int = 0, margin: float = 40.0) -> GPTJForCausalLM:
    """An attention-sink head: every query attends to the key holding token ``sink`` (the start token
    in :func:`sink_prompts`), whatever its position (logit ``margin``, every other key 0).

    rotary_dim = 2 rotates dims 0-1, where q and k are zero, so positions play no role; ln_1 maps
    token ``v`` to ``8·e_v``, q reads every token as ``a·e_sink``, k keeps only the ``e_sink`` part.
    """
    m = _one_layer_gptj(rotary_dim=2)
    e = _orthonormal_embeddings().float()  # [V, D]
    ad = get_adapter(m)
    a = (margin / ad.scaling) ** 0.5
    with torch.no_grad():
        blk = m.transformer.h[0]
        blk.attn.q_proj.weight.copy_(a / 8 * torch.outer(e[sink], e.sum(0)))
        blk.attn.k_proj.weight.copy_(a / 8 * torch.outer(e[sink], e[sink]))
    return m


def sink_prompts(n: int, length: int = 17, sink: int = 0, seed: int = 0) -> np.ndarray:
    """Prompts [n, length] starting with token ``sink`` followed by distinct other tokens."""
    rng = np.random.default_rng(seed)
    others = [x for x in range(V) if x != sink]
    return np.stack([np.concatenate(([sink], rng.permutation(others)[: length - 1])) for _ in range(n)])
