"""Exchange two directories in one step, so that a replaced run is never half gone (``train --force``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import uuid
from pathlib import Path

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


__all__ = ["exchange_dirs"]
