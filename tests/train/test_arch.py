"""``posym train --arch`` (SPEC §2, docs/models.md "Training other families"): each family builds at the
preset's shape (read back through the RoPE adapter every analysis uses), trains with the same loop,
resumes exactly, tracks every head, writes strictly loadable HF checkpoints; what a family cannot
take (a --pe, an override) is a one-line PosymError before any work."""

import json
import math

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.model.arch import (ARCHS, GEMMA3_GLOBAL_BASE, GEMMA3_SLIDING_WINDOW, MODEL_TYPES, arch_config,
                              attention_implementation, build_arch_model, check_arch_pe)
from posym.model.causal_lm import load_causal_lm
from posym.model.fast import last_token_logits
from posym.model.gptj import model_config
from posym.train import make_config
from posym.train.config import TrainConfig
from posym.train.loop import _param_groups
from posym.verbs.train import train
from train_helpers import Interrupt, interrupt_at, kill_then_resume

torch.set_num_threads(1)
OTHERS = [a for a in ARCHS if a != "gptj"]
# 2 layers x 2 heads of dim 16; dropout on (the RNG streams must resume too); GPT-NeoX: partial rotary
SHAPE = dict(n_layer=2, n_head=2, n_embd=32, n_inner=64, rotary_dim=16, attn_pdrop=0.1)
TINY = dict(steps=16, eval_every=4, n_val=64, n_test=64, eval_batch_size=64, track_prompts=8, warmup=2, lr=3e-3,
            checkpoint_every=8)


def _shape(arch: str) -> dict:
    if arch == "gpt-neox":
        return {**SHAPE, "rotary_dim": 8, "resid_pdrop": 0.1, "embd_pdrop": 0.1}
    return dict(SHAPE)


def _metrics(run) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv").drop(columns="time_s")


@pytest.mark.parametrize("preset", ["quick", "paper"])
@pytest.mark.parametrize("arch", ARCHS)
def test_builds_at_the_preset_shape(arch, preset):
    cfg = arch_config(arch, preset, 137)
    model = build_arch_model(cfg, seed=0)
    ad = get_adapter(model)
    n_layer = 8 if preset == "quick" else 12
    assert (ad.n_layers, ad.n_heads, ad.n_kv_heads, ad.head_dim, ad.rotary_dim) == (n_layer, 1, 1, 128, 128)
    assert model.config.model_type == MODEL_TYPES[arch] and model.config.vocab_size == 137
    assert model.config._attn_implementation == "eager"
    assert model.get_input_embeddings().weight.data_ptr() != model.get_output_embeddings().weight.data_ptr()
    assert math.isclose(ad.scaling, 128 ** -0.5)
    for layer in range(n_layer):  # RoPE base 10,000 on every layer but Gemma-3's global ones
        base = GEMMA3_GLOBAL_BASE if arch == "gemma3" and (layer + 1) % 6 == 0 else 10000.0
        want = base ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
        torch.testing.assert_close(ad.layer_inv_freq(layer), want, rtol=1e-6, atol=0)
    if arch == "gptj":
        return
    c = model.config
    assert c.hidden_size == 128 and c.intermediate_size == 512 and c.max_position_embeddings == 128
    assert (c.pad_token_id, c.bos_token_id, c.eos_token_id, c.tie_word_embeddings) == (0, None, None, False)
    assert c.initializer_range == 0.02
    assert (c.layer_norm_eps if arch == "gpt-neox" else c.rms_norm_eps) == 1e-5
    drop = 0.1 if preset == "paper" else 0.0  # the preset's attn_pdrop (and GPT-NeoX's hidden_dropout)
    assert c.attention_dropout == drop and getattr(c, "hidden_dropout", drop) == drop
    if arch == "gemma3":
        assert [ad.sliding_window(i) for i in range(n_layer)] == [
            None if (i + 1) % 6 == 0 else GEMMA3_SLIDING_WINDOW for i in range(n_layer)]
        assert c.final_logit_softcapping is None and c.attn_logit_softcapping is None


