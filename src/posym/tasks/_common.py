"""Shared machinery of the task generators: layout, counter-based randomness, balancing (SPEC §1.3).

Every random choice of sample ``i`` is a pure function of ``(seed, i)`` (SPEC §1.3, "every sample
reproducible from (seed, index)"): we never use a sequential RNG. Instead each draw is a splitmix64
hash of the seed, the sample's global index, a per-field id and a per-column counter, computed
vectorised in ``uint64`` numpy arithmetic (wrap-around is the intended behaviour).

Balancing: the (hop class, answer position, answer value) tuples of a task form a set of size
``K = H * R`` (``H`` hop classes, ``R`` = positions x values per class). Sample ``i`` takes tuple
``block_perm(seed, i // K)[i % K]``, where ``block_perm`` is a random permutation seeded by
``(seed, block)``. Our choice of permutation is *stratified* by hop class: the block is cut into
``R`` groups of ``H`` consecutive slots, each group holds every hop class once in a random order, and
the ``g``-th occurrence of hop class ``c`` takes the ``g``-th element of a random permutation of that
class's ``R`` (position, value) tuples. Hence every complete block of ``K`` consecutive indices
contains each tuple exactly once, and every run of ``H`` consecutive indices starting at a multiple of
``H`` has each hop class exactly once (so any split whose size is a multiple of ``H`` has exactly
equal hop shares, even when it does not end on a block boundary).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from posym.checks import check_int
from posym.errors import PosymError

U64 = np.uint64
_MASK64 = (1 << 64) - 1
_GOLDEN = U64(0x9E3779B97F4A7C15)
_M1 = U64(0xBF58476D1CE4E5B9)
_M2 = U64(0x94D049BB133111EB)

# domain-separation salts (arbitrary fixed constants)
SALT_SAMPLE = 0x243F6A8885A308D3
SALT_GROUP = 0x13198A2E03707344
SALT_CLASS = 0xA4093822299F31D0


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 step on a ``uint64`` array (any shape): a bijective, well-mixing hash."""
    z = x + _GOLDEN
    z = (z ^ (z >> U64(30))) * _M1
    z = (z ^ (z >> U64(27))) * _M2
    return z ^ (z >> U64(31))


def key64(*parts: int) -> np.uint64:
    """Hash a few Python ints (reduced mod 2**64) into one ``uint64`` key."""
    acc = np.zeros(1, dtype=U64)
    for p in parts:
        acc = mix64(acc ^ np.asarray([int(p) & _MASK64], dtype=U64))
    return acc[0]


def sample_keys(seed: int, index: np.ndarray) -> np.ndarray:
    """Per-sample base keys, ``uint64 [n]``, a pure function of (seed, global index)."""
    return mix64(key64(SALT_SAMPLE, seed) ^ mix64(index.astype(U64)))


def field_draws(base: np.ndarray, field: int, m: int) -> np.ndarray:
    """``m`` independent uint64 draws per sample for field ``field``: ``uint64 [n, m]``.

    Column ``j`` depends only on (base, field, j), so adding columns never changes earlier ones.
    """
    cols = mix64(np.arange(m, dtype=U64) + U64((field & 0xFFFFFFFF) << 32))
    fkey = key64(0x5EED, field)
    return mix64((base ^ fkey)[:, None] + cols[None, :])


def uniform_int(u: np.ndarray, m: np.ndarray | int) -> np.ndarray:
    """Map uint64 draws ``u`` to integers uniform on ``[0, m)`` (``m <= 2**32``; broadcasts), int64."""
    m = np.asarray(m).astype(U64)
    return (((u >> U64(32)) * m) >> U64(32)).astype(np.int64)


def rank_in_row(keys: np.ndarray) -> np.ndarray:
    """Rank of each key within its row (0 = smallest), ``int64 [n, m]``: a random permutation's inverse."""
    order = np.argsort(keys, axis=1, kind="stable")
    return np.argsort(order, axis=1, kind="stable")


