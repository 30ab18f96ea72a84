"""Checkpoints: a JSON document and ``.npz`` arrays, written atomically, checked whole on loading.

A checkpoint is a directory::

    CK/checkpoint.json         what :data:`FIELDS` lists: config, task, step, generator state ...
    CK/weights-00001234-5f0c1a2e.npz    the model's parameters by dotted name (step, digest)
    CK/optimizer-00001234-9b3d77c0.npz  Adam's moments (only in ``last/``, for resuming)

Every file is written to a temporary name, flushed and renamed; ``checkpoint.json``,
which names the ``.npz`` files it belongs to (with their SHA-256), is renamed last. A
save interrupted at any moment leaves the previous checkpoint whole, and its leftover
temporary files are removed by the next save or load. Loading checks the whole
document against :data:`FIELDS`, then the arrays' names, shapes, dtypes and values,
before anything is built; every problem is a :class:`CheckpointError` naming the file
and the field. The ``.npz`` files are read with ``allow_pickle=False``: no pickle anywhere.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Dict

import numpy as np

from .errors import NumpyTransformerError

__all__ = ["CheckpointError", "FORMAT_VERSION", "FIELDS", "save_checkpoint", "load_checkpoint",
           "read_checkpoint_meta", "atomic_write_text", "average_checkpoints"]

FORMAT_VERSION = 2

#: The fields of ``checkpoint.json`` and their JSON types; save and load both check against it.
FIELDS = {"format_version": int, "model": str, "config": dict, "task": dict, "data": dict, "train": dict,
          "step": int, "epoch": int, "best_score": (float, int, type(None)), "history": dict, "rng": dict,
          "files": dict}
#: Present only in a checkpoint saved for resuming.
RESUME_FIELDS = {"optimizer": dict}


class CheckpointError(NumpyTransformerError):
    """A checkpoint is missing, damaged, or does not match the model."""


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a save that was killed
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _remove_leftovers(path: Path) -> None:
    """Delete temporary files that a save killed half-way left behind."""
    for tmp in path.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def _npz_bytes(arrays: Dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def save_checkpoint(path, model, meta: dict, optimizer=None) -> Path:
    """Save ``model`` (and ``optimizer``, for resuming) into the directory ``path``.

    ``meta`` holds the remaining :data:`FIELDS` (task, data, train, step, epoch,
    best_score, history); the config, the generator state and the file list are added here.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(path)
    arrays = {"weights": model.parameters()}
    doc = {"format_version": FORMAT_VERSION, "model": type(model).__name__, "config": model.cfg.to_dict(),
           "rng": _jsonable(model.rng.bit_generator.state), **meta, "files": {}}
    if optimizer is not None:
        arrays["optimizer"] = optimizer.state_arrays()
        doc["optimizer"] = {"t": optimizer.t}
    for kind, named in arrays.items():
        data = _npz_bytes(named)
        sha = hashlib.sha256(data).hexdigest()
        name = f"{kind}-{int(meta['step']):08d}-{sha[:8]}.npz"  # never the name of the file the old JSON reads
        atomic_write_bytes(path / name, data)
        doc["files"][kind] = {"name": name, "sha256": sha}
    _check_fields(doc, path / "checkpoint.json", optimizer is not None)
    atomic_write_text(path / "checkpoint.json", json.dumps(doc, indent=1))
    keep = {f["name"] for f in doc["files"].values()}
    for old in list(path.glob("weights-*.npz")) + list(path.glob("optimizer-*.npz")):
        if old.name not in keep:
            old.unlink()
    return path


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    return int(obj) if isinstance(obj, np.integer) else obj


