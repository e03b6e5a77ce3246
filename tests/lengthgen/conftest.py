"""Shared fixture of the local-LLM tests: a tiny random Llama saved with three tokenizer flavours."""

from __future__ import annotations

import pytest
import torch

from tiny_tokenizer import word_tokenizer

CHAT_TEMPLATE = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
                 "{% if add_generation_prompt %}<s> assistant {% endif %}")
NO_SYSTEM_TEMPLATE = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
                      "supported') }}{% endif %}" + CHAT_TEMPLATE)


def _tokenizer(chat_template: str | None):
    return word_tokenizer(["system", "user", "assistant", "Input:", "Output:"], chat_template=chat_template)


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    """A tiny random Llama saved with save_pretrained, with three tokenizer flavours."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("tiny-llama")
    tok = _tokenizer(CHAT_TEMPLATE)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=2, eos_token_id=3, pad_token_id=1, tie_word_embeddings=False,
                      initializer_range=0.2)  # large enough that answers depend on the prompt
    model = LlamaForCausalLM(cfg)
    dirs = {}
    for name, template in (("chat", CHAT_TEMPLATE), ("plain", None), ("nosys", NO_SYSTEM_TEMPLATE)):
        d = root / name
        model.save_pretrained(d)
        _tokenizer(template).save_pretrained(d)
        dirs[name] = d
    return dirs
