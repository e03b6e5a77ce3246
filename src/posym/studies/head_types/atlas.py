"""``posym atlas``: a head atlas of one model — the file to publish beside a paper (SPEC §3, §4, §7;
docs/llm.md, "A head atlas"; schema in docs/runs.md, "The head atlas").

One row per (layer, head), written as ``atlas.parquet`` (with the settings and the model's identity
in its schema metadata, JSON under the ``posym`` key) and ``atlas.csv``, with ``atlas.json`` beside
them holding the same metadata:

* who the head is: ``layer``, ``head``, ``kv_head`` (its key/value head under GQA), ``layer_type``
  (``sliding`` / ``global``, :func:`posym.heads.llm_heads.layer_types`), ``rope`` (False on a NoPE
  layer), ``depth``;
* the classic detectors on the repeated sequences (:func:`posym.heads.detectors.detector_scores`),
  ``classic_type`` and ``is_sink`` (:func:`posym.heads.head_types.join_head_types`);
* per prompt set ``S`` of :data:`PROMPT_SOURCES` (columns ``S_<name>``): the mean scores, the
  per-prompt fractions and the posym type of the head-types join — computed exactly as ``posym
  head-types`` computes them (the same functions, the same settings, the same values) — and the
  head's frequency use on that set's prompts read as Paper A's weighted and dominant frequency ID
  (:func:`posym.heads.frequencies.weighted_frequency_id`).

The compute is the study's (``head_types.py`` below the studies floor); this module only widens the
join to one row per head, adds the frequency IDs and writes the files.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from posym.constants import GAMMA
from posym.errors import PosymError
from posym.runs import layout
from posym.studies.head_types.run import check_reading_settings, head_types_out, load_inputs, parse_sources
from posym.studies.head_types.study import DEFAULT_REPEAT_LENGTH, DEFAULT_SWAP_EXCLUDE, PROMPT_SOURCES
from posym.verbs import Outputs, VerbResult

#: Root of the default output folders: ``runs/atlas/<model>/``.
ATLAS_OUT_ROOT = "runs/atlas"
#: Key of the atlas metadata in the Parquet schema metadata.
META_KEY = "posym"
#: Per-head columns (before the per-set ones), in table order.
HEAD_COLUMNS: tuple[str, ...] = ("layer", "head", "kv_head", "layer_type", "rope", "depth", "previous_token",
                                 "induction", "duplicate_token", "first_token", "classic_type", "is_sink")
#: Per-set columns (each written ``<set>_<name>``), in table order.
SET_COLUMNS: tuple[str, ...] = ("s_pos", "s_sym", "entropy", "swap_mass", "frac_positional", "frac_symbolic",
                                "frac_mixed", "frac_uninformative", "mean_type", "purity_fraction", "posym_type",
                                "weighted_id", "dominant_id")
_STR = {"layer_type", "classic_type", "mean_type", "posym_type"}
_INT = {"layer", "head", "kv_head", "dominant_id"}
_BOOL = {"rope", "is_sink"}


def column_dtype(name: str) -> str:
    """The dtype of an atlas column (per-set columns by their ``<set>_`` suffix): ``int64``, ``bool``,
    ``string`` or ``float64`` (docs/runs.md, "The head atlas")."""
    base = name.split("_", 1)[1] if name.split("_", 1)[0] in PROMPT_SOURCES else name
    return "int64" if base in _INT else "bool" if base in _BOOL else "string" if base in _STR else "float64"


def atlas_columns(sources: Sequence[str] = PROMPT_SOURCES) -> list[str]:
    """The atlas' columns for ``sources``, in table order."""
    return [*HEAD_COLUMNS, *(f"{s}_{c}" for s in sources for c in SET_COLUMNS)]


def atlas_out(model: Any = None, gguf: str | os.PathLike | None = None) -> Path:
    """Default output folder: ``runs/atlas/<model>/`` (named as ``posym head-types`` names its own)."""
    return Path(ATLAS_OUT_ROOT) / head_types_out(model, gguf).name