def _check_fields(doc, js: Path, for_resume: bool) -> None:
    if not isinstance(doc, dict):
        raise CheckpointError(f"{js} is damaged: expected a JSON object, got {type(doc).__name__}")
    if doc.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{js} has format version {doc.get('format_version')!r}; this version reads "
                              f"{FORMAT_VERSION}: train the model again")
    fields = {**FIELDS, **(RESUME_FIELDS if for_resume else {})}
    for name, kind in fields.items():
        if name not in doc:
            raise CheckpointError(f"{js} is damaged: field {name!r} is missing")
        if not isinstance(doc[name], kind) or isinstance(doc[name], bool):
            raise CheckpointError(f"{js} is damaged: field {name!r} has the wrong type "
                                  f"({type(doc[name]).__name__})")
    for name in ("step", "epoch"):
        if doc[name] < 0:
            raise CheckpointError(f"{js} is damaged: field {name!r} is negative")
    for kind in ("weights",) + (("optimizer",) if for_resume else ()):
        entry = doc["files"].get(kind)
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("sha256"), str)
                and Path(entry["name"]).name == entry["name"] and entry["name"].endswith(".npz")):
            raise CheckpointError(f"{js} is damaged: field files.{kind} must name a file in the checkpoint "
                                  "and its sha256")
    if for_resume:
        t, steps, epochs = doc["optimizer"].get("t"), doc["history"].get("steps"), doc["history"].get("epochs")
        if not (_number(t) and t == doc["step"]):
            raise CheckpointError(f"{js} is damaged: field optimizer.t must equal field step ({doc['step']}), got {t!r}")
        # The records are read again when training goes on (curves.png): numbers, with the same keys in every epoch.
        if not (isinstance(steps, list) and isinstance(epochs, list)
                and all(isinstance(s, dict) and all(_number(s.get(k)) for k in ("step", "loss", "lr")) for s in steps)
                and all(isinstance(e, dict) and all(map(_number, e.values())) and e.keys() == epochs[0].keys()
                        for e in epochs)):
            raise CheckpointError(f"{js} is damaged: field history must hold lists 'steps' and 'epochs' of records "
                                  "of numbers")


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def read_checkpoint_meta(path, for_resume: bool = False) -> dict:
    """The checked ``checkpoint.json`` of the checkpoint directory ``path``."""
    path = Path(path)
    js = path / "checkpoint.json"
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if not js.is_file():
        raise CheckpointError(f"{str(path)!r} is not a checkpoint directory (it has no checkpoint.json)")
    try:
        doc = json.loads(js.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"{js} is damaged: {e}") from None
    _check_fields(doc, js, for_resume)
    _remove_leftovers(path)
    return doc


def _read_npz(path: Path, entry: dict) -> Dict[str, np.ndarray]:
    f = path / entry["name"]
    if not f.is_file():
        raise CheckpointError(f"checkpoint file {f} is missing")
    data = f.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointError(f"checkpoint file {f} is damaged (its checksum does not match checkpoint.json)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint file {f} is not a readable .npz archive ({type(e).__name__})") from None


def _check_arrays(arrays: Dict[str, np.ndarray], like: Dict[str, np.ndarray], where: str) -> None:
    """Names, shapes, dtypes and finiteness of loaded arrays against the model's own."""
    missing, extra = sorted(set(like) - set(arrays)), sorted(set(arrays) - set(like))
    if missing or extra:
        raise CheckpointError(f"{where} does not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for k, p in like.items():
        a = arrays[k]
        if a.shape != p.shape or a.dtype != p.dtype:
            raise CheckpointError(f"{where}: array {k} is {a.dtype} {a.shape}, the model expects {p.dtype} {p.shape}")
        if not np.isfinite(a).all():
            raise CheckpointError(f"{where}: array {k} holds NaN or infinite values")


def load_checkpoint(path, model, optimizer=None) -> dict:
    """Load a checkpoint into ``model`` (and ``optimizer``); returns its JSON document.

    Everything is checked before anything is copied, so a refused checkpoint leaves the
    model as it was.
    """
    path = Path(path)
    doc = read_checkpoint_meta(path, for_resume=optimizer is not None)
    js = path / "checkpoint.json"
    if doc["model"] != type(model).__name__:
        raise CheckpointError(f"{js} holds a {doc['model']}, not a {type(model).__name__}")
    want = model.cfg.to_dict()
    diff = [k for k in sorted(set(want) | set(doc["config"])) if doc["config"].get(k) != want.get(k)]
    if diff:
        raise CheckpointError(f"{js}: field config differs from the model's ({', '.join(diff[:4])})")
    weights = _read_npz(path, doc["files"]["weights"])
    _check_arrays(weights, model.parameters(), str(path / doc["files"]["weights"]["name"]))
    moments = None
    if optimizer is not None:
        moments = _read_npz(path, doc["files"]["optimizer"])
        _check_arrays(moments, optimizer.state_arrays(), str(path / doc["files"]["optimizer"]["name"]))
    rng = np.random.default_rng()
    try:
        rng.bit_generator.state = doc["rng"]
    except (TypeError, ValueError, KeyError, OverflowError):
        raise CheckpointError(f"{js} is damaged: field 'rng' is not a generator state") from None
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
    total = None
    for path in paths:
        doc = load_checkpoint(path, model)  # checks each against the model's config
        params = model.parameters()
        if total is None:
            total = {k: p.astype(np.float64) for k, p in params.items()}
        else:
            for k, p in params.items():
                total[k] += p
    if total is None:
        raise CheckpointError("no checkpoints to average")
    for k, p in model.parameters().items():
        p[...] = total[k] / len(paths)
    return doc
