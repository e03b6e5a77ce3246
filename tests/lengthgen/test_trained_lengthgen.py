"""Length generalization of trained GPT-J (SPEC §1.4, Fig. 5B): rotary rebuild, grid, tables."""

import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.lengthgen.trained import (PAPER_GRID, extend_positions, largest_length_above, lengthgen, parse_grid,
                                     summarize_lengthgen)
from posym.verbs.lengthgen import lengthgen as lengthgen_verb
from posym.model import build_model, last_token_logits, model_config, reference_last_token_logits, save_model
from posym.tasks import generate


def _tiny(vocab=137):
    return build_model(model_config("quick", vocab, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32), seed=0).eval()


def test_paper_grid():
    assert PAPER_GRID[:3] == (0, 10, 20) and 100 in PAPER_GRID and 1000 in PAPER_GRID and PAPER_GRID[-1] == 5000
    assert len(PAPER_GRID) == 11 + 9 + 8
    assert parse_grid("0,200, 1000") == [0, 200, 1000]
    with pytest.raises(PosymError, match="bad grid"):
        parse_grid("0,a")


def test_rotary_rebuild_keeps_original_logits_and_matches_hf_at_long_length():
    m = _tiny()
    x = torch.as_tensor(generate("number", 4, 0).input_ids)
    with torch.no_grad():
        before_fast, before_hf = last_token_logits(m, x), reference_last_token_logits(m, x)
        extend_positions(m, 700)
        assert m.transformer.rotary_emb.embed_positions.shape[0] == 700
        assert torch.equal(last_token_logits(m, x), before_fast)
        assert torch.equal(reference_last_token_logits(m, x), before_hf)
        long = torch.as_tensor(generate("letter", 3, 0, extra_tokens=600).input_ids)
        assert long.shape[1] == 617
        diff = (last_token_logits(m, long) - reference_last_token_logits(m, long)).abs().max().item()
    assert diff <= 1e-5


def test_lengthgen_table_and_summary(tmp_path):
    m = _tiny(129)
    t = lengthgen(m, "letter", [0, 30], n=16, seeds=2, progress=False)
    assert list(t["extra_tokens"]) == [0, 0, 30, 30] and list(t["seed"]) == [0, 1, 0, 1]
    assert ((t["acc"] >= 0) & (t["acc"] <= 1)).all() and {"acc_hop4", "seconds", "peak_rss_mb"} <= set(t.columns)
    s = summarize_lengthgen(t)
    assert list(s["n_seeds"]) == [2, 2] and "acc_sd" in s


def test_largest_length_above():
    s = pd.DataFrame({"extra_tokens": [0, 100, 500, 800, 1000], "acc_mean": [1.0, 0.95, 0.91, 0.85, 0.92]})
    assert largest_length_above(s, 0.9) == 500
    assert largest_length_above(s.assign(acc_mean=0.5), 0.9) is None


def test_lengthgen_verb_on_foreign_checkpoint(tmp_path):
    save_model(_tiny(), tmp_path / "hf")  # an HF GPT-J dir posym did not write: needs --task
    with pytest.raises(PosymError, match="task"):
        lengthgen_verb(tmp_path / "hf", grid="0", n=4, progress=False)
    t = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=8, progress=False).table
    assert (tmp_path / "hf/lengthgen.csv").is_file() and (tmp_path / "hf/lengthgen_summary.csv").is_file()
    assert (tmp_path / "hf/figures/lengthgen_fig5b.png").is_file()  # the same place posym reproduce uses
    assert set(t["task"]) == {"number"} and set(t["extra_rule"]) == {"window"}
    before = (tmp_path / "hf/lengthgen.csv").read_bytes()
    with pytest.raises(PosymError, match="exists"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, progress=False)
    assert (tmp_path / "hf/lengthgen.csv").read_bytes() == before
    again = lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, extra_rule="copies", force=True,
                           progress=False).table
    assert set(again["extra_rule"]) == {"copies"}
