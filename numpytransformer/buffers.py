"""Reuse of large output arrays that their last user has let go of.

Why: a fresh array larger than glibc's mmap threshold (32 MiB at most) is mapped from the
operating system on every call and returned on every free, so each use pays a page fault
per page before any arithmetic. Inside a translation-size training step a fresh (1536, 8000)
float32 array (49 MB: the logits, the softmax) took 14-152 ms of CPU time in faults against
8-9 ms for the subtraction written into it (benchmarks/RESULTS.md, issue 21).

How: :func:`empty_reusable` keeps the last few large arrays it made and hands one out again
only when nothing else refers to it any more (its reference count is the pool's own), so an
array a caller still holds, or holds a view of, is never overwritten. Small
arrays come straight from :func:`numpy.empty`: malloc already recycles them.
"""
from __future__ import annotations

import math
import sys
import threading
from typing import List

import numpy as np

__all__ = ["empty_reusable", "REUSE_BYTES"]

#: Arrays at least this large are pooled (glibc's largest mmap threshold, 32 MiB).
REUSE_BYTES = 32 * 2**20
_MAX_KEPT = 4  # buffers kept at once (a training step needs two); the oldest goes first

_pool: List[np.ndarray] = []  # flat uint8 buffers; what is handed out are views of them
_lock = threading.Lock()  # between the check that a buffer is free and the view that takes it


def empty_reusable(shape: tuple, dtype) -> np.ndarray:
    """Like ``np.empty(shape, dtype)``, but in the memory of an earlier large array nobody holds.

    The result is a C-contiguous view of a pooled buffer at least as large, so batches of
    varying shapes (length-bucketed training) reuse the buffer of the largest one. The
    contents are undefined, as with ``np.empty``: callers write the whole array.
    """
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in shape)
    nbytes = math.prod(shape) * dtype.itemsize  # not np.prod: 5 us a call, and every linear layer calls this
    if nbytes < REUSE_BYTES:
        return np.empty(shape, dtype)
    with _lock:
        for buf in _pool:
            # Free means 3 references: the pool's, the loop name ``buf`` and getrefcount's own
            # argument. Every array handed out is a view holding its buffer, so as long as a
            # caller keeps one (or any view of one) its buffer is not handed out again.
            if buf.nbytes >= nbytes and sys.getrefcount(buf) <= 3:
                break
        else:
            buf = np.empty(nbytes, dtype=np.uint8)
            _pool.append(buf)
            if len(_pool) > _MAX_KEPT:
                del _pool[0]
        return buf[:nbytes].view(dtype).reshape(shape)
