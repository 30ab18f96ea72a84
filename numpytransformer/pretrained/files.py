"""The files of a Hugging Face model directory: ``config.json`` and ``model.safetensors``.

Weights are read and written with ``safetensors``' NumPy API, never with pickle: a
``pytorch_model.bin`` is a pickle, which can run code when it is read, and is refused. A
directory is written whole into a temporary sibling and renamed into place, so a reader
never sees a mix of old and new files (:func:`write_directory` says what it can see).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Sequence

import numpy as np

from ..errors import NumpyTransformerError
from ..files import atomic_write

__all__ = ["CONFIG", "WEIGHTS", "TOKENIZER_FILES", "PretrainedError", "read_config", "read_tensors",
           "tokenizer_files", "write_directory"]

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
#: The tokenizer's files a directory may hold beside the weights (WordPiece's vocab.txt, GPT-2's BPE).
TOKENIZER_FILES = ("vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")


class PretrainedError(NumpyTransformerError):
    """A model directory this library cannot read or represent; the message names the file and field."""


def _safetensors_numpy():
    try:
        import safetensors.numpy
    except ImportError:
        raise PretrainedError("reading and writing model.safetensors needs the safetensors package: "
                              "pip install numpytransformer[pretrained]") from None
    return safetensors.numpy


def read_config(directory: Path) -> dict:
    """``directory/config.json`` as a dict; a missing or unreadable one is a :class:`PretrainedError`."""
    path = directory / CONFIG
    if not directory.is_dir():
        raise PretrainedError(f"{directory} is not a directory (expected a Hugging Face model directory)")
    if not path.is_file():
        raise PretrainedError(f"{path} is missing: a Hugging Face model directory holds config.json")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PretrainedError(f"{path} is not readable JSON: {e}") from None
    if not isinstance(config, dict):
        raise PretrainedError(f"{path} must hold a JSON object, got {type(config).__name__}")
    return config


def read_tensors(directory: Path) -> Dict[str, np.ndarray]:
    """Every tensor of ``directory/model.safetensors`` by name; pickled weights are refused."""
    path = directory / WEIGHTS
    if not path.is_file():
        pickles = sorted(p.name for p in directory.glob("*.bin"))
        if (directory / (WEIGHTS + ".index.json")).is_file():
            raise PretrainedError(f"{directory} holds its weights in shards ({WEIGHTS}.index.json); this library "
                                  f"reads one {WEIGHTS}")
        if pickles:
            raise PretrainedError(f"{directory} holds only {pickles[0]}, a pickle, which this library never reads "
                                  f"(it can run code): convert it to {WEIGHTS} with safetensors first")
        raise PretrainedError(f"{path} is missing: the weights must be in {WEIGHTS}")
    st = _safetensors_numpy()
    try:
        return st.load_file(str(path))
    except Exception as e:  # safetensors raises its own SafetensorError, OSError or ValueError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PretrainedError(f"{path} is damaged (truncated or not a safetensors file): {first}") from None


def tokenizer_files(directory: Path) -> Dict[str, Path]:
    """The tokenizer's files present in ``directory``, by name (see :data:`TOKENIZER_FILES`)."""
    return {name: directory / name for name in TOKENIZER_FILES if (directory / name).is_file()}


def write_directory(directory: Path, config: dict, tensors: Dict[str, np.ndarray],
                    extra_files: Sequence[Path] = (), overwrite: bool = False) -> Path:
    """Write ``config.json``, ``model.safetensors`` and copies of ``extra_files`` as the directory ``directory``.

    All of it is written into a temporary directory beside the target, every file flushed to
    disk, and that directory is renamed to ``directory``. A new ``directory`` is absent until it
    appears whole. An existing non-empty one is replaced only with ``overwrite``, in two renames:
    the old directory moves aside into a hidden sibling, then the new one comes in. A reader sees
    the old directory whole, then, for the moment between the renames, no directory at all, then
    the new one whole; never a mix of the two. A write killed in that moment leaves the old
    directory whole at ``.NAME.old.*/NAME`` beside the target.
    """
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())) and not overwrite:
        raise PretrainedError(f"{directory} exists and is not empty: pass overwrite=True to replace it")
    st = _safetensors_numpy()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        atomic_write(tmp / CONFIG, json.dumps(config, indent=2, sort_keys=True) + "\n")
        for f in extra_files:
            atomic_write(tmp / Path(f).name, Path(f).read_bytes())
        # metadata "pt": what transformers expects of a safetensors file it loads into torch
        st.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp / WEIGHTS),
                     metadata={"format": "pt"})
        with open(tmp / WEIGHTS, "rb") as fh:  # safetensors writes without flushing to disk
            os.fsync(fh.fileno())
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent))
            os.replace(directory, old / directory.name)
            os.replace(tmp, directory)
            shutil.rmtree(old)
        else:
            os.replace(tmp, directory)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return directory
