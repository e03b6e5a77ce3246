"""``--intervene`` in ``posym llm eval`` (both protocols) and ``posym llm heads`` on a tiny random
Llama (``tiny_dirs`` in conftest.py): rows per intervention with the canonical string, ``none`` rows
equal to the plain call's, the answers cache keyed on the intervention (never reused across
interventions; old records without the key are ``none``), intervened forwards cache-free."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.lengthgen.llm_eval import contrast_markdown, intervention_contrast, load_cache, normalised_rank
from posym.verbs.llm import llm_eval, llm_heads

GRID = dict(lengths=[4, 8], runs=1, n=2, progress=False, threads=1)
TEMP = "temperature:beta=1,n_train=17,floor=1"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _plain_records(out):
    return {(r["task"], r["length"], r["run"], r["index"]): r for r in load_cache(out / "answers.jsonl").values()}


@pytest.mark.parametrize("protocol", ["choice", "generate"])
def test_llm_eval_two_interventions_none_rows_equal_plain_and_cache_keyed(protocol, tiny_dirs, tmp_path):
    model = str(tiny_dirs["chat"])
    plain = llm_eval(model, out=tmp_path / "plain", protocol=protocol, **GRID).data["result"]
    assert (plain.table["intervention"] == "none").all() and plain.table.columns[-1] == "intervention"
    out = tmp_path / "iv"
    first = llm_eval(model, out=out, protocol=protocol, intervene=["none"], **GRID).data["result"]
    # another intervention into the same folder: nothing of the none answers is reused for it
    res = llm_eval(model, out=out, protocol=protocol, intervene=["none", "temperature:beta=1"], **GRID).data["result"]
    assert first.n_new == 8 and res.n_cached == 8 and res.n_new == 8
    assert list(dict.fromkeys(res.table["intervention"])) == ["none", TEMP]
    none = res.table[res.table["intervention"] == "none"].reset_index(drop=True)
    pd.testing.assert_frame_equal(none, plain.table, check_exact=True)
    recs = list(load_cache(out / "answers.jsonl").values())
    assert sorted(r["intervention"] for r in recs) == ["none"] * 8 + [TEMP] * 8
    plain_recs = _plain_records(tmp_path / "plain")
    for r in recs:
        if r["intervention"] == "none":  # the none answers are the plain call's
            p = plain_recs[(r["task"], r["length"], r["run"], r["index"])]
            assert r["prediction"] == p["prediction"] and r.get("logprobs") == p.get("logprobs")
    # a rerun asks nothing; the tables and llm_table.md carry both interventions
    again = llm_eval(model, out=out, protocol=protocol, intervene=["temperature:beta=1", "none"], **GRID)
    assert again.data["result"].n_new == 0
    assert f"| number · {TEMP} |" in (out / "llm_table.md").read_text()
    csv = pd.read_csv(out / "llm_runs.csv")
    assert set(csv["intervention"]) == {"none", TEMP} and list(csv.columns[-3:]) == ["model", "protocol",
                                                                                      "intervention"]
    meta = json.loads((out / "llm_eval.json").read_text())
    assert meta["interventions"] == [TEMP, "none"] and meta["full_forwards"] == []  # the temperature holds under a cache
    # choice: the paired contrast table against none on the same prompts; generate has none
    assert (out / "llm_interventions.csv").is_file() == (protocol == "choice")
    if protocol == "choice":
        c = pd.read_csv(out / "llm_interventions.csv")
        assert set(c["intervention"]) == {TEMP} and (c.loc[c["length"] == "all", "n_pairs"] == 4).all()
        assert (out / "llm_interventions.md").is_file()
        llm_eval(model, out=out, protocol=protocol, intervene=["none"], **GRID)  # one intervention: no contrast left
        assert not (out / "llm_interventions.csv").exists() and not (out / "llm_interventions.md").exists()


def test_identity_intervention_through_the_cache_free_path_answers_as_none(tiny_dirs, tmp_path):
    """interpolate:factor=1 is an exact no-op, so its cache-free (reference) log-probs match the cached none ones."""
    res = llm_eval(str(tiny_dirs["chat"]), out=tmp_path / "o", protocol="choice",
                   intervene=["none", "interpolate:factor=1"], **GRID).data["result"]
    assert json.loads((tmp_path / "o" / "llm_eval.json").read_text())["full_forwards"] == ["interpolate:factor=1"]
    recs = list(load_cache(tmp_path / "o" / "answers.jsonl").values())
    by = {}
    for r in recs:
        by.setdefault((r["task"], r["length"], r["index"]), {})[r["intervention"]] = r
    assert len(by) == 8
    for pair in by.values():
        a, b = pair["none"], pair["interpolate:factor=1"]
        assert a["prediction"] == b["prediction"]
        assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-4)
    assert res.n_new == 16


def test_records_without_an_intervention_are_none(tiny_dirs, tmp_path):
    out = tmp_path / "old"
    llm_eval(str(tiny_dirs["chat"]), out=out, protocol="choice", **GRID)
    lines = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    (out / "answers.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "intervention"}) + "\n"
                                               for r in lines))
    again = llm_eval(str(tiny_dirs["chat"]), out=out, protocol="choice", **GRID).data["result"]
    assert again.n_new == 0 and again.n_cached == 8


def test_llm_eval_bad_specs_fail_before_the_model_loads(tiny_dirs, tmp_path):
    for iv, layers, needle in ((["bogus"], None, "unknown intervention"),
                               (["none"], [0], "--layers restricts an intervention"),
                               (["temperature:beta=1"], [9], "layer")):
        with pytest.raises(PosymError, match=needle):
            llm_eval(str(tiny_dirs["chat"]), out=tmp_path / "x", protocol="choice", intervene=iv, layers=layers,
                     **GRID)
    assert not (tmp_path / "x" / "answers.jsonl").exists()
    with pytest.raises(PosymError, match="API model cannot be intervened"):
        llm_eval(api_base="http://127.0.0.1:9/v1", api_model="m", out=tmp_path / "y", intervene=["ntk:kappa=2"],
                 **GRID)


def test_llm_heads_two_interventions_none_rows_equal_plain(tiny_dirs, tmp_path):
    kw = dict(prompts="number", n=2, length=5, n_examples=1, batch_size=2, progress=False)
    model = str(tiny_dirs["chat"])
    plain = llm_heads(model, out=tmp_path / "plain", **kw)
    both = llm_heads(model, out=tmp_path / "both", intervene=["none", "freq-mask:keep=1+2"], layers=[0], **kw)
    for name in ("llm_heads.csv", "llm_heads_freq_use.csv", "llm_heads_layers.csv", "llm_heads_summary.csv",
                 "llm_heads_groups.csv"):
        a, b = pd.read_csv(tmp_path / "plain" / name), pd.read_csv(tmp_path / "both" / name)
        assert list(dict.fromkeys(b["intervention"])) == ["none", "freq-mask:keep=1+2,layers=0"], name
        pd.testing.assert_frame_equal(b[b["intervention"] == "none"].reset_index(drop=True), a, check_exact=True)
    use = pd.read_csv(tmp_path / "both" / "llm_heads_freq_use.csv")
    masked = use[(use["intervention"] != "none") & (use["layer"] == 0)]
    assert (masked.loc[masked["freq_id"] > 2, "use"] == 0.0).all() and (masked["use"] > 0).any()
    assert (plain.table["intervention"] == "none").all() and len(both.table) == 2 * len(plain.table)
    meta = json.loads((tmp_path / "both" / "llm_heads.json").read_text())
    assert meta["intervention"] == ["none", "freq-mask:keep=1+2,layers=0"]


@pytest.mark.parametrize("spec", ["none", "temperature:beta=1", "freq-mask:keep=1+2"])
def test_cache_free_choice_scores_equal_the_reference(spec, tiny_dirs):
    """The scorer used under an intervention (no KV cache, no padding; prefixes batched by length) gives
    the per-candidate full-forward reference's log-probs, with and without an intervention applied."""
    from posym.interventions import intervened
    from posym.lengthgen.hf_llm import HFChoice
    from posym.model.llm import load_llm
    from posym.tasks.prompts import build_messages, candidates, make_sample

    lm, tok = load_llm(str(tiny_dirs["chat"]), dtype="float32")
    samples = [make_sample(t, 8, 0, i) for t in ("number", "letter") for i in range(2)]
    # candidates of 1 to 3 tokens; "a b c" and "a b d" share their prefix row ("a b"), rows of two lengths
    prompts = [build_messages(s, 1) for s in samples]
    cands = [candidates(s) + ["a b c", "a b d", "a b", "x y"] for s in samples]
    scorer = HFChoice(lm, tok, cache=False)
    assert {len(c) for c in scorer.encode(prompts[0], cands[0])[1]} == {1, 2, 3}
    with intervened(lm, spec):
        got, ref = scorer(prompts, cands), scorer.reference(prompts, cands)
        chunked = HFChoice(lm, tok, cache=False, max_cache_bytes=1)(prompts, cands)  # one row per forward
    for g, r, c in zip(got, ref, chunked):
        assert g == pytest.approx(r, abs=1e-4) and g == pytest.approx(c, abs=1e-5) and len(set(g)) > 1


