"""Number task generator (positional; SPEC §1.1, §1.3, §1.4), fully vectorised numpy.

Effective layout (before the ``E`` extra tokens are prepended): target window ``[0, T)`` of letters,
pre-target window ``[T, T+P)`` and query ``T+P`` of integers; an integer ``v`` at ``t`` points to
``t - v``. With ``h`` hops: answer position ``a in [0, T)`` and answer letter come from the balanced
tuple; ``h-1`` distinct sorted chain positions ``p_1 < … < p_{h-1}`` in ``[T, T+P)``; the chain is
``T+P -> p_{h-1} -> … -> p_1 -> a`` and each chain token holds the offset to the next chain position.
Non-chain pre-target tokens at ``t`` hold an offset uniform in ``[1, t]`` (point uniformly to
``[0, t-1]``). Target-window letters are uniform over the 120 letters, the answer letter sits at
``a``. Extra tokens (SPEC §1.4, our choice, ``layout.extra_rule``): uniform letters ("window"),
distractor integers pointing uniformly to an earlier extra position ("distractor"), or copies of the
row's non-answer target-window letters ("copies").
"""

from __future__ import annotations

import numpy as np

from posym.tasks._common import Layout, balanced_tuples, field_draws, rank_in_row, sample_keys, uniform_int
from posym.tasks.vocab import N_INTEGERS, N_NUMBER_LETTERS, NUMBER_LETTER_OFFSET

# field ids of the counter-based draws (fixed: changing them changes every dataset)
F_TARGET = 101  # target-window letters          [T]
F_CHAIN = 102  # keys choosing the chain positions [P]
F_DISTRACT = 103  # distractor offsets              [P]
F_EXTRA = 104  # extra letters                      [E]
F_EXTRA_INT = 105  # extra distractor offsets, rule "distractor" [E]
F_EXTRA_COPY = 106  # extra source columns, rule "copies"     [E]


def tuple_counts(layout: Layout) -> tuple[int, int]:
    """``(hop classes H, tuples per class R = T * 120)``; ``K = H * R`` (3,840 by default)."""
    return len(layout.hops), layout.target_len * N_NUMBER_LETTERS


def generate_rows(seed: int, index: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows for global indices ``index [n]``: ``(input_ids [n, L], labels [n], hops [n], answer_pos [n])``."""
    T, P, E = layout.target_len, layout.pretarget_len, layout.extra_tokens
    n = index.shape[0]
    H, R = tuple_counts(layout)
    cls, within = balanced_tuples(seed, index, H, R)
    h = np.asarray(layout.hops, dtype=np.int64)[cls]  # [n]
    a = within // N_NUMBER_LETTERS  # answer position in [0, T)
    ans = within % N_NUMBER_LETTERS  # answer letter in [0, 120)
    base = sample_keys(seed, index)

    ids = np.empty((n, layout.seq_len), dtype=np.int64)
    rows = np.arange(n)

    # target window: uniform letters, answer letter at a
    letters = uniform_int(field_draws(base, F_TARGET, T), N_NUMBER_LETTERS)  # [n, T]
    letters[rows, a] = ans
    ids[:, E:E + T] = NUMBER_LETTER_OFFSET + letters

    # pre-target window + query: integer offsets
    t_pos = T + np.arange(P + 1)  # effective positions T..T+P (last = query)
    if P > 0:
        chosen = rank_in_row(field_draws(base, F_CHAIN, P)) < (h - 1)[:, None]  # [n, P], h-1 chain positions
        distract = 1 + uniform_int(field_draws(base, F_DISTRACT, P), t_pos[None, :P])  # offsets in [1, t]
        # previous chain position strictly before each position (or -1 when there is none)
        marked = np.where(chosen, t_pos[None, :P], -1)
        prev = np.concatenate([np.full((n, 1), -1, np.int64), np.maximum.accumulate(marked, axis=1)], axis=1)
        prev = np.where(prev < 0, a[:, None], prev)  # [n, P+1]
        chain_off = t_pos[None, :] - prev  # offset from each chain token to the next chain position
        offsets = np.where(chosen, chain_off[:, :P], distract)
        ids[:, E + T:E + T + P] = offsets
        ids[:, E + T + P] = chain_off[:, P]
    else:
        ids[:, E + T] = T - a  # query points straight at the answer

    if E > 0:
        if layout.extra_rule == "window":  # uniform letters
            ids[:, :E] = NUMBER_LETTER_OFFSET + uniform_int(field_draws(base, F_EXTRA, E), N_NUMBER_LETTERS)
        elif layout.extra_rule == "distractor":  # integer at e points to a uniform earlier position (e = 0: offset 1
            # would leave the row, so it points nowhere: value 1 is still a plain integer token)
            e_pos = np.arange(E)
            span = np.clip(e_pos, 1, N_INTEGERS)[None, :]  # offsets 1..min(e, 16)
            ids[:, :E] = 1 + uniform_int(field_draws(base, F_EXTRA_INT, E), span)
        else:  # "copies" of non-answer target-window letters
            src = uniform_int(field_draws(base, F_EXTRA_COPY, E), T - 1)
            src = src + (src >= a[:, None])
            ids[:, :E] = np.take_along_axis(ids[:, E:E + T], src, axis=1)

    labels = NUMBER_LETTER_OFFSET + ans
    return ids, labels.astype(np.int64), h, (E + a).astype(np.int64)
