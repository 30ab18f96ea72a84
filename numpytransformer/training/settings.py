"""Settings as dataclasses, and the command-line flags declared on their fields.

A field is declared once, with :func:`option` (its flag, written out, then default, help,
choices or range): ``lr_factor: float = option("--lr-factor", 1.0, ...)``, so that a search for
``--lr-factor`` lands on it. The parser's flag, help and check all come from that declaration. A run is described by
:class:`ModelSettings`, :class:`~numpytransformer.training.trainer.TrainConfig` and the task's own
data settings (``ReverseData``, ``TranslateData``, ...).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ..nn.config import DROPOUT_MAX, SEED_MAX, SIZE_LIMITS
from ..errors import NumpyTransformerError

__all__ = ["option", "flag_of", "check_fields", "add_flags", "given_values", "whole_number", "ModelSettings"]


def option(flag: str, default, help: str, *, choices: Optional[Tuple] = None, low=None, high=None,
           none: Optional[str] = None):
    """A dataclass field with its command-line flag and what the flag needs.

    ``flag`` is the flag's whole text (``"--lr-factor"``); ``low``/``high`` bound a number
    (inclusive), ``choices`` a string, ``none`` says what ``None`` means for an optional
    field (``"all"``).
    """
    if not (isinstance(flag, str) and flag.startswith("--")):
        raise TypeError(f"option's flag must be a string starting with --, got {flag!r}")
    meta = {"flag": flag, "help": help, "choices": choices, "low": low, "high": high, "none": none}
    return dataclasses.field(default=default, metadata=meta)


def flag_of(cls_or_obj, name: str) -> str:
    """The flag that sets field ``name``, as its :func:`option` declares it."""
    return {f.name: f for f in dataclasses.fields(cls_or_obj)}[name].metadata["flag"]


@functools.lru_cache(maxsize=None)  # get_type_hints evaluates every annotation of the class, for each field
def _kind(cls, f) -> type:
    """The plain type of a field (``Optional[int]`` -> ``int``)."""
    t = typing.get_type_hints(cls)[f.name]
    args = [a for a in typing.get_args(t) if a is not type(None)]
    return args[0] if args else t


def check_fields(obj) -> None:
    """Check every field of a settings dataclass against its declaration; the message names
    the flag: ``--d-model must be from 1 to 4096, got 0``."""
    for f in dataclasses.fields(obj):
        value, m, kind = getattr(obj, f.name), f.metadata, _kind(type(obj), f)
        flag = flag_of(obj, f.name)
        if value is None and m.get("none"):
            continue
        if kind is bool and not isinstance(value, bool):
            raise NumpyTransformerError(f"{flag} must be True or False, got {value!r}")
        if kind is str and m.get("choices") and value not in m["choices"]:
            raise NumpyTransformerError(f"{flag} must be one of {', '.join(m['choices'])}, got {value!r}")
        if kind is str and not isinstance(value, str):
            raise NumpyTransformerError(f"{flag} must be a string, got {value!r}")
        if kind in (int, float):
            whole = kind is int
            ok = isinstance(value, int if whole else (int, float)) and not isinstance(value, bool)
            if not ok or not (whole or math.isfinite(value)):
                what = "a whole number" if whole else "a finite number"
                raise NumpyTransformerError(f"{flag} must be {what}, got {value!r}")
            low, high = m.get("low"), m.get("high")
            if (low is not None and value < low) or (high is not None and value > high):
                span = (f"from {low} to {high}" if low is not None and high is not None
                        else f"at least {low}" if low is not None else f"at most {high}")
                raise NumpyTransformerError(f"{flag} must be {span}, got {value!r}")


def add_flags(parser: argparse.ArgumentParser, cls, defaults, title: str) -> None:
    """Add a flag for every field of the dataclass ``cls``; ``defaults`` (an instance) gives
    the values shown in the help, except that a field declared ``None`` with a ``none`` text shows
    that text (what it resolves to, which may depend on the other settings). Unset flags stay out of
    the parsed namespace, so a task's recipe can fill them in (see :func:`given_values`)."""
    group = parser.add_argument_group(title)
    for f in dataclasses.fields(cls):
        m, kind, default = f.metadata, _kind(cls, f), getattr(defaults, f.name)
        shown = m["none"] if f.default is None and m.get("none") else default  # what None resolves to
        kw: Dict[str, Any] = {"dest": f"{cls.__name__}.{f.name}", "default": argparse.SUPPRESS,
                              "help": f"{m['help']} (default: {shown})"}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = whole_number() if kind is int else float if kind is float else str
            kw["choices"] = m.get("choices")
            kw["metavar"] = None if m.get("choices") else {int: "N", float: "X"}.get(kind, "TEXT")
        group.add_argument(flag_of(cls, f.name), **kw)


def whole_number(low: Optional[int] = None, high: Optional[int] = None, expected: str = ""):
    """An argparse ``type`` for a whole number, digits only (``1_0`` and ``1e3`` are refused,
    not read as 10 and 1000); given ``low`` and ``high``, from ``low`` to ``high``."""
    def parse(text: str) -> int:
        body = text[1:] if text[:1] in "+-" else text
        if not body.isdigit() or not body.isascii() or len(body) > 18:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
        if low is not None and not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"expected {expected or f'a whole number from {low} to {high}'}, "
                                             f"got {text}")
        return int(text)
    return parse


def given_values(args: argparse.Namespace, cls) -> Dict[str, Any]:
    """The fields of ``cls`` that were set on the command line."""
    prefix = cls.__name__ + "."
    return {k[len(prefix):]: v for k, v in vars(args).items() if k.startswith(prefix)}


@dataclass
class ModelSettings:
    """The shape of a model: the same fields, and flags, for every task; their limits are
    :class:`~numpytransformer.nn.config.TransformerConfig`'s (:data:`~numpytransformer.nn.config.SIZE_LIMITS`)."""

    d_model: int = option("--d-model", 64, "model width", low=1, high=SIZE_LIMITS["d_model"])
    n_heads: int = option("--heads", 4, "attention heads", low=1, high=SIZE_LIMITS["n_heads"])
    n_layers: int = option("--layers", 2, "layers in the encoder (and in the decoder)", low=1,
                           high=SIZE_LIMITS["n_layers"])
    d_ff: int = option("--d-ff", 256, "hidden width of the feed-forward sublayer", low=1, high=SIZE_LIMITS["d_ff"])
    dropout: float = option("--dropout", 0.1, "dropout rate", low=0.0, high=DROPOUT_MAX)
    norm: str = option("--norm", "post", "residual LayerNorm placement: post-LN is the paper's, pre-LN trains faster",
                       choices=("pre", "post"))
    tie_embeddings: bool = option("--tie", False, "tie the target embedding and the output projection")
    dtype: str = option("--dtype", "float32", "floating-point type", choices=("float32", "float64"))
    seed: int = option("--seed", 0, "seed of initialisation, dropout and data order", low=0, high=SEED_MAX)

    def __post_init__(self):
        check_fields(self)
        if self.d_model % self.n_heads:
            raise NumpyTransformerError(f"--d-model {self.d_model} must be divisible by --heads {self.n_heads} "
                                        "(each head gets d_model / heads dimensions)")

    def config_fields(self) -> dict:
        """The :class:`~numpytransformer.nn.config.TransformerConfig` fields these settings set."""
        return {"d_model": self.d_model, "n_heads": self.n_heads, "n_layers": self.n_layers, "d_ff": self.d_ff,
                "dropout": self.dropout, "norm_first": self.norm == "pre", "tie_embeddings": self.tie_embeddings,
                "dtype": self.dtype, "seed": self.seed}
