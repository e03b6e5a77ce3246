"""Writing files so that a reader never sees half of one: the one atomic writer of posym (a temporary
sibling, then ``os.replace``) and the exchange of two directories (``train --force``). Every module that
writes a file a user keeps goes through :func:`write_atomic`."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import uuid
from pathlib import Path
from typing import Callable


def temp_sibling(path: str | os.PathLike) -> Path:
    """The temporary name beside ``path`` that :func:`write_atomic` writes first:
    ``.<name>.<8 hex>.tmp`` (hidden, unique per call, same directory so the rename is atomic)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


def write_atomic(path: str | os.PathLike, write: Callable[[Path], object], mkdir: bool = True) -> Path:
    """Call ``write(tmp)`` on a temporary sibling of ``path`` and rename it to ``path`` in one step; the
    temporary file is removed if ``write`` fails, and an existing ``path`` is untouched until the rename.
    ``mkdir``: create the parent directory first. Returns ``path``."""
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | os.PathLike, text: str, mkdir: bool = True) -> Path:
    """:func:`write_atomic` of a UTF-8 text."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), mkdir=mkdir)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, mkdir: bool = True) -> Path:
    """:func:`write_atomic` of bytes."""
    return write_atomic(path, lambda tmp: tmp.write_bytes(data), mkdir=mkdir)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """Linux ``renameat2(RENAME_EXCHANGE)``: True if it swapped, False where unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # not supported by this kernel or file system
        return False
    raise OSError(err, os.strerror(err), str(a))


def exchange_dirs(a: str | os.PathLike, b: str | os.PathLike) -> None:
    """Swap the contents of directories ``a`` and ``b`` (siblings on one file system): atomically
    where the kernel can (Linux ``renameat2``), else by three renames (a crash between them leaves
    both directories intact, one under a ``.swap-*`` name beside them)."""
    a, b = Path(a), Path(b)
    if _renameat2_exchange(a, b):
        return
    aside = a.with_name(f".{a.name}.swap-{uuid.uuid4().hex[:8]}")
    os.rename(a, aside)
    os.rename(b, a)
    os.rename(aside, b)


__all__ = ["exchange_dirs", "temp_sibling", "write_atomic", "write_bytes_atomic", "write_text_atomic"]
