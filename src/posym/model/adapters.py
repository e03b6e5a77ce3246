"""Uniform access to the RoPE attention of HF model families (docs/models.md, docs/architecture.md "model/"; SPEC §3–4).

``get_adapter(model)`` returns a :class:`RopeAdapter` for

* ``GPTJForCausalLM`` — interleaved pairs, partial ``rotary_dim``, rotary table
  ``transformer.rotary_emb.embed_positions`` (``attn.embed_positions`` on transformers 4.x);
* every family of :data:`posym.model.families.FAMILIES` (Llama, Mistral, Ministral, Qwen2/3,
  Gemma/Gemma2/Gemma-3 text, OLMo/OLMo2/OLMo3, Granite, Phi, Phi-3, StableLM, Persimmon, GPT-NeoX,
  Cohere/Cohere2, Starcoder2, SmolLM3, Helium, GLM, Nemotron, ...; docs/models.md) through one
  :class:`HFRopeAdapter`: the model's own rotary module (incl. ``attention_scaling``, rope-scaling
  variants and per-layer rotaries such as Gemma-3's local/global bases), either pair convention,
  partial rotary, separate / fused / per-head-fused q/k projections, grouped-query attention, q/k
  norms before the rotary (read after the norm), logit soft-capping, per-layer sliding windows and
  layers without rotary (NoPE: a rotation by angle 0, exactly).

The rotary API takes an optional ``layer`` (:meth:`RopeAdapter.cos_sin`, :meth:`RopeAdapter.rotate`,
:meth:`RopeAdapter.rotate_t`, :meth:`RopeAdapter.layer_inv_freq`); it is required when the layers
do not all share one rotary (Gemma-3, NoPE layers), and ``inv_freq`` then raises a PosymError.

The adapter captures *pre-rotary* per-head queries/keys with forward hooks on the projections (or
on the q/k norms that follow them) and re-implements the causal eager attention. The contract
(tested in ``tests/model/test_adapters.py`` and ``tests/model/test_families.py``):
:meth:`RopeAdapter.attention_from_qk` of the captured q/k equals the model's own
``output_attentions`` (eager) to 1e-5, per layer and head. Prompts are unpadded; position ids are
``0..T-1``.

:meth:`RopeAdapter.head_output_site` names the module whose input holds each query head's output
before the output projection (GPT-J ``attn.out_proj``, Llama-like ``o_proj``, GPT-NeoX ``dense``,
...): the site of head ablation (:mod:`posym.heads.ablate`).
"""

from __future__ import annotations

import os
import inspect
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model import rope
from posym.model.families import FAMILIES, Family
from posym.model.gptj import extend_positions, positions_extended, rotary_table
from posym.model.pe import config_pe, gptj_inv_freq

Positions = Tensor | Sequence[int] | int


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


#: Every supported ``config.model_type`` (GPT-J and the families of :data:`FAMILIES`).
SUPPORTED: tuple[str, ...] = ("gptj", *FAMILIES)


#: The attribute a per-head rotary intervention (``rope-base``/``ntk``/``interpolate``/``yarn`` with
#: ``heads=`` or ``layers=``) sets on the model while active, its name as value: the q/k it changes carry a
#: rotation tied to each token's own position, which the fast score path cannot move with the content
#: (docs/interventions.md, "Head selections"), so :func:`position_tied_qk` sends the scores to the re-run.
POSITION_TIED_QK = "_posym_position_tied_qk"


def position_tied_qk(model: nn.Module) -> str | None:
    """The name of the active per-head rotary intervention of ``model`` (:data:`POSITION_TIED_QK`), or None."""
    return getattr(unwrap_model(model), POSITION_TIED_QK, None)


