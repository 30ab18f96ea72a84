"""Atomic file writes: a reader finds a file whole, the old version or the new, never part of one.

Checkpoints, histories, sweep reports and converted model directories are all written through
:func:`atomic_write`, so that a run killed while writing leaves the previous file as it was.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path, data) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` through a temporary file in the same
    directory, flushed to disk and renamed: ``path`` is always whole, the old file or the new."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for tmp in path.parent.glob(".*.tmp"):  # the temporary files of writes killed half-way
        tmp.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
