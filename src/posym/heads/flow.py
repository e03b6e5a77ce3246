"""Information flow through the attention layers (Paper A, Fig. 3 left).

For one prompt, :func:`attention_flow` keeps, for every layer, head and query position, the strongest
attention edges (query position <- key position, post-softmax weight). Drawn layer over layer
(``posym.report.flow_figures.plot_flow``) they show how the answer travels from its position in the
target window up the hop chain to the query; :func:`hop_chain` gives that chain (query first).

Our choices (Paper A publishes no numbers for its Fig. 3): ``top_k = 3`` edges per query position,
kept only if their weight is ``>= min_weight = 0.05``; edges of every query position are kept (not
only the chain's), so the plot also shows what the other positions read.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd
import torch
from transformers import GPTJForCausalLM

from posym.errors import PosymError
from posym.tasks.dataset import SPLIT_SIZES, generate, split_seed
from posym.tasks.vocab import check_task

#: Columns of the edge table returned by :func:`attention_flow`.
EDGE_COLUMNS = ["layer", "head", "query", "key", "weight", "rank"]

DEFAULT_TOP_K = 3
DEFAULT_MIN_WEIGHT = 0.05


def _as_row(input_ids) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(input_ids) if not isinstance(input_ids, torch.Tensor) else input_ids)
    if x.dim() == 2 and x.shape[0] == 1:
        x = x[0]
    if x.dim() != 1 or x.numel() == 0:
        raise PosymError(f"attention_flow takes one prompt: input_ids of shape [n] or [1, n], got {tuple(x.shape)}")
    if x.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise PosymError(f"input_ids must be integer token ids, got {x.dtype}")
    return x.long()[None]


@torch.no_grad()
def attention_weights(model: GPTJForCausalLM, input_ids) -> torch.Tensor:
    """Post-softmax attention of one prompt: ``[n_layer, n_head, n, n]`` (query, key), float32 on CPU.

    Uses the HF forward with ``output_attentions=True`` (needs eager attention, which
    ``posym.model.load_model``/``build_model`` set); raises PosymError if the model returns none.
    """
    x = _as_row(input_ids).to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        out = model(input_ids=x, output_attentions=True)
    finally:
        model.train(was_training)
    att = getattr(out, "attentions", None)
    n_layer = getattr(model.config, "n_layer", None) or model.config.num_hidden_layers  # GPT-J or another family
    if att is None or len(att) != n_layer or any(a is None for a in att):
        impl = getattr(model.config, "_attn_implementation", None)
        raise PosymError(f"the model returned no attention weights (attention implementation {impl!r}); "
                         "load it with eager attention (posym.model.load_model does)")
    return torch.stack([a[0] for a in att]).float().cpu()


def attention_flow(model: GPTJForCausalLM, input_ids, top_k: int = DEFAULT_TOP_K,
                   min_weight: float = DEFAULT_MIN_WEIGHT) -> pd.DataFrame:
    """Strongest attention edges of one prompt, one row per edge.

    ``input_ids``: one prompt, shape ``[n]`` or ``[1, n]``. For every layer, head and query position
    ``q`` the (at most) ``top_k`` keys ``k <= q`` with the largest weight are kept if their weight is
    ``>= min_weight`` (and > 0). Columns: ``layer, head, query, key, weight, rank`` (``rank`` 0 =
    strongest edge of that query position), sorted by layer, head, query, rank. ``df.attrs`` holds
    ``n_layer``, ``n_head`` and ``seq_len`` (used by the plot).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise PosymError(f"top_k must be an integer >= 1, got {top_k!r}")
    if not 0.0 <= float(min_weight) <= 1.0:
        raise PosymError(f"min_weight must be in [0, 1], got {min_weight!r}")
    att = attention_weights(model, input_ids)  # [L, H, T, T]
    L, H, T, _ = att.shape
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    masked = att.masked_fill(~causal, -1.0)  # future keys can never be selected
    k = min(int(top_k), T)
    w, key = torch.topk(masked, k, dim=-1, sorted=True)  # [L, H, T, k]
    layer, head, query, rank = np.meshgrid(np.arange(L), np.arange(H), np.arange(T), np.arange(k), indexing="ij")
    w, key = w.numpy(), key.numpy()
    keep = (w >= float(min_weight)) & (w > 0) & (key <= query)
    df = pd.DataFrame({
        "layer": layer[keep].astype(np.int64),
        "head": head[keep].astype(np.int64),
        "query": query[keep].astype(np.int64),
        "key": key[keep].astype(np.int64),
        "weight": w[keep].astype(np.float64),
        "rank": rank[keep].astype(np.int64),
    }, columns=EDGE_COLUMNS)
    df.attrs.update(n_layer=int(L), n_head=int(H), seq_len=int(T))
    return df