def test_kv_cache_safe_interventions_use_the_cached_path_and_agree_with_full_forwards(tiny_dirs, tmp_path):
    """rope-base / ntk / freq-mask act at absolute positions and the temperature reads each query's key count
    from the padding mask and the cache: measured with the KV cache, their log-probs equal the cache-free
    scorer's under the same intervention; interpolate reads the forward's length and is never measured with
    a cache."""
    from posym.interventions import holds_under_kv_cache, intervened, parse_intervention
    from posym.lengthgen.hf_llm import HFChoice
    from posym.model.llm import load_llm
    from posym.tasks.prompts import build_messages, candidates, make_sample

    assert [holds_under_kv_cache(parse_intervention(t)) for t in
            ("none", "ntk:kappa=2", "rope-base:theta=500", "freq-mask:keep=1", "temperature:beta=0",
             "interpolate:factor=2", "interpolate:n_train=17")] == [True] * 5 + [False] * 2
    ivs = ["ntk:kappa=2", "freq-mask:keep=1+2", "temperature:beta=1,n_train=5", "temperature:beta=1,n_train=5,heads=L0H1"]
    res = llm_eval(str(tiny_dirs["chat"]), out=tmp_path / "o", protocol="choice", intervene=ivs, **GRID)
    assert json.loads((tmp_path / "o" / "llm_eval.json").read_text())["full_forwards"] == []
    recs = list(load_cache(tmp_path / "o" / "answers.jsonl").values())
    lm, tok = load_llm(str(tiny_dirs["chat"]), dtype="float32")
    for iv in ivs:
        mine = [r for r in recs if r["intervention"] == iv]
        samples = [make_sample(r["task"], r["length"], r["run"], r["index"]) for r in mine]
        with intervened(lm, iv):
            full = HFChoice(lm, tok, cache=False)([build_messages(x, 3) for x in samples],
                                                   [candidates(x) for x in samples])
        for r, f in zip(mine, full):
            assert list(r["logprobs"].values()) == pytest.approx(f, abs=1e-4)
    assert res.data["result"].n_new == 32


