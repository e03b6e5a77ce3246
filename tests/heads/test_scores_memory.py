"""Peak memory of the fast path is bounded by batch_size, not by the number of prompts (SPEC §3 fast
path; docs/benchmarks.md): each batch and layer is reduced to its scores as it comes."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

#: One child process per prompt count: build a tiny GPT-J (2 layers x 4 heads), score ``n`` random
#: prompts of 65 tokens (C(64, 2) = 2016 swaps) in batches of 8, print the peak RSS (KiB) of the scoring
#: beyond what the process held before it. Keeping every prompt's per-swap arrays (the bug) costs
#: 2 layers x 4 heads x 2016 swaps x 2 arrays x 8 B = 258 KB per prompt: 58 MB more at 256 prompts.
CHILD = r"""
import json, resource, sys, torch
torch.set_num_threads(1)
from posym.heads import scores_fast
from posym.model import build_model, model_config
n = int(sys.argv[1])
model = build_model(model_config("quick", 50, n_layer=2, n_head=4, n_embd=64, rotary_dim=16), seed=0)
ids = torch.randint(0, 50, (n, 65), generator=torch.Generator().manual_seed(0))
scores_fast(model, ids[:8], batch_size=8)  # warm-up: imports, allocator pools
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = scores_fast(model, ids, batch_size=8, taus=(1e-4, 1e-2))
assert res.s_pos.shape == (n, 2, 4, 2)
print(json.dumps({"grew_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base}))
"""


def _growth_mib(n: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["grew_kib"] / 1024


def test_peak_memory_does_not_grow_with_the_number_of_prompts():
    small, large = _growth_mib(32), _growth_mib(256)
    # 224 more prompts would hold >= 58 MB of per-swap arrays; the results themselves are ~30 KB
    assert large - small < 15, f"peak RSS grew {small:.1f} MiB -> {large:.1f} MiB with 8x the prompts"