def balanced_tuples(seed: int, index: np.ndarray, n_classes: int, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """Balanced tuple of each global index (SPEC §1.3): ``(class [n], within [n])``, both int64.

    ``class`` in ``[0, n_classes)`` is the hop class, ``within`` in ``[0, per_class)`` encodes the
    (answer position, answer value) tuple. See the module docstring for the stratified block
    permutation.
    """
    index = np.asarray(index, dtype=np.int64)
    H, R = int(n_classes), int(per_class)
    K = H * R
    if index.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    block = index // K
    slot = index % K
    group = slot // H
    j = slot % H
    # hop class of each slot: random permutation of the H classes per (block, group)
    gkeys = mix64((key64(SALT_GROUP, seed, K) ^ mix64((block * R + group).astype(U64)))[:, None]
                  + np.arange(H, dtype=U64)[None, :] * _GOLDEN)
    corder = np.argsort(gkeys, axis=1, kind="stable")
    cls = np.take_along_axis(corder, j[:, None], axis=1)[:, 0]
    # within class: random permutation of the R tuples per (block, class); compute touched blocks only
    ublocks, binv = np.unique(block, return_inverse=True)
    ckey = key64(SALT_CLASS, seed, K)
    bc = (ublocks[:, None] * H + np.arange(H)[None, :]).astype(U64)  # [nb, H]
    tkeys = mix64((ckey ^ mix64(bc))[:, :, None] + np.arange(R, dtype=U64)[None, None, :] * _GOLDEN)
    perms = np.argsort(tkeys, axis=2, kind="stable")  # [nb, H, R]
    within = perms[binv.reshape(-1), cls, group]
    return cls.astype(np.int64), within.astype(np.int64)


@dataclass(frozen=True)
class Layout:
    """Sequence layout (SPEC §1): ``extra | target window | pre-target window | query``.

    Positions (0-based, in the row): extra tokens ``[0, E)``, target window ``[E, E+T)``, pre-target
    ``[E+T, E+T+P)``, query ``E+T+P`` (last). Offsets/chains are defined on the effective layout
    (without the extra tokens), so they do not change when extra tokens are added (SPEC §1.4).

    ``distractors`` (letter task, SPEC §1.2): where the right letters of non-chain pre-target tokens
    come from — ``"pool"`` (the authors' rule: the non-chain pool ``choices``) or ``"uniform"`` (a..h,
    posym's rule before 2026-12; kept for the ablation). ``extra_rule`` (SPEC §1.4, our choice): what the
    extra tokens are — see :data:`EXTRA_RULES`.
    """

    hops: tuple[int, ...]
    target_len: int
    pretarget_len: int
    extra_tokens: int
    distractors: str = "pool"
    extra_rule: str = "window"

    @property
    def seq_len(self) -> int:
        """Input length ``L = E + T + P + 1`` (label not included)."""
        return self.extra_tokens + self.target_len + self.pretarget_len + 1


#: Right letters of non-chain pre-target tokens in the letter task (SPEC §1.2); "pool" is the authors'.
DISTRACTOR_RULES: tuple[str, ...] = ("pool", "uniform")

#: Extra-token rules of length-extended inputs (SPEC §1.4, our choice; Paper A publishes none):
#: "window" — target-window-like filler (number: uniform letters; letter: (pool letter, uniform number));
#: "distractor" — drawn like the pre-target distractors (number: integers pointing uniformly to an
#: earlier position, offsets 1..min(e, 16) at extra position e; letter: (pool letter, pool letter));
#: "copies" — copies of the row's own non-answer target-window tokens (chosen uniformly).
#: Every rule keeps offsets, chain and the unique answer unchanged.
EXTRA_RULES: tuple[str, ...] = ("window", "distractor", "copies")


def _as_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PosymError(f"{name} must be an integer, got {value!r}")
    return int(value)


def make_layout(task: str, hops: object, target_len: object, pretarget_len: object, extra_tokens: object,
                distractors: str = "pool", extra_rule: str = "window") -> Layout:
    """Validate a layout for ``task`` (SPEC §1.1/§1.2 limits); PosymError on impossible combinations."""
    from posym.tasks.vocab import N_INTEGERS, N_LETTERS, N_NUMBER_LETTERS, check_task

    check_task(task)
    T = _as_int("target_len", target_len)
    P = _as_int("pretarget_len", pretarget_len)
    E = _as_int("extra_tokens", extra_tokens)
    if T < 1:
        raise PosymError(f"target_len must be >= 1, got {T}")
    if P < 0:
        raise PosymError(f"pretarget_len must be >= 0, got {P}")
    if E < 0:
        raise PosymError(f"extra_tokens must be >= 0, got {E}")
    if distractors not in DISTRACTOR_RULES:
        raise PosymError(f"unknown distractor rule {distractors!r}; choose one of {list(DISTRACTOR_RULES)}")
    if extra_rule not in EXTRA_RULES:
        raise PosymError(f"unknown extra-token rule {extra_rule!r}; choose one of {list(EXTRA_RULES)}")
    if isinstance(hops, (int, np.integer)) and not isinstance(hops, bool):
        hop_list = [int(hops)]
    else:
        try:
            hop_list = [_as_int("hops", h) for h in hops]  # type: ignore[union-attr]
        except TypeError:
            raise PosymError(f"hops must be an integer or a sequence of integers, got {hops!r}") from None
    if not hop_list:
        raise PosymError("hops must not be empty")
    if len(set(hop_list)) != len(hop_list):
        raise PosymError(f"hops has duplicates: {hop_list}")
    max_hops = P + 1
    if task == "letter":
        max_hops = min(max_hops, N_LETTERS - 1)  # h chain letters distinct + a non-empty pool
    for h in hop_list:
        if not 1 <= h <= max_hops:
            why = (f"pretarget_len={P} allows at most {P + 1}" if max_hops == P + 1
                   else f"the letter task's {N_LETTERS} letters allow at most {N_LETTERS - 1}")
            raise PosymError(f"hops={h} is impossible: {why}")
    if task == "number":
        if T + P > N_INTEGERS:
            raise PosymError(
                f"number task needs target_len + pretarget_len <= {N_INTEGERS} (query offsets up to "
                f"{T + P} exceed the integers 1..{N_INTEGERS}), got {T} + {P}")
        if T > N_NUMBER_LETTERS:  # unreachable given the check above; kept for clarity
            raise PosymError(f"number task needs target_len <= {N_NUMBER_LETTERS}, got {T}")
    if extra_rule == "copies" and T < 2:
        raise PosymError("extra_rule='copies' needs target_len >= 2 (a non-answer target-window token to copy)")
    return Layout(tuple(sorted(hop_list)), T, P, E, distractors, extra_rule)


def check_seed(seed: object) -> int:
    """Validate a seed: any non-negative integer (used mod 2**64)."""
    return check_int(seed, "seed")