def model_identity(lm: Any, label: str, name: str | None = None) -> dict[str, Any]:
    """The model's identity for the metadata: name (``name``, default ``label``) and where it was
    loaded from (``label``), ``model_type``, layers × heads (and key/value
    heads), head and rotary dims, the config's RoPE bases, and per layer its type, whether it rotates
    and its fastest and slowest rotary angle (radians per position; 0 on a NoPE layer)."""
    from posym.heads.llm_heads import layer_types
    from posym.model.adapters import get_adapter

    ad = get_adapter(lm)
    cfg = lm.config
    inv = [ad.layer_inv_freq(l).double().numpy() for l in range(ad.n_layers)]
    bases = {k: getattr(cfg, k) for k in ("rope_theta", "rope_local_base_freq", "rotary_emb_base", "rope_scaling",
                                              "rope_parameters")
             if getattr(cfg, k, None) is not None}
    return {"name": name or label, "source": label, "model_type": str(getattr(cfg, "model_type", type(lm).__name__)),
            "n_layers": int(ad.n_layers), "n_heads": int(ad.n_heads), "n_kv_heads": int(ad.n_kv_heads),
            "head_dim": int(ad.head_dim), "rotary_dim": int(ad.rotary_dim), "rope_config": _jsonable(bases),
            "layer_types": layer_types(ad), "rope_layers": [bool(ad.has_rope(l)) for l in range(ad.n_layers)],
            "fastest_angle": [float(a.max()) if a.size else 0.0 for a in inv],
            "slowest_angle": [float(a.min()) if a.size else 0.0 for a in inv]}


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def frequency_ids(lm: Any, source: str, rep: np.ndarray, prompts: Sequence[Any] | None, batch_size: int) -> pd.DataFrame:
    """Weighted and dominant frequency ID per head (SPEC §4; :func:`posym.heads.frequencies.weighted_frequency_id`)
    from the frequency use of the last token of ``source``'s prompts (the repeated sequences, or the
    prompt set's prompts, grouped by length) -> ``layer, head, weighted_id, dominant_id``."""
    from posym.heads.frequencies import frequency_use_array, use_frame, weighted_frequency_id
    from posym.model.adapters import get_adapter
    from posym.tasks.llm_prompts import group_prompts

    ad = get_adapter(lm)
    if source == "repeated":
        per = [frequency_use_array(ad, rep, batch_size=batch_size)]
    else:
        per = [frequency_use_array(ad, np.asarray([prompts[i].input_ids for i in idx]), batch_size=batch_size)
               for idx in group_prompts(prompts).values()]
    use = np.concatenate(per)
    return weighted_frequency_id(use_frame(ad, use.mean(0), use.shape[0]))[["layer", "head", "weighted_id", "dominant_id"]]


def widen(joins: dict[str, pd.DataFrame], heads: pd.DataFrame) -> pd.DataFrame:
    """One row per head: ``heads`` (``layer, head, kv_head, layer_type, rope, depth``), the detector
    columns, ``classic_type`` and ``is_sink`` of the first join (they come from the detectors, the same
    for every set), then :data:`SET_COLUMNS` of each set's join (with ``weighted_id``, ``dominant_id``
    merged in) as ``<set>_<name>``; dtypes as :func:`column_dtype`."""
    first = next(iter(joins.values()))
    keys = ["layer", "head"]
    out = heads.merge(first[keys + [c for c in HEAD_COLUMNS if c not in heads.columns]], on=keys, validate="one_to_one")
    for s, j in joins.items():
        part = j[keys + list(SET_COLUMNS)].rename(columns={c: f"{s}_{c}" for c in SET_COLUMNS})
        out = out.merge(part, on=keys, validate="one_to_one")
    out = out[atlas_columns(list(joins))].sort_values(keys, kind="stable").reset_index(drop=True)
    return out.astype({c: column_dtype(c) for c in out.columns})


