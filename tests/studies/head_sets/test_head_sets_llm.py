"""The LLM path of ``posym head-sets`` (``--model FOLDER``): on a tiny random Llama folder with its tokenizer,
each cell's per-prompt outcomes equal what ``posym llm eval --protocol choice`` records for the same prompts —
untouched, under the set's freq-mask and under its temperature (both KV-cached scoring)."""

import json

import pandas as pd
import pytest

from posym.cli import main
from posym.lengthgen.llm_answers import load_cache
from posym.lengthgen.outcomes import choice_outcomes
from posym.studies.head_sets.figures import heads_title, plot_dose_curves, plot_temperature_curve

from tiny_chat_llama import save_tiny_chat_llama


@pytest.fixture(scope="module")
def llm_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hs-llm")
    save_tiny_chat_llama(root / "model")
    readout = root / "head_types.csv"
    pd.DataFrame([{"layer": ly, "head": h, "posym_type": "positional" if (ly, h) in ((0, 1), (1, 3)) else "mixed"}
                  for ly in range(2) for h in range(4)]).to_csv(readout, index=False)
    return root / "model", readout


def test_llm_outcomes_equal_llm_eval_choice(llm_dir, tmp_path):
    directory, readout = llm_dir
    out = tmp_path / "study"
    assert main(["head-sets", "--model", str(directory), "--readout", str(readout), "--task", "letter", "--sets",
                 "positional", "--controls", "1", "--doses", "1", "--directions", "high", "--intervene",
                 "temperature:beta=1", "--lengths", "6", "--n", "3", "--readout-n", "0", "--quiet", "--out",
                 str(out)]) == 0
    t = pd.read_csv(out / "head_sets.csv")
    assert len(t) == 2 and set(t["extra_tokens"]) == {6} and t["s_pos"].isna().all()
    record = json.loads((out / "head_sets.json").read_text())
    assert record["protocol"] == "choice" and record["readout_n"] == 0 and record["notes"] == []
    # an LLM's lengths are target windows (SPEC §1.5), not added tokens, in the table and the figures
    assert "| k | window | heads |" in (out / "head_sets.md").read_text() and "| p (rank) |" in (out / "head_sets.md").read_text()
    dose, iv = (plot_dose_curves(t, "positional", window=True, rank=True),
                plot_temperature_curve(t, "positional", window=True, rank=True))
    assert [a.get_ylabel().split("\n")[0] for a in dose.axes] == ["accuracy", "answer's normalised rank"]
    assert "target window 6" in dose._suptitle.get_text() and "+6 tokens" not in dose._suptitle.get_text()
    assert iv.axes[-1].get_xlabel() == "target-window size (SPEC §1.5)" and "(L0H1+L1H3)" in iv._suptitle.get_text()
    cached = {(r["intervention"], r["extra_tokens"]): r for r in map(json.loads, (out / "head_sets_outcomes.jsonl")
                                                                     .read_text().splitlines())}
    ivs = ["none", *t["intervention"]]  # the set's freq-mask and temperature (both through the KV cache)
    ev = tmp_path / "eval"
    assert main(["llm", "eval", "--model", str(directory), "--protocol", "choice", "--tasks", "letter", "--lengths",
                 "6", "--runs", "1", "--n", "3", "--quiet", "--out", str(ev), *[a for iv in ivs for a in
                                                                                   ("--intervene", iv)]]) == 0
    records = list(load_cache(ev / "answers.jsonl").values())
    for iv in ivs:
        want = choice_outcomes(records, intervention=iv, task="letter", length=6)
        assert len(want) == 3
        assert cached[(iv, 6)]["correct"] == want["correct"].tolist(), iv
        assert cached[(iv, 6)]["rank"] == pytest.approx(want["rank"].tolist(), abs=1e-9), iv


def test_llm_bad_input_is_one_line(llm_dir, tmp_path, capsys):
    directory, readout = llm_dir
    base = ["head-sets", "--readout", str(readout), "--out", str(tmp_path / "o"), "--quiet", "--sets", "positional"]
    for args, msg in ((["--model", str(directory), "--task", "letter"], "--lengths: 0 is not a target-window length"),
                      (["--model", str(directory), "--lengths", "6"], "an LLM study needs --task"),
                      ([str(directory), "--model", str(directory)], "not both"),
                      ([], "give a trained posym model (MODEL) or an offline LLM")):
        assert main([*base, *args]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and msg in err[0], err
    assert not (tmp_path / "o").exists()


def test_heads_title_names_a_long_set_by_size_and_span():
    assert heads_title("L0H1+L1H3") == "L0H1+L1H3"
    many = "+".join(f"L{ly}H{h}" for ly in (1, 2, 22) for h in range(3))
    assert heads_title(many) == "9 heads in 3 layers, L1–L22"
    assert heads_title(many, limit=9) == many and heads_title("") == ""
