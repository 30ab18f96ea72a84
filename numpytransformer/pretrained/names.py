"""Turning a family's table of names (theirs -> ours) into arrays, in either direction.

A row names one of their tensors and the parameter(s) of ours it holds. ``{i}`` stands for a
layer's index. ``transposed``: theirs is ours transposed, as a ``torch.nn.Linear`` weight
(out, in) is our ``W`` (in, out). Several of ours: theirs is ours side by side on its last
axis, as GPT-2's fused ``c_attn`` (D, 3D) is ``[W_q W_k W_v]``.
"""
from __future__ import annotations

from typing import Dict, Iterator, List, NamedTuple, Tuple

import numpy as np

from .files import PretrainedError

__all__ = ["Row", "expand", "to_ours", "to_theirs"]


class Row(NamedTuple):
    theirs: str
    ours: Tuple[str, ...]
    transposed: bool = False


def expand(table: List[Row], n_layers: int) -> Iterator[Row]:
    """Every row, once per layer for those that name ``{i}``."""
    for row in table:
        layers = range(n_layers) if "{i}" in row.theirs else [None]
        for i in layers:
            fill = (lambda s: s) if i is None else (lambda s, i=i: s.replace("{i}", str(i)))
            yield Row(fill(row.theirs), tuple(fill(o) for o in row.ours), row.transposed)


def to_ours(rows: Iterator[Row], tensors: Dict[str, np.ndarray], params: Dict[str, np.ndarray],
            where: str) -> Dict[str, np.ndarray]:
    """Our parameters from their ``tensors``, shaped and typed as ``params``; a missing tensor or a
    shape that does not fit is a :class:`PretrainedError` naming it (``where``: the file)."""
    out = {}
    for row in rows:
        if row.theirs not in tensors:
            raise PretrainedError(f"{where} has no tensor {row.theirs!r}, which the configuration needs")
        value = np.asarray(tensors[row.theirs])
        if value.dtype.kind != "f":
            raise PretrainedError(f"{where}: tensor {row.theirs!r} is {value.dtype}, expected floating point")
        if row.transposed:
            value = value.T
        parts = np.split(value, len(row.ours), axis=-1) if value.shape[-1] % len(row.ours) == 0 else [value]
        expected = [params[o].shape for o in row.ours]
        expected_theirs = expected[0][:-1] + (sum(s[-1] for s in expected),)
        if row.transposed:
            expected_theirs = expected_theirs[::-1]
        if len(parts) != len(row.ours) or [p.shape for p in parts] != expected:
            raise PretrainedError(f"{where}: tensor {row.theirs!r} has shape {tuple(tensors[row.theirs].shape)}, "
                                  f"the configuration needs {expected_theirs}")
        for name, part in zip(row.ours, parts):
            out[name] = part.astype(params[name].dtype)
    return out


def to_theirs(rows: Iterator[Row], params: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Their tensors from our ``params``: the inverse of :func:`to_ours`."""
    out = {}
    for row in rows:
        value = np.concatenate([params[o] for o in row.ours], axis=-1)
        out[row.theirs] = np.ascontiguousarray(value.T if row.transposed else value)
    return out
