"""Letter task generator (symbolic; SPEC §1.2, §1.3, §1.4), fully vectorised numpy.

Effective layout (before the ``E`` extra tokens are prepended): target window ``[0, T)`` of
(letter, number) pairs, pre-target window ``[T, T+P)`` and query ``T+P`` of (letter, letter) pairs.
A (l, r) token names the unique token whose left letter is ``r``.

With ``h`` hops: answer position ``a``, answer letter ``L`` and answer number come from the balanced
tuple; ``h-1`` distinct sorted chain positions ``p_1 < … < p_{h-1}`` in ``[T, T+P)``; chain letters
``c_1..c_{h-1}`` are distinct and different from ``L``; the remaining ``8-h`` letters form the pool
``choices``. The chain ``query -> p_{h-1} -> … -> p_1 -> a`` visits left letters ``c_1, …, c_{h-1}, L``
and each chain token's right letter is the next chain token's left letter (the query's right letter
is ``c_1``, or ``L`` when ``h = 1``). Left letters of all non-chain tokens (target window, pre-target,
query, extra tokens) come uniformly from ``choices``; right letters of non-chain pre-target tokens
also come from ``choices`` (the authors' rule, ``layout.distractors == "pool"``; ``"uniform"`` draws
them over a..h instead), so a distractor never points at a chain token; target-window (and
extra-token) numbers are uniform 1..8, the answer number sits at ``a``. Every chain letter is thus
the left letter of exactly one token, so the answer is unique.
"""

from __future__ import annotations

import numpy as np

from posym.tasks._common import U64, Layout, balanced_tuples, field_draws, rank_in_row, sample_keys, uniform_int
from posym.tasks.vocab import LL_OFFSET, LN_OFFSET, N_LETTERS, N_NUMBERS

# field ids of the counter-based draws (fixed: changing them changes every dataset)
F_LETTERS = 201  # keys ordering the 8 letters (chain letters, then pool) [8]
F_CHAIN = 202  # keys choosing the chain positions                   [P]
F_T_LEFT = 203  # target-window left letters (pool index)            [T]
F_T_NUM = 204  # target-window numbers                               [T]
F_P_LEFT = 205  # pre-target non-chain left letters (pool index)     [P]
F_P_RIGHT = 206  # pre-target non-chain right letters                [P]
F_Q_LEFT = 207  # query left letter (pool index)                     [1]
F_E_LEFT = 208  # extra-token left letters (pool index)              [E]
F_E_NUM = 209  # extra-token numbers                                 [E]
F_E_RIGHT = 210  # extra-token right letters, rule "distractor" (pool) [E]
F_E_COPY = 211  # extra-token source column, rule "copies"           [E]


def tuple_counts(layout: Layout) -> tuple[int, int]:
    """``(hop classes H, tuples per class R = T * 8 * 8)``; ``K = H * R`` (2,048 by default)."""
    return len(layout.hops), layout.target_len * N_LETTERS * N_NUMBERS


