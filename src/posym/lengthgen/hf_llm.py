"""Local Hugging Face causal LMs answering the 1-hop prompt protocol (SPEC §1.5), offline; models
are loaded by :mod:`posym.model.llm`.

* :class:`HFChat` — greedy answers for a batch of chat-message prompts (the tokenizer's chat
  template when it has one, else the plain ``Input:/Output:`` rendering).
* :class:`HFChoice` — the log-likelihood ("choice") protocol: the log-probability of every candidate
  answer as the assistant's reply, all candidates of a prompt scored from its KV cache in batched
  forwards (:meth:`HFChoice.reference` is the slow cache-free check).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Sequence

from posym.tasks.prompts import merge_system, render_plain


def input_device(model) -> "Any":
    """Device on which to place input ids (the embedding's device under a device map)."""
    import torch

    dmap = getattr(model, "hf_device_map", None)
    if dmap:
        first = next(iter(dmap.values()))
        if isinstance(first, int):
            return torch.device("cuda", first)
        if first in ("disk", "meta"):
            return torch.device("cpu")
        return torch.device(first)
    return model.device


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render(tokenizer, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """One conversation as text: the chat template (system turn merged into the first user turn when
    the template rejects a system role), or :func:`render_plain` when the tokenizer has no template."""
    if not has_chat_template(tokenizer):
        return render_plain(messages)
    try:
        return tokenizer.apply_chat_template(list(messages), tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    except Exception:  # noqa: BLE001 - jinja TemplateError etc.: e.g. "System role not supported"
        return tokenizer.apply_chat_template(merge_system(messages), tokenize=False,
                                             add_generation_prompt=add_generation_prompt)


def format_prompts(tokenizer, prompts: Sequence[Sequence[dict[str, str]]]) -> list[str]:
    """Prompt strings with the generation prompt added (:func:`render`), as the model is asked."""
    return [render(tokenizer, m) for m in prompts]


class HFChat:
    """Greedy answers of a local causal LM: ``chat(list_of_message_lists) -> list[str]``.

    Prompts are batched (``batch_size``, left padding) and generation stops at the end-of-turn /
    eos token or after ``max_new_tokens``; the decoded continuation (special tokens removed) is
    returned raw — parse it with :func:`posym.tasks.prompts.parse_answer`. ``cache=False``: every
    decoding step is a full forward of the sequence so far (no KV cache; with ``batch_size=1`` no
    padding either), what a length-dependent intervention needs (docs/interventions.md).
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 8, batch_size: int = 8, cache: bool = True):
        import torch
        from transformers import GenerationConfig

        self.model, self.tokenizer = model, tokenizer
        self.batch_size = max(1, int(batch_size))
        self.chat_template = has_chat_template(tokenizer)
        eos = []
        for src in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
            for e in (src if isinstance(src, (list, tuple)) else [src]):
                if e is not None and e not in eos:
                    eos.append(int(e))
        self.gen_config = GenerationConfig(
            max_new_tokens=int(max_new_tokens), do_sample=False, num_beams=1,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=eos or None,
            temperature=None, top_p=None, top_k=None, **({} if cache else {"use_cache": False}))
        self._torch = torch

    def __call__(self, prompts: Sequence[Sequence[dict[str, str]]]) -> list[str]:
        texts = format_prompts(self.tokenizer, prompts)
        out: list[str] = []
        for s in range(0, len(texts), self.batch_size):
            out.extend(self._generate(texts[s:s + self.batch_size]))
        return out

    def _generate(self, texts: list[str]) -> list[str]:
        enc = self.tokenizer(texts, return_tensors="pt", padding=True,
                             add_special_tokens=not self.chat_template)
        enc = {k: v.to(input_device(self.model)) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        with self._torch.inference_mode():
            gen = self.model.generate(**enc, generation_config=self.gen_config)
        new = gen[:, enc["input_ids"].shape[1]:].cpu()
        return self.tokenizer.batch_decode(new, skip_special_tokens=True)


#: Memory for the repeated prompt KV cache of one candidate forward (bytes); more candidates run in chunks.
CHOICE_CACHE_BYTES = 1 << 30


def answer_continuations(tokenizer, messages: Sequence[dict[str, str]], answers: Sequence[str]) -> list[str]:
    """Each candidate answer as the text that follows the prompt when it is the assistant's reply.

    The conversation is rendered with the answer as a final assistant turn (:func:`render`, no
    generation prompt); the text after the prompt (which ends in the generation prompt) is kept up to
    the end of the answer: the bare token as the worked examples' answers start (ChatML: ``c2``; the
    plain rendering: ``" c2"`` after ``Output:``), without the end-of-turn marker, so that the score
    is that of the reply *starting* with the token — what the generate protocol's first-word parse
    counts. A template whose rendering does not extend the prompt gets the bare answer.
    Paper A Table 3 protocol (SPEC §1.5), choice variant.
    """
    prompt = render(tokenizer, messages)
    out = []
    for a in answers:
        full = render(tokenizer, [*messages, {"role": "assistant", "content": a}], add_generation_prompt=False)
        tail = full[len(prompt):] if full.startswith(prompt) else ""
        cut = tail.find(a)
        out.append(tail[:cut + len(a)] if cut >= 0 else a)
    return out


class HFChoice:
    """Log-probabilities of candidate answers: ``scorer(prompts, answers) -> list[list[float]]``.

    ``answers[i]`` are the candidates of ``prompts[i]``; each score is the **sum of the
    log-probabilities** of the candidate's continuation tokens (:func:`answer_continuations`) after
    the chat-formatted prompt with the generation prompt — the same text :class:`HFChat` generates
    from. The prompt is encoded once (its last position scores every candidate's first token); for
    candidates of more than one token its KV cache is repeated over the distinct inputs they need
    (their tokens but the last; candidates with the same inputs share a row), which, right-padded to
    equal length, go through one forward (chunked so that the repeated cache stays under
    ``max_cache_bytes``). Right padding needs no attention mask: under causal attention a real token
    never sees the pads after it, and pad positions are not scored. ``cache=False``
    (:meth:`_score_full`): no KV cache and no padding — every forward is a full sequence from position
    0 (the prompt, then prompt + each distinct candidate prefix, batched by equal length), what a
    position-dependent intervention needs (docs/interventions.md).
    """

    def __init__(self, model, tokenizer, *, max_cache_bytes: int = CHOICE_CACHE_BYTES, cache: bool = True):
        import torch

        self.model, self.tokenizer = model, tokenizer
        self.chat_template = has_chat_template(tokenizer)
        self.max_cache_bytes = int(max_cache_bytes)
        self.cache = bool(cache)
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        params = inspect.signature(model.forward).parameters
        self._keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        # transformers >= 5.2x names the KV cache ``cache`` (``past_key_values`` before, deprecated after)
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._torch = torch

    def encode(self, messages: Sequence[dict[str, str]], answers: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """Token ids of the prompt (as :class:`HFChat` tokenizes it) and of each candidate's continuation."""
        prompt = self.tokenizer(render(self.tokenizer, messages), add_special_tokens=not self.chat_template)["input_ids"]
        conts = [self.tokenizer(c, add_special_tokens=False)["input_ids"]
                 for c in answer_continuations(self.tokenizer, messages, answers)]
        return list(prompt), [list(c) for c in conts]

    def __call__(self, prompts: Sequence[Sequence[dict[str, str]]],
                 answers: Sequence[Sequence[str]]) -> list[list[float]]:
        score = self._score if self.cache else self._score_full
        return [score(*self.encode(m, a)) for m, a in zip(prompts, answers)]

    def reference(self, prompts: Sequence[Sequence[dict[str, str]]],
                  answers: Sequence[Sequence[str]]) -> list[list[float]]:
        """The same scores by one full forward of prompt + candidate per candidate, without a cache (slow)."""
        torch, dev = self._torch, input_device(self.model)
        out = []
        for msgs, cands in zip(prompts, answers):
            prompt, conts = self.encode(msgs, cands)
            row = []
            for c in conts:
                ids = torch.tensor([prompt + c], device=dev)
                with torch.inference_mode():
                    logp = self.model(input_ids=ids, use_cache=False).logits[0].float().log_softmax(-1)
                pos = torch.arange(len(prompt) - 1, len(prompt) + len(c) - 1, device=logp.device)
                row.append(float(logp[pos, torch.tensor(c, device=logp.device)].sum()))
            out.append(row)
        return out

    def _score_full(self, prompt: list[int], conts: list[list[int]]) -> list[float]:
        """:meth:`_score` without KV cache or padding: the prompt's forward scores every first token; the
        distinct prefixes ``c[:-1]`` of the longer candidates follow the prompt in full forwards, rows of
        one length batched (at most ``max_cache_bytes`` of activations' worth of rows, like the cache)."""
        torch, dev = self._torch, input_device(self.model)
        P = len(prompt)
        with torch.inference_mode():
            res = self.model(input_ids=torch.tensor([prompt], device=dev), use_cache=False, **self._keep_last)
            first = res.logits[0, -1].float().log_softmax(-1)
            scores = [first[c[0]] for c in conts]
            users: dict[tuple[int, ...], list[int]] = {}
            for i, c in enumerate(conts):
                if len(c) > 1:
                    users.setdefault(tuple(c[:-1]), []).append(i)
            by_len: dict[int, list[tuple[int, ...]]] = {}
            for row in users:
                by_len.setdefault(len(row), []).append(row)
            cfg = getattr(self.model.config, "text_config", None) or self.model.config
            width = int(getattr(cfg, "hidden_size", 1024)) * max(1, int(getattr(cfg, "num_hidden_layers", 1)))
            for n, rows in by_len.items():
                step = max(1, self.max_cache_bytes // max(1, 4 * (P + n) * width))
                for s in range(0, len(rows), step):
                    chunk = rows[s:s + step]
                    ids = torch.tensor([prompt + list(r) for r in chunk], device=dev)
                    # only the n positions after the prompt are scored: skip the vocabulary logits of the
                    # prompt's positions (a 262k-token vocabulary makes those the bulk of the cost)
                    keep = {"logits_to_keep": n} if self._keep_last else {}
                    logits = self.model(input_ids=ids, use_cache=False, **keep).logits
                    logp = logits[:, -n:].float().log_softmax(-1)
                    for r, row in enumerate(chunk):
                        for i in users[row]:
                            nxt = torch.tensor(conts[i][1:], device=logp.device)
                            scores[i] = scores[i] + logp[r, torch.arange(n, device=logp.device), nxt].sum()
        return [float(x) for x in scores]

    def _score(self, prompt: list[int], conts: list[list[int]]) -> list[float]:
        torch, dev = self._torch, input_device(self.model)
        with torch.inference_mode():
            res = self.model(input_ids=torch.tensor([prompt], device=dev), use_cache=True, **self._keep_last)
            first = res.logits[0, -1].float().log_softmax(-1)
            cache = res.get("cache", None)
            cache = res.get("past_key_values", None) if cache is None else cache
            scores = [first[c[0]] for c in conts]
            # the batch rows: the distinct inputs (all tokens but the last) of the longer candidates;
            # candidates that share them (letter task: "c2", "c5" after "c") share one row
            users: dict[tuple[int, ...], list[int]] = {}
            for i, c in enumerate(conts):
                if len(c) > 1:
                    users.setdefault(tuple(c[:-1]), []).append(i)
            rows = list(users)
            step = max(1, self.max_cache_bytes // max(1, _cache_bytes(cache)))
            for s in range(0, len(rows), step):
                chunk = rows[s:s + step]
                ids = torch.full((len(chunk), max(map(len, chunk))), self.pad_id, dtype=torch.long)
                for r, row in enumerate(chunk):
                    ids[r, :len(row)] = torch.tensor(row)
                batch_cache = copy.deepcopy(cache)
                batch_cache.batch_repeat_interleave(len(chunk))
                logits = self.model(input_ids=ids.to(dev), use_cache=True, **{self._cache_kw: batch_cache}).logits
                logp = logits.float().log_softmax(-1)
                for r, row in enumerate(chunk):
                    for i in users[row]:
                        nxt = torch.tensor(conts[i][1:], device=logp.device)
                        scores[i] = scores[i] + logp[r, torch.arange(len(row), device=logp.device), nxt].sum()
        return [float(x) for x in scores]


def _cache_bytes(cache) -> int:
    """Bytes held by the key/value tensors of a transformers ``Cache`` (one copy of the prompt's cache)."""
    import torch

    return sum(t.numel() * t.element_size() for layer in getattr(cache, "layers", ())
               for t in (getattr(layer, "keys", None), getattr(layer, "values", None)) if isinstance(t, torch.Tensor))
