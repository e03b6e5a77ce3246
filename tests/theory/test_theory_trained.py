"""Discrepancy of trained heads: last-query logits vs the model's own attention, tables, CLI."""

import numpy as np
import pytest
import torch

from posym.cli import main
from posym.errors import PosymError
from posym.model import build_model, model_config, save_model
from posym.tasks import generate
from posym.theory.trained import head_discrepancy, last_query_logits, trained_discrepancy

torch.set_num_threads(1)


def _tiny(vocab=137, seed=0):
    cfg = model_config("quick", vocab, n_layer=2, n_embd=32, n_inner=64, n_head=4, rotary_dim=4)
    m = build_model(cfg, seed=seed).eval()
    with torch.no_grad():  # sharpen the random attention so margins are far from zero
        for block in m.transformer.h:
            block.attn.q_proj.weight.mul_(8.0)
    return m


def _delta_from_attentions(model, ids):
    """Independent path: Δ = log p_max − log p_second of the model's own softmax weights."""
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(ids), output_attentions=True, use_cache=False)
    att = torch.stack(out.attentions)[:, :, :, -1].double()  # [L, B, H, T]
    logp = att.log()
    top2 = logp.topk(2, dim=-1).values
    return (top2[..., 0] - top2[..., 1]).permute(1, 0, 2).numpy()  # [B, L, H]


def test_last_query_logits_match_model_attention():
    m = _tiny()
    ids = generate("number", 6, 0).input_ids
    logits = last_query_logits(m, ids)  # [L, B, H, T]
    assert logits.shape == (2, 6, 4, ids.shape[1])
    with torch.no_grad():
        att = torch.stack(m(input_ids=torch.as_tensor(ids), output_attentions=True, use_cache=False).attentions)
    assert torch.allclose(torch.softmax(logits, -1), att[:, :, :, -1].float(), atol=1e-5)


def test_head_discrepancy_equals_log_probability_gap():
    m = _tiny()
    ids = generate("letter", 5, 1, extra_tokens=10).input_ids
    d = head_discrepancy(m, ids, batch_size=2)
    ref = _delta_from_attentions(m, ids)
    assert d.shape == (5, 2, 4) and np.isfinite(d).all() and (d > 0).all()
    assert np.allclose(d, ref, atol=1e-4)


def test_trained_discrepancy_table_beyond_training_length():
    m = _tiny()
    grid = [0, 20, 700]  # +700 is beyond the preset's n_positions: rotary tables are rebuilt
    t = trained_discrepancy(m, "number", grid=grid, n=4, progress=False)
    assert len(t) == len(grid) * 2 * 4
    assert sorted(t["extra_tokens"].unique()) == grid and t["seq_len"].is_monotonic_increasing
    assert (t["delta_min"] <= t["delta_median"] + 1e-12).all() and (t["delta_min"] > 0).all()
    with pytest.raises(PosymError, match="n >= 1"):
        trained_discrepancy(m, "number", grid=[0], n=0, progress=False)


def test_cli_trained_discrepancy(tmp_path, capsys):
    save_model(_tiny(), tmp_path / "hf")
    out = tmp_path / "theory"
    main(["theory", "discrepancy", "--out", str(out), "--run", str(tmp_path / "hf"), "--task", "letter",
          "--grid", "0,10", "--n", "3", "--n-max", "20"])
    assert (out / "discrepancy.csv").exists() and (out / "trained_discrepancy.csv").exists()
    assert (out / "trained_discrepancy.png").stat().st_size > 1000
    assert "trained heads" in capsys.readouterr().out
