"""``posym llm heads``: LLM prompt sets with exact token blocks, block scores of
every head of tiny random GPT-J / Llama (GQA) / GPT-NeoX (partial rotary) / Gemma-3 (per-layer RoPE) /
SmolLM3 (a NoPE layer) models, fast == reference,
frequency use, summaries, the plane figure and the CLI verb."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import (
    GPTJConfig,
    GPTJForCausalLM,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from posym.cli import main
from posym.errors import PosymError
from posym.heads.frequencies import frequency_use_array
from posym.heads.llm_heads import (
    GROUP_COLUMNS,
    SUMMARY_COLUMNS,
    TABLE_COLUMNS,
    _full_pass,
    group_medians,
    layer_medians,
    llm_heads,
    parse_prompt_sets,
    summarize_llm_heads,
)
from posym.tasks.llm_prompts import (
    ATTRIBUTES,
    ENTITIES,
    binding_prompts,
    build_prompts,
    group_prompts,
    make_binding_sample,
    onehop_prompts,
    single_token_words,
    tokenize_with_spans,
)
from posym.heads.scores import (
    scores_blocks_fast,
    scores_blocks_reference,
    swap_attention,
)
from posym.tasks.prompts import make_sample, solve_sequence
from posym.model.adapters import get_adapter
from posym.report.llm_heads_figures import plot_llm_heads_layers, plot_llm_heads_plane
from head_builders import sharpen_qk
from family_models import build_family
from tiny_tokenizer import word_tokenizer

# The tiny tokenizer knows only some of the word lists' words: the single-token filter must drop the rest.
KNOWN_ENTITIES = ENTITIES[:10]
KNOWN_ATTRIBUTES = ATTRIBUTES[:8]


def _tokenizer():
    return word_tokenizer(["Each", "object", "has", "one", "colour", ".", "The", "is", "Input", "Output", ":",
                           *KNOWN_ENTITIES, *KNOWN_ATTRIBUTES], split_punctuation=True)


TOK = _tokenizer()
V = len(TOK)


def _boost(model, std=0.5):
    return sharpen_qk(model, std)


def _gptj():
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=V, n_positions=256, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_inner=64,
                     bos_token_id=2, eos_token_id=3, attn_implementation="eager")
    return _boost(GPTJForCausalLM(cfg).eval())


def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, attn_implementation="eager")
    return _boost(LlamaForCausalLM(cfg).eval())


def _neox():
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                        max_position_embeddings=256, rotary_pct=0.5, attn_implementation="eager")
    return _boost(GPTNeoXForCausalLM(cfg).eval())


FAMILIES = {"gptj": _gptj, "llama-gqa": _llama, "neox-partial": _neox,
            # per-layer RoPE (Gemma-3 local/global bases, windows) and a NoPE layer (SmolLM3)
            "gemma3-per-layer": lambda: build_family("gemma3_text", vocab_size=V, std=0.5),
            "smollm3-nope": lambda: build_family("smollm3", vocab_size=V, std=0.5)}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


# ------------------------------------------------------------------------------------------------
# prompts
# ------------------------------------------------------------------------------------------------
def test_single_token_filter_keeps_exactly_the_known_words():
    assert single_token_words(TOK, ENTITIES) == KNOWN_ENTITIES
    assert single_token_words(TOK, ATTRIBUTES) == KNOWN_ATTRIBUTES


def test_binding_prompts_deterministic_correct_and_exact_blocks():
    a = binding_prompts(TOK, 12, seed=3)
    b = binding_prompts(TOK, 12, seed=3)
    assert a == b
    assert binding_prompts(TOK, 12, seed=4) != a
    assert make_binding_sample(5, 3, 6, KNOWN_ENTITIES, KNOWN_ATTRIBUTES) == \
        make_binding_sample(5, 3, 6, KNOWN_ENTITIES, KNOWN_ATTRIBUTES)
    queried = []
    for p in a:
        # independent parse of the text: the answer is the attribute bound to the queried entity
        facts = re.findall(r"The (\w+) is (\w+)\.", p.text)
        query = re.search(r"The (\w+) is$", p.text).group(1)
        bound = dict(facts)
        assert len(facts) == 6 and len(bound) == 6 and len(set(bound.values())) == 6
        assert set(bound) <= set(KNOWN_ENTITIES) and set(bound.values()) <= set(KNOWN_ATTRIBUTES)
        assert p.answer == bound[query]
        queried.append([e for e, _ in facts].index(query))
        # one block per fact, all of equal token length, decoding to the fact, before the query
        assert len(p.blocks) == 6 and len({e - s for s, e in p.blocks}) == 1
        for (s, e), (ent, att) in zip(p.blocks, facts):
            assert TOK.convert_ids_to_tokens(list(p.input_ids[s:e])) == ["The", ent, "is", att, "."]
        assert p.blocks[-1][1] < len(p.input_ids) - 1
        assert p.answer_id == TOK.convert_tokens_to_ids(p.answer)
    assert queried == [i % 6 for i in range(12)]  # every fact position queried equally often
    assert len(group_prompts(a)) == 1  # one length / block layout: one batch


@pytest.mark.parametrize("task", ["number", "letter"])
def test_onehop_prompts_blocks_are_the_window(task):
    ps = onehop_prompts(TOK, task, 5, length=7, seed=2, n_examples=2)
    assert ps == onehop_prompts(TOK, task, 5, length=7, seed=2, n_examples=2)
    for i, p in enumerate(ps):
        sample = make_sample(task, 7, 2, i)
        assert p.answer == sample.answer == solve_sequence(sample.tokens)
        assert p.text.endswith(f"Input: {sample.sequence}\nOutput:")
        assert len(p.blocks) == 7
        window = [TOK.convert_ids_to_tokens(list(p.input_ids[s:e])) for s, e in p.blocks]
        assert window == [[w] for w in sample.tokens[:-1]]
        assert TOK.convert_ids_to_tokens(p.input_ids[p.blocks[-1][1]]) == sample.tokens[-1]  # the query item
        assert p.answer_id == TOK.convert_tokens_to_ids(p.answer)


def test_prompt_errors():
    with pytest.raises(PosymError, match="straddles"):
        tokenize_with_spans(TOK, "The apple is red", [(0, 2), (4, 9)])
    with pytest.raises(PosymError, match="unknown prompt set"):
        build_prompts(TOK, "bogus", 2)
    with pytest.raises(PosymError, match="single-token"):
        binding_prompts(TOK, 2, n_entities=9)  # only 8 known attributes
    with pytest.raises(PosymError, match="n must be"):
        binding_prompts(TOK, 0)
    with pytest.raises(PosymError, match="unknown prompt set"):
        parse_prompt_sets("binding,bogus")
    assert parse_prompt_sets("letter,binding") == ("binding", "letter")
    assert parse_prompt_sets("all") == ("binding", "number", "letter")


# ------------------------------------------------------------------------------------------------
# scores
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", list(FAMILIES))
def test_fast_block_scores_equal_reference_on_llm_prompts(family):
    # q/k std 0.3 as in test_scores_exact.py: sharp heads (max block mass > 0.9) whose scores stay well
    # conditioned; with tau = 1e-4 the swap weights exp(|d_a - d_b| / tau) multiply the float32 rounding
    # of the reference's attention (~1e-7) by 1e4, so much sharper random heads can differ by ~1e-4
    # in s_POS although the raw attention before/after every swap agrees to ~1e-6.
    model = _boost(FAMILIES[family](), std=0.3)
    prompts = (binding_prompts(TOK, 3) + onehop_prompts(TOK, "number", 2, length=6, n_examples=1)
               + onehop_prompts(TOK, "letter", 2, length=6, n_examples=1))
    n_groups, d_max = 0, 0.0
    for (_, blocks), idx in group_prompts(prompts).items():
        ids = torch.tensor([prompts[i].input_ids for i in idx])
        raw_f = swap_attention(model, ids, blocks=list(blocks))
        raw_r = swap_attention(model, ids, blocks=list(blocks), method="reference")
        for name in ("d", "dp_i", "dp_j", "entropy"):
            assert np.abs(getattr(raw_f, name) - getattr(raw_r, name)).max() <= 1e-5, name
        fast = scores_blocks_fast(model, ids, blocks=list(blocks))
        ref = scores_blocks_reference(model, ids, blocks=list(blocks))
        for name in ("s_pos", "s_sym", "entropy"):
            assert np.abs(getattr(fast, name) - getattr(ref, name)).max() <= 1e-5, name
        d_max = max(d_max, raw_f.d.max())
        n_groups += 1
    assert n_groups >= 3 and d_max > 0.5  # all three sets, attention far from uniform


@pytest.mark.parametrize("family", list(FAMILIES))
def test_llm_heads_table_every_head(family):
    model = FAMILIES[family]()
    ad = get_adapter(model)
    table = llm_heads(model, tokenizer=TOK, n=4, length=6, n_examples=1, batch_size=3, progress=False)
    assert list(table.columns) == TABLE_COLUMNS
    L, H = ad.n_layers, ad.n_heads
    assert len(table) == 3 * L * H
    for s, g in table.groupby("prompt_set"):
        assert sorted(zip(g["layer"], g["head"])) == [(l, h) for l in range(L) for h in range(H)]
        assert (g["n_prompts"] == 4).all()
    for col in ("s_pos", "s_sym", "entropy", "block_mass"):
        v = table[col].to_numpy()
        assert np.isfinite(v).all() and v.min() >= 0 and v.max() <= 1 + 1e-9, col
    K = ad.rotary_dim // 2
    assert table["weighted_id"].between(1, K).all() and table["dominant_id"].between(1, K).all()
    partial = ad.rotary_dim < ad.head_dim
    assert ((table["nonrotary_share"] > 0) if partial else (table["nonrotary_share"] == 0)).all()
    assert (table["kv_head"] == table["head"] // (ad.n_heads // ad.n_kv_heads)).all()
    # layer type from the adapter's sliding window (Gemma-3: config.layer_types), relative depth
    types = ["sliding", "global", "sliding", "global"] if family == "gemma3-per-layer" else ["global"] * L
    assert list(table.drop_duplicates("layer")["layer_type"]) == types * 1
    np.testing.assert_allclose(table["depth"], table["layer"] / (L - 1))
    assert not table["centred"].any() and table.attrs["meta"]["centred"] is False
    assert table.attrs["meta"]["layer_types"] == types
    # the binding rows are the prompt means of the block scores (one batch of 4 equal-length prompts)
    bp = binding_prompts(TOK, 4)
    ref = scores_blocks_fast(model, torch.tensor([p.input_ids for p in bp]), blocks=list(bp[0].blocks))
    b = table[table["prompt_set"] == "binding"].sort_values(["layer", "head"])
    np.testing.assert_allclose(b["s_pos"], ref.s_pos[..., 0].mean(0).ravel(), atol=1e-12)
    np.testing.assert_allclose(b["s_sym"], ref.s_sym[..., 0].mean(0).ravel(), atol=1e-12)
    np.testing.assert_allclose(b["entropy"], ref.entropy.mean(0).ravel(), atol=1e-12)
    sw = swap_attention(model, torch.tensor([p.input_ids for p in bp]), blocks=list(bp[0].blocks))
    np.testing.assert_allclose(b["block_mass"], sw.d.sum(-1).mean(0).ravel(), atol=1e-12)
    assert (b["block_mass"] < 1).all()  # the prefix, the query's statement and the query itself get the rest
    acc = table.attrs["accuracy"]
    assert set(acc) == {"binding", "number", "letter"} and all(0 <= a <= 1 for a in acc.values())


def test_full_pass_matches_frequency_use_and_greedy_token():
    model = _llama()
    ad = get_adapter(model)
    ps = binding_prompts(TOK, 3)
    ids = torch.tensor([p.input_ids for p in ps])
    use, pred = _full_pass(ad, ids)
    np.testing.assert_allclose(use, frequency_use_array(model, ids), rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        assert (pred == model(ids).logits[:, -1].argmax(-1).numpy()).all()


def test_summary_halves_and_pearson():
    rows = []
    for layer in range(4):
        for head in range(3):
            sp = 0.9 - 0.2 * layer + 0.01 * head
            rows.append({"prompt_set": "binding", "layer": layer, "head": head, "s_pos": sp, "s_sym": 1 - sp,
                         "n_prompts": 5})
    t = pd.DataFrame(rows)
    t2 = t.assign(prompt_set="number", s_sym=t["s_pos"])
    both = pd.concat([t, t2], ignore_index=True)
    s = summarize_llm_heads(both, accuracy={"binding": 0.5, "number": 1.0}).set_index("prompt_set")
    assert list(s.index) == ["binding", "number", "mean_of_sets"]
    assert s.loc["binding", "first_half"] == "0-1" and s.loc["binding", "second_half"] == "2-3"
    assert s.loc["binding", "median_s_pos_first"] == pytest.approx(np.median([0.9, 0.91, 0.92, 0.7, 0.71, 0.72]))
    assert s.loc["binding", "median_s_sym_second"] == pytest.approx(1 - np.median([0.5, 0.51, 0.52, 0.3, 0.31, 0.32]))
    assert s.loc["binding", "pearson_r"] == pytest.approx(-1.0)
    assert s.loc["number", "pearson_r"] == pytest.approx(1.0)
    assert s.loc["mean_of_sets", "accuracy"] == pytest.approx(0.75)
    assert np.isnan(s.loc["mean_of_sets", "pearson_r"])  # s_sym is the constant 0.5 after averaging
    med = layer_medians(both)
    assert len(med) == 8 and med.loc[0, "s_pos"] == pytest.approx(0.91)


def test_llm_heads_centred_are_the_centred_block_scores():
    model = _llama()
    table = llm_heads(model, tokenizer=TOK, prompts="binding", n=4, centred=True, threads=1, progress=False)
    assert table["centred"].all() and table.attrs["meta"]["centred"] is True
    assert table.attrs["meta"]["torch_threads"] == 1
    bp = binding_prompts(TOK, 4)
    ids = torch.tensor([p.input_ids for p in bp])
    ref = scores_blocks_fast(model, ids, blocks=list(bp[0].blocks), centred=True)
    plain = scores_blocks_fast(model, ids, blocks=list(bp[0].blocks))
    np.testing.assert_allclose(table["s_pos"], ref.s_pos[..., 0].mean(0).ravel(), atol=1e-12)
    np.testing.assert_allclose(table["s_sym"], ref.s_sym[..., 0].mean(0).ravel(), atol=1e-12)
    assert np.abs(ref.s_pos - plain.s_pos).max() > 0.01
    with pytest.raises(PosymError, match="centred must be"):
        llm_heads(model, tokenizer=TOK, prompts="binding", n=2, centred=1, progress=False)


def _typed_table():
    """6 layers x 2 heads, layers 2 and 5 global; s_pos = 1 - layer/10 + head/100, s_sym = layer/10,
    block_mass = 0.01 for head 0 of layers 0-2 (filtered by min_mass 0.05), else 0.5."""
    rows = []
    for layer in range(6):
        for head in range(2):
            rows.append({"prompt_set": "binding", "layer": layer, "head": head,
                         "layer_type": "global" if layer in (2, 5) else "sliding",
                         "s_pos": 1 - layer / 10 + head / 100, "s_sym": layer / 10,
                         "block_mass": 0.01 if head == 0 and layer < 3 else 0.5, "n_prompts": 4})
    return pd.DataFrame(rows)


def test_summary_by_layer_type_and_min_mass():
    t = _typed_table()
    s = summarize_llm_heads(t).iloc[0]
    assert list(summarize_llm_heads(t).columns) == SUMMARY_COLUMNS
    assert s["n_heads"] == 12 and s["n_excluded"] == 0 and s["min_mass"] == 0
    assert (s["first_half"], s["second_half"]) == ("0-2", "3-5")
    assert (s["n_heads_sliding"], s["n_heads_global"]) == (8, 4)
    assert s["median_s_pos_global"] == pytest.approx(np.median([0.8, 0.81, 0.5, 0.51]))
    assert s["median_s_sym_sliding"] == pytest.approx(np.median([0, 0.1, 0.3, 0.4] * 2))
    f = summarize_llm_heads(t, min_mass=0.05).iloc[0]
    assert f["n_excluded"] == 3 and f["n_heads"] == 12 and f["min_mass"] == 0.05 and f["n_heads_sliding"] == 8
    assert f["median_s_pos_first"] == pytest.approx(np.median([1.01, 0.91, 0.81]))
    assert f["median_s_pos_global"] == pytest.approx(np.median([0.81, 0.5, 0.51]))
    kept = t[t["block_mass"] >= 0.05]
    assert f["pearson_r"] == pytest.approx(np.corrcoef(kept["s_pos"], kept["s_sym"])[0, 1])
    # an old table without layer_type: every layer global
    old = summarize_llm_heads(t.drop(columns="layer_type")).iloc[0]
    assert old["n_heads_global"] == 12 and np.isnan(old["median_s_pos_sliding"])
    with pytest.raises(PosymError, match="min_mass must be"):
        summarize_llm_heads(t, min_mass=1.5)
    with pytest.raises(PosymError, match="block_mass column"):
        summarize_llm_heads(t.drop(columns="block_mass"), min_mass=0.1)


def test_group_medians_layer_type_by_depth():
    t = _typed_table()
    g = group_medians(t, min_mass=0.05).set_index(["layer_type", "depth"])
    assert list(group_medians(t).columns) == GROUP_COLUMNS
    assert set(g.index.get_level_values(0)) == {"all", "sliding", "global"}
    assert len(g) == 3 * 6
    row = g.loc[("global", "third 2")]  # thirds 0-1, 2-3, 4-5: global layer 2 only
    assert row["layers"] == "2" and row["n_heads"] == 2 and row["n_excluded"] == 1
    assert row["median_s_pos"] == pytest.approx(0.81)
    assert g.loc[("sliding", "half 2"), "layers"] == "3-4"
    assert g.loc[("all", "all"), "layers"] == "0-5" and g.loc[("all", "all"), "n_excluded"] == 3
    assert g.loc[("sliding", "all"), "layers"] == "0-1,3-4"
    assert g.loc[("all", "half 1"), "median_s_sym"] == pytest.approx(np.median([0.0, 0.1, 0.2]))
    assert np.isnan(g.loc[("global", "third 1"), "median_s_pos"]) and g.loc[("global", "third 1"), "n_heads"] == 0
    # one layer type: only the "all" rows
    one = group_medians(t.assign(layer_type="global"))
    assert set(one["layer_type"]) == {"all"} and len(one) == 6
    med = layer_medians(t, min_mass=0.05).set_index("layer")
    assert list(med["n_excluded"]) == [1, 1, 1, 0, 0, 0] and (med["n_heads"] == 2).all()
    assert med.loc[0, "s_pos"] == pytest.approx(1.01) and med.loc[2, "layer_type"] == "global"


def test_layers_figure_marks_global_layers():
    import matplotlib.pyplot as plt

    med = layer_medians(_typed_table())
    fig = plot_llm_heads_layers(pd.concat([med, med.assign(prompt_set="number")]))
    axes = [a for a in fig.axes]
    assert len(axes) == 2 and len(axes[0].patches) == 2  # layers 2 and 5 shaded
    assert axes[0].get_ylim()[0] > -0.1
    plt.close(fig)
    fig = plot_llm_heads_layers(med.assign(s_sym=-med["s_sym"], layer_type="global"))
    assert len(fig.axes[0].patches) == 0 and fig.axes[0].get_ylim()[0] < -1  # centred range, no shading
    plt.close(fig)
    with pytest.raises(PosymError, match="lacks column"):
        plot_llm_heads_layers(med.drop(columns="s_pos"))


def test_plane_figure_axes():
    import matplotlib.pyplot as plt

    t = pd.DataFrame({"prompt_set": ["binding"] * 4 + ["number"] * 4, "layer": [0, 0, 1, 1] * 2,
                          "s_pos": np.linspace(0, 1, 8), "s_sym": np.linspace(1, 0, 8)})
    fig = plot_llm_heads_plane(t)
    assert len([a for a in fig.axes if a.get_label() != "<colorbar>"]) == 2
    assert "r = -1.00" in fig.axes[0].get_title()
    plt.close(fig)
    fig, ax = plt.subplots()
    plot_llm_heads_plane(t[t["prompt_set"] == "number"], ax=ax)
    with pytest.raises(PosymError, match="single prompt_set"):
        plot_llm_heads_plane(t, ax=ax)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def test_cli_llm_heads_end_to_end(tmp_path, capsys, monkeypatch):
    """Default output folder runs/llm-heads/<model>/ (printed first), default --min-mass 0.01, a narrow
    printed summary without the (NaN) sliding columns of a model without sliding layers, the warning
    that the model does not solve the prompts, and the pointer to the reading of the scores."""
    import json

    from posym.heads.llm_heads import DEFAULT_MIN_MASS
    from posym.reading import READ_POINTER

    d = tmp_path / "models" / "tiny-llama"
    _llama().save_pretrained(d)
    TOK.save_pretrained(d)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["llm", "heads", "--model", str(d), "--n", "3", "--length", "5", "--n-examples", "1",
               "--batch-size", "2"])
    assert rc == 0
    cap = capsys.readouterr()
    printed = cap.out
    out = tmp_path / "runs" / "llm-heads" / "tiny-llama"
    assert cap.err.startswith(f"llm heads: output folder {Path('runs/llm-heads/tiny-llama')}{os.sep}\n")
    assert f"wrote 15 files to {Path('runs/llm-heads/tiny-llama')}{os.sep}" in printed
    assert printed.rstrip().endswith(READ_POINTER)
    assert "s_pos 1st" in printed and "sliding" not in printed and "NaN" not in printed
    assert "warning: accuracy <= chance (binding, number, letter)" in printed
    wide = [line for line in printed.splitlines() if len(line) > 100 and str(d) not in line]
    assert not wide, wide
    meta = json.loads((out / "llm_heads.json").read_text())
    assert meta["min_mass"] == DEFAULT_MIN_MASS == 0.01 and meta["warnings"] and set(meta["chance"]) == {
        "binding", "number", "letter"}
    table = pd.read_csv(out / "llm_heads.csv")
    assert len(table) == 3 * 2 * 4 and set(table["prompt_set"]) == {"binding", "number", "letter"}
    summary = pd.read_csv(out / "llm_heads_summary.csv")
    assert list(summary["prompt_set"]) == ["binding", "number", "letter", "mean_of_sets"]
    use = pd.read_csv(out / "llm_heads_freq_use.csv")
    assert len(use) == 3 * 2 * 4 * 4  # (set, layer, head, frequency): head_dim 8, full rotary -> 4 pairs
    for f in ("llm_heads_layers.csv", "llm_heads.json", "figures/llm_heads_plane.png", "figures/llm_heads_plane.pdf"):
        assert (out / f).stat().st_size > 0, f


def test_cli_llm_heads_gemma3_centred_min_mass(tmp_path, capsys):
    import json

    d = tmp_path / "tiny-gemma3"
    model = FAMILIES["gemma3-per-layer"]()
    model.save_pretrained(d)
    TOK.save_pretrained(d)
    out = tmp_path / "heads"
    rc = main(["llm", "heads", "--model", str(d), "--prompts", "binding,number", "--n", "3", "--length", "5",
               "--n-examples", "1", "--centred", "--min-mass", "0.05", "--threads", "1", "--out", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "(centred)" in printed and "heads with block_mass >= 0.05" in printed and "layer_type" in printed
    table = pd.read_csv(out / "llm_heads.csv")
    assert table["centred"].all() and list(table.drop_duplicates("layer")["layer_type"]) == [
        "sliding", "global", "sliding", "global"]
    meta = json.loads((out / "llm_heads.json").read_text())
    assert meta["centred"] is True and meta["min_mass"] == 0.05 and meta["torch_threads"] == 1
    summary = pd.read_csv(out / "llm_heads_summary.csv").set_index("prompt_set")
    for s, g in table.groupby("prompt_set"):
        assert summary.loc[s, "n_excluded"] == int((g["block_mass"] < 0.05).sum())
    groups = pd.read_csv(out / "llm_heads_groups.csv")
    assert set(groups["layer_type"]) == {"all", "sliding", "global"}
    assert set(groups["prompt_set"]) == {"binding", "number", "mean_of_sets"}
    layers = pd.read_csv(out / "llm_heads_layers.csv")
    assert {"layer_type", "depth", "n_heads", "n_excluded"} <= set(layers.columns)
    for f in ("figures/llm_heads_layers.png", "figures/llm_heads_layers.pdf"):
        assert (out / f).stat().st_size > 0, f


def test_cli_llm_heads_bad_min_mass_one_line_error(tmp_path, capsys):
    rc = main(["llm", "heads", "--model", str(tmp_path / "nope"), "--min-mass", "2", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "min_mass must be a number in [0, 1]" in err
    assert not (tmp_path / "o").exists()


def test_cli_llm_heads_bad_prompts_one_line_error(tmp_path, capsys):
    rc = main(["llm", "heads", "--model", str(tmp_path / "nope"), "--prompts", "bogus", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("posym: error: llm heads: argument --prompts: unknown 'bogus'")
    assert not (tmp_path / "llm_heads.csv").exists()


# ------------------------------------------------------------------------------------------------
# how to read the scores: one text, shown where users look
# ------------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def _quoted_reading(path: Path) -> str:
    """The ```text block of ``path`` that starts with the reading's first words."""
    text = path.read_text(encoding="utf-8")
    start = text.index("```text\nHow to read the scores") + len("```text\n")
    return text[start:text.index("\n```", start)]


