"""Head selections (docs/interventions.md, "Head selections"): which query heads an intervention or an
ablation acts on, written three ways and resolved against one model.

* explicit: ``L3H1+L5H0`` (layer and query head, 0-based);
* a head type read from a **head readout** of the same model (:data:`TYPE_NAMES`): the posym types of
  SPEC §3 / §7 (``positional``, ``symbolic``, ``mixed``, ``diffuse``, ``uninformative``) and the
  classic types of SPEC §7 (``previous-token``, ``induction``, ``duplicate-token``, ``sink``), at the
  thresholds of :mod:`posym.heads.head_types`;
* ``random:<type>[,seed=S][,match=count]``: the **matched random control** of a type — in every layer
  as many heads as the typed set has there, drawn without replacement (``numpy.random.default_rng(S)``,
  layers in order) from that layer's *other* heads; with ``match=count``, as many heads as the typed set
  in all, drawn without replacement from every head outside it (for models with one head per layer,
  where no layer-matched control exists).

The readout is a per-head table posym writes: ``posym head-types``' join (``posym_type``,
``classic_type``, ``is_sink``) or a scores table (``s_pos``, ``s_sym``, ``entropy``, ``swap_mass``;
``scores.csv``), typed there with :func:`posym.heads.head_types.posym_types` at γ =
:data:`~posym.constants.GAMMA` — with the per-prompt fractions (``frac_positional``, ``frac_symbolic``)
where the table has them (a head pure on the mean counts as pure only when it is pure on
:data:`~posym.heads.head_types.PURE_FRACTION` of the prompts), on the means alone where it has not.
A table with an ``intervention`` column is read on its ``none`` rows (the untouched model).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from posym.checks import check_int
from posym.constants import GAMMA
from posym.errors import PosymError
from posym.heads.head_types import DIFFUSE_ENTROPY, posym_types
from posym.reading import MIN_MASS
from posym.stats import distinct_draws

#: posym types (SPEC §3 / §7): read from ``posym_type`` or typed from ``s_pos`` / ``s_sym``.
POSYM_TYPE_NAMES: tuple[str, ...] = ("positional", "symbolic", "mixed", "diffuse", "uninformative")
#: classic types (SPEC §7) -> their ``classic_type`` label; ``sink`` reads ``is_sink`` (every head with
#: most of its attention on the first token, whatever type wins) where the table has it.
CLASSIC_TYPE_NAMES: dict[str, str] = {"previous-token": "previous_token", "induction": "induction",
                                      "duplicate-token": "duplicate_token", "sink": "sink"}
#: Every type name a selection takes.
TYPE_NAMES: tuple[str, ...] = (*POSYM_TYPE_NAMES, *CLASSIC_TYPE_NAMES)
#: The prefix of a matched random control (``random:positional,seed=3``).
RANDOM = "random"
#: How a random control is matched: ``layer`` (as many heads per layer as the typed set; the default) or
#: ``count`` (as many heads in all, from every head outside the set).
MATCHES: tuple[str, ...] = ("layer", "count")

Head = tuple[int, int]
_PAIR = re.compile(r"L(\d+)H(\d+)")


@dataclass(frozen=True)
class HeadSelection:
    """A parsed selection: ``heads`` (explicit pairs, sorted) or ``type`` (one of :data:`TYPE_NAMES`),
    ``random`` for its matched control, drawn with ``seed`` and matched by ``match`` (:data:`MATCHES`).
    :meth:`canonical` is its string."""

    heads: tuple[Head, ...] | None = None
    type: str | None = None
    random: bool = False
    seed: int = 0
    match: str = "layer"

    def canonical(self) -> str:
        """``L0H1+L2H3`` | ``positional`` | ``random:positional,seed=0`` (the seed always written;
        ``,match=count`` appended for a count-matched control, the layer form unchanged)."""
        if self.heads is not None:
            return format_heads(self.heads)
        if not self.random:
            return str(self.type)
        return f"{RANDOM}:{self.type},seed={self.seed}" + (f",match={self.match}" if self.match != "layer" else "")

    @property
    def needs_readout(self) -> bool:
        """True for a type or its random control (resolved from a head readout)."""
        return self.heads is None


def format_heads(heads: tuple[Head, ...] | list[Head]) -> str:
    """``[(0, 1), (2, 3)]`` -> ``L0H1+L2H3`` (the ``heads=`` value of an intervention)."""
    return "+".join(f"L{int(layer)}H{int(head)}" for layer, head in heads)


def _bad(text: str) -> PosymError:
    return PosymError(f"heads: {text!r} is not a selection; give heads like L3H1+L5H0, a type ({', '.join(TYPE_NAMES)}) "
                      f"or {RANDOM}:<type>[,seed=S][,match=count]")


def parse_heads(text: str) -> HeadSelection:
    """``L3H1+L5H0`` | a type name (:data:`TYPE_NAMES`) | ``random:<type>[,seed=S][,match=layer|count]`` -> a
    :class:`HeadSelection`; a one-line PosymError otherwise (a head named twice, an unknown type, a bad
    seed or match)."""
    text = str(text).strip()
    if not text:
        raise _bad(text)
    if text.startswith(RANDOM + ":"):
        body, *opts = [p.strip() for p in text[len(RANDOM) + 1:].split(",")]
        if body not in TYPE_NAMES:
            raise PosymError(f"heads: {text!r}: a random control matches a type ({', '.join(TYPE_NAMES)}), got {body!r}")
        seed, match = 0, "layer"
        for opt in opts:
            key, eq, value = opt.partition("=")
            key, value = key.strip(), value.strip()
            if key == "match" and eq:
                if value not in MATCHES:
                    raise PosymError(f"heads: {text!r}: match is {' or '.join(MATCHES)}, got {value!r}")
                match = value
                continue
            if key != "seed" or not eq:
                raise PosymError(f"heads: {text!r}: {RANDOM}:<type> takes seed=S only (and match=count), "
                                 f"e.g. {RANDOM}:{body},seed=3")
            try:
                seed = check_int(int(value), "heads: seed", lo=0)
            except ValueError:
                raise PosymError(f"heads: {text!r}: seed must be an integer >= 0, e.g. {RANDOM}:{body},seed=3") from None
        return HeadSelection(type=body, random=True, seed=seed, match=match)
    if text in TYPE_NAMES:
        return HeadSelection(type=text)
    pairs = [_PAIR.fullmatch(p.strip()) for p in text.split("+")]
    if not all(pairs):
        raise _bad(text)
    heads = [(int(m.group(1)), int(m.group(2))) for m in pairs]  # type: ignore[union-attr]
    if len(set(heads)) != len(heads):
        raise PosymError(f"heads: {text!r} names a head twice; give each once")
    return HeadSelection(heads=tuple(sorted(heads)))


def read_readout(path: str | os.PathLike) -> pd.DataFrame:
    """A head readout table from ``path`` (CSV, or Parquet by its suffix); a one-line PosymError when it
    is missing or unreadable. Its columns are checked by :func:`typed_heads`."""
    p = Path(path)
    if not p.is_file():
        raise PosymError(f"--readout {p}: no such file; give the head readout of the same model "
                         "(posym head-types' head_types.csv or posym scores' scores.csv)")
    try:
        return pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
    except Exception as e:  # noqa: BLE001 - any parse failure is the same one-line message
        raise PosymError(f"--readout {p}: cannot read it as a table ({type(e).__name__}: {str(e).splitlines()[0]})") from None


def _one_row_per_head(readout: pd.DataFrame) -> pd.DataFrame:
    """The readout's rows of the untouched model, one per (layer, head); PosymError naming the columns
    that tell several rows of a head apart."""
    if not {"layer", "head"} <= set(readout.columns):
        raise PosymError(f"the head readout has no layer and head columns (columns: {', '.join(map(str, readout.columns))})")
    table = readout
    if "intervention" in table.columns:
        table = table[table["intervention"].fillna("none").astype(str) == "none"]
    if table.duplicated(["layer", "head"]).any():
        varying = [c for c in ("prompt_set", "tau", "step", "prompt") if c in table.columns and table[c].nunique() > 1]
        what = "; ".join(f"{c}: {', '.join(map(str, table[c].unique()[:4]))}" for c in varying) or "no column tells them apart"
        raise PosymError(f"the head readout has several rows per head ({what}); keep the rows of one "
                         "prompt set / τ / step (a mean over prompts, not --per-prompt rows)")
    return table


def typed_heads(readout: pd.DataFrame, type_name: str) -> tuple[Head, ...]:
    """The ``(layer, head)`` pairs of ``readout`` (module doc) of type ``type_name``, sorted (maybe empty).

    A ``posym_type`` column gives the posym types, ``classic_type`` the classic ones and ``is_sink`` the
    sinks; without ``posym_type``, ``s_pos``/``s_sym`` are typed here (module doc). One-line PosymError
    for an unknown type or a readout that cannot give it."""
    if type_name not in TYPE_NAMES:
        raise PosymError(f"heads: unknown type {type_name!r}; types: {', '.join(TYPE_NAMES)}")
    table = _one_row_per_head(readout)
    if type_name in POSYM_TYPE_NAMES:
        if "posym_type" in table.columns:
            labels = table["posym_type"].astype(str).to_numpy()
        elif {"s_pos", "s_sym"} <= set(table.columns):
            has_frac = {"frac_positional", "frac_symbolic"} <= set(table.columns)
            has_mass = "swap_mass" in table.columns or "block_mass" in table.columns
            labels = posym_types(table, gamma=GAMMA, min_mass=MIN_MASS if has_mass else 0.0,
                                 max_entropy=None if "entropy" not in table.columns else DIFFUSE_ENTROPY,
                                 pure_fraction=None if has_frac else 0)
        else:
            raise PosymError(f"heads={type_name}: the head readout has neither posym_type nor s_pos and s_sym; "
                             "give posym head-types' head_types.csv or a scores.csv of the same model")
        sel = labels == type_name
    elif type_name == "sink" and "is_sink" in table.columns:
        sel = table["is_sink"].astype(str).str.lower().isin(["true", "1", "1.0"]).to_numpy()
    elif "classic_type" in table.columns:
        sel = (table["classic_type"].astype(str) == CLASSIC_TYPE_NAMES[type_name]).to_numpy()
    else:
        raise PosymError(f"heads={type_name}: a classic type needs the classic_type column of posym head-types' "
                         "head_types.csv (a scores table gives the posym types only)")
    rows = table.loc[sel, ["layer", "head"]].astype(int)
    return tuple(sorted((int(layer), int(head)) for layer, head in rows.itertuples(index=False)))


def matched_control(typed: tuple[Head, ...] | list[Head], n_layers: int, n_heads: int, seed: int,
                    type_name: str = "typed", match: str = "layer") -> tuple[Head, ...]:
    """The matched random control of ``typed``, sorted, drawn with ``numpy.random.default_rng(seed)``.
    ``match="layer"``: per layer (in order) as many heads as ``typed`` has there, without replacement from
    that layer's other heads; ``match="count"``: ``len(typed)`` heads without replacement from all
    ``n_layers x n_heads`` heads outside ``typed`` (in (layer, head) order). One-line PosymError when a
    layer (or the model) has fewer other heads than typed ones, naming ``--match count`` for layers."""
    rng = np.random.default_rng(check_int(seed, "heads: seed", lo=0))
    if match not in MATCHES:
        raise PosymError(f"match is {' or '.join(MATCHES)}, got {match!r}")
    if match == "count":
        mine = set((int(ly), int(h)) for ly, h in typed)
        others = [(ly, h) for ly in range(n_layers) for h in range(n_heads) if (ly, h) not in mine]
        if len(others) < len(mine):
            raise PosymError(f"cannot match {RANDOM}:{type_name},match=count: the model has {len(mine)} {type_name} heads "
                             f"and only {len(others)} other head{'s' if len(others) != 1 else ''}")
        pick = rng.choice(len(others), size=len(mine), replace=False)
        return tuple(sorted(others[int(i)] for i in pick))
    out: list[Head] = []
    for layer in range(n_layers):
        mine = sorted(h for ly, h in typed if ly == layer)
        if not mine:
            continue
        others = [h for h in range(n_heads) if h not in mine]
        if len(others) < len(mine):
            raise PosymError(f"cannot match {RANDOM}:{type_name}: layer {layer} has {len(mine)} {type_name} heads and only "
                             f"{len(others)} other head{'s' if len(others) != 1 else ''}; use --match count "
                             f"({RANDOM}:{type_name},match=count)")
        out += [(layer, int(h)) for h in rng.choice(others, size=len(mine), replace=False)]
    return tuple(sorted(out))



def n_matched_sets(typed: tuple[Head, ...] | list[Head], n_layers: int, n_heads: int, match: str = "layer") -> int:
    """How many distinct matched controls of ``typed`` exist (:func:`matched_control`): the product over
    layers of C(other heads of the layer, typed heads there) (``layer``), or C(all other heads, |typed|)
    (``count``); 0 when none can be matched."""
    mine = sorted(set((int(ly), int(h)) for ly, h in typed))
    if match == "count":
        return math.comb(n_layers * n_heads - len(mine), len(mine))
    out = 1
    for layer in range(n_layers):
        k = sum(1 for ly, _ in mine if ly == layer)
        out *= math.comb(n_heads - k, k) if k else 1
    return out


def control_draws(typed: tuple[Head, ...] | list[Head], n_layers: int, n_heads: int, k: int, seed: int,
                  type_name: str = "typed", match: str = "layer") -> list[tuple[int, tuple[Head, ...]]]:
    """K **distinct** matched controls ``(seed used, heads)`` of ``typed`` (:func:`matched_control` with
    seeds ``seed, seed + 1, …``, a seed whose set repeats an earlier one skipped), or, when at most ``k``
    distinct sets exist (:func:`n_matched_sets`; e.g. one head among 11 others), **all** of them — the
    exact randomization null, whose p floor is 1/(1 + that number) (a draw with repeats would put the
    floor below the exact one and overstate significance). Each set is reproduced by
    ``random:<type>,seed=S`` with its recorded seed. One-line PosymError as :func:`matched_control`."""
    k = check_int(k, "controls", lo=1)
    seed = check_int(seed, "heads: seed", lo=0)
    want = min(k, n_matched_sets(typed, n_layers, n_heads, match))
    return distinct_draws(lambda s: matched_control(typed, n_layers, n_heads, s, type_name, match), max(want, 1), seed,
                          limit=k, error=f"could not draw {want} distinct {RANDOM}:{type_name} controls; give fewer --controls")


def resolve_heads(selection: HeadSelection | str, readout: pd.DataFrame | None, n_layers: int,
                  n_heads: int) -> tuple[Head, ...]:
    """The sorted ``(layer, head)`` pairs of ``selection`` in a model of ``n_layers`` x ``n_heads`` query
    heads: explicit heads checked against that shape; a type read from ``readout`` (module doc); its
    ``random:`` control matched per layer or by count (:func:`matched_control`). One-line PosymError for a head that
    does not exist, a type without a readout, a type with no heads in this model, or a control that
    cannot be matched."""
    sel = parse_heads(selection) if isinstance(selection, str) else selection
    n_layers, n_heads = check_int(n_layers, "n_layers", lo=1), check_int(n_heads, "n_heads", lo=1)
    if sel.heads is not None:
        heads = sel.heads
        what = "in this model"
    else:
        if readout is None:
            raise PosymError(f"heads={sel.canonical()} needs a head readout of the same model (--readout FILE: posym "
                             "head-types' head_types.csv or a scores.csv)")
        heads = typed_heads(readout, str(sel.type))
        what = "in the head readout"
        if not heads:
            raise PosymError(f"heads={sel.canonical()}: the head readout has no {sel.type} head (this model has none at "
                             f"the documented thresholds); choose another type")
    bad = [format_heads([h]) for h in heads if not (0 <= h[0] < n_layers and 0 <= h[1] < n_heads)]
    if bad:
        raise PosymError(f"heads: no head {bad[0]} {what}: the model has {n_layers} layers x {n_heads} query heads "
                         f"(L0H0..L{n_layers - 1}H{n_heads - 1})")
    if sel.random:
        return matched_control(heads, n_layers, n_heads, sel.seed, str(sel.type), sel.match)
    return tuple(sorted(heads))


__all__ = ["POSYM_TYPE_NAMES", "CLASSIC_TYPE_NAMES", "TYPE_NAMES", "RANDOM", "MATCHES", "HeadSelection", "format_heads",
           "parse_heads",
           "read_readout", "typed_heads", "matched_control", "n_matched_sets", "control_draws", "resolve_heads"]
