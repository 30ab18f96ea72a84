"""Pretrained Transformers in the field's layout: a Hugging Face directory in, our model out, and back.

``load(DIR)`` reads ``config.json`` and ``model.safetensors`` (with safetensors' NumPy API,
never pickle) of a BERT-family encoder (``model_type`` "bert", such as MiniLM) or a GPT-2
language model (``model_type`` "gpt2") and returns our model holding those weights:

>>> loaded = load("all-MiniLM-L6-v2/", dtype="float64")
>>> h = loaded.model.forward(ids, attention_mask)      # (N, T) -> hidden states (N, T, 384)

A GPT-2's ``loaded.model.forward(ids)`` gives the next-token logits (N, T, V). ``save(model, DIR)``
writes the same two files back, in the layout ``transformers`` loads (``AutoModel`` /
``GPT2LMHeadModel.from_pretrained``). One table per family (:mod:`.bert`, :mod:`.gpt2`)
says which of their tensors is which of our parameters; ``tests/test_pretrained.py`` proves
the outputs and the gradients equal to ``transformers``'.

What this library cannot compute (another activation, relative positions, a decoder BERT ...)
is refused in one line naming the field, as are damaged files: every problem is a
:class:`PretrainedError`. Needs the ``pretrained`` extra (``safetensors``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Union

from ..errors import NumpyTransformerError
from ..nn.bert import EncoderModel
from ..nn.gpt import TransformerLM
from . import bert, gpt2
from . import files
from .files import PretrainedError
from .names import expand, to_ours, to_theirs

__all__ = ["load", "save", "LoadedModel", "PretrainedError", "FAMILIES"]

#: ``model_type`` -> the module with that family's table and configuration
FAMILIES = {bert.MODEL_TYPE: bert, gpt2.MODEL_TYPE: gpt2}
#: our model class -> the family it is saved as
_SAVED_AS = {EncoderModel: bert, TransformerLM: gpt2}


@dataclass
class LoadedModel:
    """What :func:`load` returns: the model and where its files are.

    ``model``: an :class:`~numpytransformer.nn.bert.EncoderModel` (bert) or a
    :class:`~numpytransformer.nn.gpt.TransformerLM` (gpt2), in eval mode. ``tokenizer_files``:
    the tokenizer's files found beside the weights, by name (``vocab.txt`` ...), for the caller to
    read and to pass to :func:`save`. ``unused``: their tensors no part of the model reads (a
    task's head, the pooler), by name.
    """

    model: Union[EncoderModel, TransformerLM]
    model_type: str
    directory: Path
    config_path: Path
    weights_path: Path
    hf_config: dict
    tokenizer_files: Dict[str, Path] = field(default_factory=dict)
    unused: List[str] = field(default_factory=list)


def _ignored(name: str, family) -> bool:
    return any(name.startswith(x) or name.endswith(x) for x in family.IGNORED)


def load(directory, dtype: str = "float32") -> LoadedModel:
    """Our model from the Hugging Face directory ``directory``, its weights cast to ``dtype``.

    Refused, each in one line naming the problem (:class:`PretrainedError`): a directory without
    ``config.json``, or with only pickled ``.bin`` weights; a ``model_type`` other than "bert" and
    "gpt2"; a configuration field this library cannot compute; a damaged ``model.safetensors``;
    a tensor that is missing, of the wrong shape, or part of the model but not in the table.
    """
    if dtype not in ("float32", "float64"):
        raise PretrainedError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    directory = Path(directory)
    hf = files.read_config(directory)
    model_type = hf.get("model_type")
    family = FAMILIES.get(model_type)
    if family is None:
        raise PretrainedError(f"{directory / files.CONFIG}: model_type={model_type!r} is not supported "
                              f"(only {sorted(FAMILIES)})")
    try:
        cfg = family.model_config(hf, dtype)
    except PretrainedError:
        raise
    except NumpyTransformerError as e:  # a size or rate out of our range, named as our field
        raise PretrainedError(f"{directory / files.CONFIG}: {e}") from None
    tensors = {family.canonical(k): v for k, v in files.read_tensors(directory).items()}
    model = family.build(cfg)
    rows = list(expand(family.table(cfg), cfg.n_layers))
    ours = to_ours(rows, tensors, model.parameters(), str(directory / files.WEIGHTS))
    mapped = {r.theirs for r in rows}
    unused = sorted(k for k in tensors if k not in mapped)
    stray = [k for k in unused if family.is_encoder_tensor(k) and not _ignored(k, family)]
    if stray:
        raise PretrainedError(f"{directory / files.WEIGHTS} holds {stray[0]!r}, which no parameter of a "
                              f"{model_type} with this config.json takes ({len(stray)} such tensors)")
    params = model.parameters()
    missing = set(params) - set(ours)
    if missing:  # the table must cover the model: a parameter left at its random start is a bug
        raise PretrainedError(f"the {model_type} table gives no tensor for {sorted(missing)[0]!r}")
    for name, value in ours.items():
        params[name][...] = value
    model.eval()
    return LoadedModel(model, model_type, directory, directory / files.CONFIG, directory / files.WEIGHTS, hf,
                       files.tokenizer_files(directory), unused)


def save(model, directory, tokenizer_files: Sequence = (), overwrite: bool = False) -> Path:
    """Write ``model`` as a Hugging Face directory: ``config.json`` and ``model.safetensors``.

    An :class:`~numpytransformer.nn.bert.EncoderModel` is saved as a BertModel, a
    :class:`~numpytransformer.nn.gpt.TransformerLM` as a GPT2LMHeadModel; a model those cannot
    express is refused, naming the option. ``tokenizer_files`` (paths) are copied beside them.
    The directory is written whole under a temporary name and renamed into place (see
    :func:`~numpytransformer.pretrained.files.write_directory`).
    """
    family = _SAVED_AS.get(type(model))
    if family is None:
        raise PretrainedError(f"save writes an EncoderModel (as BERT) or a TransformerLM (as GPT-2), "
                              f"got {type(model).__name__}")
    hf = family.hf_config(model)
    tensors = to_theirs(expand(family.table(model.cfg), model.cfg.n_layers), model.parameters())
    return files.write_directory(Path(directory), hf, tensors, [Path(p) for p in tokenizer_files], overwrite)
