"""``lengthgen --resume`` keeps only rows of the same model and data settings, from a sound table
(docs/reliability.md, "Every table knows what it measured")."""

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.model import build_model, model_config, save_model
from posym.runs.digest import weights_digest
from posym.runs.layout import write_meta
from posym.verbs.lengthgen import lengthgen


def _model_dir(path, seed=0, vocab=137):
    cfg = model_config("quick", vocab, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32)
    save_model(build_model(cfg, seed=seed).eval(), path)
    return path


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return _model_dir(root / "a", seed=0), _model_dir(root / "b", seed=1)


def _table(model, out, **kw):
    return lengthgen(model, task="number", grid="0,20", n=4, seeds=2, out=out, progress=False, **kw).table


def test_rows_carry_the_models_identity(two_models, tmp_path):
    a, _ = two_models
    t = _table(a, tmp_path / "lg.csv")
    assert set(t["weights"]) == {weights_digest(a)} and len(weights_digest(a)) == 16
    assert set(t["distractors"]) == {"pool"} and list(pd.read_csv(tmp_path / "lg.csv").columns) == list(t.columns)


def test_resume_refuses_another_models_points(two_models, tmp_path):
    a, b = two_models
    out = tmp_path / "lg.csv"
    _table(a, out)
    before = out.read_bytes()
    with pytest.raises(PosymError, match=f"measured otherwise.*weights {weights_digest(a)}.*now.*weights "
                                         f"{weights_digest(b)}.*--force"):
        lengthgen(b, task="number", grid="0,20,40", n=4, seeds=2, out=out, resume=True, progress=False)
    assert out.read_bytes() == before
    t = lengthgen(b, task="number", grid="0,20", n=4, seeds=2, out=out, resume=True, force=True, progress=False).table
    assert set(t["weights"]) == {weights_digest(b)} and len(t) == 4  # --force replaces the other model's rows


def test_the_letter_distractor_rule_is_part_of_the_identity(tmp_path):
    m = _model_dir(tmp_path / "m", vocab=129)
    write_meta(m, {"task": "letter", "config": {"distractors": "pool"}})
    out = tmp_path / "lg.csv"
    lengthgen(m, grid="0", n=4, out=out, progress=False)
    write_meta(m, {"task": "letter", "config": {"distractors": "uniform"}})
    with pytest.raises(PosymError, match="distractors pool.*now.*distractors uniform"):
        lengthgen(m, grid="0,20", n=4, out=out, resume=True, progress=False)


def test_a_table_without_the_identity_columns_is_refused(two_models, tmp_path):
    a, _ = two_models
    out = tmp_path / "lg.csv"
    _table(a, out)
    pd.read_csv(out).drop(columns=["weights", "distractors"]).to_csv(out, index=False)
    before = out.read_bytes()
    with pytest.raises(PosymError, match="no weights, distractors column.*older posym.*--force"):
        _table(a, out, resume=True)
    assert out.read_bytes() == before
    assert "weights" in _table(a, out, resume=True, force=True)  # --force measures afresh


def _set(col, row, value):
    def edit(d):
        d[col] = d[col].astype(object)
        d.loc[row, col] = value
        return d
    return edit


CORRUPTIONS = {
    "acc 7.5": (_set("acc", 0, 7.5), "row 1: acc = '7.5' is not a number in \\[0, 1\\]"),
    "acc NaN": (_set("acc", 1, float("nan")), "row 2: acc = '' is not a number in \\[0, 1\\]"),
    "acc abc": (_set("acc", 2, "abc"), "row 3: acc = 'abc' is not a number"),
    "seed -3": (_set("seed", 1, -3), "row 2: seed = '-3' is not an integer >= 0"),
    "n 0": (_set("n", 0, 0), "row 1: n = '0' is not an integer >= 1"),
    "duplicate": (lambda d: pd.concat([d, d.iloc[[1]]]), "rows 2 and 5 repeat the point intervention none, extra_tokens 0, seed 1"),
    "missing column": (lambda d: d.drop(columns=["acc_hop1"]), "lacks the column\\(s\\) acc_hop1"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS) + ["torn line"])
def test_resume_refuses_a_corrupt_table_naming_row_and_column(two_models, tmp_path, name):
    a, _ = two_models
    out = tmp_path / "lg.csv"
    _table(a, out)
    if name == "torn line":
        out.write_bytes(out.read_bytes()[:-12])
        needle = "row 4: the line is torn"
    else:
        edit, needle = CORRUPTIONS[name]
        edit(pd.read_csv(out)).to_csv(out, index=False)
    before = out.read_bytes()
    with pytest.raises(PosymError, match=needle) as err:
        _table(a, out, resume=True)
    assert "\n" not in str(err.value) and "--force" in str(err.value)
    assert out.read_bytes() == before
    t = _table(a, out, resume=True, force=True)  # --force replaces the corrupt table
    assert len(t) == 4 and t["acc"].between(0, 1).all()
