"""Fast last-token forward of HF GPT-J for training and evaluation (SPEC §2).

Paper A's loss and accuracy read only the logits at the last input position (the query, which
predicts the answer). ``last_token_logits`` runs the *same parameters* of an HF
``GPTJForCausalLM`` with three savings over ``model(input_ids).logits[:, -1]``:

* SDPA attention (``F.scaled_dot_product_attention``) instead of eager matmul + mask;
* the last layer computes its query, attention output and MLP for the last position only
  (earlier positions of the last layer never reach the output);
* the LM head runs on one position.

Dropout (in ``train()`` mode) has the model's rates and distribution but a faster draw (``_dropout``);
on the CPU attention dropout uses SDPA's ``dropout_p``. ``dropout_masks`` draws the same masks ahead of the
call (same generator consumption), and ``last_token_logits(..., dropout_masks=...)`` uses them. Off the CPU
(:func:`explicit_dropout`) a train-mode call always draws its masks so, from the device's default generator,
and runs attention through SDPA's math path with the mask (``_masked_attention``) instead of SDPA's in-kernel
dropout, which nothing outside the kernel reproduces: a single run and one run of a batched group
(``posym train --seeds``) then draw the same masks. In ``eval()``
mode the result equals the HF forward to float tolerance (``reference_last_token_logits``; tested to
1e-5), for every positional encoding (SPEC §2.1): the rotary table is the model's own, ``positions``
gives each sequence its position ids (``randomized:L`` training), and an SSMax query projection gets
the token index of each query.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import GPTJForCausalLM

from posym.model.gptj import rotary_table
from posym.model.ssmax import SSMaxQuery


def _rotary_tables(model: GPTJForCausalLM, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """sin, cos of shape [T, rotary_dim] (positions [T]) or [B, 1, T, rotary_dim] (positions [B, T]),
    repeated per interleaved pair (GPT-J convention)."""
    table = rotary_table(model)  # [max_pos, rd]: sin | cos
    sincos = table[positions].to(dtype)
    if sincos.dim() == 3:
        sincos = sincos[:, None]  # broadcast over heads
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    return sin.repeat_interleave(2, dim=-1), cos.repeat_interleave(2, dim=-1)


def _query(q_proj: torch.nn.Module, h: Tensor, index: Tensor) -> Tensor:
    """``q_proj(h)``; an SSMax projection is told the token index of each row (the last layer's one query)."""
    return q_proj(h, index) if isinstance(q_proj, SSMaxQuery) else q_proj(h)


def _rotate(x: Tensor, sin: Tensor, cos: Tensor, rd: int) -> Tensor:
    """GPT-J rotary on the first ``rd`` dims of x [B, H, T, hd]; sin/cos [T, rd]."""
    x_rot, x_pass = x[..., :rd], x[..., rd:]
    x1 = x_rot[..., ::2]
    x2 = x_rot[..., 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    out = x_rot * cos + rotated * sin
    return torch.cat((out, x_pass), dim=-1) if x_pass.shape[-1] else out


def _dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Inverted dropout with the same distribution as ``F.dropout`` (keep w.p. 1-p, scale 1/(1-p)).

    Drawn with one ``rand_like`` + compare, about 2x faster than ``bernoulli_`` on CPU; the random
    stream differs from ``nn.Dropout``'s, the distribution does not.
    """
    if not training or p == 0.0:
        return x
    keep = (torch.rand_like(x) >= p).to(x.dtype)
    return x * keep * (1.0 / (1.0 - p))


def dropout_masks(model: GPTJForCausalLM, batch: int, length: int, dtype: torch.dtype = torch.float32,
                  device: str | torch.device = "cpu") -> list[Tensor]:
    """The dropout draws of one train-mode :func:`last_token_logits` call on ``[batch, length]`` ids, made now
    from the global generator in the forward's order, shapes and ops (so the generator ends in the state the
    call leaves it in): embedding ``[B, T, D]`` (``rand >= p``), then per layer the attention probabilities
    ``[B, H, Tq, T]`` (SDPA's own CPU draw: ``F.dropout``, i.e. ``bernoulli_(1 - p)``), the attention output
    and the MLP output ``[B, Tq, D]``; ``Tq`` = T, 1 in the last layer. A site with rate 0 draws nothing and
    has no entry. Each entry is the multiplier ``keep / (1 - p)`` (0 or 1/(1-p)); passed back as
    ``dropout_masks=`` the forward equals the drawing call bit for bit on the CPU (tested). Off the CPU the
    forward itself draws them so (:func:`explicit_dropout`); SDPA's in-kernel CUDA draw is not reproduced."""
    cfg = model.config
    D, H = cfg.n_embd, cfg.n_head
    n_layers = len(model.transformer.h)
    masks: list[Tensor] = []

    def rand_site(shape: tuple[int, ...], p: float) -> None:
        if p:
            masks.append((torch.rand(shape, dtype=dtype, device=device) >= p).to(dtype) * (1.0 / (1.0 - p)))

    rand_site((batch, length, D), cfg.embd_pdrop)
    for i in range(n_layers):
        tq = 1 if i == n_layers - 1 else length
        if cfg.attn_pdrop:
            masks.append(F.dropout(torch.ones(batch, H, tq, length, dtype=dtype, device=device), cfg.attn_pdrop, True))
        rand_site((batch, tq, D), cfg.resid_pdrop)
        rand_site((batch, tq, D), cfg.resid_pdrop)
    return masks


def explicit_dropout(device: str | torch.device) -> bool:
    """The one rule of where a train-mode :func:`last_token_logits` draws its dropout masks explicitly
    (:func:`dropout_masks` from ``device``'s default generator, attention through ``_masked_attention``)
    instead of inside the ops (SDPA's ``dropout_p``): every device but the CPU. On the CPU both paths draw
    the same masks and give the same values bit for bit (tested), so the CPU keeps the implicit one."""
    return (device if isinstance(device, torch.device) else torch.device(device)).type != "cpu"


def has_dropout(model: torch.nn.Module) -> bool:
    """Whether ``model``'s config has any dropout rate > 0 (embedding, residual or attention; GPT-J names)."""
    return any(getattr(model.config, k, 0) for k in ("embd_pdrop", "resid_pdrop", "attn_pdrop"))


def _masked_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, mask: Tensor) -> Tensor:
    """SDPA's math path (the CPU's kernel with ``dropout_p``, op for op: q and k each scaled by sqrt(scale),
    the causal mask, softmax, the dropout multiplier ``mask`` [B, H, Tq, T], times v): equal to
    ``F.scaled_dot_product_attention(q, k, v, dropout_p=p)`` bit for bit on the CPU with the same draw."""
    sf = math.sqrt(scale)
    scores = (q * sf) @ (k.transpose(-1, -2) * sf)
    if causal:
        tq, t = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(tq, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1) * mask).to(v.dtype) @ v


