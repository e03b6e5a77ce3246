"""``--intervene`` in ``posym scores`` and ``posym freqs`` (docs/interventions.md, "From the command
line"): one measurement per intervention, an ``intervention`` column with the canonical string, the
``none`` rows equal to the plain call's, a frequency mask's dropped IDs at exactly zero use, and
every bad spec refused before any work."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.interventions import FreqMask, Temperature, parse_intervention, plan_interventions
from posym.model import build_model, model_config
from posym.runs.layout import write_meta
from posym.train.checkpoints import save_checkpoint
from posym.verbs.freqs import freqs
from posym.verbs.scores import scores

CONFIG = {"task": "number", "preset": "quick", "config": {"task": "number", "distractors": "pool"}}
TWO = ["none", "temperature:beta=1,n_train=5", "freq-mask:keep=1+2+3"]  # n_train 5: the floored scale acts on the prompts
CANON = ["none", "temperature:beta=1,n_train=5,floor=1", "freq-mask:keep=1+2+3"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run with two checkpoints (steps 5, 10) of a 2-layer GPT-J with 16 rotary frequencies."""
    d = tmp_path_factory.mktemp("iv") / "run"
    for step, seed in ((5, 0), (10, 1)):
        model = build_model(model_config("quick", 137, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32,
                                         initializer_range=0.3), seed=seed)
        save_checkpoint(d, step, model, CONFIG)
    write_meta(d, CONFIG)
    return d


def test_plan_parses_applies_layers_and_refuses_in_one_line():
    assert plan_interventions(None) == (None,) and plan_interventions([]) == (None,)
    assert plan_interventions(["none", "temperature:beta=1", "freq-mask:keep=1+2"], layers=[0]) == (
        None, Temperature(1.0, 17, "log", (0,)), FreqMask((1, 2), (0,)))
    for bad, needle in ((["bogus:x=1"], "unknown intervention"), (["temperature:beta=nan"], "finite"),
                        (["temperature:beta=1", "temperature:beta=1,n_train=17"], "repeats")):
        with pytest.raises(PosymError, match=needle):
            plan_interventions(bad)
    assert plan_interventions(["ntk:kappa=4"], layers=[0]) == (parse_intervention("ntk:kappa=4,layers=0"),)
    with pytest.raises(PosymError, match="drop --layers"):
        plan_interventions(["ntk:kappa=4,heads=L0H0"], layers=[0])
    with pytest.raises(PosymError, match="--layers restricts an intervention"):
        plan_interventions(None, layers=[0])


def test_scores_two_interventions_and_none_equals_the_plain_call(run, tmp_path):
    plain = scores(run, n_prompts=4, progress=False, out=tmp_path / "plain.csv").table
    both = scores(run, n_prompts=4, progress=False, out=tmp_path / "both.csv", intervene=TWO).table
    assert list(dict.fromkeys(both["intervention"])) == CANON
    assert both.groupby(["step", "intervention"]).size().tolist() == [2] * 6  # every step under each
    assert (plain["intervention"] == "none").all() and plain.columns[-1] == "intervention"
    none = both[both["intervention"] == "none"].reset_index(drop=True)
    pd.testing.assert_frame_equal(none, plain, check_exact=True)
    temp = both[both["intervention"] == CANON[1]].reset_index(drop=True)
    assert not temp["entropy"].equals(plain["entropy"])  # the intervention was applied
    assert pd.read_csv(tmp_path / "both.csv")["intervention"].tolist() == both["intervention"].tolist()


def test_scores_checks_the_layers_against_the_model_before_writing(run, tmp_path):
    with pytest.raises(PosymError, match="layer"):
        scores(run, n_prompts=4, progress=False, out=tmp_path / "s.csv", intervene=["temperature:beta=1"],
               layers=[7])
    with pytest.raises(PosymError, match=r"frequency IDs must be in 1\.\.16"):
        scores(run, n_prompts=4, progress=False, out=tmp_path / "s.csv", intervene=["freq-mask:keep=1+40"])
    assert not (tmp_path / "s.csv").exists()