def test_gpt_neox_partial_rotary_has_gptj_frequencies():
    shape = dict(n_head=2, n_embd=64, rotary_dim=8)
    neox = get_adapter(build_arch_model(arch_config("gpt-neox", "quick", 137, **shape)))
    gptj = get_adapter(build_arch_model(arch_config("gptj", "quick", 137, **shape)))
    assert (neox.head_dim, neox.rotary_dim, neox.pair_convention) == (32, 8, "half")
    assert gptj.pair_convention == "interleaved"
    torch.testing.assert_close(neox.inv_freq, gptj.inv_freq, rtol=1e-6, atol=0)


@pytest.mark.parametrize("arch", OTHERS)
def test_rope_base_sets_the_family_base(arch):
    if arch == "gemma3":
        with pytest.raises(PosymError, match="two RoPE bases") as info:
            make_config("number", arch=arch, pe="rope-base:1e6")
        assert "\n" not in str(info.value)
        return
    ad = get_adapter(build_arch_model(arch_config(arch, "quick", 137, pe="rope-base:500")))
    torch.testing.assert_close(ad.inv_freq, 500.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128),
                               rtol=1e-6, atol=0)
    assert make_config("number", arch=arch, pe="rope-base:500").pe == "rope-base:500"


@pytest.mark.parametrize("arch", OTHERS)
def test_sdpa_forward_equals_eager(arch):
    """The families' SDPA attention gives the eager logits to float tolerance (training keeps eager:
    docs/benchmarks.md measures the few percent SDPA would save)."""
    model = build_arch_model(arch_config(arch, "quick", 137), seed=1).eval()
    x = torch.randint(1, 137, (8, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eager = last_token_logits(model, x)
        with attention_implementation(model, "sdpa"):
            sdpa = last_token_logits(model, x)
    assert model.config._attn_implementation == "eager"
    torch.testing.assert_close(sdpa, eager, rtol=0, atol=1e-5)


def test_norm_weights_are_not_decayed():
    model = build_arch_model(arch_config("qwen3", "quick", 137, n_layer=1))
    decay, other = (g["params"] for g in _param_groups(model, 0.1))
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in other) == ["model.layers.0.input_layernorm.weight",
                                                   "model.layers.0.post_attention_layernorm.weight",
                                                   "model.layers.0.self_attn.k_norm.weight",
                                                   "model.layers.0.self_attn.q_norm.weight", "model.norm.weight"]
    assert len(decay) + len(other) == len(names)


@pytest.mark.parametrize("arch", OTHERS)
def test_trains_resumes_exactly_and_tracks_every_head(tmp_path, arch):
    cfg = make_config("letter", "quick", arch=arch, model_overrides=_shape(arch), **TINY)
    train(cfg, tmp_path / "full", progress=False)
    with pytest.raises(Interrupt):  # dies at the step-12 evaluation: newest trainer state is step 8
        train(cfg, tmp_path / "cut", progress=False, callbacks=[interrupt_at(12)])
    train(make_config("letter", "quick"), tmp_path / "cut", resume=True, progress=False)  # the stored config wins
    full, cut = tmp_path / "full", tmp_path / "cut"
    pd.testing.assert_frame_equal(_metrics(full), _metrics(cut), rtol=0, atol=0)
    wa = load_file(full / "checkpoints/step-000016/model.safetensors")
    wb = load_file(cut / "checkpoints/step-000016/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    sa, sb = pd.read_csv(full / "scores.csv"), pd.read_csv(cut / "scores.csv")
    pd.testing.assert_frame_equal(sa, sb, rtol=0, atol=0)
    assert len(sa) == 5 * 2 * 2  # evaluations 0, 4, ..., 16 x 2 layers x 2 heads (1 tau)
    assert sorted(set(zip(sa["layer"], sa["head"]))) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert json.loads((cut / "posym.json").read_text())["config"]["arch"] == arch
    ck = cut / "checkpoints/step-000016"
    raw = json.loads((ck / "config.json").read_text())
    assert raw["model_type"] == MODEL_TYPES[arch] and raw["posym_task"] == "letter"
    model = load_causal_lm(ck)  # eager, every weight tensor present and expected
    assert model.config._attn_implementation == "eager"
    own = model.state_dict()  # GPT-NeoX's checkpoint names its lm_head embed_out (transformers' own rename)
    assert len(own) == len(wb) and all(torch.equal(own[k.replace("embed_out.", "lm_head.")], wb[k]) for k in wb)
    if arch == "gpt-neox":
        assert get_adapter(model).rotary_dim == 8


@pytest.mark.parametrize("pe", ["nope", "p-rope:0.5", "randomized:64", "ssmax"])
def test_gptj_only_encodings_are_refused_in_one_line(pe):
    for arch in OTHERS:
        with pytest.raises(PosymError, match=rf"--pe {pe.split(':')[0]}\S* applies to --arch gptj only") as info:
            make_config("number", arch=arch, pe=pe)
        assert "\n" not in str(info.value)
    make_config("number", arch="gptj", pe=pe)
    with pytest.raises(PosymError, match="applies to --arch gptj only"):
        check_arch_pe("llama", pe)


@pytest.mark.parametrize("arch, overrides, message", [
    ("llama", {"activation_function": "relu"}, "activation_function do not apply to --arch llama"),
    ("qwen3", {"n_ctx": 64}, "n_ctx do not apply to --arch qwen3"),
    ("llama", {"rotary_dim": 64}, "rotary_dim=64 != head dim 128: --arch llama rotates the whole head"),
    ("gemma3", {"resid_pdrop": 0.1}, "resid_pdrop has no counterpart in --arch gemma3"),
    ("gpt-neox", {"embd_pdrop": 0.2}, "embd_pdrop=0.2 must equal resid_pdrop=0.0"),
    ("qwen3", {"n_head": 3}, "not divisible by n_head=3"),
    ("gpt-neox", {"rotary_dim": 7}, "must be even"),
])
def test_bad_overrides_are_one_line_errors(arch, overrides, message):
    with pytest.raises(PosymError, match=message) as info:
        make_config("number", arch=arch, model_overrides=overrides)
    assert "\n" not in str(info.value)


def test_unknown_arch_config_and_cli(tmp_path, capsys):
    from posym.cli import main

    with pytest.raises(PosymError, match="unknown arch 'mamba'; choose one of gptj, llama, qwen3, gemma3, gpt-neox"):
        make_config("number", arch="mamba")
    assert main(["train", "--task", "number", "--out", str(tmp_path / "r"), "--arch", "mamba"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown arch 'mamba'; choose one of gptj, llama" in err[0]
    assert main(["train", "--task", "number", "--out", str(tmp_path / "r"), "--arch", "llama", "--pe", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["posym: error: --pe nope applies to --arch gptj only; --arch llama takes rope and rope-base"]
    assert not (tmp_path / "r").exists()  # refused before any work


def test_old_runs_are_gptj_and_defaults_unchanged():
    old = make_config("number").to_dict()
    assert old["arch"] == "gptj"
    del old["arch"]  # a posym.json written before the option existed
    assert TrainConfig.from_dict(old).arch == "gptj"
    assert arch_config("gptj", "paper", 137).to_dict() == model_config("paper", 137).to_dict()


def test_reproduce_setting_reaches_the_training_config():
    from posym.verbs.settings import overrides_from_pairs, preset_settings, validate_settings

    s = preset_settings("quick", overrides_from_pairs({"train.arch": "llama"}))
    validate_settings(s, ("number",))
    assert make_config("number", "quick", **s["train"]).arch == "llama"
    for bad, msg in (({"train.arch": "rwkv"}, "unknown arch 'rwkv'"),
                     ({"train.arch": "qwen3", "train.pe": "nope"}, "--pe nope applies to --arch gptj only")):
        with pytest.raises(PosymError, match=f"bad reproduction setting train: {msg}"):
            validate_settings(preset_settings("quick", overrides_from_pairs(bad)), ("number",))


def test_cli_arch_is_stored(tmp_path):
    from posym.cli import main

    tiny = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
            "--set", "n_inner=16", "--set", "rotary_dim=16", "--quiet"]
    run = tmp_path / "run"
    assert main(["train", "--task", "number", "--out", str(run), "--arch", "Gemma3", "--pe", "rope", *tiny]) == 0
    assert json.loads((run / "posym.json").read_text())["config"]["arch"] == "gemma3"
    assert json.loads((run / "checkpoints/step-000004/config.json").read_text())["model_type"] == "gemma3_text"
    assert len(pd.read_csv(run / "scores.csv")) == 3 * 2  # evaluations 0, 2, 4 x 2 layers x 1 head


KILL_TINY = dict(steps=120, eval_every=10, n_val=64, n_test=64, checkpoint_every=30, eval_batch_size=64,
                 track_prompts=8)
KILL_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from posym.train import make_config
from posym.verbs.train import train
train(make_config("number", "quick", arch=sys.argv[2], model_overrides={shape!r}, **{tiny!r}), sys.argv[1],
      resume=len(sys.argv) > 3, progress=False)
"""


@pytest.mark.integration
@pytest.mark.parametrize("arch", [a if a == "qwen3" else pytest.param(a, marks=pytest.mark.slow) for a in OTHERS])
def test_sigkill_then_resume_gives_identical_run(tmp_path, arch):
    """As tests/train/test_resume.py for GPT-J: a run killed with SIGKILL mid-way and resumed writes
    the same metrics, head scores and final weights as an uninterrupted one (max |Δ| = 0). Qwen3 in the
    default suite, the others with ``-m slow`` (≈ 40 s each; every family's exact resume after an
    interruption is also in the fast tier, test_trains_resumes_exactly_and_tracks_every_head)."""
    script = KILL_SCRIPT.format(shape=_shape(arch), tiny=KILL_TINY)
    kill_then_resume(tmp_path, lambda out, resume: [script, str(out), arch] + (["resume"] if resume else []),
                     "step-00006*")
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "killed"), rtol=0, atol=0)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "full/scores.csv"),
                                  pd.read_csv(tmp_path / "killed/scores.csv"), rtol=0, atol=0)
    wa = load_file(tmp_path / "full/checkpoints/step-000120/model.safetensors")
    wb = load_file(tmp_path / "killed/checkpoints/step-000120/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("arch", OTHERS)
def test_ablation_and_flow_read_every_family(arch):
    """The reproduction's ablate and flow stages on a trained family: zero-ablating a head equals
    zeroing its columns of the attention output projection (o_proj / GPT-NeoX's dense)."""
    from posym.heads.ablate import ablated
    from posym.heads.flow import attention_flow
    from posym.model.adapters import get_adapter

    model = build_arch_model(arch_config(arch, "quick", 137, **_shape(arch)), seed=2).eval()
    x = torch.randint(1, 137, (4, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with ablated(model, [(1, 1)], "zero"):
            hooked = model(input_ids=x).logits
        proj = get_adapter(model).head_output_site(1)
        assert proj.weight.shape[1] == 2 * 16
        proj.weight[:, 16:] = 0
        zeroed = model(input_ids=x).logits
    torch.testing.assert_close(hooked, zeroed, rtol=0, atol=1e-6)
    flow = attention_flow(model, x[0])
    assert flow.attrs["n_layer"] == 2 and flow.attrs["n_head"] == 2
