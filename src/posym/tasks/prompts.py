"""One-hop natural-language prompts for pretrained LLMs (SPEC §1.5; exact protocol, our wording).

Two tasks, each a single hop from the final (query) token into a *target window* of ``length``
tokens:

* **number** (positional) — the window holds lowercase letters ``a``..``z`` drawn uniformly (repeats
  allowed); the final token is an integer ``v`` in ``[1, length]``; the answer is the letter ``v``
  positions to the left of the final token, i.e. at window position ``length - v``. Paper example:
  ``a z b y c x d w 5`` → ``y``.
* **letter** (symbolic) — the window holds (letter, digit) tokens such as ``c2`` (letters ``a``..``z``,
  digits ``1``..``9``); the final token is a (letter, letter) pair whose *second* character names the
  window token that starts with it; the answer is that whole token. Paper example:
  ``a4 b3 c2 d1 fc`` → ``c2``.

Our choices (SPEC §1.5 leaves them open; all documented in ``docs/llm.md``):

* **Reproducibility.** Every sample is a pure function of ``(task, length, run, index)``: its random
  content comes from ``numpy.random.default_rng([tag, task, length, run, index])``, so it does not
  depend on ``n`` or on which other samples were generated. ``run`` (0-based) is the "fresh dataset
  seeded by the run number".
* **Balanced answer positions.** Indices are grouped in blocks of ``length``; within each block every
  window position is the answer exactly once (counts over any ``n`` differ by at most one). The order
  inside a block is a low-discrepancy (golden-ratio) permutation with a random shift per
  ``(task, length, run, block)``, so even a prefix ``n < length`` spreads evenly over the window.
* **Unique answer.** Number task: the offset is always within the window (``1 <= v <= length``).
  Letter task: the answer's left letter occurs exactly once in the window. The other ``length - 1``
  left letters come from the 25 remaining letters *without replacement while possible* — all left
  letters of a prompt are distinct when ``length <= 26`` — and beyond that from fresh shuffles of the
  25 letters (so each repeats ``floor`` or ``ceil`` of ``(length - 1) / 25`` times; distinct left
  letters cannot exist past 26 single letters). The query's left letter is uniform among the letters
  other than the answer letter.
* **Prompt.** A system message with the instructions (ending in "Output just the target token"),
  ``n_examples`` worked examples as user/assistant turns (the first is the paper's own example; all
  are short, fixed and identical in every prompt), then the test sequence as the last user message.
  Models without a chat template get the same content as plain text (``Input: …`` / ``Output: …``).
* **Parsing** (:func:`parse_answer`): the first whitespace-separated word of the reply, skipping an
  echoed ``Answer:`` / ``Output:`` label, with surrounding punctuation, quotes, backticks and markdown
  stripped; compared with the target case-insensitively.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from posym.constants import TASKS
from posym.errors import PosymError

DEFAULT_LENGTHS: tuple[int, ...] = (12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300)
LETTERS: str = string.ascii_lowercase  # 26 window letters (both tasks)
DIGITS: str = "123456789"  # right part of letter-task window tokens
PROMPT_VERSION = "1hop-v1"  # bump when the wording changes (part of every cache key)

_SEED_TAG = 0x5E1F  # first word of every seed sequence (keeps these streams apart from others)
_TASK_ID = {"number": 1, "letter": 2}
_PHI = (math.sqrt(5.0) - 1.0) / 2.0

INSTRUCTIONS: dict[str, str] = {
    "number": (
        "You will see a sequence of tokens separated by spaces. Every token is a lowercase letter, "
        "except the final token, which is a number n. Move n positions to the left from the final "
        "token and give the token you land on (for n = 1 that is the token just before the final "
        "token). Output just the target token: no explanation, no reasoning, no other text."
    ),
    "letter": (
        "You will see a sequence of tokens separated by spaces. Every token except the last is a "
        "letter followed by a digit; the last token is two letters. The second character of the "
        "last token names the token that starts with it: find the token whose first character is "
        "the second character of the last token, and give that whole token (letter and digit). "
        "Output just the target token: no explanation, no reasoning, no other text."
    ),
}

# Worked examples: (sequence, answer). The first of each is the paper's own example (SPEC §1.5).
WORKED_EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "number": (
        ("a z b y c x d w 5", "y"),
        ("p f s k d m 2", "d"),
        ("g t c j n w h r e v 9", "t"),
        ("o q l b u i 6", "o"),
    ),
    "letter": (
        ("a4 b3 c2 d1 fc", "c2"),
        ("e7 h1 b5 g2 a8 cg", "g2"),
        ("d3 f6 a1 c9 h2 e4 b7 g5 ha", "a1"),
        ("k2 m9 r4 t6 wm", "m9"),
    ),
}


@dataclass(frozen=True)
class PromptSample:
    """One test item: the window + query tokens and the expected answer token."""

    task: str
    length: int  # target-window size
    run: int
    index: int
    tokens: tuple[str, ...]  # length + 1 tokens: the window, then the query
    answer: str
    answer_pos: int  # 0-based position of the answer in the window

    @property
    def sequence(self) -> str:
        """The space-separated sequence shown to the model."""
        return " ".join(self.tokens)

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.task, self.length, self.run, self.index)


def _check(task: str, length: int, run: int, index: int | None = None) -> None:
    if task not in _TASK_ID:
        raise PosymError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
    if int(length) != length or length < 1:
        raise PosymError(f"target-window length must be a positive integer, got {length!r}")
    if int(run) != run or run < 0:
        raise PosymError(f"run must be a non-negative integer, got {run!r}")
    if index is not None and (int(index) != index or index < 0):
        raise PosymError(f"sample index must be a non-negative integer, got {index!r}")


def _block_order(task: str, length: int, run: int, block: int) -> np.ndarray:
    """Answer positions of indices ``block*length .. block*length+length-1``: a permutation of the
    window positions whose prefixes are evenly spread (ranks of a shifted golden-ratio sequence)."""
    shift = np.random.default_rng([_SEED_TAG, _TASK_ID[task], length, run, 1 << 20, block]).random()
    vals = np.mod(shift + _PHI * np.arange(length), 1.0)
    order = np.empty(length, dtype=np.int64)
    order[np.argsort(vals, kind="stable")] = np.arange(length)
    return order


def answer_position(task: str, length: int, run: int, index: int) -> int:
    """Window position of the answer of sample ``(task, length, run, index)`` (balanced, see module)."""
    _check(task, length, run, index)
    block, i = divmod(int(index), int(length))
    return int(_block_order(task, int(length), int(run), block)[i])


def make_sample(task: str, length: int, run: int, index: int) -> PromptSample:
    """The sample ``(task, length, run, index)``; a pure function of its arguments."""
    _check(task, length, run, index)
    length, run, index = int(length), int(run), int(index)
    pos = answer_position(task, length, run, index)
    rng = np.random.default_rng([_SEED_TAG, _TASK_ID[task], length, run, index])
    if task == "number":
        window = [LETTERS[k] for k in rng.integers(0, len(LETTERS), size=length)]
        offset = length - pos  # final token sits at position `length`
        tokens = (*window, str(offset))
        answer = window[pos]
    else:
        ans_letter = int(rng.integers(0, len(LETTERS)))
        others = np.array([k for k in range(len(LETTERS)) if k != ans_letter])
        n_fill = length - 1
        reps = -(-n_fill // len(others)) if n_fill else 0
        fill = np.concatenate([rng.permutation(others) for _ in range(reps)])[:n_fill] if reps else []
        left = list(fill)
        left.insert(pos, ans_letter)
        digits = rng.integers(0, len(DIGITS), size=length)
        window = [LETTERS[l] + DIGITS[d] for l, d in zip(left, digits)]
        query_left = int(others[rng.integers(0, len(others))])
        tokens = (*window, LETTERS[query_left] + LETTERS[ans_letter])
        answer = window[pos]
    return PromptSample(task, length, run, index, tuple(tokens), answer, pos)


def make_samples(task: str, length: int, run: int, n: int, start: int = 0) -> list[PromptSample]:
    """Samples ``start .. start+n-1`` of ``(task, length, run)``."""
    if int(n) != n or n < 0:
        raise PosymError(f"n must be a non-negative integer, got {n!r}")
    return [make_sample(task, length, run, i) for i in range(start, start + int(n))]


def solve_sequence(tokens: Sequence[str] | str) -> str:
    """Reference solver from the tokens alone (used by tests and the stub API server)."""
    toks = tokens.split() if isinstance(tokens, str) else list(tokens)
    query = toks[-1]
    if query.isdigit():
        v = int(query)
        if not 1 <= v <= len(toks) - 1:
            raise PosymError(f"offset {v} outside the window of {len(toks) - 1} tokens")
        return toks[len(toks) - 1 - v]
    matches = [t for t in toks[:-1] if t[0] == query[1]]
    if len(matches) != 1:
        raise PosymError(f"query {query!r} matches {len(matches)} tokens (expected exactly one)")
    return matches[0]


# --- prompts ---------------------------------------------------------------------------------------
def worked_examples(task: str, n_examples: int = 3) -> list[tuple[str, str]]:
    """The first ``n_examples`` fixed worked examples of ``task`` as ``(sequence, answer)``."""
    _check(task, 1, 0)
    ex = WORKED_EXAMPLES[task]
    if not 0 <= n_examples <= len(ex):
        raise PosymError(f"n_examples must be in 0..{len(ex)}, got {n_examples}")
    return list(ex[:n_examples])


def build_messages(sample: PromptSample, n_examples: int = 3) -> list[dict[str, str]]:
    """Chat messages: system instructions, worked examples as user/assistant turns, the test item."""
    msgs = [{"role": "system", "content": INSTRUCTIONS[sample.task]}]
    for seq, ans in worked_examples(sample.task, n_examples):
        msgs.append({"role": "user", "content": seq})
        msgs.append({"role": "assistant", "content": ans})
    msgs.append({"role": "user", "content": sample.sequence})
    return msgs


def merge_system(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """For chat templates without a system role: prepend the system text to the first user turn."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0]["role"] == "system":
        sys_text = msgs.pop(0)["content"]
        if msgs and msgs[0]["role"] == "user":
            msgs[0]["content"] = f"{sys_text}\n\n{msgs[0]['content']}"
        else:
            msgs.insert(0, {"role": "user", "content": sys_text})
    return msgs


