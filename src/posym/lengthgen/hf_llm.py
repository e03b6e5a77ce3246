"""Local Hugging Face causal LMs answering the 1-hop prompt protocol (SPEC §1.5), offline; models
are loaded by :mod:`posym.model.llm`.

* :class:`HFChat` — greedy answers for a batch of chat-message prompts (the tokenizer's chat
  template when it has one, else the plain ``Input:/Output:`` rendering).
"""

from __future__ import annotations

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


def format_prompts(tokenizer, prompts: Sequence[Sequence[dict[str, str]]]) -> list[str]:
    """Prompt strings: the chat template (system turn merged into the first user turn when the
    template rejects a system role), or :func:`render_plain` when the tokenizer has no template."""
    if not has_chat_template(tokenizer):
        return [render_plain(m) for m in prompts]
    out = []
    for msgs in prompts:
        try:
            text = tokenizer.apply_chat_template(list(msgs), tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - jinja TemplateError etc.: e.g. "System role not supported"
            text = tokenizer.apply_chat_template(merge_system(msgs), tokenize=False,
                                                 add_generation_prompt=True)
        out.append(text)
    return out


class HFChat:
    """Greedy answers of a local causal LM: ``chat(list_of_message_lists) -> list[str]``.

    Prompts are batched (``batch_size``, left padding) and generation stops at the end-of-turn /
    eos token or after ``max_new_tokens``; the decoded continuation (special tokens removed) is
    returned raw — parse it with :func:`posym.tasks.prompts.parse_answer`.
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 8, batch_size: int = 8):
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
            temperature=None, top_p=None, top_k=None)
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