class RopeAdapter:
    """Family-independent view of a RoPE causal LM's attention.

    Attributes: ``n_layers``, ``n_heads``, ``n_kv_heads``, ``head_dim``, ``rotary_dim`` (rotated
    dims per head, the first ``rotary_dim`` of ``head_dim``), ``scaling`` (logit multiplier, usually
    ``head_dim**-0.5``), ``pair_convention`` (``"interleaved"`` | ``"half"``), ``inv_freq``
    [rotary_dim/2] (angle per position of each pair, float64; per layer: :meth:`layer_inv_freq`),
    ``softcap`` (``None`` or the logit cap, Gemma2).
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

    def head_output_site(self, layer: int) -> nn.Module:
        """The module of ``layer`` whose *input* is the per-head attention outputs concatenated before
        the output projection, ``[B, T, n_heads * head_dim]`` with query head ``h`` at columns
        ``h*hd:(h+1)*hd`` (each head's ``attn_weights @ v``): the site of head ablation (SPEC §7).
        One-line PosymError when the family has none."""
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
    def has_rope(self, layer: int) -> bool:
        """Whether ``layer`` rotates its q/k (False for NoPE layers, whose rotation is the identity)."""
        return True

    def layer_inv_freq(self, layer: int | None = None) -> Tensor:
        """Angle per position of each pair at ``layer`` [rotary_dim/2], float64 (zeros for a NoPE layer).

        ``layer=None``: the model's one rotary (PosymError when layers differ, SPEC §3).
        """
        raise NotImplementedError

    @property
    def inv_freq(self) -> Tensor:
        """The angles [rotary_dim/2] shared by every layer (:meth:`layer_inv_freq` with ``layer=None``)."""
        return self.layer_inv_freq(None)

    def cos_sin(self, positions: Tensor, layer: int | None = None) -> tuple[Tensor, Tensor]:
        """The model's own per-dim cos/sin of ``layer`` at integer ``positions`` [T] -> two float32 [T, rotary_dim].

        Laid out in the model's pair convention and including any ``attention_scaling``;
        ``layer=None`` only for models whose layers share one rotary.
        """
        raise NotImplementedError

    def _positions(self, positions: Positions) -> Tensor:
        pos = torch.as_tensor(positions, dtype=torch.long, device=self.device)
        if pos.ndim == 0:
            pos = pos[None]
        if pos.numel() and int(pos.min()) < 0:
            raise PosymError("RoPE positions must be non-negative")
        mp = self.max_positions
        if mp is not None and pos.numel() and int(pos.max()) >= mp:
            raise PosymError(f"position {int(pos.max())} beyond the model's rotary table ({mp} positions)")
        return pos

    def rotate(self, x: Tensor, positions: Positions, layer: int | None = None) -> Tensor:
        """Apply ``layer``'s RoPE to pre-rotary vectors x [..., T, head_dim] at ``positions`` [T].

        Exactly the model's rotary (its cos/sin, pair convention, partial rotary and
        ``attention_scaling``; identity on NoPE layers); computed in x's dtype (cos/sin cast to it,
        as HF does). ``layer=None`` only for models whose layers share one rotary.
        """
        cos, sin = self.cos_sin(self._positions(positions), layer)
        return rope.apply_rotary(x, cos.to(x.dtype), sin.to(x.dtype), self.pair_convention)

    def rotate_t(self, y: Tensor, positions: Positions, layer: int | None = None) -> Tensor:
        """The transpose of :meth:`rotate`'s linear map: ``rotate_t(y, p, l) · x == y · rotate(x, p, l)``.

        y [..., T, head_dim]. Used to evaluate ``q_rot(t) · rotate(k_b, a)`` for every content
        ``b`` at every position ``a`` with one matmul (SPEC §3 fast path).
        """
        cos, sin = self.cos_sin(self._positions(positions), layer)
        return rope.apply_rotary_transpose(y, cos.to(y.dtype), sin.to(y.dtype), self.pair_convention)

    # ---- capture -------------------------------------------------------------------------------------
    def qk_hooks(self, layer: int, store: dict) -> list:
        """Register hooks storing pre-rotary q [B,H,T,hd] and k [B,Hkv,T,hd] of ``layer`` in ``store``.

        Returns the hook handles (remove them, e.g. inside :func:`hook_handles`).
        """
        raise NotImplementedError

    def qk_sites(self, layer: int) -> tuple[nn.Module, nn.Module, bool] | None:
        """``(q module, k module, heads_first)``: the modules whose outputs :meth:`qk_hooks` captures as
        ``layer``'s pre-rotary q and k (``heads_first``: a 4-D output is ``[B, H, T, hd]`` when
        ``H == T``), or None when q and k come out of one fused projection."""
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

    @contextmanager
    def covering(self, n_positions: int) -> Iterator["RopeAdapter"]:
        """Context manager: the model accepts ``n_positions`` tokens for the duration (RoPE needs no
        learned positions). GPT-J rebuilds its rotary table and restores it exactly on exit
        (:func:`posym.model.gptj.positions_extended`); families computing the rotary on the fly need
        nothing; a family whose rotary depends on a length cap keeps :meth:`check_ids`' error."""
        yield self

    def extend_to(self, n_positions: int) -> "RopeAdapter":
        """Let the model take ``n_positions`` tokens from now on (in place, no weights change; length
        generalization): GPT-J rebuilds its rotary tables (:func:`posym.model.gptj.extend_positions`,
        rows of existing positions bit-identical); families computing the rotary on the fly need
        nothing; a family whose rotary stops at a length cap (:attr:`max_positions`) is a PosymError."""
        mp = self.max_positions
        if mp is not None and n_positions > mp:
            raise PosymError(f"{self.family}: sequence length {n_positions} exceeds the model's {mp} positions "
                             "(its rotary rescales beyond them)")
        return self

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
        qr = self.rotate(q, pos, layer).float()
        kr = self.rotate(k, pos, layer).float()[:, self.kv_index.to(q.device)]
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
        return (f"{type(self).__name__}(family={self.family!r}, layers={self.n_layers}, heads={self.n_heads}, "
                f"kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
                f"pairs={self.pair_convention!r})")


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


