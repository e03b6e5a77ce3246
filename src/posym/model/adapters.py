"""Uniform access to the RoPE attention of HF model families (DESIGN "Real models"; SPEC §3–4).

``get_adapter(model)`` returns a :class:`RopeAdapter` for

* ``GPTJForCausalLM`` — interleaved pairs, partial ``rotary_dim``, rotary table
  ``transformer.rotary_emb.embed_positions`` (``attn.embed_positions`` on transformers 4.x);
* Llama-style models (``LlamaForCausalLM`` and the same layout: Mistral, Qwen2/3, Gemma/Gemma2,
  OLMo/OLMo2, Granite; SmolLM2 is a Llama) — half-split pairs, ``model.rotary_emb`` (incl. its
  ``attention_scaling`` and rope-scaling variants), grouped-query attention, optional
  ``q_norm``/``k_norm`` (read after the norm), Gemma2 logit soft-capping and sliding windows;
* ``GPTNeoXForCausalLM`` — half-split pairs, partial rotary (``rotary_pct``), fused
  ``query_key_value`` projection (per-head ``[q | k | v]`` layout).

The adapter captures *pre-rotary* per-head queries/keys with forward hooks on the projections
(version-robust: the projections' outputs are pre-rotary on every transformers version) and
re-implements the causal eager attention. The contract (tested in ``tests/model/test_adapters.py``):
:meth:`RopeAdapter.attention_from_qk` of the captured q/k equals the model's own
``output_attentions`` (eager) to 1e-5. Prompts are unpadded; position ids are ``0..T-1``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model import rope


class _Stop(Exception):
    """Raised from a forward hook to end a forward pass early (caught by :meth:`RopeAdapter.run`)."""


def _stop(module, args, output):
    raise _Stop


@contextmanager
def hook_handles() -> Iterator[list]:
    """Context manager yielding a list: every hook handle put in it is removed on exit, error or not."""
    handles: list = []
    try:
        yield handles
    finally:
        for h in handles:
            h.remove()


#: Llama-layout ``config.model_type`` values (q_proj/k_proj/v_proj, model.model.rotary_emb, half pairs).
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "olmo", "olmo2", "granite")


class RopeAdapter:
    """Family-independent view of a RoPE causal LM's attention.

    Attributes: ``n_layers``, ``n_heads``, ``n_kv_heads``, ``head_dim``, ``rotary_dim`` (rotated
    dims per head, the first ``rotary_dim`` of ``head_dim``), ``scaling`` (logit multiplier, usually
    ``head_dim**-0.5``), ``pair_convention`` (``"interleaved"`` | ``"half"``), ``inv_freq``
    [rotary_dim/2] (angle per position of each pair, float64), ``softcap`` (``None`` or Gemma2's
    logit cap).
    """

    family: str = ""
    pair_convention: str = ""

    def __init__(self, model: nn.Module):
        self.model = model
        self.config = model.config

    # ---- structure (set by subclasses) -------------------------------------------------------------
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rotary_dim: int
    scaling: float
    softcap: float | None = None

    @property
    def blocks(self) -> Sequence[nn.Module]:
        """The decoder blocks (their input is the residual stream before the first norm)."""
        raise NotImplementedError

    def attention_module(self, layer: int) -> nn.Module:
        """The attention module of ``layer`` (its forward returns the attention weights in eager mode)."""
        raise NotImplementedError

    def kv_head_of(self, h: int) -> int:
        """The key/value head that query head ``h`` reads (grouped-query attention, HF ``repeat_kv``)."""
        if not 0 <= h < self.n_heads:
            raise PosymError(f"head {h} out of range [0, {self.n_heads})")
        return h // (self.n_heads // self.n_kv_heads)

    @property
    def kv_index(self) -> Tensor:
        """``[kv_head_of(h) for h in range(n_heads)]`` as a LongTensor [H]."""
        return torch.arange(self.n_heads) // (self.n_heads // self.n_kv_heads)

    def sliding_window(self, layer: int) -> int | None:
        """The sliding-window length of ``layer`` (keys with ``t - b >= window`` are masked), or None."""
        return None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int | None:
        """Largest supported sequence length (None when the rotary is computed on the fly)."""
        return None

    # ---- rotary --------------------------------------------------------------------------------------
    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The model's own per-dim cos/sin at integer ``positions`` [T] -> two float32 [T, rotary_dim].

        Laid out in the model's pair convention and including any ``attention_scaling``.
        """
        raise NotImplementedError

    def _positions(self, positions: Tensor | Sequence[int] | int) -> Tensor:
        pos = torch.as_tensor(positions, dtype=torch.long, device=self.device)
        if pos.ndim == 0:
            pos = pos[None]
        if pos.numel() and int(pos.min()) < 0:
            raise PosymError("RoPE positions must be non-negative")
        mp = self.max_positions
        if mp is not None and pos.numel() and int(pos.max()) >= mp:
            raise PosymError(f"position {int(pos.max())} beyond the model's rotary table ({mp} positions)")
        return pos

    def rotate(self, x: Tensor, positions: Tensor | Sequence[int] | int) -> Tensor:
        """Apply the model's RoPE to pre-rotary vectors x [..., T, head_dim] at ``positions`` [T].

        Exactly the model's rotary (its cos/sin, pair convention, partial rotary and
        ``attention_scaling``); computed in x's dtype (cos/sin cast to it, as HF does).
        """
        cos, sin = self.cos_sin(self._positions(positions))
        return rope.apply_rotary(x, cos.to(x.dtype), sin.to(x.dtype), self.pair_convention)

    def rotate_t(self, y: Tensor, positions: Tensor | Sequence[int] | int) -> Tensor:
        """The transpose of :meth:`rotate`'s linear map: ``rotate_t(y, p) · x == y · rotate(x, p)``.

        y [..., T, head_dim]. Used to evaluate ``q_rot(t) · rotate(k_b, a)`` for every content
        ``b`` at every position ``a`` with one matmul (SPEC §3 fast path).
        """
        cos, sin = self.cos_sin(self._positions(positions))
        return rope.apply_rotary_transpose(y, cos.to(y.dtype), sin.to(y.dtype), self.pair_convention)

    # ---- capture -------------------------------------------------------------------------------------
    def qk_hooks(self, layer: int, store: dict) -> list:
        """Register hooks storing pre-rotary q [B,H,T,hd] and k [B,Hkv,T,hd] of ``layer`` in ``store``.

        Returns the hook handles (remove them, e.g. inside :func:`hook_handles`).
        """
        raise NotImplementedError

    def check_layers(self, layers: Sequence[int] | None) -> list[int]:
        """Validated layer indices (None = all layers, in order); PosymError on out-of-range or duplicates."""
        if layers is None:
            return list(range(self.n_layers))
        out = [int(l) for l in layers]
        for l in out:
            if not 0 <= l < self.n_layers:
                raise PosymError(f"layer {l} out of range [0, {self.n_layers})")
        if len(set(out)) != len(out):
            raise PosymError("duplicate layers requested")
        return out

    def check_ids(self, input_ids) -> Tensor:
        """Unpadded prompts [B, T] (or one prompt [T]) -> LongTensor [B, T] on the model's device.

        PosymError unless integer ids with ``1 <= T <= max_positions``.
        """
        ids = torch.as_tensor(input_ids)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or ids.shape[1] < 1:
            raise PosymError(f"input_ids must be [batch, length], got shape {tuple(ids.shape)}")
        if ids.dtype.is_floating_point:
            raise PosymError("input_ids must be integer token ids")
        mp = self.max_positions
        if mp is not None and ids.shape[1] > mp:
            raise PosymError(f"sequence length {ids.shape[1]} exceeds the model's {mp} positions")
        return ids.to(self.device, torch.long)

    def run(self, ids: Tensor, *, stop_after: int | None = None, output_attentions: bool = False) -> Any:
        """One eval-mode forward ``model(input_ids=ids, use_cache=False)`` with the hooks currently registered.

        ``stop_after=l`` ends the pass right after block ``l`` (higher layers never run) and returns
        None; otherwise returns the model's output. The training flag is restored afterwards.
        """
        kwargs = {"output_attentions": True} if output_attentions else {}
        with hook_handles() as handles, eval_mode(self.model):
            if stop_after is not None:
                handles.append(self.blocks[stop_after].register_forward_hook(_stop))
            try:
                return self.model(input_ids=ids, use_cache=False, **kwargs)
            except _Stop:
                return None

    @contextmanager
    def capturing(self, layers: Sequence[int]) -> Iterator[dict[int, dict[str, Tensor]]]:
        """Context manager: q/k hooks (:meth:`qk_hooks`) on ``layers``, removed on exit.

        Yields ``stores = {layer: {"q": [B,H,T,hd], "k": [B,Hkv,T,hd]}}``, filled by every forward run
        inside (the last one wins); PosymError on exit if a layer's q/k were not captured.
        """
        stores: dict[int, dict[str, Tensor]] = {l: {} for l in layers}
        with hook_handles() as handles:
            for l, st in stores.items():
                handles += self.qk_hooks(l, st)
            yield stores
        for l, st in stores.items():
            if "q" not in st or "k" not in st:
                raise PosymError(f"could not capture q/k of layer {l} (unsupported module layout)")

    def capture(self, input_ids, layers: Sequence[int] | None = None, *,
                stop_after_last: bool = True) -> dict[int, dict[str, Tensor]]:
        """Pre-rotary q/k of each (requested) layer from one forward: ``{layer: {"q": [B,H,T,hd], "k": [B,Hkv,T,hd]}}``.

        input_ids [B, T] (checked by :meth:`check_ids`); layers default all. The forward stops after
        the last requested layer unless ``stop_after_last=False``. Hooks registered by the caller
        (e.g. block pre-hooks) stay active during the pass. Eval mode, restored afterwards.
        """
        ids = self.check_ids(input_ids)
        layers = self.check_layers(layers)
        with self.capturing(layers) as stores:
            self.run(ids, stop_after=max(layers) if stop_after_last else None)
        return stores

    @torch.no_grad()
    def capture_qk(self, input_ids, layers: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
        """Pre-rotary per-head queries and keys of every (requested) layer from one forward pass.

        input_ids [B, T] -> ``q`` [L, B, H, T, head_dim], ``k`` [L, B, Hkv, T, head_dim] in the
        model's dtype, ``L = len(layers)`` (all layers by default, in the given order). The forward
        stops after the last requested layer. Runs in eval mode (dropout off), restoring the mode.
        """
        ids = self.check_ids(input_ids)
        layers = self.check_layers(layers)
        stores = self.capture(ids, layers)
        q = torch.stack([stores[l]["q"] for l in layers])
        k = torch.stack([stores[l]["k"] for l in layers])
        return q, k

    # ---- attention -----------------------------------------------------------------------------------
    def logits_from_qk(self, q: Tensor, k: Tensor, layer: int) -> Tensor:
        """Masked causal attention logits from pre-rotary q [B,H,T,hd], k [B,Hkv,T,hd] -> [B,H,T,T] float32.

        Positions ``0..T-1``; masked entries are ``-inf``; soft-capping applied when the model has it.
        """
        T = q.shape[-2]
        pos = torch.arange(T, device=q.device)
        qr = self.rotate(q, pos).float()
        kr = self.rotate(k, pos).float()[:, self.kv_index.to(q.device)]
        logits = torch.matmul(qr, kr.transpose(-1, -2)) * self.scaling
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        diff = pos[:, None] - pos[None, :]  # query t - key b
        masked = diff < 0
        win = self.sliding_window(layer)
        if win is not None:
            masked = masked | (diff >= win)
        return logits.masked_fill(masked, float("-inf"))

    def attention_from_qk(self, q: Tensor, k: Tensor, layer: int) -> Tensor:
        """Causal post-softmax attention of ``layer`` recomputed from pre-rotary q/k.

        Accepts the output of :meth:`capture_qk` (5-D, indexed by ``layer``'s position in the
        captured list, i.e. ``layer`` when all layers were captured) or per-layer tensors
        q [B, H, T, hd], k [B, Hkv, T, hd]. Returns [B, H, T, T] float32 (rows sum to 1).
        """
        if q.ndim == 5:
            q, k = q[layer], k[layer]
        if q.ndim != 4 or k.ndim != 4:
            raise PosymError("q and k must be [B, H, T, hd] (or 5-D from capture_qk)")
        return torch.softmax(self.logits_from_qk(q, k, layer), dim=-1)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(layers={self.n_layers}, heads={self.n_heads}, kv_heads={self.n_kv_heads}, "
                f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, pairs={self.pair_convention!r})")


class eval_mode:
    """Context manager: ``model.eval()`` inside, the previous training flag restored on exit."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self):
        self.was_training = self.model.training
        self.model.eval()
        return self.model

    def __exit__(self, *exc):
        self.model.train(self.was_training)
        return False


def _heads_view(out: Tensor, n: int, hd: int) -> Tensor:
    """A projection output [B, T, n*hd] (or [B, T, n, hd]) -> [B, n, T, hd]."""
    B, T = out.shape[:2]
    return out.reshape(B, T, n, hd).transpose(1, 2)


class GPTJAdapter(RopeAdapter):
    """HF ``GPTJForCausalLM``: interleaved pairs, partial ``rotary_dim``, base 10,000."""

    family = "gptj"
    pair_convention = "interleaved"

    def __init__(self, model: nn.Module):
        super().__init__(model)
        cfg = self.config
        tr = model.transformer
        self.n_layers = len(tr.h)
        self.n_heads = self.n_kv_heads = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.rotary_dim = cfg.rotary_dim or self.head_dim
        self.scaling = float(getattr(tr.h[0].attn, "scaling", self.head_dim**-0.5))
        table = self._table()
        # The table's column k of the sin half is sin(p * inv_freq[k]); rebuild inv_freq as HF does.
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.int64) / self.rotary_dim))
        self.inv_freq = self.inv_freq.double()
        if table.shape[-1] != self.rotary_dim:
            raise PosymError("GPT-J rotary table width does not match rotary_dim")

    def _table(self) -> Tensor:
        tr = self.model.transformer
        emb = getattr(tr, "rotary_emb", None)
        if emb is not None and hasattr(emb, "embed_positions"):
            return emb.embed_positions
        return tr.h[0].attn.embed_positions  # transformers 4.x keeps the table on each attention

    @property
    def max_positions(self) -> int:
        return int(self._table().shape[0])

    @property
    def blocks(self):
        return self.model.transformer.h

    def attention_module(self, layer: int) -> nn.Module:
        return self.model.transformer.h[layer].attn

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        table = self._table().to(positions.device)
        sincos = table[positions].float()
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)

    def qk_hooks(self, layer: int, store: dict) -> list:
        attn = self.attention_module(layer)
        H, hd = self.n_heads, self.head_dim

        def hq(module, args, out):
            store["q"] = _heads_view(out, H, hd)

        def hk(module, args, out):
            store["k"] = _heads_view(out, H, hd)

        return [attn.q_proj.register_forward_hook(hq), attn.k_proj.register_forward_hook(hk)]


class _HFRotaryMixin:
    """cos/sin from the model's own HF rotary module (``forward(x, position_ids) -> (cos, sin)``)."""

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        emb = self._rotary_module()
        dummy = torch.zeros(1, dtype=torch.float32, device=positions.device)
        cos, sin = emb(dummy, positions[None])
        return cos[0].float(), sin[0].float()

    def _inv_freq_and_dim(self) -> tuple[Tensor, int]:
        emb = self._rotary_module()
        inv = getattr(emb, "inv_freq", None)
        if inv is None:
            raise PosymError("the model's rotary module has no inv_freq")
        return inv.detach().double().cpu(), 2 * inv.numel()

    _attn_attr = "self_attn"  # name of the attention module inside a decoder layer

    def _rotary_module(self) -> nn.Module:
        emb = getattr(self.base_model, "rotary_emb", None)
        if emb is None:
            emb = getattr(getattr(self.base_model.layers[0], self._attn_attr), "rotary_emb", None)
        if emb is None:
            raise PosymError("cannot find the model's rotary embedding module")
        return emb

    @property
    def blocks(self):
        return self.base_model.layers

    def attention_module(self, layer: int) -> nn.Module:
        return getattr(self.base_model.layers[layer], self._attn_attr)


class LlamaAdapter(_HFRotaryMixin, RopeAdapter):
    """Llama-layout models (see :data:`LLAMA_LIKE`): half-split pairs, GQA, ``model.model.rotary_emb``."""

    family = "llama"
    pair_convention = "half"

    def __init__(self, model: nn.Module):
        super().__init__(model)
        cfg = self.config
        self.base_model = model.model
        layers = self.base_model.layers
        self.n_layers = len(layers)
        attn0 = layers[0].self_attn
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = int(getattr(attn0, "head_dim", None) or getattr(cfg, "head_dim", None)
                            or cfg.hidden_size // cfg.num_attention_heads)
        self.scaling = float(getattr(attn0, "scaling", self.head_dim**-0.5))
        cap = getattr(cfg, "attn_logit_softcapping", None)
        self.softcap = float(cap) if cap else None
        self.inv_freq, self.rotary_dim = self._inv_freq_and_dim()
        if self.n_heads % self.n_kv_heads:
            raise PosymError("num_attention_heads must be a multiple of num_key_value_heads")


    def sliding_window(self, layer: int) -> int | None:
        attn = self.attention_module(layer)
        if hasattr(attn, "sliding_window"):
            return attn.sliding_window or None
        if getattr(self.config, "model_type", "") == "mistral":
            return getattr(self.config, "sliding_window", None) or None
        return None

    def qk_hooks(self, layer: int, store: dict) -> list:
        attn = self.attention_module(layer)
        H, Hkv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        qmod = getattr(attn, "q_norm", None) or attn.q_proj  # q_norm (Qwen3/OLMo2/Gemma3) acts pre-rotary
        kmod = getattr(attn, "k_norm", None) or attn.k_proj

        def hq(module, args, out):
            store["q"] = _heads_view(out, H, hd)

        def hk(module, args, out):
            store["k"] = _heads_view(out, Hkv, hd)

        return [qmod.register_forward_hook(hq), kmod.register_forward_hook(hk)]


class GPTNeoXAdapter(_HFRotaryMixin, RopeAdapter):
    """HF ``GPTNeoXForCausalLM``: half-split pairs on the first ``rotary_pct`` dims, fused qkv."""

    _attn_attr = "attention"

    family = "gpt_neox"
    pair_convention = "half"

    def __init__(self, model: nn.Module):
        super().__init__(model)
        cfg = self.config
        self.base_model = model.gpt_neox
        self.n_layers = len(self.base_model.layers)
        self.n_heads = self.n_kv_heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        attn0 = self.base_model.layers[0].attention
        scaling = getattr(attn0, "scaling", None)
        if scaling is None:  # transformers 4.x: norm_factor = sqrt(head_size)
            nf = getattr(attn0, "norm_factor", None)
            scaling = 1.0 / float(nf) if nf is not None else self.head_dim**-0.5
        self.scaling = float(scaling)
        self.inv_freq, self.rotary_dim = self._inv_freq_and_dim()


    def qk_hooks(self, layer: int, store: dict) -> list:
        attn = self.attention_module(layer)
        H, hd = self.n_heads, self.head_dim

        def hqkv(module, args, out):
            B, T = out.shape[:2]
            qkv = out.reshape(B, T, H, 3 * hd).transpose(1, 2)
            store["q"] = qkv[..., :hd]
            store["k"] = qkv[..., hd:2 * hd]

        return [attn.query_key_value.register_forward_hook(hqkv)]


def get_adapter(model: nn.Module) -> RopeAdapter:
    """The :class:`RopeAdapter` for an HF causal LM (GPT-J, Llama-style, GPT-NeoX); PosymError otherwise."""
    if isinstance(model, RopeAdapter):
        return model
    cfg = getattr(model, "config", None)
    mt = getattr(cfg, "model_type", None)
    if mt == "gptj" and hasattr(model, "transformer"):
        return GPTJAdapter(model)
    if mt in LLAMA_LIKE and hasattr(getattr(model, "model", None), "layers"):
        return LlamaAdapter(model)
    if mt == "gpt_neox" and hasattr(model, "gpt_neox"):
        return GPTNeoXAdapter(model)
    name = type(model).__name__
    raise PosymError(f"unsupported model {name} (model_type={mt!r}); supported: gptj, gpt_neox, "
                     + ", ".join(LLAMA_LIKE) + " (causal-LM classes)")


__all__ = ["RopeAdapter", "GPTJAdapter", "LlamaAdapter", "GPTNeoXAdapter", "LLAMA_LIKE", "get_adapter", "eval_mode",
           "hook_handles"]
