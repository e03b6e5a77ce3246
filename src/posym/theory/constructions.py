"""Exact one-layer, one-head RoPE constructions of the basic functions (SPEC §4; Paper A Thm. 3.1).

Each construction is a real attention module (:class:`RopeHead`): one-hot token embeddings plus a bias
coordinate, linear ``W_Q``/``W_K`` onto a single 2-D RoPE plane with one angle ``theta`` (GPT-J
rotation: position ``p`` rotates the plane by ``+p·theta``), a linear value map ``W_V``, causal
softmax attention with inverse temperature ``beta`` over keys ``0..t`` at every position ``t``, the
residual ``h = x + a`` and a read-out of the token coordinates of ``h`` as output logits (the dot
product with the one-hot embeddings; the bias coordinate would only add the same constant to every
logit). Everything is float64.

Notation in the 2-D plane: ``u(alpha) = rho(alpha) v`` with ``v = (0, 1)``, so that the RoPE logit of a
query ``u(a)`` at position ``t`` and a key ``u(b)`` at position ``j <= t`` is
``cos((b - a) - (t - j)·theta)``.

**Index** (:class:`IndexConstruction`; number-task alphabet, ids as ``NUMBER_VOCAB`` by default:
``1..N`` are the integers ``1..N``, ``N+1..N+m`` the ``m`` letters, 0 = PAD). All keys are ``v`` (the
bias coordinate), a letter query is ``v``, an integer query ``v'`` is ``u(-v'·theta) = rho(theta)^(-v') v``,
so the logit of key ``j`` seen from position ``t`` is ``cos((t - j - v')·theta)``, maximal at
``j = t - v'`` (SPEC writes ``t = n - 1``). Values: ``2·onehot`` on letters, 0 on integers. Output
``x + a``: a letter keeps itself (it attends to itself), an integer pointing to a letter returns that
letter (score ``≈ 2 > 1``), an integer pointing to an integer returns itself (score ``1 > ≈ 0``).

**Retrieval** (:class:`RetrievalConstruction`; letter-task alphabet, ids as ``LETTER_VOCAB`` by default:
``(l, num) -> 1 + K·l + num - 1``, ``(l, r) -> 1 + A·K + A·l + r``). Letters are angles ``φ(l)·ω``,
``ω = 2π/A``. A key is ``u(-φ(left)·ω)`` (every token, rotated by its *left* letter); a letter-letter query
is ``u(-φ(right)·ω)`` (rotated by its *right* letter); a letter-number query is the zero vector (it
attends uniformly, see below). The logit of key ``j`` is ``cos((φ(left_j) - φ(right_q))·ω + (t - j)·theta)``
— exactly SPEC's formula. With ``0 < theta < ω/(2 n0)`` and ``t < n0`` the unique matching key is the
arg-max (the matching key's angle is ``< ω/2`` in absolute value, every other key's is ``> ω/2``).
Values: ``2·onehot`` of every token. *Our choice* (SPEC is silent on how non-query tokens return
themselves): letter-number tokens are embedded with weight ``c = 3`` on their one-hot coordinate
(letter-letter tokens with ``c = 1``), so a letter-number token's own residual score 3 beats any
attention score ``<= 2`` whatever it attends to, while a letter-letter query's match scores
``>= 2(1 - eps) > 1 + 2 eps``.

**Inverse temperature (Lemma F.1).** If the arg-max key's logit exceeds every other logit by at
least ``Δ`` and a query sees at most ``n0`` keys, the total softmax weight outside the arg-max is
``eps <= (n0 - 1)·exp(-beta·Δ)``. The read-out argmax is exact when ``eps < 1/2`` (Index: worst cases
``2(1 - eps) > max(1, 2 eps)`` and ``1 > 2 eps``) or ``eps < 1/4`` (Retrieval: ``2(1 - eps) > 1 + 2 eps``).
We take ``beta = ln((n0 - 1)/eps*) / Δ(n0)`` with half of those tolerances, ``eps* = 1/4`` (Index)
and ``1/8`` (Retrieval), where ``Δ(n0)`` is the worst-case discrepancy over inputs of length
``<= n0`` (:mod:`posym.theory.discrepancy`; it is non-increasing in the length).

**Stacked model** (:class:`StackedIndexModel`): ``f_NUM = Reflexive^(l-h) ∘ Index^h`` (SPEC §4). The
composition is of functions on symbol sequences, so between layers each position's output symbol
(the argmax of its read-out) is re-embedded (our choice: a hard clean-up step instead of a
continuous residual stream). Reflexive layers are :class:`RopeHead` s with zero values.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model import rope

DTYPE = torch.float64


def _u(alpha: Tensor | float) -> Tensor:
    """``rho(alpha) (0, 1) = (-sin alpha, cos alpha)`` -> [..., 2]."""
    a = torch.as_tensor(alpha, dtype=DTYPE)
    return torch.stack((-torch.sin(a), torch.cos(a)), dim=-1)


class RopeHead(nn.Module):
    """One causal attention head on a single 2-D RoPE plane with fixed (constructed) weights.

    ``embed [V, d]`` token embeddings (``d = V + 1``: token coordinates then the bias coordinate),
    ``w_q, w_k [d, 2]``, ``w_v [d, V]`` (values live in token space), angle ``theta``, inverse
    temperature ``beta``. ``forward(ids [B, n]) -> logits [B, n, V]`` = token coordinates of
    ``x + softmax(beta · causal RoPE logits) @ (x W_V)`` at every position.
    """

    def __init__(self, embed: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, theta: float, beta: float):
        super().__init__()
        V, d = embed.shape
        if d != V + 1 or w_q.shape != (d, 2) or w_k.shape != (d, 2) or w_v.shape != (d, V):
            raise PosymError("RopeHead: inconsistent weight shapes")
        self.register_buffer("embed", embed.to(DTYPE))
        self.register_buffer("w_q", w_q.to(DTYPE))
        self.register_buffer("w_k", w_k.to(DTYPE))
        self.register_buffer("w_v", w_v.to(DTYPE))
        self.theta = float(theta)
        self.beta = float(beta)

    @property
    def vocab_size(self) -> int:
        return int(self.embed.shape[0])

    def _token_ids(self, ids) -> Tensor:
        ids = torch.as_tensor(ids, dtype=torch.long)
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2:
            raise PosymError(f"token ids must be [batch, length], got shape {tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise PosymError(f"token id outside [0, {self.vocab_size})")
        return ids

    def _rotate(self, x: Tensor) -> Tensor:
        n = x.shape[-2]
        cos, sin = rope.cos_sin(torch.arange(n), torch.tensor([self.theta], dtype=DTYPE), "interleaved")
        return rope.apply_rotary(x, cos, sin, "interleaved")

    def scores(self, ids) -> Tensor:
        """Pre-``beta`` causal RoPE logits ``[B, n (query t), n (key j)]``; ``-inf`` for ``j > t``."""
        ids = self._token_ids(ids)
        # x W = E[ids] W = (E W)[ids]: project the (one-hot) embedding table once, then look up
        q = self._rotate((self.embed @ self.w_q)[ids])
        k = self._rotate((self.embed @ self.w_k)[ids])
        s = q @ k.transpose(-1, -2)
        n = ids.shape[1]
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        return s.masked_fill(future, float("-inf"))

    def forward(self, ids, return_attention: bool = False):
        ids = self._token_ids(ids)
        att = torch.softmax(self.beta * self.scores(ids), dim=-1)
        a = att @ (self.embed @ self.w_v)[ids]
        logits = self.embed[ids][..., : self.vocab_size] + a
        return (logits, att) if return_attention else logits

    @torch.no_grad()
    def predict(self, ids, chunk: int = 2048) -> Tensor:
        """Output symbol at every position, ``[B, n]`` long (argmax of the read-out), in chunks."""
        ids = self._token_ids(ids)
        out = [self(ids[i:i + chunk]).argmax(-1) for i in range(0, ids.shape[0], chunk)]
        return torch.cat(out) if out else ids.clone()


def lemma_f1_beta(delta: float, n0: int, eps: float) -> float:
    """Lemma F.1 rule: ``beta = ln((n0 - 1)/eps) / delta`` so that the softmax weight outside the arg-max
    key is ``<= (n0 - 1)·exp(-beta·delta) = eps`` for every query seeing ``<= n0`` keys."""
    if not (delta > 0 and math.isfinite(delta)):
        raise PosymError(f"discrepancy must be positive and finite, got {delta}")
    return math.log(max(n0 - 1, 1) / eps) / delta


# ---- Index ----------------------------------------------------------------------------------------


class IndexConstruction(RopeHead):
    """T_Index: one head, one RoPE angle ``theta`` (default ``2π/n0``), exact on valid inputs of length <= n0.

    Alphabet: ids ``1..n_integers`` = integers ``1..N``, ``N+1..N+n_letters`` = letters, 0 = PAD
    (never valid). The defaults (120 letters, 16 integers) equal ``posym.tasks.NUMBER_VOCAB``.
    Valid input: every integer ``v`` at position ``j`` has ``v <= j`` (it points inside the sequence).
    """

    EPS = 0.25  # target weight outside the arg-max (exactness needs < 1/2)

    def __init__(self, n0: int = 64, theta: float | None = None, n_letters: int = 120,
                 n_integers: int = 16, beta: float | None = None):
        from posym.theory.discrepancy import index_delta

        if n0 < 1 or n_letters < 1 or n_integers < 0:
            raise PosymError("IndexConstruction needs n0 >= 1, n_letters >= 1, n_integers >= 0")
        theta = 2 * math.pi / max(n0, 2) if theta is None else float(theta)
        self.n0, self.n_letters, self.n_integers = int(n0), int(n_letters), int(n_integers)
        V = 1 + n_integers + n_letters
        d = V + 1
        embed = torch.zeros(V, d, dtype=DTYPE)
        embed[1:, :V] = torch.eye(V, dtype=DTYPE)[1:]
        embed[1:, V] = 1.0  # bias coordinate (PAD row stays 0)
        w_k = torch.zeros(d, 2, dtype=DTYPE)
        w_k[V] = _u(0.0)  # every key is v
        w_q = torch.zeros(d, 2, dtype=DTYPE)
        ints = torch.arange(1, n_integers + 1, dtype=DTYPE)
        w_q[1:n_integers + 1] = _u(-ints * theta)  # integer v' -> rho(theta)^(-v') v
        w_q[n_integers + 1:V] = _u(0.0)  # letters -> v
        w_v = torch.zeros(d, V, dtype=DTYPE)
        letters = torch.arange(n_integers + 1, V)
        w_v[letters, letters] = 2.0
        if n0 >= 2:
            # hard attention must pick one key: cos(dθ) < 1 for every distance 1 <= d <= n0-1
            d = torch.arange(1, n0, dtype=DTYPE)
            if (1 - torch.cos(d * theta)).min() <= 1e-12:
                raise PosymError(f"theta={theta} ties two keys (dθ ≡ 0 mod 2π for some d < {n0})")
        if beta is None:
            beta = lemma_f1_beta(index_delta(n0, theta) if n0 >= 2 else 1.0, n0, self.EPS)
        super().__init__(embed, w_q, w_k, w_v, theta, beta)

    def is_letter(self, ids) -> Tensor:
        ids = torch.as_tensor(ids)
        return ids > self.n_integers

    def reference(self, ids) -> Tensor:
        """The Index function at every position (SPEC §4), ``[B, n]``; see :func:`index_function`."""
        return index_function(ids, self.n_integers)

    def valid(self, ids) -> Tensor:
        """``[B]`` bool: every integer points inside its prefix and no PAD occurs."""
        return index_valid(ids, self.n_integers)


def index_function(ids, n_integers: int) -> Tensor:
    """Reference Index: integer ``v`` (id ``v <= n_integers``) at ``j`` returns ``σ_{j-v}`` if that is a
    letter, else ``σ_j``; a letter returns itself. Integers pointing before position 0 return
    themselves (such inputs are not valid for the construction)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.ndim == 1:
        ids = ids[None]
    n = ids.shape[1]
    pos = torch.arange(n)
    is_int = (ids >= 1) & (ids <= n_integers)
    tgt = pos - torch.where(is_int, ids, torch.zeros_like(ids))
    inside = tgt >= 0
    pointed = ids.gather(1, tgt.clamp(min=0))
    hit = is_int & inside & (pointed > n_integers)
    return torch.where(hit, pointed, ids)


