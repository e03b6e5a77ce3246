"""Frequency-restricted attention heads (SPEC §6; Paper B's canonical tasks).

**Toy model (our choice of every size; Paper B publishes none).** :class:`RestrictedAttention` is a
one-layer, attention-only model: learned token embeddings (no absolute positions), ``n_heads`` causal
RoPE heads (GPT-J interleaved pairs, ``d_head/2`` frequencies, ID 1 = fastest; base scaled to the
context by :func:`context_base` unless given — with base 10,000 the slowest toy frequencies would barely
turn over 16 positions) read at
the last position only, an output projection, an optional residual from the last token, and an
unembedding. The RoPE frequencies outside ``keep`` are restricted in one of two ways:

* ``mode="prope"`` (p-RoPE style, the default): they rotate by 0, so their 2-D planes become
  position-free (NoPE) channels;
* ``mode="drop"``: their planes are zeroed in ``q`` and ``k``, so the logit uses the kept
  frequencies only (the head has no NoPE channel).

Bands (``band_frequencies``): ``"high"`` = the ``band_size`` fastest frequencies (IDs ``1..band_size``),
``"low"`` = the ``band_size`` slowest, ``"all"`` = every frequency.

**Tasks** (sequence length ``n + 1``, the query last, answer = one class):

* ``index``: ``n`` symbols (uniform over ``n_symbols``) then a position token ``p`` (one of ``n`` extra
  tokens); answer = the symbol at position ``p`` (answer position ``p``).
* ``retrieval``: ``n`` atomic key-value pair tokens ``(k, v)`` with distinct keys (drawn from
  ``n_keys >= n``) and uniform values (``n_symbols``), then a query-key token ``k``; answer = the value
  bound to ``k`` (answer position = the pair's position). Pairs are single tokens because a one-layer
  attention-only model cannot bind two separate tokens.

:func:`restricted_table` trains each (task, band, mode) with Adam on fresh samples each step and
measures accuracy per answer position on a held-out balanced set.

**HF GPT-J.** :func:`restrict_frequencies` zeroes the rotation (sin = 0, cos = 1) of the non-kept
frequencies in a GPT-J model's rotary table in place (transformers 5.x:
``model.transformer.rotary_emb.embed_positions``, layout ``[max_pos, rotary_dim]`` = sin | cos halves,
column ``k`` of each half = frequency ID ``k + 1``; transformers 4.x: ``attn.embed_positions`` of each
layer). The table is a non-persistent buffer: it is not saved with the model, and re-initialising the
weights restores it. The returned :class:`FrequencyRestriction` restores the original table(s).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model import rope
from posym.model.gptj import rotary_tables

#: The two toy tasks of the restricted-frequency experiment (not the tasks of Paper A, posym.constants.TASKS).
TOY_TASKS = ("index", "retrieval")
BANDS = ("high", "low", "all")
MODES = ("prope", "drop")


def band_frequencies(band: str, n_freq: int, band_size: int = 4) -> set[int]:
    """Frequency IDs (1 = fastest) of a band: ``high`` / ``low`` = the ``band_size`` fastest / slowest."""
    if band == "all":
        return set(range(1, n_freq + 1))
    if not 1 <= band_size <= n_freq:
        raise PosymError(f"band_size must be in [1, {n_freq}], got {band_size}")
    if band == "high":
        return set(range(1, band_size + 1))
    if band == "low":
        return set(range(n_freq - band_size + 1, n_freq + 1))
    raise PosymError(f"unknown band {band!r}; choose one of {BANDS}")


def context_base(n: int, d_head: int, turn: float = 0.5) -> float:
    """RoPE base whose slowest frequency turns by ``turn`` radians over the largest key distance ``n``:
    ``base = (n/turn)^(d_head/(d_head-2))``. ``turn = 0.5`` is the ratio of a 128-dim head with base
    10,000 over a 4k context (``10000^(-126/128) · 4096 ≈ 0.47``); with base 10,000 and ``n = 16`` the
    slowest toy frequencies would turn by < 0.02 rad, i.e. the "low" band would be plain NoPE."""
    if n < 1 or d_head < 4 or turn <= 0:
        raise PosymError("context_base needs n >= 1, d_head >= 4 and turn > 0")
    return float((n / turn) ** (d_head / (d_head - 2)))


def _check_keep(keep: Iterable[int] | None, n_freq: int) -> set[int]:
    if keep is None:
        return set(range(1, n_freq + 1))
    keep = {int(k) for k in keep}
    bad = sorted(k for k in keep if not 1 <= k <= n_freq)
    if bad:
        raise PosymError(f"frequency IDs must be in 1..{n_freq}, got {bad}")
    return keep


# ---- toy model ------------------------------------------------------------------------------------


class RestrictedAttention(nn.Module):
    """One-layer attention-only model with a restricted RoPE band; ``forward(ids [B, L]) -> [B, n_out]``."""

    def __init__(self, vocab_size: int, n_out: int, d_model: int = 64, n_heads: int = 1, d_head: int = 32,
                 base: float = 10000.0, keep: Iterable[int] | None = None, mode: str = "prope",
                 residual: bool = True, embed_std: float = 0.1):
        super().__init__()
        if mode not in MODES:
            raise PosymError(f"unknown restriction mode {mode!r}; choose one of {MODES}")
        if d_head % 2:
            raise PosymError(f"d_head must be even, got {d_head}")
        self.n_heads, self.d_head, self.mode, self.residual = n_heads, d_head, mode, residual
        n_freq = d_head // 2
        self.keep = _check_keep(keep, n_freq)
        kept = torch.zeros(n_freq, dtype=torch.bool)
        kept[[k - 1 for k in sorted(self.keep)]] = True
        inv = rope.angles(d_head, base, dtype=torch.float32)
        if mode == "prope":
            inv = torch.where(kept, inv, torch.zeros_like(inv))
            qk_mask = torch.ones(d_head)
        else:
            qk_mask = rope.expand_pairs(kept.float(), "interleaved")
        self.register_buffer("inv_freq", inv)
        self.register_buffer("qk_mask", qk_mask)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.q = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.k = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.v = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.o = nn.Linear(n_heads * d_head, d_model, bias=False)
        self.unembed = nn.Linear(d_model, n_out)
        nn.init.normal_(self.embed.weight, std=embed_std)

    def attention(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """``(weights [B, H, L], head outputs [B, H, d_head])`` of the last query."""
        B, L = ids.shape
        x = self.embed(ids)
        H, dh = self.n_heads, self.d_head
        q = self.q(x[:, -1]).view(B, H, dh) * self.qk_mask
        k = self.k(x).view(B, L, H, dh).transpose(1, 2) * self.qk_mask
        v = self.v(x).view(B, L, H, dh).transpose(1, 2)
        cos, sin = rope.cos_sin(torch.arange(L), self.inv_freq, "interleaved")
        k = rope.apply_rotary(k, cos, sin, "interleaved")
        q = rope.apply_rotary(q, cos[-1], sin[-1], "interleaved")
        logits = torch.einsum("bhd,bhld->bhl", q, k) / math.sqrt(dh)
        att = torch.softmax(logits, dim=-1)
        return att, torch.einsum("bhl,bhld->bhd", att, v)

    def forward(self, ids: Tensor) -> Tensor:
        _, heads = self.attention(ids)
        h = self.o(heads.flatten(1))
        if self.residual:
            h = h + self.embed(ids[:, -1])
        return self.unembed(h)


# ---- tasks ----------------------------------------------------------------------------------------


@dataclass
class ToyConfig:
    """Sizes and training of one toy run (all our choice; SPEC §6)."""

    task: str = "index"
    band: str = "all"
    mode: str = "prope"
    n: int = 16  # positions before the query (index: symbols; retrieval: pairs)
    n_symbols: int = 16  # index symbols / retrieval values
    n_keys: int = 16  # retrieval keys (>= n)
    d_model: int = 64
    n_heads: int = 1
    d_head: int = 32  # 16 frequencies
    band_size: int = 4
    base: float | None = None  # None: context-scaled (see context_base)
    embed_std: float = 0.1
    residual: bool = True
    steps: int = 1500
    batch: int = 256
    lr: float = 3e-3
    warmup: int = 100
    seed: int = 0
    eval_per_pos: int = 256

    def check(self) -> "ToyConfig":
        if self.task not in TOY_TASKS:
            raise PosymError(f"unknown toy task {self.task!r}; choose one of {TOY_TASKS}")
        if self.band not in BANDS:
            raise PosymError(f"unknown band {self.band!r}; choose one of {BANDS}")
        if self.mode not in MODES:
            raise PosymError(f"unknown mode {self.mode!r}; choose one of {MODES}")
        if self.n < 1 or self.n_symbols < 2 or (self.task == "retrieval" and self.n_keys < self.n):
            raise PosymError("toy sizes: need n >= 1, n_symbols >= 2 and n_keys >= n")
        if self.steps < 0 or self.batch < 1:
            raise PosymError("toy training: need steps >= 0 and batch >= 1")
        return self

    def rope_base(self) -> float:
        """``base``, or when None :func:`context_base` for ``n`` and ``d_head``."""
        return context_base(self.n, self.d_head) if self.base is None else float(self.base)

    def vocab(self) -> tuple[int, int]:
        """``(vocab size, number of output classes)``."""
        if self.task == "index":
            return self.n_symbols + self.n, self.n_symbols
        return self.n_keys * self.n_symbols + self.n_keys, self.n_symbols


def toy_batch(cfg: ToyConfig, size: int, gen: torch.Generator, answer_pos: Tensor | None = None):
    """``(ids [size, n+1], labels [size], answer_pos [size])`` of the toy task (module doc)."""
    n, S = cfg.n, cfg.n_symbols
    a = torch.randint(n, (size,), generator=gen) if answer_pos is None else answer_pos.long()
    rows = torch.arange(size)
    if cfg.task == "index":
        sym = torch.randint(S, (size, n), generator=gen)
        ids = torch.cat([sym, (S + a)[:, None]], dim=1)
        return ids, sym[rows, a], a
    K = cfg.n_keys
    keys = torch.rand(size, K, generator=gen).argsort(dim=1)[:, :n]
    vals = torch.randint(S, (size, n), generator=gen)
    ids = torch.cat([keys * S + vals, (K * S + keys[rows, a])[:, None]], dim=1)
    return ids, vals[rows, a], a


def build_toy(cfg: ToyConfig) -> RestrictedAttention:
    cfg.check()
    V, n_out = cfg.vocab()
    keep = band_frequencies(cfg.band, cfg.d_head // 2, cfg.band_size)
    torch.manual_seed(cfg.seed)
    return RestrictedAttention(V, n_out, cfg.d_model, cfg.n_heads, cfg.d_head, cfg.rope_base(), keep, cfg.mode,
                               cfg.residual, cfg.embed_std)


@torch.no_grad()
def evaluate_toy(model: RestrictedAttention, cfg: ToyConfig, seed: int = 12345) -> pd.DataFrame:
    """Accuracy per answer position on ``eval_per_pos`` held-out samples per position."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.arange(cfg.n).repeat_interleave(cfg.eval_per_pos)
    ids, labels, a = toy_batch(cfg, pos.numel(), gen, pos)
    model.eval()
    pred = torch.cat([model(ids[i:i + 4096]).argmax(-1) for i in range(0, ids.shape[0], 4096)])
    model.train()
    correct = (pred == labels).double()
    acc = torch.zeros(cfg.n, dtype=torch.float64).index_add_(0, a, correct) / cfg.eval_per_pos
    return pd.DataFrame({"answer_pos": np.arange(cfg.n), "acc": acc.numpy()})