def generate_rows(seed: int, index: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows for global indices ``index [n]``: ``(input_ids [n, L], labels [n], hops [n], answer_pos [n])``."""
    T, P, E = layout.target_len, layout.pretarget_len, layout.extra_tokens
    n = index.shape[0]
    H, R = tuple_counts(layout)
    cls, within = balanced_tuples(seed, index, H, R)
    h = np.asarray(layout.hops, dtype=np.int64)[cls]  # [n]
    a = within // (N_LETTERS * N_NUMBERS)  # answer position in [0, T)
    L = (within // N_NUMBERS) % N_LETTERS  # answer letter in [0, 8)
    num = within % N_NUMBERS  # answer number - 1 in [0, 8)
    base = sample_keys(seed, index)
    rows = np.arange(n)

    # random order of the 7 letters != L (L forced last): order[:, :h-1] = chain letters c_1..c_{h-1},
    # order[:, h-1:7] = the pool ``choices`` (8 - h letters)
    keys = field_draws(base, F_LETTERS, N_LETTERS) >> U64(1)
    keys[rows, L] = U64(1 << 63)  # strictly larger than every other key
    order = np.argsort(keys, axis=1, kind="stable")  # [n, 8], order[:, 7] == L
    pool_size = (N_LETTERS - h)[:, None]  # [n, 1]

    def pick_pool(field: int, m: int) -> np.ndarray:
        """``m`` letters per row drawn uniformly from the row's pool, int64 [n, m]."""
        k = (h - 1)[:, None] + uniform_int(field_draws(base, field, m), pool_size)
        return np.take_along_axis(order, k, axis=1)

    ids = np.empty((n, layout.seq_len), dtype=np.int64)

    # target window: (pool letter, uniform number); the answer (L, num) at a
    t_left = pick_pool(F_T_LEFT, T)
    t_num = uniform_int(field_draws(base, F_T_NUM, T), N_NUMBERS)
    t_left[rows, a] = L
    t_num[rows, a] = num
    ids[:, E:E + T] = LN_OFFSET + N_LETTERS * t_left + t_num

    # pre-target window: chain tokens and distractors
    if P > 0:
        chosen = rank_in_row(field_draws(base, F_CHAIN, P)) < (h - 1)[:, None]  # [n, P]
        j = np.cumsum(chosen, axis=1)  # chain rank (1 = p_1, the smallest chain position)
        # chain token p_j: left = c_{h-j} = order[h-1-j]; right = c_{h-j+1} = order[h-j], or L when j = 1
        left_k = np.clip(h[:, None] - 1 - j, 0, N_LETTERS - 1)
        right_k = np.where(j == 1, N_LETTERS - 1, np.clip(h[:, None] - j, 0, N_LETTERS - 1))
        c_left = np.take_along_axis(order, left_k, axis=1)
        c_right = np.take_along_axis(order, right_k, axis=1)
        d_left = pick_pool(F_P_LEFT, P)
        if layout.distractors == "pool":
            d_right = pick_pool(F_P_RIGHT, P)
        else:  # "uniform": posym's rule before 2026-12 (may name a chain letter)
            d_right = uniform_int(field_draws(base, F_P_RIGHT, P), N_LETTERS)
        p_left = np.where(chosen, c_left, d_left)
        p_right = np.where(chosen, c_right, d_right)
        ids[:, E + T:E + T + P] = LL_OFFSET + N_LETTERS * p_left + p_right

    # query: pool left letter; right letter = c_1 (= order[0]) or L for one hop
    q_left = pick_pool(F_Q_LEFT, 1)[:, 0]
    q_right = np.where(h == 1, L, order[:, 0])
    ids[:, E + T + P] = LL_OFFSET + N_LETTERS * q_left + q_right

    # extra tokens (SPEC §1.4, our choice; layout.extra_rule): left letters from the pool, so the answer stays unique
    if E > 0:
        if layout.extra_rule == "window":  # (pool letter, uniform number)
            e_left = pick_pool(F_E_LEFT, E)
            e_num = uniform_int(field_draws(base, F_E_NUM, E), N_NUMBERS)
            ids[:, :E] = LN_OFFSET + N_LETTERS * e_left + e_num
        elif layout.extra_rule == "distractor":  # (pool letter, pool letter), like pre-target distractors
            ids[:, :E] = LL_OFFSET + N_LETTERS * pick_pool(F_E_LEFT, E) + pick_pool(F_E_RIGHT, E)
        else:  # "copies" of non-answer target-window tokens (their left letters are pool letters)
            src = uniform_int(field_draws(base, F_E_COPY, E), T - 1)  # [n, E] in [0, T-1)
            src = src + (src >= a[:, None])  # skip the answer column
            ids[:, :E] = np.take_along_axis(ids[:, E:E + T], src, axis=1)

    labels = LN_OFFSET + N_LETTERS * L + num
    return ids, labels.astype(np.int64), h, (E + a).astype(np.int64)
