"""Accuracy of the answer-position prediction, global and per hop count (SPEC §2)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPTJForCausalLM

from posym.checks import warn_other_task
from posym.model.fast import last_token_logits

MAX_HOPS = 4


@torch.no_grad()
def predict(model: GPTJForCausalLM, input_ids: np.ndarray, batch_size: int = 512,
            device: str | torch.device = "cpu", progress: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Argmax predictions and logits at the last position. input_ids [N, T] -> ([N], [N, V]).
    ``progress``: a bar description (a bar over the batches), or None for none."""
    from tqdm.auto import tqdm

    was_training = model.training
    model.eval()
    preds, logits_all = [], []
    try:
        for start in tqdm(range(0, len(input_ids), batch_size), desc=progress, disable=progress is None,
                          unit="batch", leave=False):
            x = torch.as_tensor(input_ids[start:start + batch_size], device=device)
            logits = last_token_logits(model, x).float()
            logits_all.append(logits.cpu())
            preds.append(logits.argmax(-1).cpu())
    finally:
        model.train(was_training)
    if not preds:
        return np.zeros(0, dtype=np.int64), np.zeros((0, model.config.vocab_size), dtype=np.float32)
    return torch.cat(preds).numpy(), torch.cat(logits_all).numpy()


def accuracy_table(pred: np.ndarray, labels: np.ndarray, hops: np.ndarray,
                   max_hops: int = MAX_HOPS) -> dict[str, float]:
    """{"acc": global, "acc_hop1".."acc_hop{max_hops}"} (NaN for an absent hop class)."""
    correct = pred == labels
    out = {"acc": float(correct.mean()) if len(correct) else float("nan")}
    for h in range(1, max_hops + 1):
        sel = hops == h
        out[f"acc_hop{h}"] = float(correct[sel].mean()) if sel.any() else float("nan")
    return out


def evaluate(model: GPTJForCausalLM, batch, batch_size: int = 512,
             device: str | torch.device = "cpu", progress: str | None = None) -> dict[str, float]:
    """Loss and accuracy (global, per hop) of ``model`` on a ``posym.tasks.TaskBatch``."""
    warn_other_task(model, getattr(batch, "task", None), "evaluated")
    pred, logits = predict(model, batch.input_ids, batch_size=batch_size, device=device, progress=progress)
    loss = F.cross_entropy(torch.from_numpy(logits), torch.as_tensor(batch.labels)).item() if len(pred) else float("nan")
    return {"loss": loss, **accuracy_table(pred, np.asarray(batch.labels), np.asarray(batch.hops))}