def train_toy(cfg: ToyConfig) -> tuple[RestrictedAttention, dict]:
    """Train one toy (Adam, linear warm-up then linear decay to 0, fresh samples each step)."""
    model = build_toy(cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    total = max(cfg.steps, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(cfg.warmup, 1)) * max(0.0, 1 - s / total))
    loss_v = float("nan")
    t0 = time.perf_counter()
    for _ in range(cfg.steps):
        ids, labels, _ = toy_batch(cfg, cfg.batch, gen)
        loss = nn.functional.cross_entropy(model(ids), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_v = loss.item()
    return model, {"final_loss": loss_v, "train_seconds": time.perf_counter() - t0}


def restricted_table(steps: int = 1500, seed: int = 0, tasks: Sequence[str] = TOY_TASKS, bands: Sequence[str] = BANDS,
                     modes: Sequence[str] = MODES, progress: bool = False, **config) -> pd.DataFrame:
    """Train and evaluate every (task, band, mode) toy (Paper B's frequency-restricted heads).

    Returns the tidy table ``task, band, mode, answer_pos, acc`` plus ``final_loss`` and ``keep``
    (the kept frequency IDs). ``config``: any other :class:`ToyConfig` field (sizes, lr, ...).
    Defaults: 2 tasks x 2 modes x 3 bands = 12 runs of 1,500 Adam steps (~10-20 s each on one thread).
    """
    from tqdm.auto import tqdm

    bad = sorted(set(config) - set(ToyConfig.__dataclass_fields__) | ({"task", "band", "mode"} & set(config)))
    if bad:
        raise PosymError(f"unknown toy option(s): {', '.join(bad)}")
    frames = []
    bar = tqdm(total=len(tasks) * len(modes) * len(bands), desc="restricted toys", unit="toy", disable=not progress)
    for task in tasks:
        for mode in modes:
            for band in bands:
                cfg = ToyConfig(task=task, band=band, mode=mode, steps=steps, seed=seed, **config).check()
                model, info = train_toy(cfg)
                df = evaluate_toy(model, cfg)
                keep = sorted(band_frequencies(band, cfg.d_head // 2, cfg.band_size))
                df.insert(0, "task", task)
                df.insert(1, "band", band)
                df.insert(2, "mode", mode)
                df["final_loss"] = info["final_loss"]
                df["keep"] = " ".join(map(str, keep))
                frames.append(df)
                bar.update(1)
    bar.close()
    return pd.concat(frames, ignore_index=True)


# ---- HF GPT-J -------------------------------------------------------------------------------------


@dataclass
class FrequencyRestriction:
    """Handle of :func:`restrict_frequencies`: ``restore()`` (or leaving a ``with`` block) undoes it."""

    tables: list[Tensor]
    originals: list[Tensor]
    keep: set[int] = field(default_factory=set)

    def restore(self) -> None:
        with torch.no_grad():
            for t, o in zip(self.tables, self.originals):
                t.copy_(o)

    def __enter__(self) -> "FrequencyRestriction":
        return self

    def __exit__(self, *exc) -> bool:
        self.restore()
        return False


def _gptj_tables(target) -> list[Tensor]:
    if isinstance(target, Tensor):
        return [target]
    model = getattr(target, "model", None) if not isinstance(target, nn.Module) else target  # RopeAdapter
    if model is None:
        raise PosymError("restrict_frequencies: expected a GPT-J model, a GPT-J RopeAdapter or a rotary table")
    return rotary_tables(model)


def restrict_frequencies(model_or_table, keep: Iterable[int]) -> FrequencyRestriction:
    """Keep only RoPE frequency IDs ``keep`` (1 = fastest) of a GPT-J model; the others rotate by 0.

    ``model_or_table``: a ``GPTJForCausalLM``/``GPTJModel``, a GPT-J ``RopeAdapter``, or a rotary table
    tensor ``[max_pos, rotary_dim]`` (sin | cos halves). Edits the table(s) in place (sin = 0, cos = 1 in
    the non-kept columns) and returns a :class:`FrequencyRestriction` whose ``restore()`` undoes it.
    ``keep`` = all IDs is a no-op; ``keep = set()`` makes the model position-free (NoPE).
    """
    tables = _gptj_tables(model_or_table)
    width = int(tables[0].shape[-1])
    if width % 2:
        raise PosymError(f"rotary table width must be even, got {width}")
    n_freq = width // 2
    keep = _check_keep(keep, n_freq)
    drop = torch.tensor([k not in keep for k in range(1, n_freq + 1)])
    originals = []
    with torch.no_grad():
        for t in tables:
            originals.append(t.detach().clone())
            sin, cos = t[..., :n_freq], t[..., n_freq:]
            sin[..., drop] = 0.0
            cos[..., drop] = 1.0
    return FrequencyRestriction(tables, originals, keep)


__all__ = [
    "BANDS",
    "MODES",
    "TOY_TASKS",
    "band_frequencies",
    "RestrictedAttention",
    "ToyConfig",
    "toy_batch",
    "build_toy",
    "train_toy",
    "evaluate_toy",
    "restricted_table",
    "FrequencyRestriction",
    "restrict_frequencies",
]
