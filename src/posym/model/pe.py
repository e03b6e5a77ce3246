"""Training-time positional encodings of posym's GPT-J (SPEC §2.1): their names and formulas.

One home for every formula a variant needs: the parser of ``--pe`` values, the angle of each
rotary pair, GPT-J's rotary table built from them, the randomized training positions and the
Scalable-Softmax factor with its initial value. The variant lives in the model's config
(``config.posym_pe``, absent = ``"rope"``), so everything that builds a table or reads the
angles (:mod:`posym.model.gptj`, :mod:`posym.model.fast`, :mod:`posym.model.adapters`) honours it.

Variants (``m = rotary_dim / 2`` pairs, pair ``k = 0..m-1`` in GPT-J's interleaved layout):

* ``rope`` — GPT-J's RoPE, ``ω_k = 10000^(-2k/rotary_dim)`` (the default, HF's own table).
* ``rope-base:θ`` — RoPE with base θ: ``ω_k = θ^(-2k/rotary_dim)``.
* ``p-rope:F`` — p-RoPE (Barbero et al. 2025): the ``K = floor(F·m)`` fastest pairs keep their
  RoPE angle, the other ``m - K`` get angle 0 (not rotated: position-free channels).
* ``nope`` — no rotation anywhere (every angle 0; NoPE, Kazemnejad et al. 2023).
* ``randomized:L`` — RoPE; during training only, each sequence's position ids are a sorted sample
  without replacement from ``[0, L)`` (Ruoss et al. 2023); evaluation and analyses use ``0..n-1``.
* ``ssmax`` / ``ssmax:N`` — RoPE plus Scalable-Softmax (Nakanishi 2025): each layer's logits of the
  query at token index ``p`` are multiplied by ``s_h·ln(p+1)`` with a learnable ``s_h`` per head,
  initialised to ``1/ln N`` (N = the task's training length), so the answer-predicting query starts
  with the plain logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from posym.errors import PosymError

#: The variant names ``--pe`` accepts (``p-rope``, ``rope-base``, ``randomized`` take ``:VALUE``).
PE_KINDS: tuple[str, ...] = ("rope", "nope", "p-rope", "rope-base", "randomized", "ssmax")
DEFAULT_PE = "rope"
#: HF GPT-J's fixed RoPE base (``create_sinusoidal_positions``).
GPTJ_BASE = 10000
#: The ``config.json`` attribute holding the variant (absent on a plain-RoPE model).
CONFIG_ATTR = "posym_pe"
#: The ``model_type`` / ``architectures`` written into ``config.json`` of a variant plain transformers
#: cannot run: ``AutoModelForCausalLM`` refuses an unknown model type, ``GPTJForCausalLM`` warns.
POSYM_MODEL_TYPE = "posym_gptj"
POSYM_ARCHITECTURE = "PosymGPTJForCausalLM"
#: The RoPE bases accepted (training-time ``rope-base:θ`` needs θ > 1 too; the inference-time
#: ``rope-base``/``ntk`` interventions use the same range): every inverse frequency ``θ^(−2k/d)``, k < d/2,
#: is then a finite, nonzero float32 number whatever the rotary dim, and so are the angles.
MIN_ROPE_BASE = 1e-30
MAX_ROPE_BASE = 1e30
_USAGE = ("rope, nope, p-rope:F (0 <= F <= 1), rope-base:THETA (1 < THETA <= 1e30), randomized:L (L >= the training "
          "length), ssmax")


@dataclass(frozen=True)
class PositionalEncoding:
    """A parsed ``--pe`` value: ``kind`` plus its one parameter (``value``: F, θ, L or N; None when unused)."""

    kind: str
    value: float | int | None = None

    @property
    def name(self) -> str:
        """The canonical string (stored in ``posym.json`` and ``config.json``); parses back to itself."""
        if self.value is None:
            return self.kind
        return f"{self.kind}:{self.value if isinstance(self.value, int) else repr(float(self.value))}"

    @property
    def theta(self) -> float | int:
        """The RoPE base (θ of ``rope-base``, else GPT-J's 10,000)."""
        return self.value if self.kind == "rope-base" else GPTJ_BASE

    @property
    def hf_plain(self) -> bool:
        """Whether the trained model *is* a plain HF GPT-J (same table, no extra weights): ``rope``,
        ``randomized`` (its change is training-only) and ``rope-base:10000``."""
        return self.kind in ("rope", "randomized") or (self.kind == "rope-base" and self.value == GPTJ_BASE)

    def rotating_pairs(self, rotary_dim: int) -> int:
        """``K``: how many of the ``rotary_dim/2`` pairs rotate (the fastest ones)."""
        m = rotary_dim // 2
        if self.kind == "nope":
            return 0
        if self.kind == "p-rope":
            return int(math.floor(float(self.value) * m + 1e-9))
        return m


def parse_pe(text: "str | PositionalEncoding | None") -> PositionalEncoding:
    """A ``--pe`` value -> :class:`PositionalEncoding`; one-line PosymError naming the valid forms."""
    if isinstance(text, PositionalEncoding):
        return text
    if text is None:
        return PositionalEncoding(DEFAULT_PE)
    if not isinstance(text, str):
        raise PosymError(f"positional encoding must be a string such as 'nope' or 'p-rope:0.5', got {text!r}")
    kind, sep, raw = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in PE_KINDS:
        raise PosymError(f"unknown positional encoding {text!r}; choose one of {_USAGE}")
    if kind in ("rope", "nope"):
        if sep:
            raise PosymError(f"positional encoding {kind!r} takes no value, got {text!r}")
        return PositionalEncoding(kind)
    if not sep and kind != "ssmax":
        raise PosymError(f"positional encoding {kind!r} needs a value ({kind}:VALUE); choose one of {_USAGE}")
    if not sep:
        return PositionalEncoding(kind)
    try:
        num = float(raw)
    except ValueError:
        raise PosymError(f"positional encoding {text!r}: {raw!r} is not a number; choose one of {_USAGE}") from None
    if not math.isfinite(num):
        raise PosymError(f"positional encoding {text!r}: the value must be finite")
    if kind == "p-rope":
        if not 0 <= num <= 1:
            raise PosymError(f"positional encoding {text!r}: the fraction F must be in [0, 1] (p-rope:0.75)")
        return PositionalEncoding(kind, num)
    if kind == "rope-base":
        if not 1 < num <= MAX_ROPE_BASE:
            raise PosymError(f"positional encoding {text!r}: the base must be > 1 and <= {MAX_ROPE_BASE:g} "
                             "(so every inverse frequency is a nonzero float32 number), e.g. rope-base:500000")
        return PositionalEncoding(kind, int(num) if num.is_integer() and num < 2**53 else num)
    if not num.is_integer() or num < 2:
        what = "L (randomized:2048)" if kind == "randomized" else "N, the initial length (ssmax:17)"
        raise PosymError(f"positional encoding {text!r}: {what} must be an integer >= 2")
    if kind == "randomized" and num > MAX_RANDOMIZED_L:
        raise PosymError(f"positional encoding {text!r}: L must be <= {MAX_RANDOMIZED_L:,} (the rotary table has L rows)")
    return PositionalEncoding(kind, int(num))


def complete_pe(text: "str | PositionalEncoding | None", train_length: int) -> PositionalEncoding:
    """:func:`parse_pe` checked against the task's training length (``randomized:L`` needs ``L >=``
    it), with ``ssmax``'s initial length filled in (``ssmax`` -> ``ssmax:<train_length>``)."""
    pe = parse_pe(text)
    if pe.kind == "randomized" and pe.value < train_length:
        raise PosymError(f"positional encoding {pe.name!r}: L must be >= the training length {train_length} "
                         "(the positions are a sample of the sequence length from [0, L))")
    if pe.kind == "ssmax" and pe.value is None:
        return PositionalEncoding("ssmax", int(train_length))
    return pe


def config_pe(config) -> PositionalEncoding:
    """The variant of a model config (``config.posym_pe``; absent = ``rope``)."""
    return parse_pe(getattr(config, CONFIG_ATTR, None) or DEFAULT_PE)


def gptj_inv_freq(pe: PositionalEncoding, rotary_dim: int, theta: float | None = None) -> Tensor:
    """The angle per position of each pair [rotary_dim/2] (float32, as HF GPT-J computes it; 0 for a
    pair that does not rotate). ``rope`` and ``rope-base:10000`` give HF's values bit for bit.
    ``theta``: another base for the rotating pairs (an inference-time base change)."""
    base = pe.theta if theta is None else (int(theta) if float(theta).is_integer() else float(theta))
    if isinstance(base, int) and base >= 2**53:  # torch takes no int beyond int64; such a base is no exact int anyway
        base = float(base)
    inv = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64) / rotary_dim))
    keep = pe.rotating_pairs(rotary_dim)
    if keep < inv.numel():
        inv = inv.clone()
        inv[keep:] = 0.0
    return inv