def test_freqs_two_interventions_none_rows_equal_and_a_mask_zeroes_the_dropped_ids(run, tmp_path):
    kw = dict(n=4, geometry_prompts=2, progress=False)
    plain = freqs(run, out=tmp_path / "plain", **kw)
    freqs(run, out=tmp_path / "both", intervene=["none", "freq-mask:keep=1+2+3"], **kw)
    geo = f"qk_geometry_L{plain.data['geometry_layer']}.csv"
    for name in ("freq_use.csv", "freq_table.csv", "freq_scores.csv", geo):
        a, b = pd.read_csv(tmp_path / "plain" / name), pd.read_csv(tmp_path / "both" / name)
        assert list(dict.fromkeys(b["intervention"])) == ["none", "freq-mask:keep=1+2+3"], name
        pd.testing.assert_frame_equal(b[b["intervention"] == "none"].reset_index(drop=True), a, check_exact=True)
    use = pd.read_csv(tmp_path / "both" / "freq_use.csv")
    masked = use[use["intervention"] == "freq-mask:keep=1+2+3"]
    assert (masked.loc[masked["freq_id"] > 3, "use"] == 0.0).all()  # the masked IDs: zero frequency use
    assert (masked.loc[masked["freq_id"] <= 3, "use"] > 0).all()
    table = pd.read_csv(tmp_path / "both" / "freq_table.csv")
    assert (table.loc[table["intervention"] != "none", "dominant_id"] <= 3).all()


def test_a_freqs_refusal_writes_nothing(run, tmp_path):
    """Probe W1: the refusal "no head uses any rotary frequency" came after 7 files were written (and the
    corrected command was then refused without --force). Now every table is computed first."""
    out = tmp_path / "fq"
    with pytest.raises(PosymError, match="no head uses any rotary frequency"):
        freqs(run, out=out, n=4, geometry_prompts=2, progress=False, intervene=["freq-mask:keep=none"])
    assert not out.exists() or not any(out.rglob("*.*"))
    for bad in ("rope-base:theta=1e-300", "ntk:kappa=1e300", "freq-mask:keep="):  # refused at parse (T1, N4)
        with pytest.raises(PosymError):
            freqs(run, out=out, n=4, geometry_prompts=2, progress=False, intervene=[bad])
    freqs(run, out=out, n=4, geometry_prompts=2, progress=False, scores=False)  # the corrected call: no --force


@pytest.mark.parametrize("per_prompt", [False, True])
def test_scores_of_own_sequences_under_two_interventions(per_prompt, tmp_path):
    """``posym scores --model DIR --ids F --intervene …``: one block per intervention over every length
    group, the none block equal to the plain call (means and per-prompt rows)."""
    from family_models import build_family

    from posym.model import save_model

    d = tmp_path / "tiny-llama"
    save_model(build_family("llama", vocab_size=40), d)
    (tmp_path / "ids.txt").write_text("1 2 3 4 5 6\n7 8 9 10 11 12\n3 4 5 6 7 8 9 10\n")
    kw = dict(ids=tmp_path / "ids.txt", per_prompt=per_prompt, progress=False)
    plain = scores(d, out=tmp_path / "p.csv", **kw).table
    both = scores(d, out=tmp_path / "b.csv", intervene=["none", "ntk:kappa=2"], **kw).table
    assert list(dict.fromkeys(both["intervention"])) == ["none", "ntk:kappa=2"]
    none = both[both["intervention"] == "none"].reset_index(drop=True)
    pd.testing.assert_frame_equal(none, plain, check_exact=True)
    ntk = both[both["intervention"] == "ntk:kappa=2"].reset_index(drop=True)
    assert len(ntk) == len(plain) and not ntk["s_pos"].equals(plain["s_pos"])