def index_valid(ids, n_integers: int) -> Tensor:
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.ndim == 1:
        ids = ids[None]
    pos = torch.arange(ids.shape[1])
    is_int = (ids >= 1) & (ids <= n_integers)
    return ((ids != 0) & ~(is_int & (ids > pos))).all(dim=1)


# ---- Retrieval ------------------------------------------------------------------------------------


class RetrievalConstruction(RopeHead):
    """T_Retrieval: one head, one RoPE angle ``theta`` (default ``0.0027``; needs ``theta < ω/(2 n0)``).

    Alphabet (defaults equal ``posym.tasks.LETTER_VOCAB``): ``n_letters`` letters ``A`` and ``n_numbers``
    numbers ``K``; ``(l, num)`` -> ``1 + K·l + num - 1``; ``(l, r)`` -> ``1 + A·K + A·l + r``; 0 = PAD.
    Valid input: every letter-letter token ``(l, r)`` at position ``t`` has ``l != r`` and exactly one
    token at a position ``< t`` has left letter ``r``.
    """

    EPS = 0.125  # target weight outside the arg-max (exactness needs < 1/4)
    LN_WEIGHT = 3.0  # residual weight of letter-number tokens (our choice, see module doc)

    def __init__(self, n0: int = 64, theta: float = 0.0027, n_letters: int = 8, n_numbers: int = 8,
                 beta: float | None = None):
        from posym.theory.discrepancy import retrieval_delta

        if n0 < 2 or n_letters < 2 or n_numbers < 1:
            raise PosymError("RetrievalConstruction needs n0 >= 2, n_letters >= 2, n_numbers >= 1")
        omega = 2 * math.pi / n_letters
        if not 0 <= theta < omega / (2 * n0):
            raise PosymError(f"Retrieval needs 0 <= theta < ω/(2 n0) = {omega / (2 * n0):.6g}, got {theta}")
        self.n0, self.n_letters, self.n_numbers, self.omega = int(n0), int(n_letters), int(n_numbers), omega
        A, K = n_letters, n_numbers
        self.ll_offset = 1 + A * K
        V = 1 + A * K + A * A
        d = V + 1
        left = torch.zeros(V, dtype=torch.long)
        left[1:1 + A * K] = torch.arange(A * K) // K
        ll = torch.arange(A * A)
        left[self.ll_offset:] = ll // A
        right = ll % A
        embed = torch.zeros(V, d, dtype=DTYPE)
        weight = torch.ones(V, dtype=DTYPE)
        weight[1:1 + A * K] = self.LN_WEIGHT
        embed[1:, :V] = torch.diag(weight)[1:]
        embed[1:, V] = 1.0
        w_k = torch.zeros(d, 2, dtype=DTYPE)
        w_k[1:V] = _u(-left[1:].to(DTYPE) * omega) / weight[1:, None]
        w_q = torch.zeros(d, 2, dtype=DTYPE)
        w_q[self.ll_offset:V] = _u(-right.to(DTYPE) * omega)
        w_v = torch.zeros(d, V, dtype=DTYPE)
        w_v[1:V, 1:V] = torch.diag(2.0 / weight[1:])
        if beta is None:
            beta = lemma_f1_beta(retrieval_delta(n0, theta, n_letters), n0, self.EPS)
        super().__init__(embed, w_q, w_k, w_v, theta, beta)

    def reference(self, ids) -> Tensor:
        """The Retrieval function at every position (SPEC §4); see :func:`retrieval_function`."""
        return retrieval_function(ids, self.n_letters, self.n_numbers)[0]

    def valid(self, ids) -> Tensor:
        return retrieval_function(ids, self.n_letters, self.n_numbers)[1]


