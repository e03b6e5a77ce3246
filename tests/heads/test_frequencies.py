"""RoPE frequency analysis (SPEC §4): the per-frequency terms sum to the model's logits (every family),
per-frequency scores (fast == literal swaps), frequency use / weighted ID on hand-built heads, Q/K
geometry, and the outputs of the freqs verb."""

import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import GPTJConfig, GPTJForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from posym.errors import PosymError  # noqa: E402
from posym.heads.frequencies import (  # noqa: E402
    TABLE_COLUMNS,
    frequency_ids,
    frequency_logits,
    frequency_scores,
    frequency_swap_attention,
    frequency_use,
    n_terms,
    qk_geometry,
    query_values,
    weighted_frequency_id,
)
from posym.heads.scores import scores_fast  # noqa: E402
from posym.model import build_model, model_config, save_model  # noqa: E402
from posym.model.adapters import get_adapter  # noqa: E402
from posym.report.freq_figures import plot_freq_use, plot_qk_geometry  # noqa: E402
from posym.runs.layout import write_meta  # noqa: E402
from posym.verbs.freqs import freqs  # noqa: E402
from head_builders import sharpen_qk
from family_models import build_family

torch.set_num_threads(1)
TOL = 1e-5


def _boost(model, std=0.4, seed=1):
    """Larger q/k projections: attention far from uniform (a stronger check)."""
    return sharpen_qk(model, std, seed)


def _gptj(rotary_dim, n_head=2, n_embd=32, n_layer=2):
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=50, n_positions=32, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                     rotary_dim=rotary_dim, n_inner=2 * n_embd, bos_token_id=None, eos_token_id=None,
                     attn_implementation="eager")
    return _boost(GPTJForCausalLM(cfg).eval())


def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=32, attn_implementation="eager")
    return _boost(LlamaForCausalLM(cfg).eval())


def _neox():
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                        max_position_embeddings=32, rotary_pct=0.5, attn_implementation="eager")
    return _boost(GPTNeoXForCausalLM(cfg).eval())


MODELS = {
    "gptj-full": lambda: _gptj(rotary_dim=16),
    "gptj-partial": lambda: _gptj(rotary_dim=6),
    "llama-gqa": _llama,
    "neox-partial": _neox,
}
# expected number of terms per logit (K, +1 for partial rotary)
N_TERMS = {"gptj-full": 8, "gptj-partial": 3 + 1, "llama-gqa": 4, "neox-partial": 4 + 1}


@pytest.fixture(scope="module", params=list(MODELS))
def model_case(request):
    return request.param, MODELS[request.param]()


def _ids(n=3, T=11, seed=0):
    return torch.randint(0, 50, (n, T), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------
# 1. decomposition
# ------------------------------------------------------------------------------------------------
def test_terms_sum_to_model_logits_and_attention(model_case):
    name, model = model_case
    ad = get_adapter(model)
    ids = _ids()
    T = ids.shape[1]
    assert n_terms(model) == N_TERMS[name]
    terms = frequency_logits(model, ids)
    assert terms.shape == (2, 3, ad.n_heads, N_TERMS[name], T) and terms.dtype == torch.float64
    q, k = ad.capture_qk(ids)
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True).attentions
    for l in range(2):
        logits = ad.logits_from_qk(q[l], k[l], l)[:, :, -1].double()  # [B, H, T]
        assert (terms[l].sum(2) - logits).abs().max() <= TOL
        p = torch.softmax(terms[l].sum(2), dim=-1)  # causal: the last query sees every key
        assert (p - att[l][:, :, -1].double()).abs().max() <= TOL
        assert terms[l].abs().amax(-1).min() > 1e-3  # every term carries some logit
    # an earlier query: keys 0..t only
    t = 6
    terms_t = frequency_logits(model, ids, query_pos=t, layers=[1])
    assert terms_t.shape[-1] == t + 1
    p = torch.softmax(terms_t[0].sum(2), dim=-1)
    assert (p - att[1][:, :, t, : t + 1].double()).abs().max() <= TOL
    assert torch.allclose(frequency_logits(model, ids, query_pos=t - T)[1], terms_t[0])


