"""Information flow (Paper A Fig. 3 left): attention edges, hop chains, run resolution, the plot."""

from __future__ import annotations

import json
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from posym.errors import PosymError  # noqa: E402
from posym.heads.flow import (  # noqa: E402
    EDGE_COLUMNS,
    attention_flow,
    attention_weights,
    chain_edge_mask,
    flow_for_example,
    hop_chain,
)
from posym.runs.resolve import resolve_model  # noqa: E402
from posym.model import build_model, model_config, save_model  # noqa: E402
from posym.report.flow_figures import plot_flow, save_figure  # noqa: E402
from posym.tasks import generate, get_vocab, make_split, solve  # noqa: E402
from posym.train.checkpoints import save_checkpoint  # noqa: E402

NUMBER_EXAMPLE = "n h n v h y r s 6 3 2 7 7 8 4 7 2".split()
LETTER_EXAMPLE = "e1 b2 e1 g6 a2 b2 e1 g6 be db ca ge eb hc dg fh eh".split()


def tiny_model(task: str = "number", n_layer: int = 2, n_head: int = 1, seed: int = 0):
    cfg = model_config("quick", get_vocab(task).size, n_layer=n_layer, n_head=n_head, n_embd=32, n_inner=64,
                       rotary_dim=32 // n_head)
    return build_model(cfg, seed=seed).eval()


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return tiny_model("number", n_layer=3, n_head=2)


@pytest.fixture(scope="module")
def prompt():
    return make_split("number", "test", n=1).input_ids[0]


def test_edges_are_causal_topk_and_weighted(model, prompt):
    edges = attention_flow(model, prompt, top_k=3, min_weight=0.05)
    assert list(edges.columns) == EDGE_COLUMNS
    assert len(edges) > 0
    assert ((edges["weight"] > 0) & (edges["weight"] <= 1)).all()
    assert (edges["weight"] >= 0.05).all()
    assert (edges["key"] <= edges["query"]).all()
    counts = edges.groupby(["layer", "head", "query"]).size()
    assert counts.max() <= 3
    assert set(edges["layer"]) <= set(range(3)) and set(edges["head"]) <= {0, 1}
    assert edges.attrs == {"n_layer": 3, "n_head": 2, "seq_len": 17}
    # ranks follow decreasing weight within each query position
    for _, g in edges.groupby(["layer", "head", "query"]):
        assert list(g["rank"]) == list(range(len(g)))
        assert np.all(np.diff(g["weight"].to_numpy()) <= 1e-12)
    # [1, n] input gives the same table
    edges2 = attention_flow(model, prompt[None], top_k=3, min_weight=0.05)
    assert edges.equals(edges2)


def test_full_edges_reproduce_attention(model, prompt):
    att = attention_weights(model, prompt)  # [L, H, T, T]
    assert att.shape == (3, 2, 17, 17)
    edges = attention_flow(model, prompt, top_k=17, min_weight=0.0)
    rebuilt = torch.zeros_like(att)
    for r in edges.itertuples():
        rebuilt[r.layer, r.head, r.query, r.key] = r.weight
    torch.testing.assert_close(rebuilt, att, atol=1e-6, rtol=0)
    sums = edges.groupby(["layer", "head", "query"])["weight"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, atol=1e-5)
    assert len(sums) == 3 * 2 * 17


def test_flow_errors(model, prompt):
    with pytest.raises(PosymError):
        attention_flow(model, np.stack([prompt, prompt]))
    with pytest.raises(PosymError):
        attention_flow(model, prompt, top_k=0)
    with pytest.raises(PosymError):
        attention_flow(model, prompt, min_weight=2.0)

    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg._attn_implementation = "sdpa"  # built with SDPA (every transformers version): returns no attention weights
    sdpa = LlamaForCausalLM(cfg).eval()
    with pytest.raises(PosymError, match="attention"):
        attention_flow(sdpa, prompt)

    class NotAModel(torch.nn.Module):  # not a family posym reads: refused before any forward
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.config = SimpleNamespace(n_layer=1, model_type="mamba")

        def forward(self, **kwargs):
            raise AssertionError("must not run")

    with pytest.raises(PosymError, match="unsupported model") as err:
        attention_flow(NotAModel(), prompt)
    assert "\n" not in str(err.value)


def test_hop_chain_spec_examples():
    assert hop_chain("number", NUMBER_EXAMPLE) == [16, 14, 10, 8, 2]
    # eh -> hc (13) -> ca (10) -> a2 (4)
    assert hop_chain("letter", LETTER_EXAMPLE) == [16, 13, 10, 4]


@pytest.mark.parametrize("task", ["number", "letter"])
def test_hop_chain_matches_solver(task):
    batch = generate(task, 200, seed=7)
    for r in range(len(batch)):
        toks = batch.tokens(r)
        chain = hop_chain(task, toks)
        _, hops, answer_pos = solve(task, toks)
        assert chain[0] == len(toks) - 1
        assert len(chain) - 1 == hops == batch.hops[r]
        assert chain[-1] == answer_pos == batch.answer_pos[r]
        if task == "number":  # offsets are >= 1: the chain always moves left
            assert all(a > b for a, b in zip(chain, chain[1:]))


def test_hop_chain_errors():
    with pytest.raises(PosymError):
        hop_chain("number", NUMBER_EXAMPLE[:-1] + ["a"])  # letter query
    with pytest.raises(PosymError):
        hop_chain("number", ["a", "5"])  # points before the start
    with pytest.raises(PosymError):
        hop_chain("letter", ["a1", "ba", "bc", "ab"])  # two tokens with left letter b
    with pytest.raises(PosymError, match="cycle"):
        hop_chain("letter", ["a1", "bc", "cb", "ab"])  # ab -> bc -> cb -> bc ...
    assert hop_chain("letter", ["a1", "ba", "bb"]) == [2, 1, 0]
    with pytest.raises(PosymError):
        hop_chain("sorting", NUMBER_EXAMPLE)


def test_chain_edge_mask(model, prompt):
    edges = attention_flow(model, prompt, top_k=17, min_weight=0.0)
    chain = [16, 14, 10]
    mask = chain_edge_mask(edges, chain)
    sel = edges[mask]
    assert set(zip(sel["query"], sel["key"])) == {(16, 14), (14, 10)}
    assert len(sel) == 2 * 3 * 2  # every layer and head keeps every edge at top_k = n


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny run directory with two checkpoints (steps 0 and 10) and a bare HF checkpoint."""
    root = tmp_path_factory.mktemp("flow_run")
    run = root / "run"
    run.mkdir()
    (run / "posym.json").write_text(json.dumps({"task": "number"}))
    save_checkpoint(run, 0, tiny_model(seed=1), {"task": "number", "preset": "quick"})
    save_checkpoint(run, 10, tiny_model(seed=2), {"task": "number", "preset": "quick"})
    bare = root / "bare"
    save_model(tiny_model("letter", seed=3), bare)  # no posym.json
    return run, bare


def test_resolve_run_and_checkpoint(run_dir):
    run, bare = run_dir
    res = resolve_model(run)
    model, task, step = res
    assert (task, step) == ("number", 10) and res.path.name == "step-000010"
    assert resolve_model(run, step=0).step == 0
    assert resolve_model(run / "checkpoints" / "step-000000").step == 0
    with pytest.raises(PosymError):
        resolve_model(run, step=5)
    with pytest.raises(PosymError, match="task"):
        resolve_model(bare)
    assert resolve_model(bare, task="letter").task == "letter"
    with pytest.raises(PosymError):
        resolve_model(run, task="letter")  # contradicts posym.json
    with pytest.raises(PosymError):
        resolve_model(run.parent / "missing")
    with pytest.raises(PosymError):
        resolve_model(run.parent)  # neither a run nor a checkpoint


def test_flow_for_example_and_plot(run_dir, tmp_path):
    run, _ = run_dir
    edges, tokens, chain, task = flow_for_example(run, 3)
    batch = make_split("number", "test", n=4)
    assert task == "number" and tokens == batch.tokens(3)
    assert chain == hop_chain("number", tokens) and len(chain) - 1 == batch.hops[3]
    assert edges.attrs["n_layer"] == 2 and edges.attrs["step"] == 10
    assert edges.attrs["label"] == batch.label_token(3)
    with pytest.raises(PosymError):
        flow_for_example(run, -1)
    with pytest.raises(PosymError):
        flow_for_example(run, 0, split="dev")

    fig = plot_flow(edges, tokens, chain)
    assert isinstance(fig, matplotlib.figure.Figure)
    paths = save_figure(fig, tmp_path / "figs" / "flow")
    assert {p.suffix for p in paths} == {".png", ".pdf"}
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    # drawing into a given Axes returns that Axes' figure
    fig2, ax = plt.subplots()
    assert plot_flow(edges, tokens, chain, ax=ax) is fig2
    plt.close("all")


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma3_text", "gpt_neox"])
def test_flow_on_other_families_reproduces_their_attention(name, prompt):
    """The flow graph builds on any family and its edges carry the model's own eager attention
    (GQA: one map per query head)."""
    from family_models import build_family

    model = build_family(name, vocab_size=get_vocab("number").size)
    ids = torch.as_tensor(prompt)[None]
    with torch.no_grad():
        ref = model(input_ids=ids, output_attentions=True).attentions
    L, H, T = len(ref), ref[0].shape[1], ids.shape[1]
    edges = attention_flow(model, prompt, top_k=T, min_weight=0.0)
    assert edges.attrs == {"n_layer": L, "n_head": H, "seq_len": T}
    rebuilt = torch.zeros(L, H, T, T)
    for r in edges.itertuples():
        rebuilt[r.layer, r.head, r.query, r.key] = r.weight
    torch.testing.assert_close(rebuilt, torch.stack([a[0] for a in ref]).float(), atol=1e-6, rtol=0)
    top = attention_flow(model, prompt)  # the defaults: a sparse graph the plot draws
    assert 0 < len(top) < len(edges) and (top["key"] <= top["query"]).all()
    fig = plot_flow(top, NUMBER_EXAMPLE, hop_chain("number", NUMBER_EXAMPLE))
    assert isinstance(fig, matplotlib.figure.Figure)
    plt.close("all")
