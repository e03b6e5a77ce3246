"""``posym head-types``: every head of an LLM scored on several prompt sources and joined with the
classic detectors (docs/llm.md, "Head types side by side"): the files, the printed summary, the
start-token exclusion, and one-line errors before anything is loaded or written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.heads.detectors import detector_scores
from posym.reading import READ_POINTER
from posym.heads.scores import scores_blocks_fast, scores_fast
from posym.tasks.llm_prompts import LLMPrompt, group_prompts
from posym.model import save_model
from posym.tasks.llm_prompts import ATTRIBUTES, ENTITIES
from posym.heads.head_types import source_scores
from posym.studies.head_types import head_types, headline_rho, parse_sources
from posym.tasks.repeated import repeated_ids
from family_models import build_family
from tiny_tokenizer import start_token_tokenizer

FILES = ("head_types.csv", "head_types_correlations.csv", "head_types_contingency.csv", "head_types.json",
         "figures/head_types_plane.png", "figures/head_types_plane.pdf")


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _tokenizer():
    return start_token_tokenizer(["Each", "object", "has", "one", "colour", ".", "The", "is", "Input", "Output", ":",
                                 *ENTITIES[:10], *ATTRIBUTES[:8]], split_punctuation=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tok = _tokenizer()
    d = tmp_path_factory.mktemp("models") / "tiny-llama"
    model = build_family("llama", vocab_size=len(tok))
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d, model, tok


@pytest.mark.integration
def test_cli_head_types_end_to_end(tiny, tmp_path, monkeypatch, capsys):
    """Default folder runs/head-types/<model>/, every file, one row per (source, layer, head), the
    narrow summary naming prompts, τ and the exclusion and ending with the reading pointer."""
    d, model, tok = tiny
    monkeypatch.chdir(tmp_path)
    rc = main(["head-types", "--model", str(d), "--prompts", "repeated,binding", "--n", "3", "--length", "6",
               "--n-boot", "20", "--n-null", "20", "--threads", "1"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    out = Path("runs/head-types/tiny-llama")
    assert cap.err.startswith(f"head types: output folder {out}{os.sep}\n")
    for f in FILES:
        assert (tmp_path / out / f).stat().st_size > 0, f
    printed = cap.out
    assert printed.rstrip().endswith(READ_POINTER)
    assert max(len(l) for l in printed.splitlines()) <= 100
    assert "prompts: repeated, binding; 3 each; repeated: 13 tokens" in printed
    assert "tau 0.0001" in printed and "swap exclusion: bos (keys 0)" in printed
    # issue 34: each set's rho with its CI where the headline is printed, the p floor said as such,
    # the purity fractions beside the pure counts and the sink flag beside every type
    lines = printed.splitlines()
    h = lines.index("95% percentile-bootstrap CI over heads (20 resamples):")
    assert lines[h + 1].split() == ["repeated", "binding"] and lines[h + 2].startswith("previous_token")
    assert lines[h + 2].count("[") == 2 and lines[h + 6].startswith("heads (informative): repeated 16, binding")
    assert "0.0476" not in printed  # the floor 1/21 of 20 shuffles is printed "< 0.05"
    assert "repeated: pure heads (on the mean and on >= 90% of the prompts; --pure-fraction 0.9):" in printed
    assert "pure on the mean only (typed mixed): positional" in printed
    assert "sink-flag" in printed and "sink heads (first-token share >= 0.5)" in printed
    table = pd.read_csv(tmp_path / out / "head_types.csv")
    assert list(table["prompt_set"].drop_duplicates()) == ["repeated", "binding"]
    assert len(table) == 2 * 4 * 4
    assert {"s_pos", "s_sym", "entropy", "swap_mass", "previous_token", "induction", "duplicate_token",
            "first_token", "frac_positional", "frac_symbolic", "classic_type", "posym_type", "is_sink", "mean_type",
            "purity_fraction"} <= set(table.columns)
    assert (table["is_sink"] == (table["first_token"] >= 0.5)).all()
    pure = table["mean_type"].isin(["positional", "symbolic"])
    assert (table.loc[pure, "purity_fraction"] == table.loc[pure].apply(
        lambda r: r[f"frac_{r['mean_type']}"], axis=1)).all() and table.loc[~pure, "purity_fraction"].isna().all()
    typed = table["posym_type"].isin(["positional", "symbolic"])
    assert (table.loc[typed, "purity_fraction"] >= 0.9).all() and (table.loc[typed, "posym_type"]
                                                                    == table.loc[typed, "mean_type"]).all()
    corr = pd.read_csv(tmp_path / out / "head_types_correlations.csv")
    assert set(corr["heads"]) == {"all", "informative"} and set(corr["prompt_set"]) == {"repeated", "binding"}
    cont = pd.read_csv(tmp_path / out / "head_types_contingency.csv")
    for s, g in table.groupby("prompt_set"):
        assert cont[(cont["prompt_set"] == s) & (cont["classic_type"] == "total")]["total"].item() == len(g)
    meta = json.loads((tmp_path / out / "head_types.json").read_text())
    assert meta["swap_exclude"] == "bos" and meta["exclude_keys"] == [0] and meta["repeated_tokens"] == 13
    assert meta["pure_fraction"] == 0.9 and meta["sink_share"] == 0.5 and set(meta["pure"]) == {"repeated", "binding"}
    assert {"sink_flagged", "positional_purity", "symbolic_mean_only"} <= set(cont.columns)
    # the repeated rows are scores_fast (start token kept out of the swaps) and the detectors on the
    # same repeated sequences, with the loaded model
    rep = repeated_ids(tok, len(tok), 3, 6, 0)
    assert (rep[:, 0] == tok.bos_token_id).all() and (rep[:, 1:7] == rep[:, 7:]).all()
    lm = type(model).from_pretrained(d).eval()
    mine = table[table["prompt_set"] == "repeated"].sort_values(["layer", "head"])
    exp = scores_fast(lm, torch.as_tensor(rep), exclude_keys=(0,)).to_frame()
    np.testing.assert_allclose(mine[["s_pos", "s_sym"]].to_numpy(), exp[["s_pos", "s_sym"]].to_numpy(), atol=1e-5)
    det = detector_scores(lm, torch.as_tensor(rep))
    np.testing.assert_allclose(mine["induction"].to_numpy(), det["induction"].to_numpy(), atol=1e-5)
    # again: refused without --force, nothing changed
    before = (tmp_path / out / "head_types.csv").read_bytes()
    assert main(["head-types", "--model", str(d), "--prompts", "repeated", "--n", "3", "--length", "6"]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / out / "head_types.csv").read_bytes() == before


@pytest.mark.integration
def test_swap_exclusion_none_keeps_every_key(tiny, tmp_path):
    d, model, tok = tiny
    res = {ex: head_types(str(d), prompts="repeated", swap_exclude=ex, n=3, length=6, n_boot=10, n_null=10,
                          out=tmp_path / ex, progress=False, threads=1) for ex in ("none", "bos")}
    a, b = (res[ex].table.sort_values(["layer", "head"]) for ex in ("none", "bos"))
    assert (a["swap_mass"] >= b["swap_mass"] - 1e-12).all() and (a["swap_mass"] > b["swap_mass"]).any()
    assert res["none"].data["meta"]["exclude_keys"] == [] and "swap exclusion: none" in res["none"].summary


@pytest.mark.parametrize("argv, message", [
    (["--prompts", "repeated,bogus"], "argument --prompts: unknown 'bogus'"),
    (["--swap-exclude", "last"], "unknown --swap-exclude 'last'"),
    (["--gamma", "0.7"], "gamma must lie in (0, 0.5)"),
    (["--min-mass", "2"], "min_mass must be a number in [0, 1]"),
    (["--pure-fraction", "1.5"], "pure_fraction must be a number in [0, 1]"),
])
def test_head_types_bad_input_one_line_nothing_written(tmp_path, capsys, argv, message):
    rc = main(["head-types", "--model", str(tmp_path / "nope"), *argv, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "o").exists()


def test_head_types_missing_model_or_tokenizer_one_line(tmp_path, capsys):
    assert main(["head-types", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "no such model folder" in capsys.readouterr().err
    bare = tmp_path / "bare"
    save_model(build_family("llama", vocab_size=40), bare)  # weights, no tokenizer
    assert main(["head-types", "--model", str(bare), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no tokenizer" in err
    assert not (tmp_path / "o").exists()


def test_parse_sources():
    assert parse_sources("all") == ("repeated", "binding", "number", "letter")
    assert parse_sources("number,repeated") == ("repeated", "number")


def test_block_sources_keep_the_prompts_order(tiny):
    """Prompts of a set are scored in groups of one (length, blocks) layout and returned in their own
    order, each as if scored alone, the start token kept out."""
    _, model, tok = tiny
    rng = np.random.default_rng(0)
    layouts = [(10, ((1, 3), (3, 5), (5, 7))), (12, ((2, 4), (4, 6), (6, 8), (8, 10)))]
    prompts = [LLMPrompt("number", i, "", (1, *rng.integers(4, 40, layouts[i % 2][0] - 1).tolist()),
                         layouts[i % 2][1], "", -1) for i in range(5)]  # two layouts, interleaved
    assert len(group_prompts(prompts)) == 2
    res = source_scores(model, "number", None, prompts, 1e-4, (0,), 2)
    assert res.s_pos.shape[0] == 5
    for i, p in enumerate(prompts):
        one = scores_blocks_fast(model, torch.tensor([p.input_ids]), blocks=list(p.blocks), exclude_keys=(0,))
        np.testing.assert_allclose(res.s_pos[i], one.s_pos[0], atol=1e-12)
        np.testing.assert_allclose(res.swap_mass[i], one.swap_mass[0], atol=1e-12)


def test_headline_rho_one_column_per_prompt_set():
    corr = pd.DataFrame({"prompt_set": ["repeated"] * 2 + ["number"] * 2, "detector": ["induction", "previous_token"] * 2,
                         "heads": "informative", "n_heads": [269, 269, 185, 185], "rho": [0.73, -0.79, 0.19, -0.31],
                         "rho_lo": [0.66, -0.84, 0.03, -0.45], "rho_hi": [0.79, -0.74, 0.34, -0.15]})
    text = headline_rho(pd.concat([corr, corr.assign(heads="all", rho=0.0)]))
    lines = text.splitlines()
    assert lines[0].split() == ["repeated", "number"]
    assert lines[1].split() == ["induction", "+0.73", "[+0.66,+0.79]", "+0.19", "[+0.03,+0.34]"]
    assert lines[-1] == "heads (informative): repeated 269, number 185"


def test_pure_fraction_zero_types_on_the_mean(tiny, tmp_path):
    """--pure-fraction 0 restores the reading on the means alone: posym_type == mean_type."""
    d, _, _ = tiny
    res = head_types(str(d), prompts="repeated", n=3, length=6, n_boot=10, n_null=10, pure_fraction=0,
                     out=tmp_path / "o", progress=False, threads=1)
    assert (res.table["posym_type"] == res.table["mean_type"]).all()
    assert "--pure-fraction 0" in res.summary and "pure on the mean only" not in res.summary


def test_printed_p_at_the_floor_of_the_shuffles():
    """A p no shuffle reached is printed '< 0.001' for 1,000 shuffles, not as the floor 0.000999."""
    from posym.heads.head_types import type_correlations
    from posym.studies.head_types.tables import _fmt_corr

    z = np.random.default_rng(0).random(60)
    t = pd.DataFrame({"s_pos": 1 - z, "s_sym": z, "induction": z, "previous_token": 1 - z,
                      "duplicate_token": np.random.default_rng(1).random(60), "first_token": z[::-1]})
    text = _fmt_corr(type_correlations(t, n_boot=20, n_null=1000).assign(heads="all"))
    assert text.count("< 0.001") >= 2 and "0.000999" not in text and "0.001" not in text.replace("< 0.001", "")


def test_sink_lines_stay_narrow_and_name_the_pattern_types():
    from posym.studies.head_types.study import WIDTH
    from posym.studies.head_types.tables import _sink_line

    k = {"sink_heads": 277, "sink_typed_sink": 274, "sink_pure_symbolic": 173, "sink_pure_positional": 109,
         "sink_typed_pattern": {"previous_token": 1, "induction": 1, "duplicate_token": 1}}
    lines = _sink_line("repeated", k, 0.5)
    assert max(map(len, lines)) <= WIDTH and "3 typed by their pattern" in lines[0]
    assert lines[1] == "  by pattern: previous-token 1, induction 1, duplicate-token 1"
