"""Peak memory and CPU time of the fast head scores on long prompts (docs/benchmarks.md).

Scores ``--n`` random-token prompts of ``--length`` tokens (default 64 × 1,017) on a random-init
quick-preset GPT-J (8 layers × 1 head, d 128; its learned context is 128 positions, so the rotary
table is extended for the call: docs/spec.md §3, Long prompts) with ``scores_fast`` at one or more
batch sizes, each in a fresh child process, and prints one row per batch size: the child's peak RSS
(``ru_maxrss``), the RSS growth during scoring, CPU seconds and wall seconds. The CPU model
(``/proc/cpuinfo``) and the torch version are printed first.

    python benchmarks/score_memory.py [--n 64] [--length 1017] [--batch-sizes 8,64] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, torch
n, length, batch_size, threads = (int(x) for x in sys.argv[1:5])
torch.set_num_threads(threads)
from posym.heads import scores_fast
from posym.model import build_model, model_config
model = build_model(model_config("quick", 137), seed=0).eval()
ids = torch.randint(0, 137, (n, length), generator=torch.Generator().manual_seed(0))
scores_fast(model, ids[:1, :65])  # warm-up: imports, kernels
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c0, w0 = time.process_time(), time.perf_counter()
res = scores_fast(model, ids, batch_size=batch_size)
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"peak_mib": peak / 1024, "grew_mib": (peak - base) / 1024, "cpu_s": cpu, "wall_s": wall,
                  "shape": list(res.s_pos.shape), "n_positions": model.config.n_positions}))
"""


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64, help="prompts")
    ap.add_argument("--length", type=int, default=1017, help="tokens per prompt")
    ap.add_argument("--batch-sizes", default="8,64", help="comma list; one child process each")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    import torch

    print(f"CPU: {cpu_model()}; torch {torch.__version__}; {a.threads} thread(s); "
          f"{a.n} prompts x {a.length} tokens; quick-preset GPT-J (8 layers x 1 head), random init")
    print(f"{'batch_size':>10} {'peak RSS MiB':>13} {'grew MiB':>9} {'CPU s':>8} {'wall s':>8}")
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    for bs in (int(x) for x in a.batch_sizes.split(",")):
        out = subprocess.run([sys.executable, "-c", CHILD, str(a.n), str(a.length), str(bs), str(a.threads)],
                             capture_output=True, text=True, env=env)
        if out.returncode:
            print(f"{bs:>10} failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{bs:>10} {r['peak_mib']:>13.0f} {r['grew_mib']:>9.0f} {r['cpu_s']:>8.1f} {r['wall_s']:>8.1f}")


if __name__ == "__main__":
    main()
