"""``posym freqs`` and ``posym theory discrepancy --run`` on model folders of other RoPE families
(SPEC §4; docs/models.md): tiny Llama (GQA), Qwen3 (QK-norm), Gemma-3 (QK-norm, sliding/full layers
with their own bases) and GPT-NeoX (partial rotary, per-head fused qkv) saved with ``save_pretrained``
and analysed with ``--task number``, as posym's GPT-J is."""

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.errors import PosymError
from posym.heads.frequencies import frequency_use, weighted_frequency_id
from posym.model.adapters import get_adapter
from posym.model import save_model
from posym.tasks import generate, make_split
from posym.tasks.vocab import get_vocab
from posym.theory.trained import check_grid, head_discrepancy
from family_models import build_family

NUMBER_VOCAB = get_vocab("number").size
FAMILIES = ["llama", "qwen3", "gemma3_text", "gpt_neox"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """name -> (model in memory, its saved folder)."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    for name in FAMILIES:
        model = build_family(name, vocab_size=NUMBER_VOCAB)
        save_model(model, root / name)
        out[name] = (model, root / name)
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_freqs_on_a_family_folder(name, folders, tmp_path, capsys):
    model, folder = folders[name]
    out = tmp_path / "freqs"
    argv = ["freqs", str(folder), "--task", "number", "--n", "8", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    geo = [f for f in files if f.startswith("qk_geometry_L") and f.endswith(".csv")]
    assert len(geo) == 1
    for f in ["freq_use.csv", "freq_table.csv", "freq_scores.csv", "figures/freq_use.png", "figures/freq_use.pdf",
              f"figures/{geo[0][:-4]}.png"]:
        assert f in files, f
    ad = get_adapter(model)
    use = pd.read_csv(out / "freq_use.csv")
    K = ad.rotary_dim // 2
    assert len(use) == ad.n_layers * ad.n_heads * (K + (ad.head_dim > ad.rotary_dim))
    rot = use[use["rotary"]]
    assert np.allclose(rot.groupby(["layer", "head"])["use_frac"].sum(), 1.0)
    for l in range(ad.n_layers):  # each layer's own angles (Gemma-3: 10k sliding / 1M full)
        got = rot[(rot["layer"] == l) & (rot["head"] == 0)].sort_values("freq_id")["angle"].to_numpy()
        assert np.allclose(got, ad.layer_inv_freq(l).numpy())
    # the folder is analysed as the model in memory is
    batch = make_split("number", "test", seed=0, n=8)
    ref = weighted_frequency_id(frequency_use(model, batch.input_ids))
    table = pd.read_csv(out / "freq_table.csv")
    np.testing.assert_allclose(table[ref.columns].to_numpy(float), ref.to_numpy(float), rtol=1e-6, equal_nan=True)
    sc = pd.read_csv(out / "freq_scores.csv")
    assert sc[["s_pos", "s_sym"]].notna().all().all()
    if name == "gemma3_text":  # the full layer's slowest pair is slower than the sliding layer's
        assert rot[rot["layer"] == 1]["angle"].min() < rot[rot["layer"] == 0]["angle"].min()


@pytest.mark.parametrize("name", FAMILIES)
def test_head_discrepancy_of_a_family_is_its_log_probability_gap(name, folders):
    """Δ of the last query from posym's logits == log p_max − log p_second of the model's own softmax."""
    model, _ = folders[name]
    ids = torch.as_tensor(generate("number", 4, 1, extra_tokens=5).input_ids)
    d = head_discrepancy(model, ids, batch_size=2)
    with torch.no_grad():
        att = torch.stack(model(input_ids=ids, output_attentions=True, use_cache=False).attentions)[:, :, :, -1]
    top2 = att.double().log().topk(2, dim=-1).values
    ref = (top2[..., 0] - top2[..., 1]).permute(1, 0, 2).numpy()
    assert d.shape == ref.shape and np.isfinite(d).all()
    assert np.allclose(d, ref, atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_theory_discrepancy_run_on_a_family_folder(name, folders, tmp_path, capsys):
    _, folder = folders[name]
    out = tmp_path / "theory"
    # +60 added tokens: past the tiny models' 64 max_position_embeddings (their rotary is computed on the fly)
    argv = ["theory", "discrepancy", "--out", str(out), "--run", str(folder), "--task", "number", "--grid", "0,60",
            "--n", "3", "--n-max", "20"]
    assert main(argv) == 0, capsys.readouterr().err
    assert "trained heads" in capsys.readouterr().out
    t = pd.read_csv(out / "trained_discrepancy.csv")
    assert len(t) == 2 * 4 * 4 and sorted(t["extra_tokens"].unique()) == [0, 60] and t["seq_len"].max() > 64
    assert np.isfinite(t[["delta_mean", "delta_median", "delta_min"]].to_numpy()).all()
    assert (out / "trained_discrepancy.png").is_file()


def test_theory_run_refuses_a_length_past_a_rotary_cap_before_any_work(folders, tmp_path, capsys):
    """Ministral-3's YaRN rotary stops at ``original_max_position_embeddings`` (16,384 here): a grid
    reaching past it is one line, before any table is computed or written; so is a negative length."""
    model = build_family("ministral3", vocab_size=NUMBER_VOCAB)
    save_model(model, tmp_path / "m3")
    out = tmp_path / "theory"
    base = ["theory", "discrepancy", "--out", str(out), "--run", str(folders["llama"][1]), "--run", str(tmp_path / "m3"),
            "--task", "number", "--n", "2"]
    assert main(base + ["--grid", "0,17000"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "[transformers]" not in line]
    assert len(err) == 1 and "17017 exceeds the model's 16384 positions" in err[0], err
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(PosymError, match="extra_tokens must be >= 0"):
        check_grid(folders["llama"][0], "number", [0, -3])