def render_plain(messages: Sequence[dict[str, str]]) -> str:
    """Plain-text prompt for models without a chat template (ends with ``Output:``)."""
    parts: list[str] = []
    for m in messages:
        if m["role"] == "system":
            parts.append(m["content"] + "\n\n")
        elif m["role"] == "user":
            parts.append(f"Input: {m['content']}\nOutput:")
        else:
            parts.append(f" {m['content']}\n\n")
    return "".join(parts)


def prompt_digest(messages: Sequence[dict[str, str]]) -> str:
    """Short stable hash of a prompt (part of the cache key: a changed prompt is asked again)."""
    blob = json.dumps([PROMPT_VERSION, list(messages)], sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- parsing ---------------------------------------------------------------------------------------
_STRIP = " \t\r\n.,;:!?\"'`*_()[]{}<>«»“”‘’"
_LABEL = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?(?:answer|output|target(?:\s+token)?)(?:\s+is)?(?:\s*[:=]\s*|\s+)",
                    re.IGNORECASE)


def parse_answer(text: str | None) -> str:
    """The first word of a reply, lower-cased, with punctuation/quotes/markdown stripped.

    A leading echoed label (``Answer:``, ``Output:``, ``Target token:``, ``The answer is:``) is
    removed first; words made of punctuation only are skipped; an empty reply gives ``""``.
    """
    if not text:
        return ""
    text = _LABEL.sub("", text, count=1)
    for word in text.split():
        w = word.strip(_STRIP).lower()
        if w:
            return w
    return ""


def is_correct(prediction: str, answer: str) -> bool:
    """Case-insensitive exact match of the parsed prediction with the target token."""
    return prediction.strip().lower() == answer.strip().lower()



# --- answer candidates (the log-likelihood "choice" protocol) -------------------------------------
def candidates(sample: PromptSample) -> list[str]:
    """The distinct target-window tokens of ``sample`` in order of first occurrence (SPEC §1.5).

    These are the answers the choice protocol scores; the target is always one of them.
    """
    return list(dict.fromkeys(sample.tokens[:-1]))


def sample_chance_level(sample: PromptSample) -> float:
    """Accuracy of a uniform guess among :func:`candidates`: ``1 / number of distinct window tokens``."""
    return 1.0 / len(candidates(sample))
