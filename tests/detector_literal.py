"""The classic head detectors (docs/spec.md §7) written as loops over prompts, queries and keys on a
model's own eager attention: the literal reference of ``posym.heads.detectors`` (tests only)."""

from __future__ import annotations

import numpy as np
import torch

from posym.heads.detectors import DETECTORS


def literal_detectors(model, ids: np.ndarray) -> dict[str, np.ndarray]:
    """The definitions written as loops over prompts, queries and keys, on the model's own eager
    attention (``output_attentions``): {(rows, detector): [B, L, H]}."""
    with torch.no_grad():
        att = [a.double().numpy() for a in model(input_ids=torch.as_tensor(ids), output_attentions=True).attentions]
    B, T = ids.shape
    L, H = len(att), att[0].shape[1]
    out = {(r, d): np.zeros((B, L, H)) for r in ("target", "all") for d in DETECTORS}
    for b in range(B):
        x = ids[b].tolist()
        targets = {d: [] for d in DETECTORS}
        for i in range(T):
            targets["previous_token"].append([i - 1] if i >= 1 else [])
            targets["duplicate_token"].append([j for j in range(i) if x[j] == x[i]])
            targets["induction"].append([j for j in range(1, i + 1) if j - 1 < i and x[j - 1] == x[i]])
            targets["first_token"].append([0])
        for l in range(L):
            for h in range(H):
                a = att[l][b, h]
                for d in DETECTORS:
                    hits = [sum(a[i, j] for j in targets[d][i]) for i in range(T)]
                    rows = [hits[i] for i in range(T) if targets[d][i]]
                    out[("target", d)][b, l, h] = np.mean(rows) if rows else np.nan
                    out[("all", d)][b, l, h] = sum(hits) / a.sum()
    return out
