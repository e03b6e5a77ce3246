"""The known-answer model of the head-level studies (issue 37 point 3): a tiny GPT-J or Llama whose
weights are set by hand so that ONE head carries the answer through ONE rotary frequency pair.

Task: prompts of ``length`` distinct tokens; the answer at the last position is the previous token
(``labels = input_ids[:, -2]``). Construction (SPEC §4's relative RoPE head, as
``tests/heads/head_builders.relative_head``; its inverse temperature by Lemma F.1,
:func:`posym.theory.constructions.lemma_f1_beta`):

* residual stream of width 64: dim 0 a constant channel (GPT-J: ``ln_1`` weight 0, bias 1 there; Llama:
  a constant 1 in every embedding, equal RMS for every token), dims 1..31 the token embeddings ``t_v``
  (orthonormal, zero-mean), dims 32..63 the answer directions ``f_v`` (orthonormal, zero-mean);
* the answer head: q and k read only the constant channel and live on one rotary pair (frequency ID
  ``pair``, 1 = fastest), ``q = R(1)ᵀ k``, so its logit of the key at distance ``d`` is
  ``β·cos((d − 1)·θ_pair)`` — peaked at the previous token, whatever the content; its value maps
  ``t_v`` to a basis vector ``g_v`` of its head dims and its output projection ``g_v`` to ``f_v``;
* every other head: q = k = 0 (uniform attention) and zero columns of the output projection (it
  carries nothing); every MLP outputs 0; ``lm_head`` reads only ``f_v`` (logit of token ``v`` ∝ the
  answer head's attention on ``v``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from transformers import GPTJConfig, GPTJForCausalLM, LlamaConfig, LlamaForCausalLM

from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.model.rope import expand_pairs
from posym.theory.constructions import lemma_f1_beta

VOCAB = 16  # tokens (one basis vector of the answer head's 16 value dims each)
WIDTH = 64  # residual width: [const | 31 token dims | 32 answer dims]
N_HEADS = 4
HEAD_DIM = 16  # all rotary: 8 frequency IDs
N_FREQ = HEAD_DIM // 2
#: Smallest discrepancy (1 − the runner-up's cos) accepted: below it β exceeds ~1e5 and float32 logits lose it.
MIN_GAP = 1e-4
FAMILIES = ("gptj", "llama")


def _zero_mean_orthonormal(n: int, dims: range, seed: int) -> torch.Tensor:
    """``n`` orthonormal vectors [n, WIDTH] supported on ``dims``, each summing to 0 (LayerNorm-neutral)."""
    g = torch.Generator().manual_seed(seed)
    k = len(dims)
    a = torch.randn(k, n, generator=g, dtype=torch.float64)
    ones = torch.ones(k, 1, dtype=torch.float64) / k ** 0.5
    qmat, _ = torch.linalg.qr(a - ones @ (ones.T @ a))
    out = torch.zeros(n, WIDTH, dtype=torch.float64)
    out[:, dims.start:dims.stop] = qmat.T
    return out


def _model(family: str, n_layers: int):
    if family == "gptj":
        cfg = GPTJConfig(vocab_size=VOCAB, n_positions=64, n_embd=WIDTH, n_layer=n_layers, n_head=N_HEADS,
                         rotary_dim=HEAD_DIM, n_inner=2 * WIDTH, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                         attn_implementation="eager")
        return GPTJForCausalLM(cfg).eval()
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=n_layers,
                      num_attention_heads=N_HEADS, num_key_value_heads=N_HEADS // 2, head_dim=HEAD_DIM,
                      max_position_embeddings=64, tie_word_embeddings=False, pad_token_id=None, bos_token_id=None,
                      eos_token_id=None, attn_implementation="eager")
    return LlamaForCausalLM(cfg).eval()


def _parts(model, family: str):
    """(embedding, [(norm, q, k, v, o, mlp_out modules)] per layer, final norm, lm_head) of either family."""
    if family == "gptj":
        t = model.transformer
        return t.wte, [(b.ln_1, b.attn.q_proj, b.attn.k_proj, b.attn.v_proj, b.attn.out_proj, b.mlp.fc_out)
                       for b in t.h], t.ln_f, model.lm_head
    m = model.model
    return m.embed_tokens, [(b.input_layernorm, b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj,
                             b.self_attn.o_proj, b.mlp.down_proj) for b in m.layers], m.norm, model.lm_head


def previous_token_gap(theta: float, length: int) -> float:
    """The discrepancy of the construction at angle ``theta``: ``1 − max_{d ≠ 1} cos((d − 1)·theta)`` over the
    distances ``d = 0..length−1`` a last query sees (> 0: the previous token wins)."""
    d = np.arange(length)
    return float(1 - np.cos((d[d != 1] - 1) * theta).max())


def build_known_answer_model(family: str = "gptj", answer_head: tuple[int, int] = (1, 2), pair: int = 1, *,
                             n_prompts: int = 256, length: int = 8, eps: float = 1e-3, seed: int = 0,
                             n_layers: int = 2) -> tuple[torch.nn.Module, torch.Tensor, np.ndarray]:
    """A tiny eager ``family`` model (``"gptj"`` or ``"llama"``, the latter with 2 key/value heads for 4
    query heads) of ``n_layers`` layers × 4 heads (head dim 16, all rotary: frequency IDs 1..8), whose
    answer is carried by head ``answer_head = (layer, head)`` through frequency ID ``pair`` alone.

    Returns ``(model, input_ids [n_prompts, length] long, labels [n_prompts] int64)``: prompts of
    ``length`` distinct tokens of 16 (seeded), label = the previous token ``input_ids[:, -2]``.

    Guaranteed (tests/test_known_heads.py):

    * the untouched model answers every prompt (accuracy 1): the answer head puts ``≥ 1 − eps`` of the
      last query's attention on the previous token (Lemma F.1: β = ln((length − 1)/eps)/Δ, Δ =
      :func:`previous_token_gap` of the pair's angle);
    * every other head attends uniformly and adds exactly 0 to the residual, so ablating any other
      head (``posym.heads.ablate.ablated``) leaves the predictions unchanged (logits to 1e-6), and
      ablating the answer head makes every logit 0 up to float noise (< 1e-4; the argmax is that noise:
      accuracy ≈ 1/16, chance);
    * ``freq-mask`` dropping ID ``pair`` (all layers) makes the answer head uniform over the prompt
      (its tokens tie: accuracy ≈ 1/length), dropping any other single ID changes no prediction (logits to 1e-6).

    One-line PosymError for an unknown family, a head outside the model, an ID outside 1..8, a
    ``length`` outside 3..16, or a pair too slow to single out the previous token over ``length``
    positions (Δ < 1e-4: pick a faster pair or shorter prompts).
    """
    if family not in FAMILIES:
        raise PosymError(f"known-answer model: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    layer, head = (int(x) for x in answer_head)
    if n_layers < 1 or not (0 <= layer < n_layers and 0 <= head < N_HEADS):
        raise PosymError(f"known-answer model: no head {answer_head} in {n_layers} layers x {N_HEADS} heads")
    if not 1 <= pair <= N_FREQ:
        raise PosymError(f"known-answer model: frequency ID {pair} outside 1..{N_FREQ} (1 = fastest)")
    if not 3 <= length <= VOCAB:
        raise PosymError(f"known-answer model: length {length} outside 3..{VOCAB} (distinct tokens of {VOCAB})")
    torch.manual_seed(seed)
    model = _model(family, n_layers)
    ad = get_adapter(model)
    gap = previous_token_gap(float(ad.inv_freq[pair - 1]), length)  # the family's own rotary angle
    if gap < MIN_GAP:
        raise PosymError(f"known-answer model: frequency ID {pair} cannot single out the previous token over {length} "
                         f"positions (discrepancy {gap:.2g} < {MIN_GAP:g}); pick a faster pair or shorter prompts")
    emb, layers, final_norm, lm_head = _parts(model, family)
    tok = _zero_mean_orthonormal(VOCAB, range(1, 32), seed)  # t_v
    ans = _zero_mean_orthonormal(VOCAB, range(32, WIDTH), seed + 1)  # f_v
    hd, kv = HEAD_DIM, ad.kv_head_of(head)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in [blk[0] for blk in layers] + [final_norm]:
            norm.weight.fill_(1.0)
        if family == "gptj":
            for blk in layers:
                blk[0].weight[0], blk[0].bias[0] = 0.0, 1.0  # dim 0 of ln_1's output: the constant 1
            emb.weight.copy_(tok.float())
        else:
            emb.weight.copy_((tok + torch.eye(WIDTH, dtype=torch.float64)[0]).float())  # + the constant channel
        norm, q_proj, k_proj, v_proj, o_proj, _ = layers[layer]
        xn = norm(emb.weight).double()  # the normalised embeddings [V, WIDTH]
        const, scale = float(xn[0, 0]), float(xn[0, 1:] @ tok[0, 1:])
        # q and k on the first dim of the chosen pair, q = R(1)^T k: logit at distance d ∝ cos((d − 1)·θ)
        first = int(torch.nonzero(expand_pairs(torch.eye(N_FREQ)[pair - 1], ad.pair_convention))[0])
        beta = lemma_f1_beta(gap, length, eps)
        k = torch.zeros(hd, dtype=torch.float64)
        k[first] = math.sqrt(beta / ad.scaling)
        q = ad.rotate_t(k[None], [1])[0].double()
        q_proj.weight[head * hd:(head + 1) * hd, 0] = (q / const).float()
        k_proj.weight[kv * hd:(kv + 1) * hd, 0] = (k / const).float()
        v_proj.weight[kv * hd:(kv + 1) * hd] = (torch.eye(hd, dtype=torch.float64)[:VOCAB].T @ tok / scale).float()
        o_proj.weight[:, head * hd:(head + 1) * hd] = (ans.T @ torch.eye(hd, dtype=torch.float64)[:VOCAB]).float()
        lm_head.weight.copy_(10.0 * ans.float())
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.permutation(VOCAB)[:length] for _ in range(int(n_prompts))]).astype(np.int64)
    return model, torch.from_numpy(ids), ids[:, -2].copy()
