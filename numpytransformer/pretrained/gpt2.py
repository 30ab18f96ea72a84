"""GPT-2 language models (``model_type`` "gpt2"): their names and configuration, and ours.

A GPT-2 is :class:`~numpytransformer.nn.gpt.TransformerLM` with learned positions, pre-LN
blocks and a final LayerNorm, GELU's tanh form (``gelu_new``) and an output projection
without a bias, tied to the token embedding unless ``tie_word_embeddings`` is false. GPT-2's
``Conv1D`` stores its weight as (in, out), as our ``W``; its ``c_attn`` is the three
projections side by side, ``[W_q W_k W_v]`` (D, 3D).
"""
from __future__ import annotations

from typing import List

from ..nn.config import TransformerConfig
from ..nn.gpt import TransformerLM
from .files import PretrainedError
from .names import Row

__all__ = ["MODEL_TYPE", "PREFIX", "IGNORED", "TABLE", "table", "canonical", "is_encoder_tensor", "model_config",
           "hf_config", "build"]

MODEL_TYPE = "gpt2"
#: What GPT2LMHeadModel puts in front of the transformer's names (GPT2Model saves them without it).
PREFIX = "transformer."
#: Buffers older checkpoints store: the causal mask and its fill value, which we compute.
IGNORED = (".attn.bias", ".attn.masked_bias")

#: theirs -> ours
TABLE: List[Row] = [
    Row("wte.weight", ("embed.W",)),
    Row("wpe.weight", ("pos.P",)),
    Row("h.{i}.ln_1.weight", ("layers.{i}.self_attn_sublayer.norm.gamma",)),
    Row("h.{i}.ln_1.bias", ("layers.{i}.self_attn_sublayer.norm.beta",)),
    Row("h.{i}.attn.c_attn.weight",
        ("layers.{i}.self_attn.W_q", "layers.{i}.self_attn.W_k", "layers.{i}.self_attn.W_v")),
    Row("h.{i}.attn.c_attn.bias",
        ("layers.{i}.self_attn.b_q", "layers.{i}.self_attn.b_k", "layers.{i}.self_attn.b_v")),
    Row("h.{i}.attn.c_proj.weight", ("layers.{i}.self_attn.W_o",)),
    Row("h.{i}.attn.c_proj.bias", ("layers.{i}.self_attn.b_o",)),
    Row("h.{i}.ln_2.weight", ("layers.{i}.ffn_sublayer.norm.gamma",)),
    Row("h.{i}.ln_2.bias", ("layers.{i}.ffn_sublayer.norm.beta",)),
    Row("h.{i}.mlp.c_fc.weight", ("layers.{i}.ffn.W1",)),
    Row("h.{i}.mlp.c_fc.bias", ("layers.{i}.ffn.b1",)),
    Row("h.{i}.mlp.c_proj.weight", ("layers.{i}.ffn.W2",)),
    Row("h.{i}.mlp.c_proj.bias", ("layers.{i}.ffn.b2",)),
    Row("ln_f.weight", ("final_norm.gamma",)),
    Row("ln_f.bias", ("final_norm.beta",)),
]
#: The untied output projection, an ``nn.Linear`` (V, D) without a bias, outside the transformer.
LM_HEAD = Row("lm_head.weight", ("out.linear.W",), transposed=True)

#: their ``activation_function`` -> our ``activation``
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
#: Fields that change the arithmetic, and the one value of each that this library computes.
REQUIRED = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False, "add_cross_attention": False}


def table(cfg: TransformerConfig) -> List[Row]:
    """Their names in GPT2LMHeadModel's layout (``transformer.`` in front, ``lm_head`` if untied)."""
    rows = [Row(PREFIX + r.theirs, r.ours, r.transposed) for r in TABLE]
    return rows if cfg.tie_embeddings else rows + [LM_HEAD]


def canonical(name: str) -> str:
    """Their name as :func:`table` spells it: GPT2Model's names get GPT2LMHeadModel's ``transformer.``."""
    return name if name.startswith((PREFIX, "lm_head.")) else PREFIX + name


def is_encoder_tensor(name: str) -> bool:
    """Whether a canonical name belongs to the model :func:`table` maps (not to another head)."""
    return name.startswith((PREFIX, "lm_head."))


def _field(hf: dict, name: str, default=None):
    if name not in hf and default is None:
        raise PretrainedError(f"config.json has no field {name!r}, which a {MODEL_TYPE} configuration needs")
    return hf.get(name, default)


def model_config(hf: dict, dtype: str) -> TransformerConfig:
    """Our configuration of their ``config.json``; what we cannot compute is refused, naming the field."""
    for name, value in REQUIRED.items():
        if hf.get(name, value) != value:
            raise PretrainedError(f"config.json: {name}={hf[name]!r} is not supported (only {value!r})")
    act = _field(hf, "activation_function", "gelu_new")
    if act not in ACTIVATIONS:
        raise PretrainedError(f"config.json: activation_function={act!r} is not supported "
                              f"(only {sorted(ACTIVATIONS)})")
    dropout = _field(hf, "resid_pdrop", 0.1)
    if _field(hf, "embd_pdrop", 0.1) != dropout:
        raise PretrainedError(f"config.json: embd_pdrop={hf['embd_pdrop']!r} differs from resid_pdrop={dropout!r}; "
                              "this library has one dropout rate for both")
    D = _field(hf, "n_embd", 768)
    return TransformerConfig(
        src_vocab_size=_field(hf, "vocab_size"), d_model=D, n_heads=_field(hf, "n_head", 12),
        n_layers=_field(hf, "n_layer", 12), d_ff=hf.get("n_inner") or 4 * D, max_len=_field(hf, "n_positions", 1024),
        dropout=float(dropout), attention_dropout=float(_field(hf, "attn_pdrop", 0.1)), dtype=dtype,
        norm_first=True, tie_embeddings=bool(_field(hf, "tie_word_embeddings", True)), scale_embeddings=False,
        layernorm_eps=float(_field(hf, "layer_norm_epsilon", 1e-5)), positions="learned",
        activation=ACTIVATIONS[act], output_bias=False)


def hf_config(model) -> dict:
    """Their ``config.json`` for our model; a model GPT-2 cannot express is refused, naming what differs."""
    cfg = model.cfg
    if not isinstance(model, TransformerLM):
        raise PretrainedError(f"a {MODEL_TYPE} directory holds a TransformerLM, got {type(model).__name__}")
    needs = {"norm_first": True, "scale_embeddings": False, "positions": "learned", "output_bias": False}
    for name, value in needs.items():
        if getattr(cfg, name) != value:
            raise PretrainedError(f"GPT-2 has {name}={value!r}; this model has {getattr(cfg, name)!r}")
    act = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}[cfg.activation]
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": MODEL_TYPE, "vocab_size": cfg.src_vocab_size,
        "n_embd": cfg.d_model, "n_head": cfg.n_heads, "n_layer": cfg.n_layers, "n_inner": cfg.d_ff,
        "n_positions": cfg.max_len, "activation_function": act, "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout, "attn_pdrop": cfg.attention_dropout, "layer_norm_epsilon": cfg.layernorm_eps,
        "tie_word_embeddings": cfg.tie_embeddings, "scale_attn_weights": True, "torch_dtype": cfg.dtype,
    }


def build(cfg: TransformerConfig) -> TransformerLM:
    return TransformerLM(cfg)
