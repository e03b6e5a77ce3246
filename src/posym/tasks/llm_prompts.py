"""Prompt sets for the head scores of real LLMs (SPEC §3 block version; SPEC §6 LLM claims).

Each prompt is tokenized with the model's own tokenizer and carries the token ``(start, stop)``
span of every *block* that the block-swap metric (:func:`posym.heads.scores.scores_blocks_fast`)
may exchange. The query is always the prompt's last token.

* **binding** — entity–attribute binding prompts in Paper B's spirit (our wording)::

      Each object has one colour. The apple is red. The car is blue. ... The dog is green. The car is

  One block per fact ``" The X is Y."`` (SPEC §3: "one block per entity-attribute pair"); the
  answer is the attribute bound to the queried entity (``blue``). Our choices: ``n_entities``
  facts (default 6) with distinct entities and distinct attributes drawn from fixed word lists
  (:data:`ENTITIES`, :data:`ATTRIBUTES`); the queried fact is ``index mod n_entities`` (every block
  position is queried equally often); the rest is a pure function of ``(seed, n_entities, index)``
  and the word lists. **Equal block lengths** (the swap machinery only swaps equal-length blocks):
  the word lists are filtered at run time to words that the tokenizer encodes as *one* token after
  a space (:func:`single_token_words`), so every fact has the same token length.
* **number** / **letter** — the 1-hop task prompts of :mod:`posym.tasks.prompts` (SPEC §1.5:
  ``make_sample(task, length, run=seed, index)``), as *plain text* (instructions, ``n_examples``
  worked examples, the test item, ending in ``Output:``; no chat template, so every model sees the
  same text). One block per target-window token of the test item (a letter, or a letter–digit
  token such as ``c2``); the instructions, examples and the query token stay outside the blocks
  (they remain in the softmax but are never swapped). Window tokens that a tokenizer splits into
  different numbers of pieces give unequal blocks, which the metric skips (module doc of
  :mod:`posym.heads.scores`).

**Token spans.** The whole text is tokenized at once (``add_special_tokens=True``, as the model
sees it) and each block's character span — the word(s) with their leading space — is mapped to
tokens through the fast tokenizer's offsets. A token that straddles a block boundary is an error
(:class:`PosymError`): the blocks would not be exact at token level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from posym.checks import check_int
from posym.constants import TASKS as ONEHOP_TASKS
from posym.errors import PosymError
from posym.tasks.prompts import build_messages, make_sample, render_plain

PROMPT_SETS: tuple[str, ...] = ("binding", *ONEHOP_TASKS)
DEFAULT_N_ENTITIES = 6
DEFAULT_LENGTH = 12  # target-window length of the 1-hop prompts (the shortest of SPEC §1.5's grid)
DEFAULT_N_EXAMPLES = 3  # worked examples in the 1-hop prompts (as in ``posym llm eval``)

BINDING_PREFIX = "Each object has one colour."
ENTITIES: tuple[str, ...] = (
    "apple", "car", "dog", "cat", "house", "book", "ball", "chair", "cup", "hat", "bird", "fish", "box",
    "door", "tree", "bike", "shoe", "coat", "bag", "lamp", "boat", "key", "bed", "table", "pen", "clock",
    "phone", "ring", "kite", "drum", "horse", "train", "shirt", "bottle", "flower", "desk", "sock", "bus",
    "cake", "toy",
)
ATTRIBUTES: tuple[str, ...] = (
    "red", "blue", "green", "yellow", "black", "white", "brown", "pink", "orange", "purple", "gray", "gold",
    "silver",
)

_SEED_TAG = 0xB1D5  # first word of every binding seed sequence


@dataclass(frozen=True)
class BindingSample:
    """One binding prompt before tokenization (a pure function of its key and the word lists)."""

    seed: int
    index: int
    entities: tuple[str, ...]  # in prompt order
    attributes: tuple[str, ...]  # attributes[i] is bound to entities[i]
    query_pos: int  # which fact is queried

    @property
    def query(self) -> str:
        return self.entities[self.query_pos]

    @property
    def answer(self) -> str:
        return self.attributes[self.query_pos]

    def text_and_spans(self) -> tuple[str, list[tuple[int, int]]]:
        """The prompt text and the character span of each fact (leading space included)."""
        text = BINDING_PREFIX
        spans = []
        for e, a in zip(self.entities, self.attributes):
            fact = f" The {e} is {a}."
            spans.append((len(text), len(text) + len(fact)))
            text += fact
        return text + f" The {self.query} is", spans


@dataclass(frozen=True)
class LLMPrompt:
    """A tokenized prompt with its swap blocks.

    ``input_ids`` (T ints, special tokens included); ``blocks``: token ``(start, stop)`` of each block,
    all before the query at ``T-1``; ``answer``: the expected continuation (word); ``answer_id``: the
    first token of ``text + " " + answer`` after the prompt's tokens (-1 when the prompt's
    tokenization is not a prefix of it, i.e. unknown).
    """

    prompt_set: str
    index: int
    text: str
    input_ids: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]
    answer: str
    answer_id: int

    @property
    def length(self) -> int:
        return len(self.input_ids)


# ------------------------------------------------------------------------------------------------
# tokenizer helpers
# ------------------------------------------------------------------------------------------------
def _encode(tokenizer: Any, text: str, offsets: bool = False, special: bool = True):
    try:
        return tokenizer(text, add_special_tokens=special, return_offsets_mapping=offsets)
    except NotImplementedError:
        raise PosymError("block spans need a fast (Rust) tokenizer with offset mappings") from None


def single_token_words(tokenizer: Any, words: Sequence[str]) -> tuple[str, ...]:
    """The words that ``tokenizer`` encodes as exactly one token after a space (``" " + w``)."""
    out = []
    for w in words:
        ids = _encode(tokenizer, " " + w, special=False)["input_ids"]
        if len(ids) == 1 and ids[0] != getattr(tokenizer, "unk_token_id", None):
            out.append(w)
    return tuple(out)


def tokenize_with_spans(tokenizer: Any, text: str,
                        char_spans: Sequence[tuple[int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
    """Tokenize ``text`` and map character spans to token spans.

    Returns ``(input_ids, token_spans)``; token span ``(a, b)`` holds every non-empty token lying inside
    the character span. PosymError if a token straddles a span boundary or a span holds no token.
    """
    enc = _encode(tokenizer, text, offsets=True)
    ids, offs = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    out = []
    for cs, ce in char_spans:
        inside = []
        for i, (a, b) in enumerate(offs):
            if b <= a:  # special tokens
                continue
            if cs <= a and b <= ce:
                inside.append(i)
            elif a < ce and b > cs:
                raise PosymError(f"token {i} ({text[a:b]!r}) straddles the block {text[cs:ce]!r}; "
                                 "blocks are not exact at token level with this tokenizer")
        if not inside:
            raise PosymError(f"block {text[cs:ce]!r} holds no token")
        if inside != list(range(inside[0], inside[-1] + 1)):
            raise PosymError(f"block {text[cs:ce]!r} is not a contiguous token range")
        out.append((inside[0], inside[-1] + 1))
    return ids, out


def _answer_id(tokenizer: Any, text: str, ids: Sequence[int], answer: str) -> int:
    full = list(_encode(tokenizer, text + " " + answer)["input_ids"])
    if full[:len(ids)] != list(ids) or len(full) <= len(ids):
        return -1
    return int(full[len(ids)])


# ------------------------------------------------------------------------------------------------
# binding prompts
# ------------------------------------------------------------------------------------------------
def make_binding_sample(index: int, seed: int = 0, n_entities: int = DEFAULT_N_ENTITIES,
                        entities: Sequence[str] = ENTITIES, attributes: Sequence[str] = ATTRIBUTES) -> BindingSample:
    """Binding sample ``index`` of ``seed`` (module doc): distinct entities/attributes drawn with
    ``numpy.random.default_rng([tag, seed, n_entities, index])``; fact ``index mod n_entities`` is queried."""
    index, seed = check_int(index, "index", 0), check_int(seed, "seed", 0)
    n_entities = check_int(n_entities, "n_entities", 2)
    if len(set(entities)) < n_entities or len(set(attributes)) < n_entities:
        raise PosymError(f"need at least {n_entities} distinct entities and attributes, got "
                         f"{len(set(entities))} and {len(set(attributes))}")
    ents, atts = list(dict.fromkeys(entities)), list(dict.fromkeys(attributes))
    rng = np.random.default_rng([_SEED_TAG, seed, n_entities, index])
    e = rng.choice(len(ents), size=n_entities, replace=False)
    a = rng.choice(len(atts), size=n_entities, replace=False)
    return BindingSample(seed, index, tuple(ents[i] for i in e), tuple(atts[i] for i in a), index % n_entities)


def binding_prompts(tokenizer: Any, n: int, seed: int = 0, n_entities: int = DEFAULT_N_ENTITIES) -> list[LLMPrompt]:
    """``n`` tokenized binding prompts (indices ``0..n-1``), one block per fact, equal block lengths."""
    n = check_int(n, "n", 1)
    ents = single_token_words(tokenizer, ENTITIES)
    atts = single_token_words(tokenizer, ATTRIBUTES)
    if min(len(ents), len(atts)) < check_int(n_entities, "n_entities", 2):
        raise PosymError(f"the tokenizer has only {len(ents)} single-token entities and {len(atts)} "
                         f"single-token attributes; n_entities={n_entities} is too many")
    out = []
    for i in range(n):
        s = make_binding_sample(i, seed, n_entities, ents, atts)
        text, spans = s.text_and_spans()
        ids, blocks = tokenize_with_spans(tokenizer, text, spans)
        out.append(LLMPrompt("binding", i, text, tuple(ids), tuple(blocks), s.answer,
                             _answer_id(tokenizer, text, ids, s.answer)))
    return out


# ------------------------------------------------------------------------------------------------
# 1-hop prompts
# ------------------------------------------------------------------------------------------------
def onehop_text(task: str, length: int, run: int, index: int,
                n_examples: int = DEFAULT_N_EXAMPLES) -> tuple[str, list[tuple[int, int]], str]:
    """Plain-text 1-hop prompt (SPEC §1.5), the character span of each window token (leading space
    included) and the answer."""
    sample = make_sample(task, length, run, index)
    text = render_plain(build_messages(sample, n_examples))
    marker = "Input: " + sample.sequence
    pos = text.rfind(marker)
    if pos < 0:  # pragma: no cover - render_plain always writes the marker
        raise PosymError("the 1-hop prompt does not contain its test item")
    pos += len("Input:")
    spans = []
    for tok in sample.tokens[:-1]:
        start = text.index(tok, pos)
        spans.append((start - 1 if text[start - 1] == " " else start, start + len(tok)))
        pos = start + len(tok)
    return text, spans, sample.answer


def onehop_prompts(tokenizer: Any, task: str, n: int, length: int = DEFAULT_LENGTH, seed: int = 0,
                   n_examples: int = DEFAULT_N_EXAMPLES) -> list[LLMPrompt]:
    """``n`` tokenized 1-hop prompts of ``task`` (``run = seed``), one block per window token."""
    if task not in ONEHOP_TASKS:
        raise PosymError(f"unknown 1-hop task {task!r}; choose from {', '.join(ONEHOP_TASKS)}")
    n, length = check_int(n, "n", 1), check_int(length, "length", 2)
    out = []
    for i in range(n):
        text, spans, answer = onehop_text(task, length, check_int(seed, "seed", 0), i, n_examples)
        ids, blocks = tokenize_with_spans(tokenizer, text, spans)
        out.append(LLMPrompt(task, i, text, tuple(ids), tuple(blocks), answer,
                             _answer_id(tokenizer, text, ids, answer)))
    return out


def build_prompts(tokenizer: Any, prompt_set: str, n: int, seed: int = 0, *, length: int = DEFAULT_LENGTH,
                  n_entities: int = DEFAULT_N_ENTITIES, n_examples: int = DEFAULT_N_EXAMPLES) -> list[LLMPrompt]:
    """The prompts of one set: ``"binding"``, ``"number"`` or ``"letter"``."""
    if prompt_set == "binding":
        return binding_prompts(tokenizer, n, seed, n_entities)
    if prompt_set in ONEHOP_TASKS:
        return onehop_prompts(tokenizer, prompt_set, n, length, seed, n_examples)
    raise PosymError(f"unknown prompt set {prompt_set!r}; choose from {', '.join(PROMPT_SETS)}")


def group_prompts(prompts: Sequence[LLMPrompt]) -> dict[tuple[int, tuple[tuple[int, int], ...]], list[int]]:
    """Indices of prompts sharing (length, blocks): each group is scored as one batch
    (the block machinery takes one block layout per query position)."""
    groups: dict[tuple[int, tuple[tuple[int, int], ...]], list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault((p.length, p.blocks), []).append(i)
    return groups


__all__ = [
    "ATTRIBUTES",
    "BINDING_PREFIX",
    "DEFAULT_LENGTH",
    "DEFAULT_N_ENTITIES",
    "DEFAULT_N_EXAMPLES",
    "ENTITIES",
    "PROMPT_SETS",
    "BindingSample",
    "LLMPrompt",
    "binding_prompts",
    "build_prompts",
    "group_prompts",
    "make_binding_sample",
    "onehop_prompts",
    "onehop_text",
    "single_token_words",
    "tokenize_with_spans",
]
