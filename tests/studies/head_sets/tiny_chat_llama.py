"""The tiny chat Llama folder of the head-set study's LLM tests (a word tokenizer with a chat template, a 2-layer
GQA Llama, seeded): one builder for every test that needs an LLM folder."""

from __future__ import annotations

from pathlib import Path

import torch

from tiny_tokenizer import word_tokenizer

TEMPLATE = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
            "{% if add_generation_prompt %}<s> assistant {% endif %}")


def save_tiny_chat_llama(folder: Path) -> Path:
    """Write the model and its tokenizer into ``folder`` (2 layers x 4 query heads, 2 KV heads); returns it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = word_tokenizer(["system", "user", "assistant"], chat_template=TEMPLATE)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=2,
                      eos_token_id=3, pad_token_id=1, tie_word_embeddings=False, initializer_range=0.2)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
