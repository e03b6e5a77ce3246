"""Shared helpers of the intervention tests: seeded ids, logits without gradients, and a snapshot of
every state tensor and buffer (non-persistent rotary tables included) to check a model is restored
bit for bit."""

import torch


def seeded_ids(T: int = 12, B: int = 3, vocab: int = 31, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def snapshot(model) -> dict:
    """Every state tensor and every buffer, by name (cloned)."""
    out = {f"state:{k}": v.clone() for k, v in model.state_dict().items()}
    out.update({f"buffer:{k}": v.clone() for k, v in model.named_buffers()})
    return out


def same(a: dict, b: dict) -> bool:
    """Two snapshots equal bit for bit (names, dtypes, values)."""
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def tiny_gptj():
    """A 2-layer, 2-head posym GPT-J (vocab 31, rotary dim 16) with large weights, in eval mode."""
    from posym.model import build_model, model_config

    m = build_model(model_config("quick", 31, n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16,
                                 initializer_range=0.3), seed=0)
    return m.eval()
