"""The literal reference re-runs only layer ℓ (SPEC §3 step 2: swap at the layer input, re-run that
layer), on GPT-J and on a family whose blocks take position embeddings from the model."""

import numpy as np
import pytest
import torch

from posym.heads import scores_fast, scores_reference
from posym.model import build_model, model_config
from posym.model.adapters import get_adapter
from family_models import build_family

torch.set_num_threads(1)


@pytest.mark.parametrize("build", [lambda: build_model(model_config("quick", 137, n_layer=3), seed=0),
                                   lambda: build_family("llama", std=0.3)], ids=["gptj", "llama"])
def test_reference_reruns_only_the_scored_layer(build):
    model = build()
    ad = get_adapter(model)
    calls = [0] * ad.n_layers
    hooks = [ad.blocks[l].register_forward_hook(lambda m, a, o, l=l: calls.__setitem__(l, calls[l] + 1))
             for l in range(ad.n_layers)]
    ids = torch.randint(0, 100, (2, 9), generator=torch.Generator().manual_seed(0))
    try:
        ref = scores_reference(model, ids, layers=[2], chunk_size=7)  # 2 x C(8, 2) = 56 copies: 8 chunks
    finally:
        for h in hooks:
            h.remove()
    assert calls[:2] == [1, 1]  # the one unswapped forward; the lower layers never re-run
    assert calls[2] == 1 + 8
    fast = scores_fast(model, ids, layers=[2])
    assert np.abs(fast.s_pos - ref.s_pos).max() <= 1e-5 and np.abs(fast.s_sym - ref.s_sym).max() <= 1e-5