def _heads_view(out: Tensor, n: int, hd: int, heads_first: bool = False) -> Tensor:
    """A projection or q/k-norm output -> [B, n, T, hd].

    ``out`` is [B, T, n*hd], or 4-D [B, T, n, hd] / [B, n, T, hd]: a 4-D layout is read from the
    shape; ``heads_first`` decides only when ``n == T`` (then both read alike).
    """
    if out.ndim == 4:
        return out if heads_first_layout(out, n, heads_first) else out.transpose(1, 2)
    B, T = out.shape[:2]
    return out.reshape(B, T, n, hd).transpose(1, 2)


def heads_first_layout(out: Tensor, n: int, heads_first: bool = False) -> bool:
    """Whether a 4-D projection / q/k-norm output with ``n`` heads is ``[B, n, T, hd]`` (else
    ``[B, T, n, hd]``), read from the shape; ``heads_first`` decides only when ``n == T``."""
    return out.shape[1] == n if out.shape[1] != out.shape[2] else heads_first


def _store_hook(store: dict, key: str, n: int, hd: int, heads_first: bool = False):
    """A forward hook writing ``_heads_view(output)`` [B, n, T, hd] to ``store[key]``."""
    def hook(module, args, out):
        store[key] = _heads_view(out, n, hd, heads_first)
    return hook


