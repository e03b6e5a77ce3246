"""The head readout under the ablation on the LLM path of ``posym head-sets`` (issue 37 point 2): on a tiny random
Llama folder, the untouched readout equals ``posym head-types``' per-head s_POS/s_SYM on its repeated prompts (same
n, repeat length, seed, τ, swap exclusion: read from its ``head_types.json``); under a dose's freq-mask it equals a
direct call of the score engine inside ``intervened``; a rerun measures nothing; ``--readout-n 0`` turns it off."""

import inspect
import json

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.heads.scores import scores_fast
from posym.interventions import intervened
from posym.model.llm import load_llm
from posym.studies.head_sets import llm as hs_llm
from posym.tasks.repeated import repeated_ids

from tiny_chat_llama import save_tiny_chat_llama

#: The set: L1H1 and L1H3 (layer 1 only: layer 0 is never scored under the set's freq-mask).
SET = ((1, 1), (1, 3))


@pytest.fixture(scope="module")
def rep_dir(tmp_path_factory):
    """A tiny Llama folder, its ``posym head-types --prompts repeated`` readout (n 4, length 6, seed 3, τ 1e-3,
    no swap exclusion) and a typed readout beside its head_types.json (positional = :data:`SET`)."""
    root = tmp_path_factory.mktemp("hs-llm-readout")
    save_tiny_chat_llama(root / "model")
    ht = root / "ht"
    assert main(["head-types", "--model", str(root / "model"), "--prompts", "repeated", "--n", "4", "--length", "6",
                 "--seed", "3", "--tau", "1e-3", "--swap-exclude", "none", "--n-boot", "10", "--n-null", "10",
                 "--threads", "1", "--quiet", "--out", str(ht)]) == 0
    types = pd.read_csv(ht / "head_types.csv")
    types["posym_type"] = ["positional" if (ly, h) in SET else "mixed" for ly, h in zip(types["layer"], types["head"])]
    types.to_csv(ht / "typed.csv", index=False)
    return root / "model", ht


def _study(directory, readout, out, *extra):
    return main(["head-sets", "--model", str(directory), "--readout", str(readout), "--task", "letter", "--sets",
                 "positional", "--controls", "1", "--doses", "1", "--directions", "high", "--intervene",
                 "temperature:beta=1", "--lengths", "6", "--n", "2", "--quiet", "--out", str(out), *extra])


def _readouts(out):
    return {r["intervention"]: r for r in map(json.loads, (out / "head_sets_outcomes.jsonl").read_text().splitlines())
            if r.get("kind") == "readout"}


def test_untouched_readout_equals_head_types_and_the_dose_readout_a_direct_score_call(rep_dir, tmp_path, monkeypatch):
    directory, ht = rep_dir
    out = tmp_path / "study"
    assert _study(directory, ht / "typed.csv", out, "--readout-n", "4") == 0
    t = pd.read_csv(out / "head_sets.csv")
    record = json.loads((out / "head_sets.json").read_text())
    assert record["readout_n"] == 4 and not any("readout" in x for x in record["notes"])
    assert record["readout_prompts"] == {"prompts": "repeated", "n": 4, "repeat_length": 6, "data_seed": 3,
                                         "tau": 1e-3, "swap_exclude": "none", "from": "head_types.json"}
    got = _readouts(out)
    # (1) untouched: every scored head (layer 1: the set's) equals head-types' own numbers
    none = pd.DataFrame({c: got["none"][c] for c in ("layer", "head", "s_pos", "s_sym")})
    assert sorted(set(none["layer"])) == [1] and len(none) == 4
    types = pd.read_csv(ht / "head_types.csv").set_index(["layer", "head"])
    want = types.loc[list(zip(none["layer"], none["head"]))]
    assert np.allclose(none[["s_pos", "s_sym"]].to_numpy(), want[["s_pos", "s_sym"]].to_numpy(), atol=1e-6, rtol=0)
    dose = t[t["part"] == "dose"].iloc[0]
    assert dose["s_pos_none"] == pytest.approx(want.loc[list(SET), "s_pos"].mean(), abs=1e-6)
    assert dose["s_sym_none"] == pytest.approx(want.loc[list(SET), "s_sym"].mean(), abs=1e-6)
    # (2) under the set's freq-mask: a direct call of the score engine inside intervened, on the same prompts
    lm, tok = load_llm(directory)
    ids = torch.as_tensor(repeated_ids(tok, lm.get_input_embeddings().num_embeddings, 4, 6, 3))
    with torch.no_grad(), intervened(lm.eval(), dose["intervention"]):
        direct = scores_fast(lm, ids, 1e-3).to_frame().set_index(["layer", "head"]).loc[list(SET)]
    assert (dose["s_pos"], dose["s_sym"]) == pytest.approx((direct["s_pos"].mean(), direct["s_sym"].mean()), abs=1e-6)
    assert abs(dose["s_pos"] - dose["s_pos_none"]) + abs(dose["s_sym"] - dose["s_sym_none"]) > 1e-6  # it did change
    assert t.loc[t["part"] == "temperature", ["s_pos", "s_sym", "s_pos_none", "s_sym_none"]].isna().all().all()
    # (3) a rerun measures nothing: no readout, no outcome
    import posym.studies.head_sets.run as run

    monkeypatch.setattr(run, "repeated_head_reader",
                        lambda *a, **k: (lambda iv, layers: pytest.fail(f"re-read the heads under {iv}")))
    assert _study(directory, ht / "typed.csv", out, "--readout-n", "4", "--force") == 0
    assert json.loads((out / "head_sets.json").read_text())["measured_now"] == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "head_sets.csv"), t)


def test_readout_n_zero_writes_nan_columns_and_no_note(rep_dir, tmp_path):
    directory, ht = rep_dir
    out = tmp_path / "off"
    assert _study(directory, ht / "typed.csv", out, "--readout-n", "0") == 0
    t = pd.read_csv(out / "head_sets.csv")
    assert t[["s_pos_none", "s_pos", "s_sym_none", "s_sym"]].isna().all().all()
    record = json.loads((out / "head_sets.json").read_text())
    assert record["readout_n"] == 0 and record["notes"] == [] and "readout_prompts" not in record
    assert not _readouts(out)


def test_readout_prompts_read_the_json_or_head_types_defaults(tmp_path):
    from posym.studies.head_types import head_types
    from posym.studies.head_types.study import DEFAULT_REPEAT_LENGTH, DEFAULT_SWAP_EXCLUDE

    verb = inspect.signature(head_types).parameters
    assert hs_llm.HEAD_TYPES_DEFAULTS == {"repeat_length": DEFAULT_REPEAT_LENGTH, "seed": verb["seed"].default,
                                          "tau": hs_llm.DEFAULT_TAU, "swap_exclude": DEFAULT_SWAP_EXCLUDE}
    table = pd.DataFrame({"layer": [0], "head": [0]})
    p = hs_llm.readout_prompts(tmp_path / "head_types.csv", table, 8)
    assert (p.source, p.n, p.repeat_length, p.seed, p.tau, p.swap_exclude, p.from_file) == \
        ("repeated", 8, 64, 0, 1e-4, "bos", False)
    (tmp_path / "head_types.json").write_text(json.dumps({"prompts": ["binding"], "repeat_length": 16, "seed": 2}))
    p = hs_llm.readout_prompts(tmp_path / "head_types.csv", table, 8)
    assert (p.source, p.repeat_length, p.seed, p.from_file) == ("binding", 16, 2, True)
    p = hs_llm.readout_prompts(tmp_path / "head_types.csv", table.assign(prompt_set="repeated"), 8)
    assert p.source == "repeated"