def test_temperature_generates_the_same_answers_with_a_cache_and_left_padding(tiny_dirs):
    """generate with its KV cache and left-padded batches under a temperature answers as the cache-free,
    one-prompt-at-a-time decoding does, and each step's scores agree (the temperature reads the mask)."""
    from posym.interventions import intervened
    from posym.lengthgen.hf_llm import HFChat, format_prompts
    from posym.model.llm import load_llm
    from posym.tasks.prompts import build_messages, make_sample

    lm, tok = load_llm(str(tiny_dirs["chat"]), dtype="float32")
    prompts = [build_messages(make_sample(t, n, 0, i), 1) for t in ("number", "letter") for n, i in ((4, 0), (9, 1))]
    spec = "temperature:beta=1,n_train=5,heads=L0H1+L1H0"
    with intervened(lm, spec):
        assert HFChat(lm, tok, batch_size=4)(prompts) == HFChat(lm, tok, batch_size=1, cache=False)(prompts)
    enc = tok(format_prompts(tok, prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    assert (enc["attention_mask"][:, 0] == 0).any()  # prompts of different lengths: left padding is exercised
    kw = dict(max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True,
              pad_token_id=tok.pad_token_id)

    def scores(ids, mask, **extra):
        with torch.no_grad():
            return torch.stack(lm.generate(input_ids=ids, attention_mask=mask, **kw, **extra).scores, dim=1)

    plain = scores(enc["input_ids"], enc["attention_mask"])
    with intervened(lm, spec):
        batched = scores(enc["input_ids"], enc["attention_mask"])
        for r in range(len(prompts)):
            keep = enc["attention_mask"][r] == 1
            ids = enc["input_ids"][r, keep][None]
            alone = scores(ids, torch.ones_like(ids), use_cache=False)
            assert torch.allclose(batched[r], alone[0], atol=1e-4), r
    assert not torch.allclose(batched, plain, atol=1e-3)  # the temperature acts


def test_cache_free_prefix_forwards_compute_only_the_scored_logits(tiny_dirs):
    """The cache-free scorer's prefix forwards ask the model for the logits of the continuation's
    positions only (``logits_to_keep``), not for every prompt position, and score as before."""
    from posym.lengthgen.hf_llm import HFChoice
    from posym.model.llm import load_llm
    from posym.tasks.prompts import build_messages, candidates, make_sample

    lm, tok = load_llm(str(tiny_dirs["chat"]), dtype="float32")
    sample = make_sample("letter", 8, 0, 0)
    prompts, cands = [build_messages(sample, 1)], [candidates(sample) + ["a b c", "x y"]]
    seen: list[tuple[int, int]] = []
    handle = lm.register_forward_hook(lambda m, args, kwargs, out: seen.append(
        (kwargs["input_ids"].shape[1], out.logits.shape[1])), with_kwargs=True)
    try:
        got = HFChoice(lm, tok, cache=False)(prompts, cands)
    finally:
        handle.remove()
    P = len(HFChoice(lm, tok).encode(prompts[0], cands[0])[0])
    prefix = [(T, L) for T, L in seen if T > P]
    assert prefix and all(L == T - P for T, L in prefix), seen
    assert got[0] == pytest.approx(HFChoice(lm, tok, cache=False).reference(prompts, cands)[0], abs=1e-4)


def test_intervention_contrast_pairs_the_same_prompts():
    def rec(iv, length, index, rank, n_cand, correct, digest=None):
        return {"intervention": iv, "task": "number", "length": length, "run": 0, "index": index,
                "digest": digest or f"d{length}-{index}", "target_rank": rank, "n_candidates": n_cand,
                "correct": correct, "chance": 1 / n_cand}
    recs = [rec("none", 4, 0, 3, 5, False), rec("none", 4, 1, 1, 5, True), rec("none", 8, 0, 5, 5, False),
            rec("ntk:kappa=4", 4, 0, 1, 5, True), rec("ntk:kappa=4", 4, 1, 2, 5, False),
            rec("ntk:kappa=4", 8, 0, 5, 5, False),
            rec("ntk:kappa=4", 8, 1, 1, 5, True)]  # no none answer of that prompt: not paired
    assert normalised_rank(1, 5) == 0 and normalised_rank(5, 5) == 1 and normalised_rank(1, 1) != normalised_rank(1, 1)
    c = intervention_contrast(recs).set_index("length")
    assert list(c.index) == ["4", "8", "all"] and c.loc["all", "n_pairs"] == 3
    # ranks (normalised): none 0.5, 0, 1; ntk 0, 0.25, 1 -> differences -0.5, +0.25, 0
    assert c.loc["4", "d_rank"] == pytest.approx(-0.125) and c.loc["8", "d_rank"] == 0
    assert c.loc["all", "d_rank"] == pytest.approx(-0.25 / 3)
    assert c.loc["all", "d_rank_se"] == pytest.approx(pd.Series([-0.5, 0.25, 0.0]).std() / 3 ** 0.5)
    assert c.loc["all", "acc_none"] == pytest.approx(1 / 3) and c.loc["all", "d_acc"] == 0
    assert c.loc["4", "acc"] == 0.5 and c.loc["all", "chance"] == pytest.approx(0.2)
    md = contrast_markdown(c.reset_index(), title="m")
    assert "| number | ntk:kappa=4 | 3 | 0.33 → 0.33 | 0.500 → 0.417 | -0.083 ± 0.220 | -0.125 | +0.000 |" in md
    assert intervention_contrast([r for r in recs if r["intervention"] != "none"]).empty