class GPTJAdapter(RopeAdapter):
    """HF ``GPTJForCausalLM``: interleaved pairs, partial ``rotary_dim``, base 10,000 — or the angles of
    posym's training-time positional encoding (``config.posym_pe``, :mod:`posym.model.pe`)."""

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
        # The table's column k of the sin half is sin(p * inv_freq[k]); rebuild inv_freq as the table
        # builder does, for the model's positional encoding (SPEC §2.1: base θ, 0 on non-rotating pairs).
        self._inv_freq = gptj_inv_freq(config_pe(cfg), self.rotary_dim).double()
        if table.shape[-1] != self.rotary_dim:
            raise PosymError("GPT-J rotary table width does not match rotary_dim")

    def _table(self) -> Tensor:
        return rotary_table(self.model)

    @property
    def max_positions(self) -> int:
        return int(self._table().shape[0])

    @contextmanager
    def covering(self, n_positions: int) -> Iterator["RopeAdapter"]:
        if n_positions <= self.max_positions:
            yield self
            return
        with positions_extended(self.model, int(n_positions)):
            yield self

    def extend_to(self, n_positions: int) -> "RopeAdapter":
        if n_positions > self.max_positions:
            extend_positions(self.model, int(n_positions))
        return self

    @property
    def blocks(self):
        return self.model.transformer.h

    def attention_module(self, layer: int) -> nn.Module:
        return self.model.transformer.h[layer].attn

    def head_output_site(self, layer: int) -> nn.Module:
        """``attn.out_proj`` (no bias)."""
        return self.attention_module(int(self.check_layers([layer])[0])).out_proj

    def layer_inv_freq(self, layer: int | None = None) -> Tensor:
        return self._inv_freq

    def cos_sin(self, positions: Tensor, layer: int | None = None) -> tuple[Tensor, Tensor]:
        table = self._table().to(positions.device)
        sincos = table[positions].float()
        sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
        return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)

    def qk_sites(self, layer: int) -> tuple[nn.Module, nn.Module, bool] | None:
        attn = self.attention_module(layer)
        return attn.q_proj, attn.k_proj, False

    def qk_hooks(self, layer: int, store: dict) -> list:
        attn = self.attention_module(layer)
        H, hd = self.n_heads, self.head_dim
        return [attn.q_proj.register_forward_hook(_store_hook(store, "q", H, hd)),
                attn.k_proj.register_forward_hook(_store_hook(store, "k", H, hd))]


#: Attention submodules whose input is the heads' concatenated outputs, searched in this order
#: (:meth:`HFRopeAdapter.head_output_site`): BitNet's sub-norm sits between them and ``o_proj``.
_OUT_SITES = ("attn_sub_norm", "o_proj", "dense", "out_proj")

#: q/k norm module names (and the attention's on/off flag) read after the projections, pre-rotary.
_QK_NORMS = (("q_norm", "k_norm", "use_qk_norm"), ("q_layernorm", "k_layernorm", "qk_layernorm"))


def _first_attr(objs: Sequence[Any], names: Sequence[str]) -> Any:
    """The first non-None ``getattr(obj, name)`` over ``objs`` × ``names`` (None if none)."""
    for obj in objs:
        for name in names:
            v = getattr(obj, name, None)
            if v is not None:
                return v
    return None


