"""A word-level fast tokenizer for the LLM tests (no downloads): special tokens, the given words, the
window tokens of both 1-hop tasks (letters, numbers, letter+digit and letter+letter)."""

from __future__ import annotations

import string
from typing import Sequence


def word_tokenizer(words: Sequence[str] = (), *, split_punctuation: bool = False, chat_template: str | None = None):
    """``PreTrainedTokenizerFast`` over ``<unk> <pad> <s> </s>`` + ``words`` + the task tokens;
    ``split_punctuation``: the ``Whitespace`` pre-tokenizer (splits "." and ":") instead of ``WhitespaceSplit``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_words = (["<unk>", "<pad>", "<s>", "</s>", *words]
                   + list(string.ascii_lowercase) + [str(i) for i in range(1, 65)]
                   + [a + d for a in string.ascii_lowercase for d in "123456789"]
                   + [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase])
    vocab = {w: i for i, w in enumerate(dict.fromkeys(vocab_words))}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace() if split_punctuation else pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                  eos_token="</s>")
    if chat_template:
        tok.chat_template = chat_template
    return tok


def start_token_tokenizer(words: Sequence[str] = (), **kwargs):
    """:func:`word_tokenizer` that adds the start token ``<s>`` to every text, as Llama's tokenizers do."""
    from tokenizers import processors

    tok = word_tokenizer(words, **kwargs)
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    return tok