@pytest.mark.parametrize("name", ["gptj-partial", "llama-gqa"])
def test_terms_match_literal_2d_rotation(name):
    """λ^(k)_j = scaling · q^(k)ᵀ ρ((j - t) g_k) k_j^(k) on the model's own pair of dims."""
    model = MODELS[name]()
    ad = get_adapter(model)
    info = frequency_ids(model)
    ids = _ids(n=2, T=9)
    t = 8
    terms = frequency_logits(model, ids, layers=[0])[0]
    q, k = ad.capture_qk(ids, [0])
    q, k = q[0, :, :, t].double(), k[0].double()
    for h in range(ad.n_heads):
        kv = ad.kv_head_of(h)
        for _, row in info[info["rotary"]].iterrows():
            a, b, g = row["dim_a"], row["dim_b"], row["angle"]
            for j in (0, 3, 8):
                phi = (j - t) * g
                rot = torch.tensor([[math.cos(phi), -math.sin(phi)], [math.sin(phi), math.cos(phi)]], dtype=torch.float64)
                qk = q[:, h, [a, b]], k[:, kv, j, [a, b]]
                lit = ad.scaling * (qk[0] * (qk[1] @ rot.T)).sum(-1)
                assert torch.allclose(terms[:, h, row["freq_id"] - 1, j], lit, atol=1e-5)
    if name == "gptj-partial":
        assert list(info["dim_a"][:3]) == [0, 2, 4] and not info["rotary"].iloc[-1] and info["angle"].iloc[-1] == 0
    else:
        assert list(info["dim_a"]) == [0, 1, 2, 3] and list(info["dim_b"]) == [4, 5, 6, 7]
    assert info["angle"].iloc[0] == 1.0 and info["freq_id"].iloc[0] == 1


# ------------------------------------------------------------------------------------------------
# 2. per-frequency scores
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gptj-partial", "llama-gqa"])
def test_frequency_scores_fast_equals_literal_swaps(name):
    model = MODELS[name]()
    ids = _ids(n=2, T=9, seed=3)
    f = frequency_swap_attention(model, ids, batch_size=1)
    r = frequency_swap_attention(model, ids, method="reference", chunk_size=50)
    for a, b in zip(f[:3], r[:3]):
        assert a.shape == b.shape and np.abs(a - b).max() <= TOL
    assert f[1].shape == (2, 2, get_adapter(model).n_heads, n_terms(model), 28)  # C(8, 2) swaps
    taus = (1e-4, 1e-2)
    fs = frequency_scores(model, ids, taus=taus, query_pos=7, mean_over_prompts=False)
    rs = frequency_scores(model, ids, taus=taus, query_pos=7, method="reference", mean_over_prompts=False)
    assert np.abs(fs[["s_pos", "s_sym"]].to_numpy() - rs[["s_pos", "s_sym"]].to_numpy()).max() <= TOL
    assert (fs.drop(columns=["s_pos", "s_sym"]) == rs.drop(columns=["s_pos", "s_sym"])).all().all()
    # the non-rotary term ignores positions: swapping two keys swaps their attention exactly
    nr = fs[~fs["rotary"]]
    if len(nr):
        assert np.allclose(nr["s_sym"], 1.0, atol=1e-12)