@pytest.mark.parametrize("doc", ["README.md", "docs/llm.md"])
def test_docs_quote_how_to_read_verbatim(doc):
    from posym.reading import HOW_TO_READ

    assert _quoted_reading(ROOT / doc) == HOW_TO_READ


def test_help_of_scores_and_llm_heads_shows_how_to_read(capsys):
    from posym.reading import HEADS_RECIPE, HOW_TO_READ, MIN_MASS
    from posym.verbs.llm import HEADS_OUT_ROOT

    assert main(["scores", "--help"]) == 0
    assert HOW_TO_READ in capsys.readouterr().out  # verbatim: line breaks kept
    assert main(["llm", "heads", "--help"]) == 0
    text = capsys.readouterr().out
    assert HOW_TO_READ in text and HEADS_RECIPE in text and f"{HEADS_OUT_ROOT}/<model>/" in text
    assert f"default {MIN_MASS:g}; 0 keeps every head" in " ".join(text.split())


def test_parser_with_the_reading_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys; from posym.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


def test_scores_summary_points_to_the_reading(tmp_path, capsys):
    from posym.reading import READ_POINTER

    d = tmp_path / "llama"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(d)
    assert main(["scores", "--model", str(d), "--task", "number", "--n", "4", "--out", str(tmp_path / "s.csv")]) == 0
    assert capsys.readouterr().out.rstrip().endswith(READ_POINTER)