_draw_masks = dropout_masks  # the function, where last_token_logits' argument of that name hides it

#: Attribute (a count) set on a model while something needs its plain forward (:func:`full_forward`).
FULL_FORWARD = "_posym_full_forward"


@contextmanager
def full_forward(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """For the duration, :func:`last_token_logits` runs the plain HF forward
    (:func:`reference_last_token_logits`) instead of the fast path. For inference-time interventions
    (docs/interventions.md): the fast path calls neither the model's forward (whose pre-hooks rebuild
    rotary tables) nor the last layer's query projection on any row but the last (a hook that scales
    each row by its position would see row 0), so it would measure another model. Nestable."""
    setattr(model, FULL_FORWARD, getattr(model, FULL_FORWARD, 0) + 1)
    try:
        yield model
    finally:
        left = getattr(model, FULL_FORWARD, 1) - 1
        if left > 0:
            setattr(model, FULL_FORWARD, left)
        else:
            delattr(model, FULL_FORWARD)


def has_fast_path(model: torch.nn.Module) -> bool:
    """Whether :func:`last_token_logits` has an exact fast path for ``model``: an HF GPT-J (posym's
    model of record, any training-time encoding); other families use the plain HF forward."""
    return isinstance(model, GPTJForCausalLM)


def last_token_logits(model: GPTJForCausalLM, input_ids: Tensor, positions: Tensor | None = None,
                      dropout_masks: Sequence[Tensor] | None = None) -> Tensor:
    """Logits at the last position. input_ids [B, T] -> logits [B, V].

    ``dropout_masks`` (GPT-J's fast path only): the draws of :func:`dropout_masks`, used in place of drawing
    (``posym train --seeds`` draws each run's masks from its own generator outside ``vmap``). Without them a
    train-mode call off the CPU draws them itself first (:func:`explicit_dropout`), so its masks are the same.

    Positions are 0..T-1 (``positions`` None) or each sequence's own position ids [B, T]; they must be
    < the model's rotary table length. The fast path is GPT-J's (:func:`has_fast_path`); every other
    family (Llama, Qwen3, Gemma-3, GPT-NeoX, ...) and, inside :func:`full_forward` (an intervention is
    active), GPT-J too run the plain HF forward (:func:`reference_last_token_logits`).
    """
    if getattr(model, FULL_FORWARD, 0) or not has_fast_path(model):
        return reference_last_token_logits(model, input_ids, positions)
    tr = model.transformer
    cfg = model.config
    B, T = input_ids.shape
    n_head = cfg.n_head
    hd = cfg.n_embd // n_head
    rd = cfg.rotary_dim or hd
    scale = hd**-0.5
    index = torch.arange(T, device=input_ids.device)
    positions = index if positions is None else positions.to(input_ids.device)
    train = model.training
    if dropout_masks is None and train and explicit_dropout(input_ids.device) and has_dropout(model):
        dropout_masks = _draw_masks(model, B, T, dtype=tr.wte.weight.dtype, device=input_ids.device)
    given = None if dropout_masks is None else iter(dropout_masks)

    def drop(t: Tensor, p: float) -> Tensor:
        if given is None:
            return _dropout(t, p, train)
        return (t * next(given)).to(t.dtype) if p else t  # bf16 autocast: the multiplier applied in fp32

    x = drop(tr.wte(input_ids), cfg.embd_pdrop)  # [B, T, D]
    sin, cos = _rotary_tables(model, positions, x.dtype)
    p_attn = cfg.attn_pdrop if model.training and given is None else 0.0
    n_layers = len(tr.h)
    for i, block in enumerate(tr.h):
        last = i == n_layers - 1
        attn = block.attn
        h = block.ln_1(x)
        hq = h[:, -1:] if last else h
        q = _query(attn.q_proj, hq, index[-1:] if last else index).view(B, hq.shape[1], n_head, hd).transpose(1, 2)
        k = attn.k_proj(h).view(B, T, n_head, hd).transpose(1, 2)
        v = attn.v_proj(h).view(B, T, n_head, hd).transpose(1, 2)
        if last:
            q = _rotate(q, sin[..., -1:, :], cos[..., -1:, :], rd)
        else:
            q = _rotate(q, sin, cos, rd)
        k = _rotate(k, sin, cos, rd)
        if given is not None and cfg.attn_pdrop:
            a = _masked_attention(q, k, v, not last, scale, next(given))
        else:
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=p_attn, is_causal=not last, scale=scale)
        a = drop(attn.out_proj(a.transpose(1, 2).reshape(B, hq.shape[1], -1)), cfg.resid_pdrop)
        mlp = block.mlp
        m = drop(mlp.fc_out(mlp.act(mlp.fc_in(hq))), cfg.resid_pdrop)
        x_res = x[:, -1:] if last else x
        x = a + m + x_res
    x = tr.ln_f(x[:, -1])
    return model.lm_head(x)


def reference_last_token_logits(model: GPTJForCausalLM, input_ids: Tensor, positions: Tensor | None = None) -> Tensor:
    """Slow reference: the plain HF forward (``position_ids=positions``), logits at the last position. [B, T] -> [B, V].

    With ``positions`` an all-ones attention mask is passed: without one, transformers reads position
    ids with gaps as several packed sequences and masks across the gaps."""
    if positions is None:
        return model(input_ids=input_ids).logits[:, -1]
    mask = torch.ones_like(input_ids)
    return model(input_ids=input_ids, position_ids=positions, attention_mask=mask).logits[:, -1]


__all__ = ["FULL_FORWARD", "dropout_masks", "explicit_dropout", "full_forward", "has_dropout", "has_fast_path",
           "last_token_logits", "reference_last_token_logits"]
