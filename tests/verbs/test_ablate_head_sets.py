"""``posym ablate --heads SEL [--readout FILE]`` on a tiny Llama folder (GQA): the set ablated together,
the heads, selection, readout and seed recorded and printed; bad selections are one line and exit 2
before anything is written; without ``--heads`` the verb is unchanged."""

import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.heads.ablate import ABLATION_COLUMNS, ablate_head_set
from posym.model import save_model
from posym.tasks import get_vocab, make_split

from family_models import build_family


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    torch.set_num_threads(1)
    directory = tmp_path_factory.mktemp("llama") / "model"
    model = build_family("llama", vocab_size=get_vocab("number").size)
    save_model(model, directory)
    readout = directory.parent / "head_types.csv"
    rows = [{"layer": layer, "head": head, "posym_type": "mixed", "classic_type": "none", "is_sink": False}
            for layer in range(4) for head in range(4)]
    df = pd.DataFrame(rows)
    df.loc[[1, 2, 9], "posym_type"] = "positional"  # L0H1, L0H2, L2H1
    df.to_csv(readout, index=False)
    return directory, model, readout


def _err(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_ablate_a_type_and_its_matched_control(llama_dir, tmp_path, capsys):
    directory, model, readout = llama_dir
    out = tmp_path / "typed"
    assert main(["ablate", str(directory), "--task", "number", "--n", "8", "--modes", "zero", "--heads", "positional",
                 "--readout", str(readout), "--out", str(out)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "ablated together: L0H1+L0H2+L2H1 (selection positional, readout" in printed
    df = pd.read_csv(out / "ablation.csv")
    assert list(df.columns) == ["step", *ABLATION_COLUMNS, "heads", "selection", "readout", "seed"]
    assert list(df["mode"]) == ["none", "zero"] and set(df["heads"]) == {"L0H1+L0H2+L2H1"}
    ref = ablate_head_set(model, make_split("number", "test", seed=0, n=8), [(0, 1), (0, 2), (2, 1)], modes=("zero",))
    assert df["acc"].tolist() == ref["acc"].tolist()

    out2 = tmp_path / "control"
    assert main(["ablate", str(directory), "--task", "number", "--n", "8", "--modes", "zero", "--heads",
                 "random:positional,seed=4", "--readout", str(readout), "--out", str(out2)]) == 0
    assert ", seed 4)" in capsys.readouterr().out
    ctrl = pd.read_csv(out2 / "ablation.csv")
    heads = ctrl["heads"].iloc[0].split("+")
    assert len([h for h in heads if h.startswith("L0")]) == 2 and len([h for h in heads if h.startswith("L2")]) == 1
    assert not set(heads) & {"L0H1", "L0H2", "L2H1"} and set(ctrl["seed"]) == {4}

    out3 = tmp_path / "count"  # match=count: 3 heads anywhere outside the typed set, the documented draw
    assert main(["ablate", str(directory), "--task", "number", "--n", "8", "--modes", "zero", "--heads",
                 "random:positional,seed=4,match=count", "--readout", str(readout), "--out", str(out3)]) == 0
    from posym.heads.selection import format_heads, matched_control
    want = format_heads(matched_control([(0, 1), (0, 2), (2, 1)], 4, 4, 4, "positional", match="count"))
    assert set(pd.read_csv(out3 / "ablation.csv")["heads"]) == {want} and len(want.split("+")) == 3


@pytest.mark.parametrize("args, msg", [
    (["--heads", "L0H9"], "no head L0H9 in this model"),
    (["--heads", "positional"], "needs --readout FILE"),
    (["--heads", "induction", "--readout", "READOUT"], "has no induction head"),
    (["--heads", "retrieval"], "is not a selection"),
    (["--heads", "L0H1", "--no-out"], "give --out DIR other than the run directory"),
    (["--readout", "READOUT"], "give --heads too"),
])
def test_bad_selections_are_one_line_before_any_write(llama_dir, tmp_path, capsys, args, msg):
    directory, _, readout = llama_dir
    out = tmp_path / "bad"
    args = [str(readout) if a == "READOUT" else a for a in args]
    extra = [] if "--no-out" in args else ["--out", str(out)]
    args = [a for a in args if a != "--no-out"]
    assert main(["ablate", str(directory), "--task", "number", "--n", "4", *args, *extra]) == 2
    err = _err(capsys)
    assert len(err) == 1 and msg in err[0], err
    assert not out.exists() and not (directory / "ablation.csv").exists()