def test_reading_warnings_low_block_mass_and_chance():
    from posym.heads.llm_heads import LOW_BLOCK_MASS, chance_level, reading_warnings

    t = pd.DataFrame({"prompt_set": ["binding"] * 3 + ["number"] * 3,
                      "block_mass": [0.5, 0.4, 0.3, 0.01, LOW_BLOCK_MASS - 0.001, 0.2]})
    t.attrs.update(accuracy={"binding": 0.5, "number": 0.1}, chance={"binding": 1 / 6, "number": 1 / 12})
    assert reading_warnings(t) == ["warning: median block_mass < 5% (number 4.9%): those scores rest on little attention"]
    t.attrs["accuracy"] = {"binding": 0.0, "number": 1 / 12}
    w = reading_warnings(t)
    assert w[1] == "warning: accuracy <= chance (binding, number): heads of a model that fails these prompts"
    t["block_mass"] = 0.5
    t.attrs["accuracy"] = {"binding": 0.9, "number": float("nan")}
    assert reading_warnings(t) == []
    prompts = build_prompts(TOK, "binding", 4, 0, n_entities=4)
    assert chance_level(prompts) == pytest.approx(0.25)


def test_where_a_fresh_model_starts_as_the_reading_says():
    """HOW_TO_READ's last point: a fresh Llama (logits ≈ 0) scores ≈ (1, 1); a fresh Qwen3, whose QK-norm
    gives O(1) logits, starts elsewhere (docs/llm.md: ≈ (0.26, 0.94), entropy 0.87)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from posym.heads.tracking import score_table
    from posym.tasks import make_split

    ids = make_split("number", "val", n=32).input_ids
    common = dict(vocab_size=137, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    llama = score_table(LlamaForCausalLM(LlamaConfig(**common)).eval(), ids)
    torch.manual_seed(0)
    qwen = score_table(Qwen3ForCausalLM(Qwen3Config(**common)).eval(), ids)
    assert llama["s_pos"].mean() > 0.99 and llama["s_sym"].mean() > 0.99 and llama["entropy"].mean() > 0.999
    assert qwen["s_pos"].mean() < 0.5 and qwen["s_sym"].mean() > 0.9 and qwen["entropy"].mean() < 0.95