def retrieval_parts(ids, n_letters: int = 8, n_numbers: int = 8) -> tuple[Tensor, Tensor, Tensor]:
    """``(is_letter_letter, left, right)`` for ids of the Retrieval alphabet (right = -1 for letter-number)."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    A, K = n_letters, n_numbers
    off = 1 + A * K
    is_ll = ids >= off
    left = torch.where(is_ll, (ids - off) // A, (ids - 1).clamp(min=0) // K)
    right = torch.where(is_ll, (ids - off) % A, torch.full_like(ids, -1))
    return is_ll, left, right


def retrieval_function(ids, n_letters: int = 8, n_numbers: int = 8) -> tuple[Tensor, Tensor]:
    """Reference Retrieval at every position -> ``(out [B, n], valid [B])``.

    A letter-letter token ``(l, r)`` at ``t`` returns the unique earlier token whose left letter is ``r``
    (itself when there is none or several — then the input is not valid); other tokens return
    themselves. ``valid``: no PAD, and every letter-letter token has ``l != r`` and exactly one match.
    """
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.ndim == 1:
        ids = ids[None]
    B, n = ids.shape
    is_ll, left, right = retrieval_parts(ids, n_letters, n_numbers)
    earlier = torch.ones(n, n, dtype=torch.bool).tril(-1)  # [t, j]: j < t
    match = (left[:, None, :] == right[:, :, None]) & earlier[None] & is_ll[:, :, None]  # [B, t, j]
    count = match.sum(-1)
    first = match.to(torch.int8).argmax(-1)
    ok = ~is_ll | ((count == 1) & (left != right))
    out = torch.where(is_ll & (count == 1), ids.gather(1, first), ids)
    valid = ok.all(1) & (ids != 0).all(1)
    return out, valid


# ---- stacked Index model (f_NUM) ------------------------------------------------------------------


class ReflexiveLayer(RopeHead):
    """Reflexive (identity): a :class:`RopeHead` with zero queries, keys and values; returns ``x``."""

    def __init__(self, vocab_size: int):
        V, d = vocab_size, vocab_size + 1
        embed = torch.zeros(V, d, dtype=DTYPE)
        embed[:, :V] = torch.eye(V, dtype=DTYPE)
        embed[:, V] = 1.0
        z2 = torch.zeros(d, 2, dtype=DTYPE)
        super().__init__(embed, z2, z2.clone(), torch.zeros(d, V, dtype=DTYPE), 0.0, 1.0)


class StackedIndexModel(nn.Module):
    """``f_NUM = Reflexive^(layers-hops) ∘ Index^hops`` (SPEC §4) as a stack of :class:`RopeHead` layers.

    Between layers every position's output symbol is re-embedded (hard clean-up; module doc). With the
    number-task defaults the token ids are those of ``posym.tasks.NUMBER_VOCAB``, so
    ``predict(batch.input_ids)`` can be compared with ``batch.labels`` directly.
    """

    def __init__(self, hops: int, layers: int | None = None, n0: int = 17, theta: float | None = None,
                 n_letters: int = 120, n_integers: int = 16):
        super().__init__()
        layers = hops if layers is None else layers
        if hops < 0 or layers < hops:
            raise PosymError(f"need 0 <= hops <= layers, got hops={hops}, layers={layers}")
        index = IndexConstruction(n0=n0, theta=theta, n_letters=n_letters, n_integers=n_integers)
        self.hops, self.n_layers = hops, layers
        self.layers = nn.ModuleList([index] * hops + [ReflexiveLayer(index.vocab_size)] * (layers - hops))

    @torch.no_grad()
    def forward(self, ids) -> Tensor:
        """Symbols at every position after all layers, ``[B, n]``."""
        cur = torch.as_tensor(np.asarray(ids), dtype=torch.long)
        for layer in self.layers:
            cur = layer.predict(cur)
        return cur

    def predict(self, ids) -> Tensor:
        """The answer: the symbol at the last position after all layers, ``[B]``."""
        return self(ids)[:, -1]


# ---- random valid inputs (for tests and checks) ---------------------------------------------------


def random_index_inputs(n_seq: int, length: int, n_letters: int, n_integers: int, seed: int = 0,
                        p_letter: float = 0.4) -> Tensor:
    """Random valid Index inputs ``[n_seq, length]``: position ``j`` holds a letter with probability
    ``p_letter`` (always at ``j = 0``) else an integer uniform in ``[1, min(j, n_integers)]``."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.arange(length)
    vmax = pos.clamp(max=n_integers)
    u = torch.rand(n_seq, length, generator=g, dtype=DTYPE)
    ints = 1 + (u * vmax.clamp(min=1)).long().clamp(max=(vmax - 1).clamp(min=0))
    letters = n_integers + 1 + torch.randint(n_letters, (n_seq, length), generator=g)
    use_letter = (torch.rand(n_seq, length, generator=g) < p_letter) | (vmax == 0)[None]
    return torch.where(use_letter, letters, ints)