def gptj_rotary_table(pe: PositionalEncoding, n_positions: int, rotary_dim: int, *, theta: float | None = None,
                      position_scale: float = 1.0) -> Tensor:
    """GPT-J's rotary table ``[n_positions, rotary_dim]`` (sin | cos halves) of the variant; the same
    expression as transformers' ``create_sinusoidal_positions``, so ``rope`` is bit-identical to it.
    A non-rotating pair has sin 0 and cos 1 exactly (the identity). Inference-time changes: ``theta``
    another base, ``position_scale`` c the fractional positions ``p·c`` (position interpolation);
    both at their identity (None, 1.0) leave the table bit-identical."""
    pos = torch.arange(n_positions, dtype=torch.int64).float()
    if position_scale != 1.0:
        pos = pos * position_scale
    ang = pos[:, None] * gptj_inv_freq(pe, rotary_dim, theta)
    return torch.cat((torch.sin(ang), torch.cos(ang)), dim=1)


#: Largest ``L`` of ``randomized:L``: its rotary table has ``L`` rows (512 MB at ``rotary_dim`` 128).
MAX_RANDOMIZED_L = 1_000_000
#: An entropy word separating the randomized-position stream from the data-order stream of one seed.
_POSITION_STREAM = 0x5EED_905


def random_positions(batch: int, length: int, limit: int, seed: int, step: int) -> Tensor:
    """Randomized positional encodings (Ruoss et al. 2023): ``batch`` rows of ``length`` sorted position
    ids sampled without replacement from ``[0, limit)`` -> LongTensor [batch, length].

    A pure function of ``(seed, step)`` (so a resumed run draws the same ids): row by row, NumPy's
    ``Generator.choice(limit, length, replace=False)`` (a uniform random subset; its cost does not
    grow with ``limit``), sorted."""
    if not 1 <= length <= limit:
        raise PosymError(f"randomized positions: need 1 <= length ({length}) <= L ({limit})")
    rng = np.random.default_rng([int(seed), int(step), _POSITION_STREAM])
    rows = [rng.choice(limit, size=length, replace=False) for _ in range(batch)]
    idx = np.sort(np.stack(rows), axis=1) if rows else np.zeros((0, length), dtype=np.int64)
    return torch.from_numpy(idx.astype(np.int64))


def ssmax_init(length: int) -> float:
    """Initial SSMax scale ``s = 1/ln N``: the query at token index ``N-1`` starts with factor 1."""
    return 1.0 / math.log(length)


def ssmax_factor(s: Tensor, positions: Tensor) -> Tensor:
    """SSMax's logit factor ``s_h · ln(p+1)`` for heads ``s`` [H] and token indices ``positions`` [T] -> [T, H]."""
    return torch.log1p(positions.to(s.dtype))[:, None] * s[None, :]


__all__ = ["PE_KINDS", "DEFAULT_PE", "GPTJ_BASE", "MIN_ROPE_BASE", "MAX_ROPE_BASE", "CONFIG_ATTR", "POSYM_MODEL_TYPE",
           "POSYM_ARCHITECTURE", "PositionalEncoding", "parse_pe", "complete_pe", "config_pe", "gptj_inv_freq",
           "gptj_rotary_table", "random_positions", "ssmax_init", "ssmax_factor"]
