"""Head scores side by side: the authors' per-layer re-run pipeline vs posym's fast and reference paths.

Three implementations score the same prompts on the same paper-shaped GPT-J (SPEC §2: 12 layers,
1 head, hidden 128; random weights — timing does not depend on them) in one process, alternated:

(a) **authors' algorithm**, re-implemented here from its description (SPEC §3): one forward with
    ``output_hidden_states`` / ``output_attentions``; then for every prompt and layer ℓ, all
    C(T−1, 2) copies of the layer-ℓ input hidden states with positions i, j swapped go through
    block ℓ alone (one batch per prompt and layer, eager attention, position ids fixed), the
    query's attention row is read, and s_POS / s_SYM follow from the weighted cosines with
    α = softmax(|D_i − D_j| / τ) and ``F.cosine_similarity``. It keeps only the query rows it needs
    (the authors' pipeline stores every swapped copy's full attention maps: ``dump_bytes``);
(b) ``posym.heads.scores_fast`` (one forward, content × position logits);
(c) ``posym.heads.scores_reference`` (the literal re-run; it re-runs layers 0..ℓ for every swapped
    copy, not layer ℓ alone), only where it fits the time budget.

(a) is checked against (b) at every T: on float64 copies before timing (with a float64 eager
attention, since HF's eager attention computes in float32; up to ``--check64-max-t``), and in
float32 on the timed prompts. Times are CPU seconds (``time.process_time``; run with 1 thread on a
shared machine). (a) and (c) do the same work for every prompt (their cost is linear in N), so where
they run on k < N prompts (to fit ``--budget``) their time is scaled by N/k (marked ``*``). Peak
memory = the process's peak RSS during a call above its RSS before it (a lower bound: memory the
process already held counts 0).

    nice -n 5 python benchmarks/peer_scores.py [--lengths 17,33,65,97] [--counts 16,64,256] [--budget 40]
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from machine import PeakRSS, machine_line
from posym.heads import scores_fast, scores_reference
from posym.model import build_model, model_config
from posym.tasks import get_vocab

TAU = 1e-4


# ------------------------------------------------------------------------------------------------
# (a) the authors' algorithm, from SPEC §3
# ------------------------------------------------------------------------------------------------
def _eager_fp64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """HF's eager attention without its cast to float32 (for the float64 check only)."""
    w = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = F.softmax(w, dim=-1)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def authors_scores(model, ids: torch.Tensor, tau: float = TAU) -> tuple[np.ndarray, np.ndarray]:
    """s_POS, s_SYM [B, L, H] by swapping hidden states at each layer's input and re-running that layer."""
    tr = model.transformer
    B, T = ids.shape
    t = T - 1
    L = len(tr.h)
    I, J = torch.triu_indices(t, t, 1)
    S = len(I)
    perms = torch.arange(T).repeat(S, 1)
    perms[torch.arange(S), I] = J
    perms[torch.arange(S), J] = I
    pos_ids = torch.arange(T)[None]
    s_pos = np.empty((B, L, model.config.n_head))
    s_sym = np.empty_like(s_pos)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True, output_attentions=True)
        dtype = out.attentions[0].dtype
        mask = torch.full((T, T), torch.finfo(dtype).min, dtype=dtype).triu(1)[None, None]
        rows = {}

        def grab(module, args, output):
            rows["w"] = output[1][:, :, t, :t]  # [S, H, t]: the query's attention after each swap

        for l, block in enumerate(tr.h):
            handle = block.attn.register_forward_hook(grab)
            try:
                for b in range(B):
                    h = out.hidden_states[l][b][perms]  # [S, T, D]: every swapped copy
                    pe = tr.rotary_emb(h, position_ids=pos_ids)
                    block(h, attention_mask=mask, position_ids=pos_ids, position_embeddings=pe)
                    dp = rows.pop("w")
                    d = out.attentions[l][b, :, t, :t]  # [H, t]
                    v = torch.stack((d[:, I], d[:, J]), -1)  # [H, S, 2]
                    dpi = dp.gather(2, I[:, None, None].expand(S, dp.shape[1], 1))[..., 0].T  # [H, S]
                    dpj = dp.gather(2, J[:, None, None].expand(S, dp.shape[1], 1))[..., 0].T
                    vp = torch.stack((dpi, dpj), -1)
                    pos = F.cosine_similarity(vp, v, dim=-1)
                    sym = F.cosine_similarity(vp, v.flip(-1), dim=-1)
                    alpha = torch.softmax((d[:, I] - d[:, J]).abs() / tau, dim=-1)
                    s_pos[b, l] = (alpha * pos).sum(-1).double().numpy()
                    s_sym[b, l] = (alpha * sym).sum(-1).double().numpy()
            finally:
                handle.remove()
    return s_pos, s_sym


def dump_bytes(T: int, L: int, H: int, itemsize: int = 4) -> int:
    """Bytes of the attention maps the authors' pipeline keeps per prompt: the unswapped and every one
    of the C(T−1, 2) swapped copies' [T, T] maps, per layer and head (≈ T⁴/2 · L · H floats)."""
    return (math.comb(T - 1, 2) + 1) * L * H * T * T * itemsize


# ------------------------------------------------------------------------------------------------
# the benchmark
# ------------------------------------------------------------------------------------------------
def _timed(fn):
    with PeakRSS() as mem:
        c0, w0 = time.process_time(), time.perf_counter()
        res = fn()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return res, cpu, wall, mem.extra_mib


def _fast(model, ids):
    r = scores_fast(model, ids, TAU)
    return r.s_pos[..., 0], r.s_sym[..., 0]


def _ref(model, ids):
    r = scores_reference(model, ids, TAU)
    return r.s_pos[..., 0], r.s_sym[..., 0]


