"""A Hugging Face directory as one of our checkpoints, and a checkpoint back as a Hugging Face directory.

``python -m numpytransformer convert DIR --out RUN`` writes ``RUN/last/``, a checkpoint in the
format of :mod:`~numpytransformer.training.checkpoint` (``checkpoint.json`` and the weights'
``.npz``, checked whole when read), with the tokenizer's files of ``DIR`` kept beside it in
``RUN/last/tokenizer/`` (their SHA-256 in the document). ``export RUN --out DIR`` writes the
Hugging Face layout back (:func:`~numpytransformer.pretrained.save`): ``transformers`` loads it,
and its outputs are the original's.

A converted checkpoint names no task of this library: its ``task`` field is
``{"name": "converted", ...}``. The commands that need one (``generate``, ``eval``, ``predict``,
``train --resume``) refuse it in one line (:func:`refusal`): a GPT-2's tokenizer is byte-level BPE
(``vocab.json`` and ``merges.txt``), which this library's BPE (word-level, with an end-of-word
marker) does not read, and no task here trains or scores a bare BERT encoder. Its use is to carry
weights in and out; ``embed`` reads a sentence-transformers directory as it is.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import NumpyTransformerError
from ..nn.bert import EncoderModel
from ..nn.config import TransformerConfig
from ..nn.gpt import TransformerLM
from ..files import atomic_write
from ..training.checkpoint import load_checkpoint, read_checkpoint_meta, save_checkpoint
from . import load, save
from .files import PretrainedError

__all__ = ["CONVERTED", "to_checkpoint", "export_checkpoint", "refusal"]

#: The ``task.name`` of a converted checkpoint.
CONVERTED = "converted"
#: The classes a checkpoint may hold to be exported, by the name ``checkpoint.json`` gives them.
_EXPORTABLE = {cls.__name__: cls for cls in (EncoderModel, TransformerLM)}


def to_checkpoint(directory, out, dtype: str = "float32") -> Path:
    """Write the Hugging Face model in ``directory`` as the checkpoint ``out/last/``; returns that path.

    Refused (:class:`PretrainedError`): ``out`` that already holds a checkpoint, and whatever
    :func:`~numpytransformer.pretrained.load` refuses.
    """
    out = Path(out)
    ck = out / "last"
    if out.exists() and not out.is_dir():
        raise PretrainedError(f"--out {out} is a file; expected a new run directory")
    if (ck / "checkpoint.json").exists() or (out / "checkpoint.json").exists():
        raise PretrainedError(f"--out {out} already holds a checkpoint; choose another --out")
    loaded = load(directory, dtype)
    kept = {}
    for name, path in loaded.tokenizer_files.items():  # written before checkpoint.json, which names them
        data = path.read_bytes()
        atomic_write(ck / "tokenizer" / name, data)
        kept[name] = hashlib.sha256(data).hexdigest()
    task = {"name": CONVERTED, "data": {}, "model": {},
            "state": {"model_type": loaded.model_type, "source": str(Path(directory).resolve()),
                      "tokenizer_files": kept}}
    meta = {"task": task, "data": {}, "train": {}, "step": 0, "epoch": 0, "best_score": None, "history": {}}
    return save_checkpoint(ck, loaded.model, meta)


def export_checkpoint(ck, out, overwrite: bool = False) -> Path:
    """Write the checkpoint directory ``ck`` (an EncoderModel or a TransformerLM) as the Hugging Face
    directory ``out``, with the tokenizer's files a converted checkpoint kept; returns ``out``.

    A kept file whose SHA-256 differs from the document's is refused, as is a model BERT or
    GPT-2 cannot express (the option is named).
    """
    ck = Path(ck)
    doc = read_checkpoint_meta(ck)
    cls = _EXPORTABLE.get(doc["model"])
    if cls is None:
        raise PretrainedError(f"{ck} holds a {doc['model']}; export writes an EncoderModel (as BERT) or a "
                              "TransformerLM (as GPT-2)")
    try:
        model = cls(TransformerConfig.from_dict(doc["config"]))
    except NumpyTransformerError as e:  # a config this version refuses: one line naming the file
        raise PretrainedError(f"{ck / 'checkpoint.json'}: field config does not fit ({e})") from None
    load_checkpoint(ck, model, doc=doc)
    files = []
    state = doc["task"].get("state", {}) if doc["task"].get("name") == CONVERTED else {}
    for name, sha in state.get("tokenizer_files", {}).items():
        path = ck / "tokenizer" / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
            raise PretrainedError(f"{path} is missing or damaged (its checksum does not match checkpoint.json)")
        files.append(path)
    return save(model, out, tokenizer_files=files, overwrite=overwrite)


def refusal(ck, doc: dict) -> str:
    """The one line by which a command that needs a task refuses the converted checkpoint ``ck``."""
    kind = doc["task"].get("state", {}).get("model_type", "?")
    why = ("its tokenizer is GPT-2's byte-level BPE (vocab.json, merges.txt), which this library does not read"
           if kind == "gpt2" else "no task of this library trains or scores a bare BERT encoder (embed reads "
           "its Hugging Face directory)")
    return (f"{ck} holds a {kind} model converted from a Hugging Face directory, with no task: {why}; "
            f"use it through: python -m numpytransformer export {ck.parent} --out DIR")
