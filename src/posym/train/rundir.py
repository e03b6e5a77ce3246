"""The run directory checks of ``posym train`` (SPEC §2; docs/runs.md): what may be trained into, resumed or
replaced with ``--force`` — one-line PosymErrors before any work. Used by :mod:`posym.train.loop` and
:mod:`posym.train.batched`."""

from __future__ import annotations

from pathlib import Path

from posym.errors import PosymError
from posym.runs import layout


def _check_run_dir(out: Path, resume: bool, force: bool) -> None:
    """Checks that need no lock (nothing is created or changed)."""
    if resume and force:
        raise PosymError("--resume and --force exclude each other")
    if out.exists() and not out.is_dir():
        raise PosymError(f"{out} exists and is not a directory")
    if resume and not (out / layout.POSYM_JSON).is_file():
        raise PosymError(f"cannot resume: {out} is not a posym run directory (no posym.json)")


def _is_cwd_or_above(path: Path) -> bool:
    """Whether ``path`` is the current directory or one of its parents (never to be deleted)."""
    try:
        here, target = Path.cwd().resolve(), path.resolve()
    except OSError:
        return True
    return target == here or target in here.parents


def _check_replaceable(out: Path) -> None:
    """What ``force`` may replace: a whole posym run directory, never a checkpoint folder, anything
    inside a run, any other folder, nor the current directory or one above it (PosymError)."""
    if _is_cwd_or_above(out):
        raise PosymError(f"--force would delete {out}, the current directory or one above it; choose another --out")
    if (out / layout.CONFIG_JSON).exists():
        raise PosymError(f"{out} is a checkpoint folder, not a run; --force replaces only a whole run directory, "
                         "so choose another --out")
    inside = layout.enclosing_run(out)
    if inside is not None:
        raise PosymError(f"{out} lies inside the run {_shown(inside)}; --force replaces only a whole run directory, "
                         "so choose another --out")
    if not layout.is_run_dir(out):
        raise PosymError(f"{out} is not a posym run (no posym.json); --force only replaces posym runs, "
                         "so choose another --out")


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when it lies under it."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _has_entries(out: Path) -> bool:
    return out.is_dir() and any(p.name != layout.LOCK for p in out.iterdir())


def _prepare_run_dir(out: Path, resume: bool, force: bool) -> None:
    """Validate the run directory; runs under the run's lock (``posym.runs.lock``). A new run starts
    in an empty (or missing) directory: ``force`` over an existing run is :func:`_replace_run`."""
    _check_run_dir(out, resume, force)
    if resume:
        return
    if _has_entries(out):
        if force:  # it was empty when train() looked; someone wrote into it since
            raise PosymError(f"run directory {out} changed while the run started; try again")
        raise PosymError(f"run directory {out} already exists; use --resume to continue it or --force to overwrite")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise PosymError(f"cannot write to {out}: {exc.strerror or exc}") from exc


__all__: list[str] = []  # private helpers of the training loop