def _maxdiff(a, b) -> float:
    return float(max(np.abs(a[0] - b[0]).max(), np.abs(a[1] - b[1]).max()))


def check64(model64, ids) -> float:
    """max |Δ| of (s_POS, s_SYM), authors vs fast, on float64 copies of model and attention."""
    return _maxdiff(authors_scores(model64, ids), _fast(model64, ids))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="17,33,65,97", help="prompt lengths T (query at T−1)")
    ap.add_argument("--counts", default="16,64,256", help="prompt counts N")
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds of the fast path per cell")
    ap.add_argument("--budget", type=float, default=40.0,
                    help="CPU seconds per T for one run of (a), and for one of (c); they run on k <= N prompts")
    ap.add_argument("--ref-max-t", type=int, default=33, help="skip (c) above this T")
    ap.add_argument("--check-n", type=int, default=2, help="prompts of the float64 (a) = (b) check")
    ap.add_argument("--check64-max-t", type=int, default=65, help="skip the float64 check above this T")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lengths = [int(x) for x in a.lengths.split(",")]
    counts = [int(x) for x in a.counts.split(",")]
    V = get_vocab("number").size
    model = build_model(model_config("paper", V), seed=0).eval()
    model64 = copy.deepcopy(model).double()
    from transformers import AttentionInterface

    AttentionInterface.register("eager_fp64", _eager_fp64)
    model64.config._attn_implementation = "eager_fp64"
    cfg = model.config
    L, H = cfg.n_layer, cfg.n_head
    print(machine_line())
    print(f"model: random-init paper GPT-J ({L} layers × {H} head, hidden {cfg.n_embd}); random prompts of the "
          f"number-task vocabulary ({V} ids); tau={TAU}")
    gen = torch.Generator().manual_seed(a.seed)
    rows = []
    for T in lengths:
        N = max(counts)
        ids = torch.randint(0, V, (N, T), generator=gen)
        if T <= a.check64_max_t:
            d64 = check64(model64, ids[:a.check_n])
            print(f"T={T}: (a) vs (b) on float64 copies, {a.check_n} prompts: max |Δ| {d64:.1e}", flush=True)
        # one prompt of (a) sizes k (and is the timed run when k = 1)
        probe = _timed(lambda: authors_scores(model, ids[:1]))
        c1 = probe[1]
        k_a = int(min(N, max(1, a.budget // max(c1, 1e-3))))
        run_ref = T <= a.ref_max_t
        k_r = int(min(N, max(1, a.budget // max(6.5 * c1, 1e-3)))) if run_ref else 0  # (c) ≈ 6.5× (a) per prompt
        fast = {n: [] for n in counts}
        for r in range(a.rounds):
            for n in counts:
                res, cpu, wall, mem = _timed(lambda: _fast(model, ids[:n]))
                fast[n].append((cpu, wall, mem))
                if r == 0 and n == N:
                    fres = res
            if r == 0:
                ares, a_cpu, a_wall, a_mem = probe if k_a == 1 else _timed(lambda: authors_scores(model, ids[:k_a]))
                dk = _maxdiff(ares, (fres[0][:k_a], fres[1][:k_a]))
                if run_ref:
                    _, r_cpu, r_wall, r_mem = _timed(lambda: _ref(model, ids[:k_r]))
        for n in counts:
            f_cpu = float(np.median([x[0] for x in fast[n]]))
            f_wall = float(np.median([x[1] for x in fast[n]]))
            f_mem = max(x[2] for x in fast[n])
            spread = max(x[0] for x in fast[n]) / min(x[0] for x in fast[n])
            row = dict(T=T, N=n, f_cpu=f_cpu, f_wall=f_wall, f_mem=f_mem, f_spread=spread,
                       a_cpu=a_cpu * n / k_a, a_wall=a_wall * n / k_a, a_mem=a_mem, k_a=k_a, d_a=dk,
                       dump=dump_bytes(T, L, H))
            if run_ref:
                row.update(r_cpu=r_cpu * n / k_r, r_wall=r_wall * n / k_r, r_mem=r_mem, k_r=k_r)
            rows.append(row)
            print(f"T={T} N={n}: fast {f_cpu:.3f} s CPU ({f_wall:.3f} s wall, spread {spread:.2f}); authors "
                  f"{row['a_cpu']:.2f} s CPU (on {k_a} prompts, float32 max |Δ| vs fast {dk:.1e})"
                  + (f"; reference {row['r_cpu']:.2f} s CPU (on {k_r})" if run_ref else "; reference skipped"),
                  flush=True)
    print()
    print("| T | N | fast CPU s (wall) | authors CPU s (wall) | reference CPU s | authors / fast | "
          "reference / authors | peak MiB fast / authors / ref | authors' dumps per prompt |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        star_a = "*" if r["k_a"] < r["N"] else ""
        if "r_cpu" in r:
            star_r = "*" if r["k_r"] < r["N"] else ""
            ref = f"{r['r_cpu']:.1f}{star_r}"
            ratio_r = f"{r['r_cpu'] / r['a_cpu']:.1f}×"
            mem_r = f"{r['r_mem']:.0f}"
        else:
            ref, ratio_r, mem_r = "skipped", "–", "–"
        print(f"| {r['T']} | {r['N']} | {r['f_cpu']:.2f} ({r['f_wall']:.2f}) | {r['a_cpu']:.1f}{star_a} "
              f"({r['a_wall']:.1f}) | {ref} | **{r['a_cpu'] / r['f_cpu']:.0f}×** | {ratio_r} | "
              f"{r['f_mem']:.0f} / {r['a_mem']:.0f} / {mem_r} | {r['dump'] / 1e6:,.1f} MB |")
    print("* run on k < N prompts and scaled by N/k (both loop over prompts one at a time)")


if __name__ == "__main__":
    main()
