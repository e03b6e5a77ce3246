"""``posym scores --model DIR`` on checkpoints of several RoPE families (SPEC §3; docs/models.md): a
user who trains a small Llama / Gemma-3 / ... on the number task scores it as posym's GPT-J, and
unsupported families get one line naming the supported ones."""

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.errors import PosymError
from posym.heads.tracking import score_table
from posym.model import load_causal_lm, save_model
from posym.tasks.export import export_jsonl, read_prompt_ids
from posym.tasks.vocab import get_vocab
from family_models import build_family

NUMBER_VOCAB = get_vocab("number").size


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return export_jsonl("number", "val", 4, tmp_path_factory.mktemp("prompts") / "p.jsonl")


def _save(name, directory):
    model = build_family(name, vocab_size=NUMBER_VOCAB)
    save_model(model, directory)  # save_pretrained without progress bars
    return model


def _err(capsys):
    return [l for l in capsys.readouterr().err.splitlines() if l.strip()]


@pytest.mark.parametrize("name", ["llama", "gemma3_text", "qwen3", "phi3", "smollm3", "olmo2"])
def test_scores_cli_any_family(name, prompts, tmp_path, capsys):
    model = _save(name, tmp_path / "model")
    out = tmp_path / "scores.csv"
    argv = ["scores", "--model", str(tmp_path / "model"), "--task", "number", "--prompts", str(prompts), "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    df = pd.read_csv(out)
    assert sorted(zip(df["layer"], df["head"])) == [(l, h) for l in range(4) for h in range(4)]
    assert (df["n_prompts"] == 4).all() and np.isfinite(df[["s_pos", "s_sym", "entropy"]].to_numpy()).all()
    # the loaded checkpoint scores as the in-memory model does
    ref = score_table(model, read_prompt_ids(prompts, "number"))
    np.testing.assert_allclose(df[["s_pos", "s_sym"]].to_numpy(), ref[["s_pos", "s_sym"]].to_numpy(), atol=1e-9)


def test_unsupported_families_refuse_in_one_line(tmp_path, capsys):
    """(``ablate`` / ``flow`` read every family now: tests/verbs/test_ablate_flow_families.py.)"""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("codegen", vocab_size=NUMBER_VOCAB, n_embd=32, n_layer=1, n_head=2, rotary_dim=8,
                               n_positions=32)
    save_model(AutoModelForCausalLM.from_config(cfg), tmp_path / "codegen")
    assert main(["scores", "--model", str(tmp_path / "codegen"), "--task", "number", "--n", "4",
                 "--out", str(tmp_path / "s.csv")]) == 2
    err = _err(capsys)
    assert len(err) == 1 and "'codegen' model, which posym cannot read" in err[0] and "gemma3_text" in err[0]


def test_load_causal_lm_refuses_weights_that_do_not_match(tmp_path):
    _save("llama", tmp_path / "m")
    cfg = tmp_path / "m" / "config.json"
    cfg.write_text(cfg.read_text().replace('"num_hidden_layers": 4', '"num_hidden_layers": 5'))
    with pytest.raises(PosymError, match="does not match its config.json: .* missing"):
        load_causal_lm(tmp_path / "m")


def test_scores_cli_gemma3_under_interventions_and_refusals(prompts, tmp_path, capsys):
    """A Gemma-3 checkpoint (q/k norms, two RoPE bases) scored under ntk and temperature: one row block
    per intervention, the `none` rows equal the plain call; one theta for two bases and a soft-capped
    family are refused in one line before anything is written."""
    _save("gemma3_text", tmp_path / "g3")
    base = ["scores", "--model", str(tmp_path / "g3"), "--task", "number", "--prompts", str(prompts)]
    assert main(base + ["--out", str(tmp_path / "plain.csv")]) == 0, capsys.readouterr().err
    out = tmp_path / "iv.csv"
    assert main(base + ["--out", str(out), "--intervene", "none", "--intervene", "ntk:kappa=4",
                        "--intervene", "temperature:beta=1,n_train=5"]) == 0, capsys.readouterr().err
    df, plain = pd.read_csv(out), pd.read_csv(tmp_path / "plain.csv")
    assert list(dict.fromkeys(df["intervention"])) == ["none", "ntk:kappa=4", "temperature:beta=1,n_train=5,floor=1"]
    none = df[df["intervention"] == "none"].reset_index(drop=True)
    np.testing.assert_array_equal(none[["s_pos", "s_sym"]].to_numpy(), plain[["s_pos", "s_sym"]].to_numpy())
    for iv in ("ntk:kappa=4", "temperature:beta=1,n_train=5,floor=1"):
        assert not np.allclose(df[df["intervention"] == iv]["s_pos"].to_numpy(), none["s_pos"].to_numpy(), atol=1e-6)
    capsys.readouterr()
    _save("gemma2", tmp_path / "g2")
    for model, spec, msg in [("g3", "rope-base:theta=20000", "2 RoPE bases"), ("g2", "temperature:beta=1", "not supported")]:
        bad = tmp_path / f"bad-{model}.csv"
        assert main(["scores", "--model", str(tmp_path / model), "--task", "number", "--prompts", str(prompts),
                     "--out", str(bad), "--intervene", spec]) == 2
        err = _err(capsys)
        assert len(err) == 1 and msg in err[0] and not bad.exists(), err
