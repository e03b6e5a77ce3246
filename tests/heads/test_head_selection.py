"""posym.heads.selection: the selection syntax, the typed set read from a hand-made head readout, its
matched random control (per-layer counts equal, disjoint, seeded, deterministic) and the one-line errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.heads.selection import (TYPE_NAMES, HeadSelection, format_heads, matched_control, parse_heads, read_readout,
                                   resolve_heads, typed_heads)
from posym.interventions.registry import format_head_pairs, parse_head_pairs

L, H = 3, 4


def _join() -> pd.DataFrame:
    """A head-types join (posym head-types' columns): layer 0 two positional heads, layer 2 one; one
    symbolic head; an induction head that is also a sink, and a classic sink."""
    rows = []
    for layer in range(L):
        for head in range(H):
            rows.append({"layer": layer, "head": head, "posym_type": "mixed", "classic_type": "none", "is_sink": False})
    df = pd.DataFrame(rows)
    at = lambda layer, head: (df["layer"] == layer) & (df["head"] == head)  # noqa: E731
    for layer, head in [(0, 1), (0, 3), (2, 2)]:
        df.loc[at(layer, head), "posym_type"] = "positional"
    df.loc[at(1, 0), "posym_type"] = "symbolic"
    df.loc[at(1, 2), ["classic_type", "is_sink"]] = ["induction", True]
    df.loc[at(2, 0), ["classic_type", "is_sink"]] = ["sink", True]
    return df


def test_parse_and_canonical_strings():
    assert parse_heads("L3H1+L0H2") == HeadSelection(heads=((0, 2), (3, 1)))
    assert parse_heads("L3H1+L0H2").canonical() == "L0H2+L3H1"
    assert parse_heads("positional").canonical() == "positional"
    assert parse_heads("random:positional,seed=3") == HeadSelection(type="positional", random=True, seed=3)
    assert parse_heads("random:induction").canonical() == "random:induction,seed=0"
    for name in TYPE_NAMES:
        assert parse_heads(name).canonical() == name and parse_heads(f"random:{name},seed=1").needs_readout


def test_explicit_syntax_agrees_with_the_interventions_heads_key():
    """The ``heads=`` key of the interventions (registry) and the selections read explicit heads alike."""
    for text in ("L0H0", "L3H1+L0H2", "L10H12+L2H3+L2H0"):
        assert parse_heads(text).heads == parse_head_pairs(text)
        assert format_heads(parse_head_pairs(text)) == format_head_pairs(parse_head_pairs(text))


@pytest.mark.parametrize("text, msg", [("", "is not a selection"), ("L0H1+L0H1", "names a head twice"),
                                       ("l0h1", "is not a selection"), ("retrieval", "is not a selection"),
                                       ("random:retrieval", "a random control matches a type"),
                                       ("random:positional,seed=-1", "seed must be an integer >= 0"),
                                       ("random:positional,seed=x", "seed must be an integer"),
                                       ("random:positional,n=3", "takes seed=S only")])
def test_bad_selections_are_one_line_errors(text, msg):
    with pytest.raises(PosymError, match=msg) as e:
        parse_heads(text)
    assert "\n" not in str(e.value)


def test_types_read_from_a_head_types_join():
    df = _join()
    assert typed_heads(df, "positional") == ((0, 1), (0, 3), (2, 2))
    assert typed_heads(df, "symbolic") == ((1, 0),)
    assert typed_heads(df, "induction") == ((1, 2),)
    assert typed_heads(df, "sink") == ((1, 2), (2, 0))  # is_sink: every head on the first token
    assert typed_heads(df.drop(columns="is_sink"), "sink") == ((2, 0),)  # the classic label alone
    assert typed_heads(df, "previous-token") == ()


def test_known_answer_typed_set_and_its_matched_control():
    df = _join()
    typed = resolve_heads("positional", df, L, H)
    assert typed == ((0, 1), (0, 3), (2, 2))
    control = resolve_heads("random:positional,seed=3", df, L, H)
    count = lambda hs, layer: sum(1 for ly, _ in hs if ly == layer)  # noqa: E731
    assert all(count(control, layer) == count(typed, layer) for layer in range(L))  # matched per layer
    assert not set(control) & set(typed)  # drawn from the other heads
    assert control == resolve_heads("random:positional,seed=3", df, L, H)  # deterministic
    assert list(control) == sorted(control)
    # the draw is numpy.random.default_rng(seed) over each layer's other heads, layers in order
    rng = np.random.default_rng(3)
    expect = sorted([(0, int(h)) for h in rng.choice([0, 2], 2, replace=False)]
                    + [(2, int(h)) for h in rng.choice([0, 1, 3], 1, replace=False)])
    assert list(control) == expect
    draws = {resolve_heads(f"random:positional,seed={s}", df, L, H) for s in range(20)}
    assert len(draws) > 1  # the seed matters (layer 2 has 3 candidates)


def test_scores_table_is_typed_with_the_pure_head_rule_and_per_prompt_fractions():
    """A scores.csv-like table (s_pos, s_sym, entropy, swap_mass): pure positional at γ = 0.1 on the means;
    with per-prompt fractions, a head pure on the mean but on too few prompts is mixed."""
    rows = [{"layer": 0, "head": h, "tau": 1.0, "s_pos": sp, "s_sym": ss, "entropy": 0.3, "swap_mass": 0.5,
             "intervention": "none"} for h, (sp, ss) in enumerate([(0.95, 0.05), (0.05, 0.97), (0.5, 0.5), (0.92, 0.02)])]
    other = pd.DataFrame(rows).assign(intervention="temperature:beta=1,n_train=17,floor=1", s_pos=0.0)
    df = pd.concat([pd.DataFrame(rows), other])  # only the untouched rows are read
    assert typed_heads(df, "positional") == ((0, 0), (0, 3))
    assert typed_heads(df, "symbolic") == ((0, 1),)
    frac = pd.DataFrame(rows).assign(frac_positional=[0.95, 0.0, 0.0, 0.5], frac_symbolic=[0.0, 1.0, 0.0, 0.0])
    assert typed_heads(frac, "positional") == ((0, 0),)
    assert typed_heads(frac, "mixed") == ((0, 2), (0, 3))
    with pytest.raises(PosymError, match="classic_type"):
        typed_heads(df, "induction")


def test_resolve_errors_are_one_line():
    df = _join()
    cases = [(lambda: resolve_heads("L3H0", None, L, H), "no head L3H0 in this model: the model has 3 layers x 4"),
             (lambda: resolve_heads("L0H4", None, L, H), "no head L0H4"),
             (lambda: resolve_heads("positional", None, L, H), "needs a head readout"),
             (lambda: resolve_heads("previous-token", df, L, H), "has no previous-token head"),
             (lambda: resolve_heads("positional", df, L, 2), "no head L0H3 in the head readout"),
             (lambda: matched_control(((0, 0), (0, 1), (0, 2)), 1, 4, 0, "positional"),
              "cannot match random:positional: layer 0 has 3 positional heads and only 1 other head"),
             (lambda: resolve_heads("positional", df.assign(prompt_set="number").pipe(lambda d: pd.concat([d, d.assign(
                 prompt_set="letter")])), L, H), "several rows per head .prompt_set: number, letter"),
             (lambda: resolve_heads("positional", df.drop(columns=["posym_type"]), L, H), "neither posym_type nor s_pos")]
    for fn, msg in cases:
        with pytest.raises(PosymError, match=msg) as e:
            fn()
        assert "\n" not in str(e.value)


def test_read_readout(tmp_path):
    p = tmp_path / "head_types.csv"
    _join().to_csv(p, index=False)
    assert resolve_heads("symbolic", read_readout(p), L, H) == ((1, 0),)
    with pytest.raises(PosymError, match="no such file"):
        read_readout(tmp_path / "missing.csv")


# ---- posym.heads.ablate with a head set -----------------------------------------------------------------

def _tiny_model():
    import torch

    from posym.model import build_model, model_config
    from posym.tasks import get_vocab

    torch.set_num_threads(1)
    cfg = model_config("quick", get_vocab("number").size, n_layer=2, n_head=2, n_embd=32, n_inner=64, rotary_dim=16)
    return build_model(cfg, seed=0).eval()


def test_head_set_ablation_equals_the_zeroed_output_columns_of_the_whole_set():
    """Known answer: zero-ablating {L0H1, L1H0} together equals the model with both heads' columns of
    out_proj zeroed; a one-head set equals that head's row of the per-head ablation."""
    import copy

    import torch

    from posym.heads.ablate import ABLATION_COLUMNS, ablate_head_set, ablate_heads
    from posym.tasks import make_split
    from posym.train import evaluate

    model, batch = _tiny_model(), make_split("number", "test", n=48)
    table = ablate_head_set(model, batch, [(0, 1), (1, 0)])
    assert list(table.columns) == ABLATION_COLUMNS and list(table["mode"]) == ["none", "zero", "mean"]
    assert (table[["layer", "head"]] == -1).all().all()
    zeroed = copy.deepcopy(model)
    hd = 16
    with torch.no_grad():
        for layer, head in [(0, 1), (1, 0)]:
            zeroed.transformer.h[layer].attn.out_proj.weight[:, head * hd:(head + 1) * hd] = 0
    assert table.iloc[1]["acc"] == evaluate(zeroed, batch)["acc"]
    assert table.iloc[0]["acc"] == evaluate(model, batch)["acc"]
    one = ablate_head_set(model, batch, [(1, 1)], modes=("zero",))
    per_head = ablate_heads(model, batch, modes=("zero",))
    row = per_head[(per_head["layer"] == 1) & (per_head["head"] == 1)].iloc[0]
    assert one.iloc[1][ABLATION_COLUMNS[3:]].tolist() == row[ABLATION_COLUMNS[3:]].tolist()
    with pytest.raises(PosymError, match="no head L2H0"):
        ablate_head_set(model, batch, [(2, 0)])


def test_ablation_for_run_with_a_type_and_its_control_records_them(tmp_path):
    from posym.heads.ablate import HEAD_SET_COLUMNS, ablation_for_run
    from posym.train.checkpoints import save_checkpoint

    model = _tiny_model()
    run = tmp_path / "run"
    save_checkpoint(run, 5, model, {"task": "number", "preset": "quick"})
    readout = tmp_path / "readout.csv"
    pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                  "posym_type": ["positional", "mixed", "mixed", "symbolic"]}).to_csv(readout, index=False)
    typed = ablation_for_run(run, n=24, modes=("zero",), heads="positional", readout=readout)
    assert list(typed.columns[-4:]) == HEAD_SET_COLUMNS and len(typed) == 2
    assert set(typed["heads"]) == {"L0H0"} and set(typed["selection"]) == {"positional"}
    assert set(typed["readout"]) == {str(readout)} and typed["seed"].isna().all()
    control = ablation_for_run(run, n=24, modes=("zero",), heads="random:positional,seed=1", readout=readout)
    assert set(control["heads"]) == {"L0H1"}  # the only other head of layer 0
    assert control.attrs["selection"] == "random:positional,seed=1" and control.attrs["selection_seed"] == 1
    assert set(control["seed"]) == {1} and control.attrs["seed"] == 0  # attrs seed: the data seed
    for kwargs, msg in [({"heads": "positional"}, "needs --readout FILE"),
                        ({"heads": "L0H0", "readout": readout}, "names its heads"),
                        ({"readout": readout}, "give --heads too"),
                        ({"heads": "L0H2"}, "no head L0H2 in this model"),
                        ({"heads": "induction", "readout": readout}, "classic_type")]:
        with pytest.raises(PosymError, match=msg):
            ablation_for_run(run, n=8, modes=("zero",), **kwargs)
