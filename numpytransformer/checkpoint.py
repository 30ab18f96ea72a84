"""Checkpoints: ``.npz`` arrays (read with ``allow_pickle=False``) and a JSON file, written atomically.

A checkpoint is a directory::

    CK/checkpoint.json         config, task settings, optimiser settings, step, RNG state ...
    CK/weights-00001234.npz    the model's parameters by dotted name
    CK/optimizer-00001234.npz  Adam's moments (only when saved for resuming)

Every file is written to a temporary name and then renamed, and ``checkpoint.json``,
which names the ``.npz`` files it belongs to, is renamed last. A save interrupted at
any moment therefore leaves the previous checkpoint whole: until the final rename,
the old JSON still points at the old arrays, which are only deleted afterwards.
No pickle is used anywhere.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from .config import TransformerConfig

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "read_checkpoint_meta", "load_weights",
           "atomic_write_bytes", "atomic_write_text"]

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is missing, damaged, or does not match the model."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _npz_bytes(arrays: Dict[str, np.ndarray]) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def save_checkpoint(path, model, meta: dict, optimizer=None) -> Path:
    """Save ``model`` (and optionally ``optimizer``) into the directory ``path``.

    Parameters
    ----------
    path : str or Path
        The checkpoint directory (created if needed).
    model : a model with ``cfg`` and ``parameters()``
    meta : dict
        JSON-serialisable extras: task settings, vocabulary, step, epoch, history ...
    optimizer : Adam, optional
        Its moments go to ``optimizer-*.npz``; its step and settings into the JSON.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    step = int(meta.get("step", 0))
    files = {}
    weights = {k: v for k, v in model.parameters().items()}
    data = _npz_bytes(weights)
    files["weights"] = {"name": f"weights-{step:08d}.npz", "sha256": hashlib.sha256(data).hexdigest()}
    atomic_write_bytes(path / files["weights"]["name"], data)
    doc = {
        "format_version": FORMAT_VERSION,
        "model": type(model).__name__,
        "config": model.cfg.to_dict(),
        "dropout_rng_state": _jsonable(model.rng.bit_generator.state),
        **meta,
    }
    if optimizer is not None:
        data = _npz_bytes(optimizer.state_arrays())
        files["optimizer"] = {"name": f"optimizer-{step:08d}.npz", "sha256": hashlib.sha256(data).hexdigest()}
        atomic_write_bytes(path / files["optimizer"]["name"], data)
        doc["optimizer"] = {"type": "Adam", "t": optimizer.t, "betas": [optimizer.beta1, optimizer.beta2],
                            "eps": optimizer.eps}
    doc["files"] = files
    atomic_write_text(path / "checkpoint.json", json.dumps(doc, indent=1))
    keep = {f["name"] for f in files.values()}
    for old in list(path.glob("weights-*.npz")) + list(path.glob("optimizer-*.npz")):
        if old.name not in keep:
            old.unlink()
    return path


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (np.integer,)):
        return int(obj)
    return obj


def read_checkpoint_meta(path) -> dict:
    """The parsed ``checkpoint.json`` of the checkpoint directory ``path``."""
    path = Path(path)
    js = path / "checkpoint.json"
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if not js.is_file():
        raise CheckpointError(f"{str(path)!r} is not a checkpoint directory (it has no checkpoint.json)")
    try:
        doc = json.loads(js.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{js} is damaged: {e}") from None
    if doc.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{js} has format version {doc.get('format_version')!r}, expected {FORMAT_VERSION}")
    return doc


def _read_npz(path: Path, entry: dict) -> Dict[str, np.ndarray]:
    f = path / entry["name"]
    if not f.is_file():
        raise CheckpointError(f"checkpoint file {f} is missing")
    data = f.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointError(f"checkpoint file {f} is damaged (its checksum does not match checkpoint.json)")
    import io

    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def load_weights(model, arrays: Dict[str, np.ndarray], source: str = "checkpoint") -> None:
    """Copy ``arrays`` into the model's parameters, checking names, shapes and dtypes."""
    params = model.parameters()
    missing, extra = sorted(set(params) - set(arrays)), sorted(set(arrays) - set(params))
    if missing or extra:
        raise CheckpointError(f"{source} does not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for k, p in params.items():
        a = arrays[k]
        if a.shape != p.shape:
            raise CheckpointError(f"{source}: parameter {k} has shape {a.shape}, the model expects {p.shape}")
        if a.dtype != p.dtype:
            raise CheckpointError(f"{source}: parameter {k} is {a.dtype}, the model is {p.dtype}")
        p[...] = a


def load_checkpoint(path, model=None, optimizer=None, expect_config: Optional[TransformerConfig] = None) -> dict:
    """Load a checkpoint into ``model`` (and ``optimizer``); returns its JSON document.

    Raises :class:`CheckpointError` with a clear message when the directory is
    missing or damaged, or when the stored config differs from the model's.
    """
    path = Path(path)
    doc = read_checkpoint_meta(path)
    if model is not None:
        want = (expect_config or model.cfg).to_dict()
        have = doc["config"]
        diff = {k: (have.get(k), want[k]) for k in want if have.get(k) != want[k]}
        if diff:
            shown = ", ".join(f"{k}: checkpoint {a!r} vs model {b!r}" for k, (a, b) in list(diff.items())[:4])
            raise CheckpointError(f"checkpoint {str(path)!r} was saved with a different config ({shown})")
        if doc.get("model") != type(model).__name__:
            raise CheckpointError(f"checkpoint {str(path)!r} holds a {doc.get('model')}, not a {type(model).__name__}")
        load_weights(model, _read_npz(path, doc["files"]["weights"]), f"checkpoint {str(path)!r}")
        model.rng.bit_generator.state = doc["dropout_rng_state"]
    if optimizer is not None:
        if "optimizer" not in doc["files"]:
            raise CheckpointError(f"checkpoint {str(path)!r} has no optimiser state, so it cannot be resumed")
        optimizer.load_state_arrays(_read_npz(path, doc["files"]["optimizer"]), doc["optimizer"]["t"])
    return doc
