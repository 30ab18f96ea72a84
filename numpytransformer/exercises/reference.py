"""The values a student's answers are compared with, computed by the grader's own library.

In the teacher's repository every value is computed when it is needed: the forward
values and optimiser states by running the library's own functions on the trusted
cases (:func:`probe.collect`), the gradients by finite differences of the library's
forward (:func:`trusted.numerical_gradient`), never by the backward under test.
A student edition has no solutions to compute them with, so ``build`` stores them,
computed by the teacher's library, in ``exercises/reference.npz`` (numbers, no code,
read without pickle).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Dict

import numpy as np

from . import probe, trusted

REFERENCE_FILE = Path(__file__).resolve().parent / "reference.npz"
_PACKAGE = __name__.rsplit(".", 2)[0]  # the package this grader belongs to


def _lib(name: str):
    return importlib.import_module(f"{_PACKAGE}.{name}")


def _pair_gradients(exercise_id: str, values: dict) -> None:
    _, module, names = trusted.PROBES[exercise_id]
    for j in range(len(names) // 2):
        forward, pre = getattr(_lib(module), names[2 * j]), probe.pair_prefix(j)
        for i, case in enumerate(trusted.pair_cases(exercise_id)):
            if case.reference != "numeric":
                continue
            inputs = {k: v.copy() for k, v in case.inputs.items()}
            out, _ = forward(**inputs, **case.static)
            dout = trusted.rng(case.seed).standard_normal(np.shape(out))
            for name in case.wrt:
                if name is not None:
                    values[f"{pre}c{i}.d{name}"] = trusted.numerical_gradient(
                        lambda: forward(**inputs, **case.static)[0], inputs[name], dout)


def _layer_gradients(values: dict, cls: str, spec: dict, inputs: dict, forward) -> None:
    """7.1 and 7.2: finite differences of the library's ``layers.<cls>``, post- and pre-LN, with respect
    to each array of ``inputs`` and every parameter; ``forward(layer)`` runs the layer on those arrays."""
    for i, norm_first in enumerate((False, True)):
        layer = probe.build_layer(_lib, cls, spec, norm_first)
        # Dropout fixed: every generator restored before each forward, so each draws the same masks.
        gens = {id(m.rng): m.rng for _, m in layer.named_modules() if getattr(m, "rng", None) is not None}
        states = {k: g.bit_generator.state for k, g in gens.items()}

        def run():
            for k, g in gens.items():
                g.bit_generator.state = states[k]
            return forward(layer)

        dout = trusted.rng(spec["dout_seed"]).standard_normal(np.shape(run()))
        for name, a in inputs.items():
            values[f"c{i}.d{name}"] = trusted.numerical_gradient(run, a, dout)
        for name, p in layer.parameters().items():
            values[f"c{i}.d{name}"] = trusted.numerical_gradient(run, p, dout)


def compute(exercise_id: str) -> Dict[str, np.ndarray]:
    """The expected values of one exercise, from this package's own library."""
    values = probe.collect(exercise_id, _lib)
    kind = trusted.PROBES[exercise_id][0]
    if kind == "pair":
        _pair_gradients(exercise_id, values)
    elif kind == "encoder_layer":
        x, mask = trusted.encoder_layer_inputs()
        _layer_gradients(values, "EncoderLayer", trusted.ENCODER_LAYER, {"x": x}, lambda layer: layer.forward(x, mask))
    elif kind == "decoder_layer":
        x, memory, self_mask, memory_mask = trusted.decoder_layer_inputs()
        _layer_gradients(values, "DecoderLayer", trusted.DECODER_LAYER, {"x": x, "memory": memory},
                         lambda layer: layer.forward(x, memory, self_mask, memory_mask))
    return values


def expected(exercise_id: str) -> Dict[str, np.ndarray]:
    """From the stored file in a student edition, computed live in the full library."""
    if REFERENCE_FILE.is_file() and not trusted.SALT:
        prefix = f"{exercise_id}/"
        with np.load(REFERENCE_FILE, allow_pickle=False) as f:
            return {k[len(prefix):]: f[k] for k in f.files if k.startswith(prefix)}
    return compute(exercise_id)


def write_reference_file(path, exercise_ids) -> None:
    """Store every exercise's expected values for the public cases (the student edition's ``reference.npz``)."""
    assert trusted.SALT == 0
    arrays = {f"{e}/{k}": v for e in exercise_ids for k, v in compute(e).items()}
    np.savez_compressed(path, **arrays)
