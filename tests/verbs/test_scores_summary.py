"""``posym scores --text / --ids`` prints the head counts first (pure positional / symbolic at γ =
``constants.GAMMA`` among the heads with swap mass >= ``reading.MIN_MASS``, the uninformative rest, how to
find sinks), then at most a few rows; the per-head table goes to the file (issue 38; SPEC §3)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.constants import GAMMA
from posym.model import save_model
from posym.reading import MIN_MASS
from posym.verbs.scores import FIRST_ROWS, _heads_summary
from family_models import build_family


def _table(**extra) -> pd.DataFrame:
    rows = [  # (layer, head, s_pos, s_sym, swap_mass)
        (0, 0, 1.0, 0.0, 0.5),            # pure positional
        (0, 1, 1 - GAMMA, GAMMA, 0.5),    # pure positional, on the boundary
        (1, 0, 0.0, 1.0, 0.3),            # pure symbolic
        (1, 1, 1.0, 0.0, MIN_MASS / 2),   # would be positional but is read on almost nothing
        (1, 2, 0.6, 0.4, 0.2),            # mixed
    ]
    df = pd.DataFrame(rows, columns=["layer", "head", "s_pos", "s_sym", "swap_mass"]).assign(tau=1e-4, entropy=0.5)
    return df.assign(**extra)


def test_counts_name_the_pure_and_the_uninformative_heads():
    lines = _heads_summary(_table())
    assert lines[0] == (f"5 heads: 2 pure positional, 1 pure symbolic (γ = {GAMMA:g}) among the 4 with swap mass "
                        f">= {MIN_MASS:g}; 1 uninformative (swap mass < {MIN_MASS:g})")
    assert lines[1] == "  pure positional: L0.H0, L0.H1" and lines[2] == "  pure symbolic: L1.H0"
    assert lines[-1].startswith("attention sinks: not read by scores (the start token is kept out")
    assert "reads as pure symbolic" in _heads_summary(_table(), "none")[-1]


def test_sinks_where_known_per_prompt_means_and_several_interventions():
    sinks = _heads_summary(_table(is_sink=[0, 0, 1, 0, 0]))
    assert "  attention sinks: L1.H0" in sinks and not any(l.startswith("attention sinks: not") for l in sinks)
    second = _table(prompt=1)
    second.loc[second["layer"] == 0, "s_pos"] = 0.5  # L0.H0, L0.H1: mean s_POS 0.75 and 0.7
    per_prompt = pd.concat([_table(prompt=0), second])
    assert _heads_summary(per_prompt)[0].startswith("5 heads: 0 pure positional, 1 pure symbolic")
    both = pd.concat([_table(intervention="none"), _table(intervention="ntk:kappa=4").assign(swap_mass=0.0)])
    lines = _heads_summary(both)
    assert lines[0] == "== none, tau 0.0001" and "== ntk:kappa=4, tau 0.0001" in lines
    assert any(l.endswith("5 uninformative (swap mass < 0.01)") for l in lines)


def test_many_pure_heads_are_cut_short():
    df = pd.DataFrame({"layer": 0, "head": range(30), "s_pos": 1.0, "s_sym": 0.0, "swap_mass": 1.0, "tau": 1e-4})
    assert _heads_summary(df)[1].endswith(", … (30 in all)")


def test_the_printed_text_puts_the_summary_first_and_the_table_in_the_file(tmp_path, capsys):
    torch.set_num_threads(1)
    model = build_family("llama", vocab_size=40)
    save_model(model, tmp_path / "bare")
    (tmp_path / "ids.txt").write_text("1 5 6 7 8 9 10 11\n1 12 13 14 15 16 17 18 19\n")
    assert main(["scores", "--model", str(tmp_path / "bare"), "--ids", str(tmp_path / "ids.txt"),
                 "--out", str(tmp_path / "s.csv")]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out.splitlines()
    table = pd.read_csv(tmp_path / "s.csv")
    n_heads = len(table.groupby(["layer", "head"]))
    assert n_heads > FIRST_ROWS
    assert out[0].startswith(f"{n_heads} heads: ") and "pure positional" in out[0] and "uninformative" in out[0]
    assert out[1].startswith("  pure positional: ") and out[2].startswith("  pure symbolic: ")
    assert out[3].startswith("attention sinks: not read by scores")
    assert out[4] == f"first {FIRST_ROWS} of {n_heads} rows (all of them in the file):"
    rows = out[out.index(out[4]) + 1:]
    wrote = next(i for i, l in enumerate(rows) if l.startswith("wrote "))
    assert wrote <= FIRST_ROWS + 2  # a header (two lines for a grouped table) and at most FIRST_ROWS rows
    assert rows[wrote] == f"wrote {len(table)} rows to {tmp_path / 's.csv'}"
    assert rows[wrote + 1] == f"2 sequences of {tmp_path / 'ids.txt'}, token swaps"
    assert len(out) < 20


@pytest.mark.parametrize("args", [[], ["--per-prompt"]])
def test_the_summary_counts_equal_the_files_table(tmp_path, capsys, args):
    from posym.heads.dynamics import classify

    torch.set_num_threads(1)
    save_model(build_family("llama", vocab_size=40), tmp_path / "bare")
    (tmp_path / "ids.txt").write_text("1 5 6 7 8 9 10 11\n1 12 13 14 15 16 17 18\n")
    assert main(["scores", "--model", str(tmp_path / "bare"), "--ids", str(tmp_path / "ids.txt"), *args,
                 "--out", str(tmp_path / "s.csv")]) == 0, capsys.readouterr().err
    first = capsys.readouterr().out.splitlines()[0]
    heads = pd.read_csv(tmp_path / "s.csv").groupby(["layer", "head"])[["s_pos", "s_sym", "swap_mass"]].mean()
    kept = heads[heads["swap_mass"] >= MIN_MASS]
    kind = classify(kept["s_pos"], kept["s_sym"], GAMMA)
    assert first == (f"{len(heads)} heads: {(kind == 'positional').sum()} pure positional, "
                     f"{(kind == 'symbolic').sum()} pure symbolic (γ = {GAMMA:g}) among the {len(kept)} with swap "
                     f"mass >= {MIN_MASS:g}; {len(heads) - len(kept)} uninformative (swap mass < {MIN_MASS:g})")
