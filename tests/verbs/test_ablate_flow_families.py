"""``posym ablate`` and ``posym flow`` on a model folder of another family (SPEC §7; docs/models.md): a
tiny Llama (GQA) saved with ``save_pretrained`` runs through the CLI as posym's GPT-J does and writes
its tables and figures; an unsupported family is one line before anything is written."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.heads.ablate import ABLATION_COLUMNS, ablate_heads
from posym.model import save_model
from posym.tasks import get_vocab, make_split
from family_models import build_family

NUMBER_VOCAB = get_vocab("number").size


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama") / "model"
    model = build_family("llama", vocab_size=NUMBER_VOCAB)
    save_model(model, directory)
    return directory, model


def _err(capsys):
    return [l for l in capsys.readouterr().err.splitlines() if l.strip()]


def test_ablate_cli_on_a_llama_folder(llama_dir, tmp_path, capsys):
    directory, model = llama_dir
    out = tmp_path / "abl"
    assert main(["ablate", str(directory), "--task", "number", "--n", "8", "--out", str(out)]) == 0, \
        capsys.readouterr().err
    df = pd.read_csv(out / "ablation.csv")
    assert list(df.columns) == ["step", *ABLATION_COLUMNS]
    assert len(df) == 1 + 2 * 4 * 4  # baseline + zero/mean x 4 layers x 4 query heads (2 kv heads)
    assert (out / "figures" / "ablation.png").stat().st_size > 0
    ref = ablate_heads(model, make_split("number", "test", seed=0, n=8))
    np.testing.assert_array_equal(df[ABLATION_COLUMNS[3:]].to_numpy(), ref[ABLATION_COLUMNS[3:]].to_numpy())


def test_flow_cli_on_a_llama_folder(llama_dir, tmp_path, capsys):
    directory, _ = llama_dir
    out = tmp_path / "flow"
    assert main(["flow", str(directory), "--task", "number", "--example", "2", "--out", str(out)]) == 0, \
        capsys.readouterr().err
    stem = out / "figures" / "flow-number-test-2"
    edges = pd.read_csv(f"{stem}.csv")
    assert len(edges) > 0 and set(edges["layer"]) <= set(range(4)) and set(edges["head"]) <= set(range(4))
    assert all((stem.parent / f"{stem.name}{ext}").stat().st_size > 0 for ext in (".png", ".pdf"))


def test_unsupported_family_is_one_line_before_any_work(tmp_path, capsys):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("codegen", vocab_size=NUMBER_VOCAB, n_embd=32, n_layer=1, n_head=2, rotary_dim=8,
                               n_positions=32)
    save_model(AutoModelForCausalLM.from_config(cfg), tmp_path / "codegen")
    (tmp_path / "codegen" / "posym.json").write_text(json.dumps({"task": "number"}))
    for verb in (["ablate", "--n", "4"], ["flow", "--example", "0"]):
        out = tmp_path / f"out-{verb[0]}"
        assert main([verb[0], str(tmp_path / "codegen"), *verb[1:], "--out", str(out)]) == 2
        err = _err(capsys)
        assert len(err) == 1 and "'codegen' model, which posym cannot read" in err[0], err
        assert not out.exists()
