"""Scoring checks its memory need before any allocation (issue 34: ``scores --model smollm2 --text F``
with a 20,000-token line was a raw 28.8 GB allocation error)."""

from __future__ import annotations

import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import score_memory, scores_blocks_fast, scores_fast

from family_models import build_family
from model_state import tiny_gptj


def test_the_estimate_counts_the_forward_the_matrices_and_the_pairs():
    # 1 prompt, 9 heads, 20,000 tokens, query at 19,999: the eager forward alone is 9 * 20000^2 * 8 bytes
    need = score_memory(9, 1, 20_000, 19_999, 19_999)
    assert need > 9 * 20_000 ** 2 * 8 + 9 * 20_000 ** 2 * 16
    assert score_memory(9, 2, 100, 99, 99) == 2 * score_memory(9, 1, 100, 99, 99) - 16 * (99 * 98 // 2)


@pytest.mark.parametrize("family", ["gptj", "llama", "qwen3"])
def test_a_sequence_too_long_for_memory_is_one_line_before_any_forward(monkeypatch, family):
    model = tiny_gptj() if family == "gptj" else build_family(family, vocab_size=31).eval()
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    monkeypatch.setattr("posym.resources.available_memory", lambda: 10_000_000)  # 10 MB free
    ids = torch.randint(0, 30, (2, 600))
    with pytest.raises(PosymError, match=r"scoring 2 prompts of 600 tokens at once .* lower --batch-size") as e:
        scores_fast(model, ids)
    assert "\n" not in str(e.value) and not calls
    with pytest.raises(PosymError, match="score shorter sequences"):
        scores_blocks_fast(model, ids[:1], blocks=4)
    scores_fast(model, ids[:, :12])  # a short one fits