@pytest.mark.parametrize("name", ["gemma3_text", "smollm3"])
def test_per_layer_rope_terms_angles_and_swaps(name):
    """Gemma-3 (local 10k / global 1M bases, windows) and SmolLM3 (a NoPE layer): each layer's own
    rotary — terms sum to its logits, ``angle`` is the layer's, fast == literal per-frequency swaps."""
    model = build_family(name, vocab_size=50)
    ad = get_adapter(model)
    ids = _ids(n=2, T=9, seed=3)
    terms = frequency_logits(model, ids)
    q, k = ad.capture_qk(ids)
    for l in range(ad.n_layers):
        logits = ad.logits_from_qk(q[l], k[l], l)[:, :, -1].double()
        seen = torch.isfinite(logits)
        assert (terms[l].sum(2) - logits)[seen].abs().max() <= TOL
    use = frequency_use(model, ids)
    for l in range(ad.n_layers):
        got = use[(use["layer"] == l) & (use["head"] == 0)]["angle"].to_numpy()
        assert np.allclose(got, ad.layer_inv_freq(l).numpy())
    assert (use[use["layer"] == 1]["angle"].min() < use[use["layer"] == 0]["angle"].min()) == (name == "gemma3_text")
    assert (use[use["layer"] == 2]["angle"] == 0).all() == (name == "smollm3")  # NoPE: angle 0
    f = frequency_swap_attention(model, ids, layers=[1, 2])
    r = frequency_swap_attention(model, ids, layers=[1, 2], method="reference")
    for a, b in zip(f[:3], r[:3]):
        assert np.abs(a - b).max() <= TOL
    fs = frequency_scores(model, ids, layers=[1, 2])
    assert np.allclose(fs[(fs["layer"] == 1) & (fs["head"] == 0) & fs["rotary"]]["angle"], ad.layer_inv_freq(1).numpy())
    with pytest.raises(PosymError, match="pass layer="):
        frequency_ids(model)