def _write_parquet(table: pd.DataFrame, meta: dict[str, Any], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.Table.from_pandas(table, preserve_index=False)
    pq.write_table(t.replace_schema_metadata({**(t.schema.metadata or {}), META_KEY.encode(): json.dumps(meta)}), path)


def read_atlas_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The atlas metadata (settings, model, posym version) stored in an ``atlas.parquet``'s schema."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(META_KEY.encode())
    if raw is None:
        raise PosymError(f"{path} holds no posym atlas metadata (written by posym atlas?)")
    return json.loads(raw)


def atlas(model: Any = None, gguf: str | os.PathLike | None = None, *, tokenizer: Any = None,
          prompts: str | Sequence[str] = PROMPT_SOURCES, swap_exclude: str = DEFAULT_SWAP_EXCLUDE,
          n: int = 32, length: int = DEFAULT_REPEAT_LENGTH, seed: int = 0, tau: float | None = None,
          gamma: float = GAMMA, min_mass: float | None = None, pure_fraction: float | None = None,
          window_length: int | None = None, n_entities: int | None = None, n_examples: int | None = None,
          device: str | None = None, dtype: Any = None, batch_size: int = 8, threads: int | None = None,
          out: str | os.PathLike | None = None, force: bool = False, progress: bool = True) -> VerbResult:
    """The head atlas of a model (module doc) written to ``out`` (default :func:`atlas_out`):
    ``atlas.parquet`` (settings in its schema metadata), ``atlas.csv`` and ``atlas.json``.

    Every option means what it means to :func:`posym.studies.head_types.head_types` (same defaults;
    the per-set values equal its ``head_types.csv`` for the same settings). ``pyarrow`` is needed
    (``pip install posym[parquet]``).
    """
    import torch
    from tqdm.auto import tqdm

    import posym
    from posym.checks import check_positive_int
    from posym.heads.detectors import detector_scores
    from posym.heads.head_types import SINK_SHARE, join_head_types, source_scores
    from posym.heads.llm_heads import layer_types, relative_depth
    from posym.heads.prompt_readings import per_prompt_kinds
    from posym.model.adapters import get_adapter
    from posym.runs.tables import parquet_available, parquet_path

    # ---- every check before any load or write (as head_types checks them)
    sources = parse_sources(prompts)
    (n, length, batch_size, tau_v, gamma, min_mass, pure_fraction, exclude, window_length, n_entities,
     n_examples) = check_reading_settings(n=n, length=length, batch_size=batch_size, tau=tau, gamma=gamma, min_mass=min_mass,
                                          pure_fraction=pure_fraction, swap_exclude=swap_exclude,
                                          window_length=window_length, n_entities=n_entities, n_examples=n_examples,
                                          one_tau="the atlas takes one tau")
    if not parquet_available():
        raise PosymError("posym atlas writes Parquet and needs pyarrow: pip install 'posym[parquet]'")
    out = Path(out) if out is not None else atlas_out(model, gguf)
    csv_path, json_path = out / layout.ATLAS, out / layout.ATLAS_JSON
    outputs = Outputs([csv_path, json_path], force).check()  # the Parquet beside the CSV is checked too
    if model is None or isinstance(model, (str, os.PathLike)):
        from posym.model.llm import check_llm_model

        check_llm_model(model, gguf)  # a missing folder or one without a tokenizer: one line, nothing loaded
    if threads is not None:
        torch.set_num_threads(check_positive_int(threads, "threads"))
    if progress:
        print(f"atlas: output folder {out}{os.sep}", file=sys.stderr, flush=True)

    # ---- inputs (the head-types study's)
    lm, tok, label, rep, built = load_inputs(model, gguf, tokenizer, device, dtype, sources, n, length, seed,
                                             window_length, n_entities, n_examples)
    ad = get_adapter(lm)

    # ---- compute: detectors once (repeated sequences), then each set's join and frequency IDs
    joins: dict[str, pd.DataFrame] = {}
    with tqdm(total=1 + len(sources), desc="atlas", unit="step", disable=not progress) as bar:
        bar.set_postfix_str("detectors")
        det = detector_scores(lm, torch.as_tensor(rep, device=next(lm.parameters()).device), batch_size=batch_size)
        bar.update(1)
        for s in sources:
            bar.set_postfix_str(s)
            sc = source_scores(lm, s, rep, built[s], tau_v, exclude, batch_size)
            readings = per_prompt_kinds(sc, gamma=gamma, min_mass=min_mass, tau_index=0, n_boot=1, seed=seed)
            join = join_head_types(sc.to_frame(), det, readings, gamma=gamma, min_mass=min_mass,
                                   pure_fraction=pure_fraction)
            with torch.no_grad():
                joins[s] = join.merge(frequency_ids(lm, s, rep, built[s], batch_size), on=["layer", "head"],
                                      validate="one_to_one")
            bar.update(1)
    L, H = ad.n_layers, ad.n_heads
    layer = np.repeat(np.arange(L), H)
    heads = pd.DataFrame({"layer": layer, "head": np.tile(np.arange(H), L), "kv_head": np.tile(ad.kv_index.numpy(), L),
                          "layer_type": np.asarray(layer_types(ad))[layer],
                          "rope": np.asarray([ad.has_rope(l) for l in range(L)], dtype=bool)[layer],
                          "depth": relative_depth(layer, L)})
    table = widen(joins, heads)
    meta = {"kind": "posym head atlas", "posym_version": posym.__version__, "spec": "docs/spec.md §3, §4, §7",
            "schema": "docs/runs.md, The head atlas", "model": model_identity(lm, label, atlas_out(model, gguf).name),
            "gguf": None if gguf is None else str(gguf),
            "settings": {"prompt_sets": list(sources), "n": n, "repeat_length": length,
                         "repeated_tokens": int(rep.shape[1]), "seed": int(seed), "tau": tau_v, "gamma": gamma,
                         "min_mass": min_mass, "pure_fraction": pure_fraction, "sink_share": SINK_SHARE,
                         "swap_exclude": str(swap_exclude), "exclude_keys": [int(k) for k in exclude],
                         "window_length": window_length, "n_entities": n_entities, "n_examples": n_examples,
                         "detectors_on": "repeated", "frequency_use": "max_abs, query = last token"},
            "n_rows": len(table), "columns": {c: column_dtype(c) for c in table.columns}}

    # ---- write
    outputs.text(table.to_csv(index=False), csv_path)
    outputs._write(parquet_path(csv_path), lambda p: _write_parquet(table, meta, p))
    outputs.json(meta, json_path)

    # ---- the printed summary: head counts
    lines = [f"model: {label} ({meta['model']['model_type']}, {L} layers x {H} heads = {len(table)} heads, "
             f"{ad.n_kv_heads} kv heads)",
             f"prompt sets: {', '.join(sources)}; {n} each; tau {tau_v:g}; gamma {gamma:g}; min mass {min_mass:g}; "
             f"swap exclusion: {swap_exclude}",
             "classic types: " + ", ".join(f"{k} {v}" for k, v in table["classic_type"].value_counts().items())
             + f"; sinks {int(table['is_sink'].sum())}"]
    for s in sources:
        counts = table[f"{s}_posym_type"].value_counts()
        lines.append(f"{s}: " + ", ".join(f"{k} {int(counts.get(k, 0))}" for k in
                                          ("positional", "symbolic", "mixed", "diffuse", "uninformative")))
    lines.append(f"wrote {len(outputs.written)} files to {out}{os.sep} (schema: docs/runs.md, \"The head atlas\")")
    return VerbResult(table, outputs.written, "\n".join(lines), {"meta": meta, "joins": joins})


__all__ = ["ATLAS_OUT_ROOT", "HEAD_COLUMNS", "META_KEY", "SET_COLUMNS", "atlas", "atlas_columns", "atlas_out",
           "column_dtype", "frequency_ids", "model_identity", "read_atlas_meta", "widen"]
