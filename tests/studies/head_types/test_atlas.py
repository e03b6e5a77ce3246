"""``posym atlas``: the head atlas of a model, one Parquet row per head (docs/llm.md, "A head atlas";
schema in docs/runs.md, "The head atlas"): one row per head, the documented columns and dtypes, the
metadata round-trip through pandas and pyarrow, the values of ``posym head-types`` for the same
settings, and one-line errors before anything is loaded or written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.heads.frequencies import frequency_use, weighted_frequency_id
from posym.studies.head_types import head_types
from posym.studies.head_types.atlas import (HEAD_COLUMNS, META_KEY, SET_COLUMNS, atlas_columns, column_dtype,
                                            read_atlas_meta)
from posym.tasks.llm_prompts import ATTRIBUTES, ENTITIES
from posym.tasks.repeated import repeated_ids
from family_models import build_family
from tiny_tokenizer import start_token_tokenizer

pq = pytest.importorskip("pyarrow.parquet", reason="posym atlas writes Parquet (pyarrow, in [dev])")

DOCS = Path(__file__).resolve().parents[3] / "docs"
SETS = ["repeated", "binding"]
ARGS = ["--prompts", "repeated,binding", "--n", "3", "--length", "6", "--threads", "1", "--quiet"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    tok = start_token_tokenizer(["Each", "object", "has", "one", "colour", ".", "The", "is", "Input", "Output", ":",
                                 *ENTITIES[:10], *ATTRIBUTES[:8]], split_punctuation=True)
    d = tmp_path_factory.mktemp("models") / "tiny-llama"
    model = build_family("llama", vocab_size=len(tok))
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d, model, tok


@pytest.fixture(scope="module")
def made(tiny, tmp_path_factory):
    d, _, _ = tiny
    out = tmp_path_factory.mktemp("atlas") / "a"
    assert main(["atlas", "--model", str(d), "--out", str(out), *ARGS]) == 0
    return out


@pytest.mark.integration
def test_one_row_per_head_with_the_documented_columns(made, tiny):
    _, model, _ = tiny
    t = pd.read_parquet(made / "atlas.parquet")
    cfg = model.config
    assert len(t) == cfg.num_hidden_layers * cfg.num_attention_heads
    assert not t.duplicated(["layer", "head"]).any()
    assert list(t.columns) == atlas_columns(SETS)
    assert {str(t[c].dtype).replace("[python]", "").replace("[pyarrow]", "") for c in t.columns} <= \
        {"int64", "float64", "bool", "string", "object"}
    for c in t.columns:
        want = column_dtype(c)
        got = str(t[c].dtype)
        assert got.startswith(want) or (want == "string" and got == "object"), (c, got, want)
    kv = cfg.num_attention_heads // cfg.num_key_value_heads
    assert (t["kv_head"] == t["head"] // kv).all() and set(t["layer_type"]) == {"global"} and t["rope"].all()
    assert (t["is_sink"] == (t["first_token"] >= 0.5)).all()
    csv = pd.read_csv(made / "atlas.csv")
    assert list(csv.columns) == list(t.columns) and len(csv) == len(t)
    np.testing.assert_allclose(csv["binding_s_sym"], t["binding_s_sym"], rtol=1e-12)


@pytest.mark.integration
def test_metadata_round_trips(made, tiny):
    _, model, _ = tiny
    meta = read_atlas_meta(made / "atlas.parquet")
    raw = json.loads(pq.read_schema(made / "atlas.parquet").metadata[META_KEY.encode()])
    assert meta == raw == json.loads((made / "atlas.json").read_text())
    s = meta["settings"]
    assert s["prompt_sets"] == SETS and s["n"] == 3 and s["repeat_length"] == 6 and s["seed"] == 0
    assert s["tau"] == 1e-4 and s["gamma"] == 0.1 and s["swap_exclude"] == "bos" and s["exclude_keys"] == [0]
    assert s["pure_fraction"] == 0.9 and 0 < s["min_mass"] < 1
    m = meta["model"]
    assert m["name"] == "tiny-llama" and m["model_type"] == "llama"
    assert (m["n_layers"], m["n_heads"]) == (model.config.num_hidden_layers, model.config.num_attention_heads)
    assert m["rotary_dim"] == m["head_dim"] and "10000" in json.dumps(m["rope_config"]) and len(m["fastest_angle"]) == m["n_layers"]
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", meta["posym_version"])
    assert meta["columns"] == {c: column_dtype(c) for c in atlas_columns(SETS)}


@pytest.mark.integration
def test_values_equal_head_types_for_the_same_settings(made, tiny, tmp_path):
    d, model, tok = tiny
    t = pd.read_parquet(made / "atlas.parquet")
    ht = head_types(d, prompts="repeated,binding", n=3, length=6, n_boot=5, n_null=5, out=tmp_path / "ht",
                    progress=False).table
    for s in SETS:
        g = ht[ht["prompt_set"] == s].sort_values(["layer", "head"]).reset_index(drop=True)
        pairs = [(f"{s}_{c}", c) for c in SET_COLUMNS[:-2]] + [(c, c) for c in HEAD_COLUMNS[6:]]
        for mine, theirs in pairs:
            if column_dtype(mine) in ("string", "bool"):
                assert t[mine].astype(object).tolist() == g[theirs].astype(object).tolist(), (s, mine)
            else:
                np.testing.assert_allclose(t[mine].to_numpy(float), g[theirs].to_numpy(float), rtol=0, atol=1e-12,
                                           err_msg=f"{s} {mine}")
    # the frequency IDs of the repeated set: frequency use of the repeated sequences' last token
    lm = type(model).from_pretrained(d).eval()
    exp = weighted_frequency_id(frequency_use(lm, repeated_ids(tok, len(tok), 3, 6, 0)))
    np.testing.assert_allclose(t["repeated_weighted_id"], exp["weighted_id"], rtol=1e-9)
    assert (t["repeated_dominant_id"] == exp["dominant_id"]).all()


@pytest.mark.integration
def test_refuses_to_overwrite_without_force(made, tiny, capsys):
    d, _, _ = tiny
    before = (made / "atlas.parquet").read_bytes()
    assert main(["atlas", "--model", str(d), "--out", str(made), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "exists; pass --force" in err and len(err.strip().splitlines()) == 1
    assert (made / "atlas.parquet").read_bytes() == before


@pytest.mark.parametrize("argv, says", [
    (["--prompts", "repeated,words"], "prompt"),
    (["--gamma", "0.7"], "gamma"),
    (["--n", "0"], "n"),
    (["--swap-exclude", "middle"], "swap"),
    (["--pure-fraction", "2"], "pure_fraction"),
])
def test_bad_input_is_one_line_before_any_work(argv, says, tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["atlas", "--model", str(tmp_path / "no-model"), "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err and not out.exists()


def test_missing_model_is_one_line(tmp_path, capsys):
    assert main(["atlas", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_every_column_is_documented():
    text = (DOCS / "runs.md").read_text()
    sec = text[text.index("## The head atlas"):]
    sec = sec[:sec.find("\n## ", 5) if "\n## " in sec[5:] else len(sec)]
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([a-z_<>]+)` \| ([a-z0-9]+) \|", sec, re.M)}
    for c in HEAD_COLUMNS:
        assert rows.get(c) == column_dtype(c), c
    for c in SET_COLUMNS:
        assert rows.get(f"<set>_{c}") == column_dtype(f"repeated_{c}"), c