class HFRopeAdapter(RopeAdapter):
    """Every family of :data:`FAMILIES` (module doc): layout from its :class:`Family`, the rest read
    from the loaded model (counts, head dim, ``scaling``, soft-cap, windows, rotary, q/k norms)."""

    def __init__(self, model: nn.Module, spec: Family):
        super().__init__(model)
        cfg = self.config
        self.spec = spec
        self.family = str(cfg.model_type)
        self.pair_convention = spec.pairs
        self.base_model = _decoder(model)
        layers = self.base_model.layers
        self.n_layers = len(layers)
        attn0 = self.attention_module(0)
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv_heads = self._kv_heads(attn0)
        self.head_dim = int(_first_attr([attn0, cfg], ["head_dim", "head_size"]) or cfg.hidden_size // self.n_heads)
        scaling = getattr(attn0, "scaling", None)
        if scaling is None:  # transformers 4.x GPT-NeoX: norm_factor = sqrt(head_size)
            nf = getattr(attn0, "norm_factor", None)
            scaling = 1.0 / float(nf) if nf is not None else self.head_dim**-0.5
        self.scaling = float(scaling)
        cap = _first_attr([attn0, cfg], ["attn_logit_softcapping"])
        self.softcap = float(cap) if cap else None
        if self.n_heads % self.n_kv_heads:
            raise PosymError("num_attention_heads must be a multiple of num_key_value_heads")
        # per layer: (rotary module, its layer_type argument) or None for a NoPE layer
        self._rotaries = [self._rotary(l) if self.has_rope(l) else None for l in range(self.n_layers)]
        dims = {2 * self._rope_inv_freq(l).numel() for l in range(self.n_layers) if self._rotaries[l] is not None}
        if len(dims) > 1:
            raise PosymError(f"{self.family}: layers rotate different numbers of dims {sorted(dims)}; not supported")
        if not dims:
            raise PosymError(f"{self.family}: no layer uses RoPE (nothing positional to score)")
        self.rotary_dim = dims.pop()

    # ---- structure -----------------------------------------------------------------------------------
    def _kv_heads(self, attn: nn.Module) -> int:
        """Key/value heads: the attention's own count or group size, else the config's (not for per-head fused qkv)."""
        kv = getattr(attn, "num_key_value_heads", None)
        groups = getattr(attn, "num_key_value_groups", None)
        if kv is None and groups:
            kv = self.n_heads // int(groups)
        if kv is None and self.spec.qkv != "per_head":
            kv = getattr(self.config, "num_key_value_heads", None)
        return int(kv or self.n_heads)

    @property
    def blocks(self):
        return self.base_model.layers

    def attention_module(self, layer: int) -> nn.Module:
        block = self.base_model.layers[layer]
        attn = _first_attr([block], ["self_attn", "attention"])
        if attn is None:
            raise PosymError(f"{self.family}: cannot find the attention module of layer {layer}")
        return attn

    def head_output_site(self, layer: int) -> nn.Module:
        """The first of :data:`_OUT_SITES` on the attention: BitNet's ``attn_sub_norm`` (it normalizes the
        heads' outputs before ``o_proj``), else ``o_proj`` (Llama, Qwen, Gemma, Mistral, Phi-3, ...;
        AFMoE's input is gated per element by its ``gate_proj``), ``dense`` (GPT-NeoX, Persimmon, Phi)
        or ``out_proj``; a Linear must take ``n_heads * head_dim`` features."""
        attn = self.attention_module(int(self.check_layers([layer])[0]))
        width = self.n_heads * self.head_dim
        for name in _OUT_SITES:
            site = getattr(attn, name, None)
            if isinstance(site, nn.Module):
                n_in = getattr(site, "in_features", width)
                if n_in != width:
                    raise PosymError(f"{self.family}: {type(attn).__name__}.{name} takes {n_in} features, not "
                                     f"{self.n_heads} heads x {self.head_dim}; cannot split it by head")
                return site
        raise PosymError(f"{self.family}: cannot find the output projection of layer {layer}'s attention "
                         f"({type(attn).__name__} has none of {', '.join(_OUT_SITES)})")

    def sliding_window(self, layer: int) -> int | None:
        attn = self.attention_module(layer)
        if self.spec.window_from_config:  # the attention passes config.sliding_window (Mistral, Phi-3)
            win = getattr(self.config, "sliding_window", None)
        elif getattr(attn, "is_sliding", True) is False or self._layer_type(layer) == "full_attention":
            win = None  # EXAONE-4, Kolibri keep the config's window on their global layers too
        else:
            win = getattr(attn, "sliding_window", None)
        return int(win) if win else None

    @property
    def max_positions(self) -> int | None:
        key = self.spec.position_cap
        if key is None:
            return None
        params = getattr(self.config, "rope_parameters", None) or {}
        cap = params.get(key) if isinstance(params, dict) else None
        return int(cap) if cap else None

    # ---- rotary --------------------------------------------------------------------------------------
    def has_rope(self, layer: int) -> bool:
        nope = self.spec.nope
        if nope is None:
            return True
        attn = self.attention_module(layer)
        if nope in ("unwindowed", "global"):
            windowed = self.sliding_window(layer) is not None or bool(getattr(attn, "force_rope", False))
            return windowed or (nope == "global" and getattr(self.config, "sliding_window", None) is None)
        flag = getattr(attn, nope, None)
        if flag is None:
            raise PosymError(f"{self.family}: the attention of layer {layer} has no {nope!r} flag (unsupported version)")
        return bool(flag)

    def _layer_type(self, layer: int) -> str | None:
        types = getattr(self.config, "layer_types", None)
        return str(types[layer]) if types else None

    def _rotary(self, layer: int) -> tuple[nn.Module, str | None]:
        """``(rotary module, layer_type argument or None)`` of ``layer``."""
        base = self.base_model
        lt = self._layer_type(layer)
        local = getattr(base, "rotary_emb_local", None)  # Gemma-3 on transformers 4.x: a second module
        if local is not None and lt == "sliding_attention":
            return local, None
        emb = _first_attr([base, self.attention_module(layer)], ["rotary_emb"])
        if emb is None:
            raise PosymError(f"{self.family}: cannot find the model's rotary embedding module")
        takes_type = "layer_type" in inspect.signature(emb.forward).parameters
        return emb, (lt if takes_type else None)

    def _rope_inv_freq(self, layer: int) -> Tensor:
        emb, lt = self._rotaries[layer]
        inv = getattr(emb, f"{lt}_inv_freq" if lt else "inv_freq", None)
        if inv is None:
            raise PosymError(f"{self.family}: the rotary module has no inv_freq")
        return inv.detach().double().cpu()

    def _layer(self, layer: int | None) -> int:
        """``layer``, or for None the layer standing for all (PosymError when their rotaries differ)."""
        if layer is not None:
            return int(self.check_layers([layer])[0])
        if len({None if r is None else (id(r[0]), r[1]) for r in self._rotaries}) > 1:
            raise PosymError(f"{self.family}: the layers use different rotaries (per-layer RoPE or NoPE layers); "
                             "pass layer=")
        return 0

    def layer_inv_freq(self, layer: int | None = None) -> Tensor:
        layer = self._layer(layer)
        if self._rotaries[layer] is None:
            return torch.zeros(self.rotary_dim // 2, dtype=torch.float64)
        return self._rope_inv_freq(layer)

    def cos_sin(self, positions: Tensor, layer: int | None = None) -> tuple[Tensor, Tensor]:
        layer = self._layer(layer)
        if self._rotaries[layer] is None:  # NoPE: the rotation by angle 0
            ones = torch.ones(positions.shape[0], self.rotary_dim, device=positions.device)
            return ones, torch.zeros_like(ones)
        emb, lt = self._rotaries[layer]
        dummy = torch.zeros(1, dtype=torch.float32, device=positions.device)
        cos, sin = emb(dummy, positions[None], *([lt] if lt else []))
        cos, sin = cos[0].float(), sin[0].float()
        table = self.spec.table
        if table is not None and table != self.pair_convention:
            cos, sin = (rope.expand_pairs(rope.pair_values(x, table), self.pair_convention) for x in (cos, sin))
        return cos, sin

    # ---- capture -------------------------------------------------------------------------------------
    def _norms(self, attn: nn.Module) -> tuple[nn.Module, nn.Module] | None:
        for qn, kn, flag in _QK_NORMS:
            q, k = getattr(attn, qn, None), getattr(attn, kn, None)
            if isinstance(q, nn.Module) and isinstance(k, nn.Module) and getattr(attn, flag, True):
                return q, k
        return None

    def qk_sites(self, layer: int) -> tuple[nn.Module, nn.Module, bool] | None:
        """``(q module, k module, heads_first)`` whose outputs are the pre-rotary q and k of ``layer``
        that :meth:`qk_hooks` captures: the q/k norms when the attention has them (their 4-D output
        read by :func:`heads_first_layout`), else ``q_proj`` / ``k_proj``; None for fused projections."""
        attn = self.attention_module(layer)
        norms = self._norms(attn)
        if norms is not None:  # q/k norms (Qwen3, OLMo2, Gemma-3, Cohere, StableLM, ...) act pre-rotary
            return norms[0], norms[1], self.spec.norm_heads_first
        if self.spec.qkv == "separate":
            return attn.q_proj, attn.k_proj, False
        return None

    def qk_hooks(self, layer: int, store: dict) -> list:
        attn = self.attention_module(layer)
        H, Hkv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        sites = self.qk_sites(layer)
        if sites is not None:
            q, k, hf = sites
            return [q.register_forward_hook(_store_hook(store, "q", H, hd, hf)),
                    k.register_forward_hook(_store_hook(store, "k", Hkv, hd, hf))]
        if self.spec.qkv == "fused":  # Phi-3 qkv_proj: [q (H·hd) | k (Hkv·hd) | v]
            def fused(module, args, out):
                store["q"] = _heads_view(out[..., : H * hd], H, hd)
                store["k"] = _heads_view(out[..., H * hd:(H + Hkv) * hd], Hkv, hd)
            return [attn.qkv_proj.register_forward_hook(fused)]

        def per_head(module, args, out):  # GPT-NeoX / Persimmon query_key_value: per head [q | k | v]
            B, T = out.shape[:2]
            qkv = out.reshape(B, T, H, 3 * hd).transpose(1, 2)
            store["q"], store["k"] = qkv[..., :hd], qkv[..., hd:2 * hd]
        return [attn.query_key_value.register_forward_hook(per_head)]


def _decoder(model: nn.Module) -> nn.Module:
    """The decoder stack (holding ``layers``) of an HF causal LM; PosymError if there is none."""
    base = getattr(model, "base_model", None)
    for cand in (base, getattr(model, "model", None), getattr(model, "gpt_neox", None)):
        if cand is not None and cand is not model and hasattr(cand, "layers"):
            return cand
    raise PosymError(f"{type(model).__name__}: no decoder layers found (use the causal-LM class of the family)")


def supported_families() -> str:
    """The supported ``model_type`` values as one comma-separated line (for error messages)."""
    return ", ".join(SUPPORTED)


def unwrap_model(model: Any) -> Any:
    """The HF model inside a wrapper: a TransformerLens >= 4 ``TransformerBridge`` gives its
    ``original_model`` (duck-typed: an object with an ``original_model`` module that has a ``config``);
    nnsight's ``NNsight``/``LanguageModel`` forward attributes and need no unwrapping. PosymError for
    something that is not a model at all (a path, None)."""
    inner = getattr(model, "original_model", None)
    if isinstance(inner, nn.Module) and getattr(inner, "config", None) is not None:
        return inner
    if isinstance(model, (str, bytes, os.PathLike)) or model is None or not hasattr(model, "parameters"):
        raise PosymError(f"model must be a loaded HF causal LM (a torch module), got {type(model).__name__} "
                         f"{str(model)[:60]!r}; load a folder first with posym.model.load_causal_lm(path)")
    return model


def get_adapter(model: nn.Module) -> RopeAdapter:
    """The :class:`RopeAdapter` for an HF causal LM (GPT-J or a family of :data:`FAMILIES`; a TransformerLens
    bridge is unwrapped by :func:`unwrap_model`); PosymError otherwise."""
    if isinstance(model, RopeAdapter):
        return model
    model = unwrap_model(model)
    cfg = getattr(model, "config", None)
    mt = getattr(cfg, "model_type", None)
    if mt == "gptj" and hasattr(model, "transformer"):
        return GPTJAdapter(model)
    if mt in FAMILIES:
        return HFRopeAdapter(model, FAMILIES[mt])
    name = type(model).__name__
    raise PosymError(f"unsupported model {name} (model_type={mt!r}); supported: {supported_families()} "
                     "(causal-LM classes; see docs/models.md)")


__all__ = ["POSITION_TIED_QK", "position_tied_qk", "RopeAdapter", "GPTJAdapter", "HFRopeAdapter", "SUPPORTED", "get_adapter",
           "eval_mode", "hook_handles",
           "heads_first_layout", "supported_families", "unwrap_model"]
