"""Every analysis on a researcher's own model (issue 35): a tiny Llama and a tiny Qwen3 trained with the
HF ``Trainer`` + ``PositionalSymbolicCallback`` into an ``output_dir``, then every analysis verb on that
``output_dir`` (length generalization, the interventions study and its page, frequencies, ablation,
flow, trained-head discrepancy, select, the encodings study and the sensitivity study), and the
refusals before any work (another vocabulary, an unsupported family)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Trainer, TrainingArguments)

from posym.cli import main
from posym.integrations import PositionalSymbolicCallback
from posym.runs import layout

from test_hf_callback import AnswerDataset

pytestmark = pytest.mark.integration

SHAPE = dict(vocab_size=137, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def build(family: str):
    torch.manual_seed(0)
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(**SHAPE))
    return Qwen3ForCausalLM(Qwen3Config(head_dim=8, **SHAPE))


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def output_dir(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "hf-run"
    args = TrainingArguments(output_dir=str(out), max_steps=20, per_device_train_batch_size=16, learning_rate=3e-3,
                             eval_strategy="steps", eval_steps=10, save_strategy="steps", save_steps=10,
                             logging_steps=10, report_to=[], use_cpu=True, seed=0, data_seed=0,
                             load_best_model_at_end=True, metric_for_best_model="eval_loss",
                             dataloader_num_workers=0, disable_tqdm=True, per_device_eval_batch_size=64)
    Trainer(model=build(request.param), args=args, train_dataset=AnswerDataset("train", 320),
            eval_dataset=AnswerDataset("val", 32), callbacks=[PositionalSymbolicCallback("number", n=16)]).train()
    return out


def test_every_analysis_verb_on_a_trainer_output_dir(output_dir, tmp_path, capsys):
    out = output_dir
    grid = ["--grid", "0,20"]
    assert main(["lengthgen", str(out), *grid, "--n", "16", "--out", str(tmp_path / "lg.csv")]) == 0
    lg = pd.read_csv(tmp_path / "lg.csv")
    assert sorted(lg["extra_tokens"]) == [0, 20] and set(lg["task"]) == {"number"}
    assert main(["lengthgen", str(out), "--step", "10", *grid, "--n", "16", "--out", str(tmp_path / "lg10.csv")]) == 0
    assert set(pd.read_csv(tmp_path / "lg10.csv")["step"]) == {10}

    iv = tmp_path / "iv"
    assert main(["interventions", str(out), "--out", str(iv), *grid, "--n", "16", "--heads-n", "4",
                 "--heads-lengths", "0", "--intervene", "temperature:beta=0.5", "--quiet"]) == 0
    assert (iv / layout.INTERVENTIONS_HTML).is_file()
    study = pd.read_csv(iv / layout.INTERVENTIONS)
    assert set(study["intervention"]) >= {"none", "temperature:beta=0.5,n_train=17,floor=1"}
    assert json.loads((iv / layout.INTERVENTIONS_JSON).read_text())["calls"][0]["architectures"]

    fq = tmp_path / "fq"
    assert main(["freqs", str(out), "--n", "8", "--out", str(fq)]) == 0
    freq = pd.read_csv(fq / layout.FREQ_TABLE)
    assert len(freq) == 2 * 4  # every (layer, head)

    ab = tmp_path / "ab"
    assert main(["ablate", str(out), "--n", "32", "--out", str(ab)]) == 0
    assert len(pd.read_csv(ab / layout.ABLATION)) > 0
    fl = tmp_path / "fl"
    assert main(["flow", str(out), "--out", str(fl)]) == 0
    assert any(fl.rglob("*.png"))

    th = tmp_path / "th"
    assert main(["theory", "discrepancy", "--run", str(out), "--grid", "0,20", "--n", "4", "--out", str(th)]) == 0
    trained = pd.read_csv(th / "trained_discrepancy.csv")
    assert set(trained["extra_tokens"]) == {0, 20} and len(trained) == 2 * 2 * 4

    # select: the Trainer's best checkpoint (load_best_model_at_end) as a derived run, laid out as a
    # reproduction (DIR/number/seed0) for the encodings and sensitivity studies
    repro = tmp_path / "repro"
    derived = repro / "number" / "seed0"
    assert main(["select", str(out), "--out", str(derived), "--n-test", "64"]) == 0
    best = json.loads((out / "checkpoint-20" / layout.HF_TRAINER_STATE).read_text())["best_model_checkpoint"]
    res = json.loads((derived / layout.RESULTS).read_text())
    assert res["final_step"] == int(best.rsplit("-", 1)[1]) and 0 <= res["test"]["acc"] <= 1
    # the per-run stages of reproduce find it trained (its train stage: "already trained") and analyse it
    assert main(["reproduce", "--preset", "quick", "--no-llm", "--tasks", "number", "--seeds", "1", "--quiet",
                 "--stages", "train,dynamics,flow,ablate,freqs,lengthgen", "--set", "lengthgen_grid=0,20",
                 "--set", "lengthgen_n=16", "--set", "ablation_n=32", "--set", "freqs_n=8", "--out", str(repro)]) == 0
    for name in (layout.LENGTHGEN, layout.ABLATION, layout.FREQ_TABLE):
        assert (derived / name).is_file(), name
    assert main(["pe-study", f"rope={repro}", "--out", str(tmp_path / "pe")]) == 0
    assert (tmp_path / "pe" / layout.PE_STUDY).is_file()
    assert main(["report", str(repro)]) == 0
    assert main(["sensitivity", f"mine={repro}", f"table={tmp_path / 'lg.csv'}", "--out", str(tmp_path / "sens"),
                 "--n", "8"]) == 0
    assert (tmp_path / "sens" / layout.SENSITIVITY).is_file()


def test_another_vocabulary_or_family_is_refused_before_any_work(tmp_path, capsys):
    small = tmp_path / "small-vocab"
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**{**SHAPE, "vocab_size": 50})).save_pretrained(small)
    gpt2 = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(vocab_size=137, n_embd=32, n_layer=1, n_head=2, n_positions=64)).save_pretrained(gpt2)
    verbs = [["lengthgen", "{m}", "--task", "number", "--out", str(tmp_path / "x.csv")],
             ["freqs", "{m}", "--task", "number", "--out", str(tmp_path / "f")],
             ["ablate", "{m}", "--task", "number", "--out", str(tmp_path / "a")],
             ["flow", "{m}", "--task", "number", "--out", str(tmp_path / "fl")],
             ["interventions", "{m}", "--task", "number", "--out", str(tmp_path / "iv")],
             ["theory", "discrepancy", "--run", "{m}", "--task", "number", "--out", str(tmp_path / "th")]]
    for model, why in ((small, "vocab_size 50 < "), (gpt2, "'gpt2' model, which posym cannot read")):
        for argv in verbs:
            capsys.readouterr()
            try:
                rc = main([a.format(m=model) for a in argv])
            except SystemExit as exc:
                rc = exc.code
            assert rc == 2, argv
            err = capsys.readouterr().err.strip()
            assert why in err and len(err.splitlines()) == 1, (argv, err)
    left = [p.name for p in tmp_path.iterdir() if p.name not in ("small-vocab", "gpt2")]
    assert left == [], left  # nothing written by a refused call


def test_one_interventions_study_never_averages_two_architectures(tmp_path):
    from posym.errors import PosymError
    from posym.studies.intervention_study import interventions

    folders = {}
    for family in ("llama", "qwen3"):
        folders[family] = tmp_path / family
        build(family).save_pretrained(folders[family])
    out = tmp_path / "iv"
    with pytest.raises(PosymError, match="one interventions study averages one architecture: .*llama.*qwen3"):
        interventions(list(folders.values()), out, task="number", grid=[0], n=4, heads_lengths=[], progress=False)
    assert not out.exists()  # refused before any work
    interventions([folders["llama"]], out, task="number", intervene=["none"], grid=[0], n=4, heads_lengths=[],
                  progress=False)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(PosymError, match=r"llama .*measured into .* before.* qwen3"):
        interventions([folders["qwen3"]], out, task="number", intervene=["none"], grid=[0], n=4, heads_lengths=[],
                      progress=False)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing of the first study lost
