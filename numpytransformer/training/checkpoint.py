"""Checkpoints: a JSON document and ``.npz`` arrays, written atomically, checked whole on loading.

A checkpoint is a directory::

    CK/checkpoint.json                  what :data:`FIELDS` lists: config, task, step, generator state ...
    CK/weights-00001234-5f0c1a2e.npz    the model's parameters by dotted name (step, digest)
    CK/optimizer-00001234-9b3d77c0.npz  the optimiser's moments (only in ``last/``, for resuming)

Each file is written to a temporary name, flushed and renamed, ``checkpoint.json`` (which names
the ``.npz`` files with their SHA-256) last: a save killed at any moment leaves the previous
checkpoint whole, and its temporary files go at the next save (not at a load: a reader must not
delete the file a running training is writing). Loading checks the
document against :data:`FIELDS` and the arrays against the model before anything is copied;
every problem is one :class:`CheckpointError` naming the file and the field. Arrays are read
with ``allow_pickle=False``: no pickle anywhere.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import zipfile
from pathlib import Path

import numpy as np

from ..errors import NumpyTransformerError
from ..files import atomic_write
from ..nn.config import with_later_defaults

__all__ = ["CheckpointError", "FORMAT_VERSION", "FIELDS", "WEIGHT_LIMIT", "save_checkpoint", "load_checkpoint",
           "read_checkpoint_meta", "average_checkpoints"]

#: The version of the layout ``checkpoint.json`` describes (docs/checkpoints.md lists what each one added).
FORMAT_VERSION = 7

#: The fields of ``checkpoint.json`` and their JSON types (``a.b`` is field ``b`` inside ``a``);
#: save and load both check a document against them.
FIELDS = {"format_version": int, "model": str, "config": dict, "task": dict, "data": dict, "train": dict,
          "step": int, "epoch": int, "best_score": (float, int, type(None)), "history": dict, "rng": dict,
          "files": dict, "files.weights": dict, "files.weights.name": str, "files.weights.sha256": str}
#: The largest magnitude a saved or loaded weight may have. Adam moves a weight by a few learning
#: rates at most per update, so no trained model comes near it; a finite weight beyond it is damage,
#: and would overflow the forward pass into NaN, which would decode as padding.
WEIGHT_LIMIT = 1e5
#: The further fields of a checkpoint saved for resuming (``last/``).
RESUME_FIELDS = {"optimizer": dict, "optimizer.t": int, "files.optimizer": dict, "files.optimizer.name": str,
                 "files.optimizer.sha256": str, "history.steps": list, "history.epochs": list}


class CheckpointError(NumpyTransformerError):
    """A checkpoint is missing, damaged, or does not match the model."""


def save_checkpoint(path, model, meta: dict, optimizer=None) -> Path:
    """Save ``model`` (and ``optimizer``, for resuming) into the directory ``path``.

    ``meta`` holds the remaining :data:`FIELDS` (task, data, train, step, epoch,
    best_score, history); the config, the generator state and the file list are added here.
    """
    path = Path(path)
    refused = f"cannot save {path}"  # everything is checked before anything is written
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointError(f"{refused}: meta field step must be a whole number >= 0, got {step!r}")
    arrays = {"weights": model.parameters()}
    doc = {"format_version": FORMAT_VERSION, "model": type(model).__name__, "config": model.cfg.to_dict(),
           "rng": model.rng.bit_generator.state, **meta, "files": {}}
    if optimizer is not None:
        arrays["optimizer"] = optimizer.state_arrays()
        doc["optimizer"] = {"t": optimizer.t, "name": optimizer.name}
    files = {}
    for kind, named in arrays.items():
        bad = next((k for k, v in named.items() if not np.isfinite(v).all()), None)
        if bad is not None:  # a load would refuse it
            raise CheckpointError(f"{refused}: array {bad} holds NaN or infinite values")
        big = next((k for k, v in named.items() if kind == "weights" and _largest(v) > WEIGHT_LIMIT), None)
        if big is not None:  # a load would refuse these too
            raise CheckpointError(f"{refused}: array {big} holds weights beyond +-{WEIGHT_LIMIT:g} "
                                  f"({_largest(named[big]):.3g}): the training diverged")
        buf = io.BytesIO()
        np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in named.items()})
        sha = hashlib.sha256(buf.getvalue()).hexdigest()
        name = f"{kind}-{step:08d}-{sha[:8]}.npz"  # never the name of the file the old JSON reads
        files[name] = buf.getvalue()
        doc["files"][kind] = {"name": name, "sha256": sha}
    _check_fields(doc, path / "checkpoint.json", optimizer is not None, damaged=f"{refused}: meta")
    try:
        text = json.dumps(doc, indent=1, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{refused}: meta holds a value JSON cannot write ({e})") from None
    for name, data in files.items():
        atomic_write(path / name, data)
    atomic_write(path / "checkpoint.json", text)
    keep = {f["name"] for f in doc["files"].values()}
    for old in list(path.glob("weights-*.npz")) + list(path.glob("optimizer-*.npz")):
        if old.name not in keep:
            old.unlink()
    return path


def _check_fields(doc, js: Path, for_resume: bool, damaged: str = "") -> None:
    """Check a ``checkpoint.json`` document: its version, the field tables, then the values.
    ``damaged`` begins each message (default: the file is damaged)."""
    damaged = damaged or f"{js} is damaged"
    if not isinstance(doc, dict):
        raise CheckpointError(f"{damaged}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{js} has format version {doc.get('format_version')!r}; this version reads "
                              f"{FORMAT_VERSION}: train the model again")
    for field, kind in {**FIELDS, **(RESUME_FIELDS if for_resume else {})}.items():
        *outer, name = field.split(".")
        parent = doc
        for key in outer:  # an object: the tables list it before its fields
            parent = parent[key]
        if name not in parent:
            raise CheckpointError(f"{damaged}: field {field} is missing")
        if not isinstance(parent[name], kind) or isinstance(parent[name], bool):
            got = type(parent[name]).__name__
            raise CheckpointError(f"{damaged}: field {field} has the wrong type ({got})")
    # Then the values: (field, is it right, what is wrong otherwise).
    checks = [("step", doc["step"] >= 0, "is negative"), ("epoch", doc["epoch"] >= 0, "is negative"),
              ("best_score", doc["best_score"] is None or math.isfinite(doc["best_score"]), "is not finite")]
    for kind in ("weights", "optimizer") if for_resume else ("weights",):
        name = doc["files"][kind]["name"]
        checks.append((f"files.{kind}.name", Path(name).name == name and name.endswith(".npz"),
                       "must name a .npz file in the checkpoint"))
    if for_resume:  # the history is read again as training goes on: numbers, the same keys in every epoch
        t, steps, epochs = doc["optimizer"]["t"], doc["history"]["steps"], doc["history"]["epochs"]
        checks += [("optimizer.t", t == doc["step"], f"must equal field step ({doc['step']}), not {t}"),
                   ("history.steps", all(_numbers(s, ("step", "loss", "lr")) for s in steps), "must hold numbers"),
                   ("history.epochs", all(_numbers(e, e) and e.keys() == epochs[0].keys() for e in epochs),
                    "must hold numbers, under the same keys in every epoch")]
    for field, ok, problem in checks:
        if not ok:
            raise CheckpointError(f"{damaged}: field {field} {problem}")


def _numbers(record, keys) -> bool:
    """Is ``record`` a JSON object with numbers (not booleans) under ``keys``?"""
    values = [record.get(k) for k in keys] if isinstance(record, dict) else [None]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def read_checkpoint_meta(path, for_resume: bool = False) -> dict:
    """The checked ``checkpoint.json`` of the checkpoint directory ``path``."""
    js = Path(path) / "checkpoint.json"
    if not js.is_file():
        raise CheckpointError(f"no checkpoint at {str(path)!r} (no checkpoint.json there)")
    try:
        doc = json.loads(js.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{js} is damaged: {e}") from None
    _check_fields(doc, js, for_resume)
    return doc


def _largest(a: np.ndarray) -> float:
    return float(np.abs(a).max(initial=0))


def _read_arrays(path: Path, entry: dict, like: dict, limit: float = math.inf) -> dict:
    """The arrays of the file that ``entry`` of field files names, checked: its SHA-256, then
    their names, shapes, dtypes and finiteness against ``like``, the model's own, and their
    magnitudes against ``limit``."""
    f = path / entry["name"]
    if not f.is_file():
        raise CheckpointError(f"checkpoint file {f} is missing")
    data = f.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointError(f"checkpoint file {f} is damaged (its checksum does not match checkpoint.json)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint file {f} is not a readable .npz archive ({type(e).__name__})") from None
    missing, extra = sorted(set(like) - set(arrays)), sorted(set(arrays) - set(like))
    if missing or extra:
        raise CheckpointError(f"{f} does not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for k, p in like.items():
        a = arrays[k]
        if a.shape != p.shape or a.dtype != p.dtype:
            raise CheckpointError(f"{f}: array {k} is {a.dtype} {a.shape}, the model expects {p.dtype} {p.shape}")
        if not np.isfinite(a).all():
            raise CheckpointError(f"{f}: array {k} holds NaN or infinite values")
        if _largest(a) > limit:
            raise CheckpointError(f"{f}: array {k} holds a weight of magnitude {_largest(a):.3g}, beyond the "
                                  f"+-{limit:g} of any trained model: the file is damaged")
    return arrays


def load_checkpoint(path, model, optimizer=None, doc=None) -> dict:
    """Load a checkpoint into ``model`` (and ``optimizer``); returns its JSON document (``doc``: the one
    :func:`read_checkpoint_meta` gave the caller, not read again). Everything is checked before
    anything is copied, so a refused checkpoint leaves the model as it was."""
    path = Path(path)
    doc = doc or read_checkpoint_meta(path, for_resume=optimizer is not None)
    js = path / "checkpoint.json"
    if doc["model"] != type(model).__name__:
        raise CheckpointError(f"{js} holds a {doc['model']}, not a {type(model).__name__}")
    want, saved = model.cfg.to_dict(), with_later_defaults(doc["config"])
    diff = [k for k in sorted(set(want) | set(saved)) if saved.get(k) != want.get(k)]
    if diff:
        raise CheckpointError(f"{js}: field config differs from the model's ({', '.join(diff[:4])})")
    weights = _read_arrays(path, doc["files"]["weights"], model.parameters(), WEIGHT_LIMIT)
    if optimizer is not None:
        saved = doc["optimizer"].get("name", "adam")  # older checkpoints name none: they are Adam's
        if saved != optimizer.name:
            raise CheckpointError(f"{js} holds the state of {saved!r}, not of {optimizer.name!r}: resume with "
                                  f"--optimizer {saved}")
        moments = _read_arrays(path, doc["files"]["optimizer"], optimizer.state_arrays())
    try:
        np.random.default_rng().bit_generator.state = doc["rng"]  # tried on a new generator first
    except (TypeError, ValueError, KeyError, OverflowError):
        raise CheckpointError(f"{js} is damaged: field rng is not a generator state") from None
    for k, p in model.parameters().items():
        p[...] = weights[k]
    model.rng.bit_generator.state = doc["rng"]
    if optimizer is not None:
        optimizer.load_state_arrays(moments, doc["optimizer"]["t"])
    return doc


def average_checkpoints(paths, model) -> dict:
    """Load into ``model`` the mean of the weights of several checkpoints of the same model
    (fairseq's ``average_checkpoints``: the last few epochs of a run, averaged, often score
    better than any one of them). Returns the last checkpoint's document."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    total = {k: np.zeros(p.shape) for k, p in model.parameters().items()}  # in float64
    for i, path in enumerate(paths):
        doc = load_checkpoint(path, model)  # checks each against the model's config
        if i == 0:
            task = doc["task"]
        elif doc["task"] != task:
            raise CheckpointError(f"{path} was trained on another task or data than {paths[0]}; average "
                                  "checkpoints of one run")
        for k, p in model.parameters().items():
            total[k] += p
    for k, p in model.parameters().items():
        p[...] = total[k] / len(paths)
    return doc
