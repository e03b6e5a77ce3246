"""Paper A's published numbers (SPEC §5; digitised figures, ±0.01) for side-by-side comparison."""

from __future__ import annotations

#: Step at which each hop class first reaches 0.9 validation accuracy (Fig. 2A); letter: all hops together.
HOP_09_STEP = {
    "number": {"acc_hop1": 2050, "acc_hop2": 2750, "acc_hop3": 3250, "acc_hop4": 3400},
    "letter": {"acc_hop1": 2700, "acc_hop2": 2700, "acc_hop3": 2700, "acc_hop4": 2700},
}

#: Global accuracy at given steps (Fig. 2A).
ACC_AT_STEP = {
    "number": {2000: 0.34, 3000: 0.83, 4000: 0.99},
    "letter": {2000: 0.51, 3000: 0.99},
}

#: Pure heads at the end of training (SPEC §5).
PURE_HEADS = {
    "number": {"positional": [0, 1, 2, 3], "symbolic": list(range(4, 12))},
    "letter": {"positional": [], "symbolic": list(range(1, 12))},
}

#: Weighted-average frequency ID per layer (Table 1; SPEC §4).
FREQ_ID = {
    "number": {0: 1, 1: 2, 2: 2, 3: 2, 4: 10, **{l: 38 for l in range(5, 12)}},  # layers 5–11: IDs 37–39
}

#: Accuracy vs added target-window tokens (Fig. 5B).
LENGTHGEN = {
    "number": {0: 1.00, 50: 0.88, 100: 0.74, 300: 0.47, 1000: 0.20, 5000: 0.04},
    "letter": {0: 1.00, 50: 1.00, 100: 1.00, 300: 0.99, 1000: 0.87, 5000: 0.49},
}


#: Paper A Fig. 5A (SPEC §4, digitised): Δ(n) of the constructions at given lengths.
PAPER_DISCREPANCY = {
    "index": {8: 0.303, 80: 0.003},  # flat at 0.303 up to n ≈ 8, then ≈ 2π²/n²
    "retrieval": {2: 0.29, 80: 0.16},  # falls slowly from 0.29 to ≈ 0.16 at n = 80
}

#: Paper A Table 3 (SPEC §5), frontier API models on 1-hop prompts: (task, length) -> (op, bound).
PAPER_TABLE3 = {
    ("number", 32): ("<", 0.5),
    ("number", 100): ("<", 0.1),
    ("letter", 32): (">", 0.88),
    ("letter", 100): (">", 0.65),
}

#: Paper A: letter accuracy stays >= 0.9 up to ≈ +750–850 added tokens (Fig. 5B); midpoint used.
PAPER_LETTER_09_LENGTH = 800
