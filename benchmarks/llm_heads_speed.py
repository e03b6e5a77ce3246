"""Block scores of a real LLM, side by side: the fast exact path vs the literal re-run (SPEC §3).

Three measurements on one model (default: the bundled SmolLM2-135M-Instruct), each in this process
unless stated:

1. **ratio** — the same prompts (``--ref-n`` random-token prompts of ``--ref-length`` tokens, 16 equal
   blocks) scored by ``scores_blocks_fast`` and by ``scores_blocks_reference`` (every swapped copy
   re-run, eager attention); time of each, the ratio and max |Δ| of s_POS / s_SYM;
2. **throughput** — every head on ``--n`` prompts × ``--length`` tokens (16 blocks) by the fast path:
   seconds and prompts/s;
3. **memory** — peak resident memory of one ``--mem-length``-token prompt (fast path), measured in a
   fresh child process as the rise of its peak RSS (``VmHWM``, reset after loading) over the loaded model.

    python benchmarks/llm_heads_speed.py [--model smollm2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time

import numpy as np
import torch


def _load(model: str, threads: int | None):
    if threads:
        torch.set_num_threads(threads)
    from posym.model.llm import load_llm

    lm, _ = load_llm(model, dtype="float32", device="cpu")
    if hasattr(lm, "set_attn_implementation"):  # the reference path reads the attention weights
        lm.set_attn_implementation("eager")
    else:
        lm.config._attn_implementation = "eager"
    return lm


def _ids(lm, n: int, length: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, lm.config.vocab_size - 100, (n, length), generator=g)


def _status_mb(field: str) -> float:
    """``VmRSS`` / ``VmHWM`` (peak) of this process from /proc, in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> None:
    """Reset the kernel's peak-RSS counter (VmHWM) to the current RSS (Linux ``clear_refs`` 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _memory_child(model: str, threads: int | None, length: int, queue) -> None:
    from posym.heads.scores import scores_blocks_fast

    lm = _load(model, threads)
    ids = _ids(lm, 1, length)
    _reset_peak()  # the GGUF de-quantization peaked higher than the scoring will
    before = _status_mb("VmRSS")
    t0 = time.perf_counter()
    scores_blocks_fast(lm, ids, blocks=16, batch_size=1)
    queue.put({"rss_model_mb": before, "rss_peak_mb": _status_mb("VmHWM"), "seconds": time.perf_counter() - t0})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="bundled short name, HF directory or .gguf file")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ref-n", type=int, default=2, help="prompts scored by both paths")
    ap.add_argument("--ref-length", type=int, default=64, help="tokens per prompt for the ratio")
    ap.add_argument("--n", type=int, default=64, help="prompts for the throughput run")
    ap.add_argument("--length", type=int, default=512, help="tokens per prompt for the throughput run")
    ap.add_argument("--batch-size", type=int, default=8, help="prompts per forward (fast path)")
    ap.add_argument("--mem-length", type=int, default=2048, help="tokens of the memory probe (0 = skip)")
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args()

    from machine import machine_line
    from posym.heads.scores import scores_blocks_fast, scores_blocks_reference

    t0 = time.perf_counter()
    lm = _load(a.model, a.threads)
    load_s = time.perf_counter() - t0
    cfg = lm.config
    print(f"model {a.model}: {cfg.num_hidden_layers} layers × {cfg.num_attention_heads} heads "
          f"({getattr(cfg, 'num_key_value_heads', None)} kv); loaded in {load_s:.0f} s; "
          f"threads={torch.get_num_threads()} torch={torch.__version__}")
    print(machine_line(), flush=True)
    res: dict = {"model": a.model, "threads": torch.get_num_threads(), "load_s": load_s}

    ids = _ids(lm, a.ref_n, a.ref_length, seed=1)
    t0 = time.perf_counter()
    fast = scores_blocks_fast(lm, ids, blocks=16, batch_size=a.batch_size)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = scores_blocks_reference(lm, ids, blocks=16, batch_size=a.batch_size)
    t_ref = time.perf_counter() - t0
    diff = float(max(np.abs(fast.s_pos - ref.s_pos).max(), np.abs(fast.s_sym - ref.s_sym).max()))
    print(f"[ratio] {a.ref_n} prompts × {a.ref_length} tokens, 16 blocks: fast {t_fast:.2f} s, "
          f"reference {t_ref:.1f} s, ratio {t_ref / t_fast:.0f}×, max |Δ| {diff:.1e}")
    res.update(ratio=t_ref / t_fast, fast_s=t_fast, reference_s=t_ref, max_diff=diff,
               ref_n=a.ref_n, ref_length=a.ref_length)

    ids = _ids(lm, a.n, a.length, seed=2)
    t0 = time.perf_counter()
    scores_blocks_fast(lm, ids, blocks=16, batch_size=a.batch_size)
    t_all = time.perf_counter() - t0
    print(f"[throughput] every head, {a.n} prompts × {a.length} tokens: {t_all:.1f} s, {a.n / t_all:.2f} prompts/s")
    res.update(throughput_s=t_all, prompts_per_s=a.n / t_all, n=a.n, length=a.length)
    del lm

    if a.mem_length:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_memory_child, args=(a.model, a.threads, a.mem_length, q))
        p.start()
        m = q.get()
        p.join()
        print(f"[memory] one {a.mem_length}-token prompt: peak RSS {m['rss_peak_mb']:.0f} MB "
              f"(model loaded: {m['rss_model_mb']:.0f} MB; +{m['rss_peak_mb'] - m['rss_model_mb']:.0f} MB), "
              f"{m['seconds']:.1f} s")
        res.update(mem_length=a.mem_length, **{f"mem_{k}": v for k, v in m.items()})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