def _single_frequency_head(freq_id, rotary_dim=32, n_embd=32, leak=0.0, seed=0):
    """1-layer, 1-head GPT-J whose q/k read random directions but write only on the dims of
    ``freq_id`` (+ ``leak`` times random values elsewhere)."""
    torch.manual_seed(seed)
    cfg = GPTJConfig(vocab_size=50, n_positions=32, n_embd=n_embd, n_layer=1, n_head=1, rotary_dim=rotary_dim,
                     n_inner=n_embd, bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    m = GPTJForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    dims = [2 * (freq_id - 1), 2 * freq_id - 1]
    with torch.no_grad():
        for proj in (m.transformer.h[0].attn.q_proj, m.transformer.h[0].attn.k_proj):
            w = torch.randn(proj.weight.shape, generator=g) * leak
            w[dims] = torch.randn(2, n_embd, generator=g) * 2.0
            proj.weight.copy_(w)
    return m


def test_single_frequency_head_use_and_weighted_id():
    ids = _ids(n=4, T=13)
    for k in (1, 6, 16):
        use = frequency_use(_single_frequency_head(k), ids)
        assert list(use.columns) == ["layer", "head", "freq_id", "angle", "rotary", "use", "use_frac", "n_prompts"]
        frac = use.set_index("freq_id")["use_frac"]
        assert frac[k] == pytest.approx(1.0) and frac.drop(k).abs().max() == 0.0
        tab = weighted_frequency_id(use)
        assert list(tab.columns) == TABLE_COLUMNS
        row = tab.iloc[0]
        assert row["weighted_id"] == pytest.approx(k) and row["dominant_id"] == k
        assert row["dominant_angle"] == pytest.approx(10000 ** (-2 * (k - 1) / 32))
        assert row["weighted_angle"] == row["dominant_angle"] and row["nonrotary_share"] == 0.0
    # a little leakage into the other frequencies: still concentrated, weighted ID close to k
    use = frequency_use(_single_frequency_head(6, leak=0.02), ids)
    row = weighted_frequency_id(use).iloc[0]
    assert row["dominant_id"] == 6 and abs(row["weighted_id"] - 6) < 0.5
    assert use.loc[use["freq_id"] == 6, "use_frac"].item() > 0.8


def test_single_frequency_head_scores_equal_head_scores():
    """With one frequency in use, that frequency's 'head' is the head itself (SPEC §3 scores)."""
    m = _single_frequency_head(3)
    ids = _ids(n=3, T=10, seed=5)
    fs = frequency_scores(m, ids, taus=(1e-4, 1e-1))
    hs = scores_fast(m, ids, taus=(1e-4, 1e-1)).to_frame()
    row = fs[fs["freq_id"] == 3].sort_values("tau")
    assert np.allclose(row["s_pos"].to_numpy(), hs.sort_values("tau")["s_pos"].to_numpy(), atol=1e-6)
    assert np.allclose(row["s_sym"].to_numpy(), hs.sort_values("tau")["s_sym"].to_numpy(), atol=1e-6)
    # unused frequencies are all-zero terms: uniform attention scores (1, 1)
    other = fs[fs["freq_id"] != 3]
    assert np.allclose(other[["s_pos", "s_sym"]].to_numpy(), 1.0)


# ------------------------------------------------------------------------------------------------
# 3. geometry, figures, errors
# ------------------------------------------------------------------------------------------------
def test_qk_geometry_points_reproduce_the_term():
    model = MODELS["llama-gqa"]()
    ad = get_adapter(model)
    ids = _ids(n=3, T=8)
    pts = qk_geometry(model, ids, layer=1, head=3, freq_id=2)
    terms = frequency_logits(model, ids, layers=[1])[0][:, 3, 1]  # [B, T]
    q = pts[pts["kind"] == "query"].set_index("prompt")
    k = pts[pts["kind"] == "key"]
    lam = ad.scaling * (k["x"].to_numpy() * q.loc[k["prompt"], "x"].to_numpy()
                        + k["y"].to_numpy() * q.loc[k["prompt"], "y"].to_numpy())
    assert np.allclose(lam, terms.numpy().ravel(), atol=1e-6)
    assert len(q) == 3 and len(k) == 3 * 8 and (pts["freq_id"] == 2).all() and (pts["angle"] == ad.inv_freq[1].item()).all()
    # rotation preserves lengths; default plane = the dominant frequency
    assert np.allclose(np.hypot(pts["x"], pts["y"]), np.hypot(pts["x_pre"], pts["y_pre"]), atol=1e-6)
    dom = weighted_frequency_id(frequency_use(model, ids, layers=[1]))
    assert qk_geometry(model, ids, 1, 3)["freq_id"].iloc[0] == dom[dom["head"] == 3]["dominant_id"].item()
    for bad in (dict(freq_id=5), dict(head=4), dict(layer=2)):
        with pytest.raises(PosymError):
            qk_geometry(model, ids, **{"layer": 1, "head": 0, **bad})
    fig, axes = plt.subplots(1, 2)
    plot_qk_geometry(pts, ax=axes[0])
    plot_qk_geometry(pts, ax=axes[1], rotated=False, normalize=False)
    assert len(plot_qk_geometry(pts).axes) >= 2  # default: rotated and pre-rotary panels
    plot_freq_use(frequency_use(model, ids), ax=None, title="t")
    plot_freq_use(frequency_use(model, ids), ax=axes[0])
    plt.close("all")


def test_query_values():
    ids = np.array([[20, 5], [20, 30], [20, 65 + 8 * 2 + 7], [20, 3]])
    assert np.array_equal(query_values(ids, 1, "number"), [5, np.nan, np.nan, 3], equal_nan=True)
    assert np.array_equal(query_values(ids[:3], 1, "letter"), [np.nan, np.nan, 7], equal_nan=True)
    assert np.array_equal(query_values(ids, 1, None), [5, 30, 88, 3])


def test_errors():
    model = MODELS["gptj-full"]()
    ids = _ids(n=1, T=6)
    with pytest.raises(PosymError):
        frequency_logits(model, ids, query_pos=6)
    with pytest.raises(PosymError):
        frequency_logits(model, ids, query_pos=1.5)
    with pytest.raises(PosymError):
        frequency_scores(model, ids, query_pos=1)
    with pytest.raises(PosymError):
        frequency_scores(model, ids, method="slow")
    with pytest.raises(PosymError):
        frequency_use(model, ids, batch_size=0)
    with pytest.raises(PosymError):
        weighted_frequency_id(pd.DataFrame({"layer": [0]}))
    with pytest.raises(PosymError):
        plot_freq_use(pd.DataFrame({"layer": [0]}))


# ------------------------------------------------------------------------------------------------
# 4. the freqs verb
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    cfg = model_config("paper", 137, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32)
    model = _boost(build_model(cfg, seed=0), std=0.3)
    d = tmp_path_factory.mktemp("freqs") / "ckpt"
    save_model(model, d)
    write_meta(d, {"task": "number", "step": 7})
    return d


def test_run_freqs_writes_tables_and_figures(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    table = freqs(tiny_checkpoint, n=16, out=out, geometry_prompts=8, progress=False).table
    assert list(table.columns) == ["step"] + TABLE_COLUMNS + ["intervention"] and len(table) == 2  # step first
    assert (table["intervention"] == "none").all()  # measured on the untouched model (docs/interventions.md)
    assert table.attrs["task"] == "number" and table.attrs["step"] == 7
    layer = table.attrs["geometry_layer"]
    assert layer == int(table.loc[table["weighted_id"].idxmin(), "layer"])
    for f in ["freq_use.csv", "freq_table.csv", "freq_scores.csv", f"qk_geometry_L{layer}.csv",
              "figures/freq_use.png", "figures/freq_use.pdf", f"figures/qk_geometry_L{layer}.png",
              f"figures/qk_geometry_L{layer}.pdf"]:
        assert (out / f).is_file(), f
    use = pd.read_csv(out / "freq_use.csv")
    assert len(use) == 2 * 16 and np.allclose(use.groupby("layer")["use_frac"].sum(), 1.0)
    assert pd.read_csv(out / "freq_table.csv").shape == table.shape
    sc = pd.read_csv(out / "freq_scores.csv")
    assert len(sc) == 2 * 16 and sc[["s_pos", "s_sym"]].notna().all().all()
    pts = pd.read_csv(out / f"qk_geometry_L{layer}.csv")
    assert (pts["kind"] == "query").sum() == 8 and pts.loc[pts["kind"] == "query", "value"].between(1, 16).all()


def test_run_freqs_plain_hf_dir_needs_task(tiny_checkpoint, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in tiny_checkpoint.iterdir():
        if f.name != "posym.json":
            (plain / f.name).write_bytes(f.read_bytes())
    with pytest.raises(PosymError, match="task"):
        freqs(plain, n=4)
    with pytest.raises(PosymError):
        freqs(plain, task="number", n=4, layer_geometry=5)
    table = freqs(plain, task="letter", n=4, layer_geometry=1, scores=False, geometry_prompts=4, progress=False).table
    assert table.attrs["geometry_layer"] == 1 and table.attrs["step"] is None
    assert not (plain / "freq_scores.csv").exists() and (plain / "figures" / "qk_geometry_L1.png").is_file()
    assert json.loads(json.dumps(table.attrs["files"]))  # plain strings


def test_centered_weighting_ignores_key_constant_terms():
    """A term constant over keys (here: the non-moving part of a slow frequency) is blind to the
    softmax; ``weighting="centered"`` removes it, ``max_abs`` (SPEC) counts it."""
    ids = _ids(n=3, T=10)
    m = _single_frequency_head(16)  # angle 1e-4·... : nearly constant over 10 positions
    raw = frequency_use(m, ids)
    cen = frequency_use(m, ids, weighting="centered")
    u_raw = raw.loc[raw["freq_id"] == 16, "use"].item()
    u_cen = cen.loc[cen["freq_id"] == 16, "use"].item()
    assert 0 < u_cen < u_raw
    terms = frequency_logits(m, ids)[0, :, 0, 15]  # [B, T]
    assert u_cen == pytest.approx((terms - terms.mean(-1, keepdim=True)).abs().amax(-1).mean().item())
    with pytest.raises(PosymError):
        frequency_use(m, ids, weighting="mean")