def random_retrieval_inputs(n_seq: int, length: int, n_letters: int, n_numbers: int, seed: int = 0,
                            p_query: float = 0.5) -> Tensor:
    """Random valid Retrieval inputs ``[n_seq, length]``, generated left to right (vectorised over rows).

    At each position a letter-letter query ``(l, r)`` is placed with probability ``p_query`` when some
    letter ``r`` is the left letter of exactly one earlier token (``r`` uniform among those, ``l != r``
    uniform); otherwise a letter-number token. To keep retrieval targets alive, new left letters are
    drawn half of the time from letters already used twice or more ("dead" letters).
    """
    g = torch.Generator().manual_seed(seed)
    A, K = n_letters, n_numbers
    off = 1 + A * K
    counts = torch.zeros(n_seq, A, dtype=torch.long)
    out = torch.empty(n_seq, length, dtype=torch.long)
    rows = torch.arange(n_seq)

    def pick(mask: Tensor) -> tuple[Tensor, Tensor]:
        score = torch.rand(n_seq, A, generator=g) + mask.to(DTYPE) * 2
        best = score.argmax(1)
        return best, mask[rows, best]

    for t in range(length):
        uniform = torch.randint(A, (n_seq,), generator=g)
        dead, has_dead = pick(counts >= 2)
        prefer_dead = (torch.rand(n_seq, generator=g) < 0.5) & has_dead
        r, has_target = pick(counts == 1)
        query = has_target & (torch.rand(n_seq, generator=g) < p_query)
        # left letter: not r for queries
        left = torch.where(prefer_dead, dead, uniform)
        shift = 1 + torch.randint(A - 1, (n_seq,), generator=g)
        left = torch.where(query & (left == r), (r + shift) % A, left)
        num = torch.randint(K, (n_seq,), generator=g)
        out[:, t] = torch.where(query, off + A * left + r, 1 + K * left + num)
        counts[rows, left] += 1
    return out


def all_sequences(choices: Sequence[Sequence[int]]) -> Tensor:
    """Every sequence whose position ``j`` takes a value of ``choices[j]`` -> ``[prod, len(choices)]``."""
    grids = torch.meshgrid(*[torch.as_tensor(list(c), dtype=torch.long) for c in choices], indexing="ij")
    return torch.stack([gr.reshape(-1) for gr in grids], dim=1)


__all__ = [
    "RopeHead",
    "IndexConstruction",
    "RetrievalConstruction",
    "ReflexiveLayer",
    "StackedIndexModel",
    "lemma_f1_beta",
    "index_function",
    "index_valid",
    "retrieval_function",
    "retrieval_parts",
    "random_index_inputs",
    "random_retrieval_inputs",
    "all_sequences",
]