def hop_chain(task: str, tokens: Sequence[str]) -> list[int]:
    """Positions of the hop chain from the query (last token) to the answer, query first.

    Number task: an integer ``v`` at ``t`` moves to ``t - v`` until a letter is reached. Letter task:
    the right letter of a (letter, letter) token names the unique other non-query token whose left
    letter equals it, until a (letter, number) token is reached. E.g. (SPEC §1.1)
    ``n h n v h y r s 6 3 2 7 7 8 4 7 2`` -> ``[16, 14, 10, 8, 2]``. PosymError on a broken chain.
    """
    check_task(task)
    toks = [str(t) for t in tokens]
    if not toks:
        raise PosymError("hop_chain: empty token sequence")
    pos = len(toks) - 1
    chain = [pos]
    if task == "number":
        if not toks[pos].isdigit():
            raise PosymError(f"number task: query {toks[pos]!r} is not an integer")
        while toks[pos].isdigit():
            nxt = pos - int(toks[pos])
            if not 0 <= nxt < pos:
                raise PosymError(f"number task: token {toks[pos]!r} at {pos} points outside the sequence")
            pos = nxt
            chain.append(pos)
        return chain

    def is_pair(t: str) -> bool:
        return len(t) == 2 and t[0].isalpha() and t[1].isalpha()

    if not is_pair(toks[pos]):
        raise PosymError(f"letter task: query {toks[pos]!r} is not a (letter, letter) token")
    by_left: dict[str, list[int]] = {}
    for i, t in enumerate(toks[:-1]):
        if len(t) != 2:
            raise PosymError(f"letter task: invalid token {t!r} at {i}")
        by_left.setdefault(t[0], []).append(i)
    while is_pair(toks[pos]):
        matches = by_left.get(toks[pos][1], [])
        if len(matches) != 1:
            raise PosymError(f"letter task: {len(matches)} tokens have left letter {toks[pos][1]!r} "
                             f"(needed by {toks[pos]!r} at {pos})")
        pos = matches[0]
        if pos in chain:
            raise PosymError("letter task: the chain has a cycle")
        chain.append(pos)
    return chain


def chain_edge_mask(edges: pd.DataFrame, chain: Sequence[int]) -> pd.Series:
    """True for edges along the chain: ``query == chain[i]`` and ``key == chain[i+1]`` for some i."""
    pairs = {(int(a), int(b)) for a, b in zip(chain[:-1], chain[1:])}
    if len(edges) == 0:
        return pd.Series(np.zeros(0, dtype=bool), index=edges.index)
    return pd.Series([(int(q), int(k)) in pairs for q, k in zip(edges["query"], edges["key"])], index=edges.index)


class FlowExample(NamedTuple):
    """Result of :func:`flow_for_example` (unpacks as ``edges, tokens, chain, task``)."""

    edges: pd.DataFrame
    tokens: list[str]
    chain: list[int]
    task: str


def flow_for_example(run_or_model_dir: str | os.PathLike, example_index: int, task: str | None = None,
                     split: str = "test", seed: int = 0, top_k: int = DEFAULT_TOP_K,
                     min_weight: float = DEFAULT_MIN_WEIGHT, step: int | None = None) -> FlowExample:
    """Attention flow of sample ``example_index`` of a split, for a run (newest checkpoint, or
    ``step``) or a checkpoint directory. Returns ``(edges, tokens, chain, task)``.

    The sample is row ``example_index`` of ``make_split(task, split, seed)``. ``edges.attrs`` also
    gets ``label`` (the answer token), ``prediction`` (the model's argmax token), ``hops``,
    ``example_index``, ``split`` and ``step``.
    """
    from posym.runs.resolve import resolve_model

    if split not in SPLIT_SIZES:
        raise PosymError(f"unknown split {split!r} (expected one of: {', '.join(SPLIT_SIZES)})")
    if isinstance(example_index, bool) or not isinstance(example_index, (int, np.integer)) \
            or not 0 <= int(example_index) < SPLIT_SIZES[split]:
        raise PosymError(f"example index must be an integer in [0, {SPLIT_SIZES[split]}), got {example_index!r}")
    model, task, ckpt_step = resolve_model(run_or_model_dir, task=task, step=step)
    batch = generate(task, 1, split_seed(seed, split), start_index=int(example_index))
    tokens = batch.tokens(0)
    chain = hop_chain(task, tokens)
    edges = attention_flow(model, batch.input_ids[0], top_k=top_k, min_weight=min_weight)
    with torch.no_grad():
        logits = model(input_ids=torch.as_tensor(batch.input_ids)).logits[0, -1]
    vocab = batch.vocab
    pred_id = int(logits.argmax())
    edges.attrs.update(label=batch.label_token(0),
                       prediction=vocab.decode([pred_id])[0] if pred_id < vocab.size else f"<id {pred_id}>",
                       hops=int(batch.hops[0]), example_index=int(example_index), split=split, step=ckpt_step)
    return FlowExample(edges, tokens, chain, task)


__all__ = ["DEFAULT_MIN_WEIGHT", "DEFAULT_TOP_K", "EDGE_COLUMNS", "FlowExample", "attention_flow",
           "attention_weights", "chain_edge_mask", "flow_for_example", "hop_chain"]
