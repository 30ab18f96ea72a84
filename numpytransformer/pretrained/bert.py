"""BERT-family encoders (``model_type`` "bert"), such as MiniLM: their names and configuration, and ours.

A BERT is :class:`~numpytransformer.nn.bert.EncoderModel` with learned positions, token types,
an embedding LayerNorm, post-LN layers and GELU. ``torch.nn.Linear`` stores its weight as
(out, in), the transpose of our ``W`` (in, out).
"""
from __future__ import annotations

from typing import List

from ..nn.bert import EncoderModel
from ..nn.config import TransformerConfig
from .files import PretrainedError
from .names import Row

__all__ = ["MODEL_TYPE", "PREFIX", "IGNORED", "TABLE", "table", "canonical", "is_encoder_tensor", "model_config",
           "hf_config", "build"]

MODEL_TYPE = "bert"
#: What BertForMaskedLM and its siblings put in front of the encoder's names.
PREFIX = "bert."
#: Tensors of theirs that the hidden states do not use: the pooler (a head over the first token),
#: and the position ids, a buffer that older checkpoints store.
IGNORED = ("pooler.", "embeddings.position_ids")

#: theirs -> ours
TABLE: List[Row] = [
    Row("embeddings.word_embeddings.weight", ("encoder.embedder.embed.W",)),
    Row("embeddings.position_embeddings.weight", ("encoder.embedder.pos.P",)),
    Row("embeddings.token_type_embeddings.weight", ("encoder.embedder.types.W",)),
    Row("embeddings.LayerNorm.weight", ("encoder.embedder.norm.gamma",)),
    Row("embeddings.LayerNorm.bias", ("encoder.embedder.norm.beta",)),
    Row("encoder.layer.{i}.attention.self.query.weight", ("encoder.layers.{i}.self_attn.W_q",), transposed=True),
    Row("encoder.layer.{i}.attention.self.query.bias", ("encoder.layers.{i}.self_attn.b_q",)),
    Row("encoder.layer.{i}.attention.self.key.weight", ("encoder.layers.{i}.self_attn.W_k",), transposed=True),
    Row("encoder.layer.{i}.attention.self.key.bias", ("encoder.layers.{i}.self_attn.b_k",)),
    Row("encoder.layer.{i}.attention.self.value.weight", ("encoder.layers.{i}.self_attn.W_v",), transposed=True),
    Row("encoder.layer.{i}.attention.self.value.bias", ("encoder.layers.{i}.self_attn.b_v",)),
    Row("encoder.layer.{i}.attention.output.dense.weight", ("encoder.layers.{i}.self_attn.W_o",), transposed=True),
    Row("encoder.layer.{i}.attention.output.dense.bias", ("encoder.layers.{i}.self_attn.b_o",)),
    Row("encoder.layer.{i}.attention.output.LayerNorm.weight", ("encoder.layers.{i}.self_attn_sublayer.norm.gamma",)),
    Row("encoder.layer.{i}.attention.output.LayerNorm.bias", ("encoder.layers.{i}.self_attn_sublayer.norm.beta",)),
    Row("encoder.layer.{i}.intermediate.dense.weight", ("encoder.layers.{i}.ffn.W1",), transposed=True),
    Row("encoder.layer.{i}.intermediate.dense.bias", ("encoder.layers.{i}.ffn.b1",)),
    Row("encoder.layer.{i}.output.dense.weight", ("encoder.layers.{i}.ffn.W2",), transposed=True),
    Row("encoder.layer.{i}.output.dense.bias", ("encoder.layers.{i}.ffn.b2",)),
    Row("encoder.layer.{i}.output.LayerNorm.weight", ("encoder.layers.{i}.ffn_sublayer.norm.gamma",)),
    Row("encoder.layer.{i}.output.LayerNorm.bias", ("encoder.layers.{i}.ffn_sublayer.norm.beta",)),
]

#: their ``hidden_act`` -> our ``activation``
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
#: Fields that change the arithmetic, and the one value of each that this library computes.
REQUIRED = {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False}


def table(cfg: TransformerConfig) -> List[Row]:
    return TABLE


def canonical(name: str) -> str:
    """Their name as :data:`TABLE` spells it: without the task model's ``bert.`` in front."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def is_encoder_tensor(name: str) -> bool:
    """Whether a canonical name belongs to the encoder (not to a task's head such as ``cls.``)."""
    return name.startswith(("embeddings.", "encoder."))


def _field(hf: dict, name: str, default=None):
    if name not in hf and default is None:
        raise PretrainedError(f"config.json has no field {name!r}, which a {MODEL_TYPE} configuration needs")
    return hf.get(name, default)


def model_config(hf: dict, dtype: str) -> TransformerConfig:
    """Our configuration of their ``config.json``; what we cannot compute is refused, naming the field."""
    for name, value in REQUIRED.items():
        if hf.get(name, value) != value:
            raise PretrainedError(f"config.json: {name}={hf[name]!r} is not supported (only {value!r})")
    act = _field(hf, "hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise PretrainedError(f"config.json: hidden_act={act!r} is not supported (only {sorted(ACTIVATIONS)})")
    pad = hf.get("pad_token_id")
    return TransformerConfig(
        src_vocab_size=_field(hf, "vocab_size"), d_model=_field(hf, "hidden_size"),
        n_heads=_field(hf, "num_attention_heads"), n_layers=_field(hf, "num_hidden_layers"),
        d_ff=_field(hf, "intermediate_size"), max_len=_field(hf, "max_position_embeddings", 512),
        dropout=float(_field(hf, "hidden_dropout_prob", 0.1)),
        attention_dropout=float(_field(hf, "attention_probs_dropout_prob", 0.1)),
        pad_id=0 if pad is None else pad, dtype=dtype, norm_first=False, scale_embeddings=False,
        layernorm_eps=float(_field(hf, "layer_norm_eps", 1e-12)), positions="learned",
        type_vocab_size=_field(hf, "type_vocab_size", 2), embedding_norm=True, activation=ACTIVATIONS[act])


def hf_config(model) -> dict:
    """Their ``config.json`` for our model; a model BERT cannot express is refused, naming what differs."""
    cfg = model.cfg
    if not isinstance(model, EncoderModel):
        raise PretrainedError(f"a {MODEL_TYPE} directory holds an EncoderModel, got {type(model).__name__}")
    needs = {"norm_first": False, "scale_embeddings": False, "positions": "learned", "embedding_norm": True,
             "region": 0}
    for name, value in needs.items():
        if getattr(cfg, name) != value:
            raise PretrainedError(f"BERT has {name}={value!r}; this model has {getattr(cfg, name)!r}")
    if cfg.type_vocab_size < 1:
        raise PretrainedError("BERT adds token-type vectors: this model has type_vocab_size=0")
    act = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}[cfg.activation]
    return {
        "architectures": ["BertModel"], "model_type": MODEL_TYPE, "vocab_size": cfg.src_vocab_size,
        "hidden_size": cfg.d_model, "num_attention_heads": cfg.n_heads, "num_hidden_layers": cfg.n_layers,
        "intermediate_size": cfg.d_ff, "max_position_embeddings": cfg.max_len, "hidden_act": act,
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
        "pad_token_id": cfg.pad_id, "layer_norm_eps": cfg.layernorm_eps, "type_vocab_size": cfg.type_vocab_size,
        "position_embedding_type": "absolute", "torch_dtype": cfg.dtype,
    }


def build(cfg: TransformerConfig) -> EncoderModel:
    return EncoderModel(cfg)
