"""Parity with PyTorch in float64: forward values and every gradient.

Each test builds our layer and the matching ``torch.nn`` layer, copies our weights
into torch, runs both on the same inputs, feeds both the same random upstream
gradient, and compares the output, the input gradients and every parameter gradient.

Layout differences. Our linear maps compute ``x @ W + b`` with ``W`` of shape
(D_in, D_out); torch's compute ``x @ W.T + b`` with ``W`` of shape (D_out, D_in), so
every weight is copied transposed. ``nn.MultiheadAttention`` stores W_q, W_k, W_v
stacked as the rows of one (3D, D) ``in_proj_weight``. Our masks are True where
attention is allowed; torch's boolean masks are True where it is *not*.

Errors are ``max|ours - torch| / max(|ours|, |torch|)`` and must stay below
:data:`TOL`: in float64 both sides compute the same sums in slightly different
orders, so the measured errors are around 1e-15.
"""
from typing import Dict, List, NamedTuple, Optional

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from numpytransformer.core.attention import causal_mask, padding_mask  # noqa: E402
from numpytransformer.core.gradcheck import rel_error  # noqa: E402
from numpytransformer.nn.modules import LayerNorm  # noqa: E402
from numpytransformer.nn.blocks import DecoderLayer, EncoderLayer  # noqa: E402
from numpytransformer.core.losses import (
    cross_entropy,
    softmax_cross_entropy_backward,
    softmax_cross_entropy_forward,
)
from numpytransformer.core.multihead import (
    PARAM_NAMES,
    multihead_attention_backward,
    multihead_attention_forward,
)
from numpytransformer.nn.modules import MultiHeadAttention

TOL = 1e-10

B, T, S, D, H, D_FF, V = 2, 5, 4, 8, 2, 16, 7
PAD = 0


# --------------------------------------------------------------------------- helpers
def to_torch(a: np.ndarray, requires_grad: bool = False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=requires_grad)


def to_numpy(t) -> np.ndarray:
    return t.detach().numpy().copy()


def randomize(params: Dict[str, np.ndarray], rng: np.random.Generator) -> None:
    """Overwrite parameters in place with non-trivial values (biases and beta non-zero,
    gamma away from one), so that no term of a gradient vanishes by accident."""
    for name, p in params.items():
        if name == "gamma":
            p[...] = 1.0 + 0.5 * rng.standard_normal(p.shape)
        else:
            p[...] = 0.5 * rng.standard_normal(p.shape)


def source_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """(B, n) token ids with trailing pads in all but the first sequence.

    Every row keeps at least one real token: torch turns a fully masked attention
    row into NaN where we give uniform weights, a difference not tested here.
    """
    ids = rng.integers(1, V, size=(B, n))
    for b in range(1, B):
        ids[b, n - b:] = PAD
    return ids


class Link(NamedTuple):
    """One of our parameters and where it lives in a torch module."""

    torch_name: str  # e.g. "self_attn.in_proj_weight"
    rows: slice  # the rows of that torch tensor holding it
    ours: object  # our Module
    our_name: str  # its key in ours.params / ours.grads
    label: str  # printed in error reports
    transpose: bool  # our (D_in, D_out) versus torch's (D_out, D_in)


def mha_links(prefix: str, mha: MultiHeadAttention, label: str) -> List[Link]:
    links = []
    for i, (w, b) in enumerate((("W_q", "b_q"), ("W_k", "b_k"), ("W_v", "b_v"))):
        rows = slice(i * D, (i + 1) * D)
        links.append(Link(prefix + "in_proj_weight", rows, mha, w, f"{label}.{w}", True))
        links.append(Link(prefix + "in_proj_bias", rows, mha, b, f"{label}.{b}", False))
    links.append(Link(prefix + "out_proj.weight", slice(None), mha, "W_o", f"{label}.W_o", True))
    links.append(Link(prefix + "out_proj.bias", slice(None), mha, "b_o", f"{label}.b_o", False))
    return links


def ffn_links(ffn) -> List[Link]:
    return [
        Link("linear1.weight", slice(None), ffn, "W1", "ffn.W1", True),
        Link("linear1.bias", slice(None), ffn, "b1", "ffn.b1", False),
        Link("linear2.weight", slice(None), ffn, "W2", "ffn.W2", True),
        Link("linear2.bias", slice(None), ffn, "b2", "ffn.b2", False),
    ]


def norm_links(torch_prefix: str, norm, label: str) -> List[Link]:
    return [
        Link(torch_prefix + "weight", slice(None), norm, "gamma", f"{label}.gamma", False),
        Link(torch_prefix + "bias", slice(None), norm, "beta", f"{label}.beta", False),
    ]


def load_into_torch(links: List[Link], module) -> None:
    """Copy our parameters into ``module``, and fail if a torch parameter is left out:
    a forgotten weight would keep torch's random initial value and fail the test
    for a reason that has nothing to do with the maths."""
    tparams = dict(module.named_parameters())
    covered = {name: 0 for name in tparams}
    with torch.no_grad():
        for link in links:
            value = link.ours.params[link.our_name]
            tparams[link.torch_name][link.rows].copy_(to_torch(value.T if link.transpose else value))
            covered[link.torch_name] += value.size
    assert covered == {name: p.numel() for name, p in tparams.items()}, "torch parameters left uncopied"


def grad_errors(links: List[Link], module) -> Dict[str, float]:
    """Relative error of each of our parameter gradients against torch's."""
    tparams = dict(module.named_parameters())
    errors = {}
    for link in links:
        g = to_numpy(tparams[link.torch_name].grad[link.rows])
        ours = link.ours.grads[link.our_name]
        theirs = g.T if link.transpose else g
        if link.our_name == "b_k":
            # The key bias cannot change any output (softmax is shift invariant), so its
            # gradient is zero in exact arithmetic and both sides are rounding noise
            # (about 1e-17); measure that noise against the size of the value bias gradient.
            scale = np.max(np.abs(link.ours.grads["b_v"]))
            errors[link.label] = float(np.max(np.abs(ours - theirs)) / scale)
        else:
            errors[link.label] = rel_error(ours, theirs)
    return errors


def assert_small(errors: Dict[str, float]) -> None:
    bad = {k: v for k, v in errors.items() if not v < TOL}
    assert not bad, f"errors above TOL={TOL}: {bad}"


# --------------------------------------------------------------------------- multi-head attention
MHA_CASES = ("self_padding", "self_causal", "cross")


def mha_errors(case: str, api: str, seed: int = 0) -> Dict[str, float]:
    """Our multi-head attention (``api``: "module" or "functional") against
    ``nn.MultiheadAttention`` on one ``case`` of :data:`MHA_CASES`."""
    rng = np.random.default_rng(seed)
    ours = MultiHeadAttention(D, H, rng)
    randomize(ours.params, rng)
    theirs = torch.nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True, dtype=torch.float64)
    links = mha_links("", ours, "mha")
    load_into_torch(links, theirs)

    x = rng.standard_normal((B, T, D))
    memory = rng.standard_normal((B, S, D)) if case == "cross" else None
    mask = key_padding = attn_mask = None
    if case == "self_causal":
        mask = causal_mask(T)  # (1, 1, T, T)
        attn_mask = torch.from_numpy(~mask[0, 0])  # (T, T), True = not allowed
    else:
        ids = source_ids(rng, T if memory is None else S)
        mask = padding_mask(ids, PAD)  # (B, 1, 1, S)
        key_padding = torch.from_numpy(ids == PAD)  # (B, S), True = ignored
    dout = rng.standard_normal((B, T, D))

    if api == "module":
        out = ours.forward(x, memory, mask=mask)
        dx = ours.backward(dout)
        dx, dmemory = dx if memory is not None else (dx, None)
    else:
        out, cache = multihead_attention_forward(x, memory, **ours.params, n_heads=H, mask=mask)
        dx, dmemory, *dparams = multihead_attention_backward(dout, cache)
        for name, g in zip(PARAM_NAMES, dparams):
            ours.grads[name] += g

    x_t = to_torch(x, requires_grad=True)
    memory_t = x_t if memory is None else to_torch(memory, requires_grad=True)
    out_t, _ = theirs(x_t, memory_t, memory_t, key_padding_mask=key_padding, attn_mask=attn_mask,
                      need_weights=False)
    out_t.backward(to_torch(dout))

    errors = {"out": rel_error(out, to_numpy(out_t)), "dx": rel_error(dx, to_numpy(x_t.grad))}
    if memory is not None:
        errors["dmemory"] = rel_error(dmemory, to_numpy(memory_t.grad))
    errors.update(grad_errors(links, theirs))
    return errors


@pytest.mark.parametrize("case", MHA_CASES)
def test_multihead_attention_module_matches_torch(case):
    assert_small(mha_errors(case, "module"))


@pytest.mark.parametrize("case", ["self_padding", "cross"])
def test_multihead_attention_functional_matches_torch(case):
    assert_small(mha_errors(case, "functional"))


# --------------------------------------------------------------------------- LayerNorm
def layernorm_errors(seed: int = 0) -> Dict[str, float]:
    rng = np.random.default_rng(seed)
    ours = LayerNorm(D, eps=1e-5)
    randomize(ours.params, rng)
    theirs = torch.nn.LayerNorm(D, eps=1e-5, dtype=torch.float64)
    links = norm_links("", ours, "norm")
    load_into_torch(links, theirs)

    # A non-zero mean and a non-unit spread per row, so centring and scaling both matter.
    x = 3.0 + 2.0 * rng.standard_normal((B, T, D)) * rng.uniform(0.1, 2.0, size=(B, T, 1))
    dout = rng.standard_normal((B, T, D))
    out = ours.forward(x)
    dx = ours.backward(dout)

    x_t = to_torch(x, requires_grad=True)
    out_t = theirs(x_t)
    out_t.backward(to_torch(dout))
    errors = {"out": rel_error(out, to_numpy(out_t)), "dx": rel_error(dx, to_numpy(x_t.grad))}
    errors.update(grad_errors(links, theirs))
    return errors


def test_layernorm_matches_torch():
    assert_small(layernorm_errors())


# --------------------------------------------------------------------------- encoder and decoder layers
def encoder_layer_errors(norm_first: bool, seed: int = 0) -> Dict[str, float]:
    rng = np.random.default_rng(seed)
    ours = EncoderLayer(D, H, D_FF, dropout=0.0, init_rng=rng, drop_rng=np.random.default_rng(1),
                        norm_first=norm_first)
    for _, mod in ours.named_modules():
        randomize(mod.params, rng)
    theirs = torch.nn.TransformerEncoderLayer(D, H, dim_feedforward=D_FF, dropout=0.0, activation="relu",
                                              batch_first=True, norm_first=norm_first, dtype=torch.float64)
    theirs.train()  # no fused inference fast path
    links = (mha_links("self_attn.", ours.self_attn, "self_attn") + ffn_links(ours.ffn)
             + norm_links("norm1.", ours.self_attn_sublayer.norm, "norm1")
             + norm_links("norm2.", ours.ffn_sublayer.norm, "norm2"))
    load_into_torch(links, theirs)

    x = rng.standard_normal((B, S, D))
    ids = source_ids(rng, S)
    dout = rng.standard_normal((B, S, D))
    out = ours.forward(x, mask=padding_mask(ids, PAD))
    dx = ours.backward(dout)

    x_t = to_torch(x, requires_grad=True)
    out_t = theirs(x_t, src_key_padding_mask=torch.from_numpy(ids == PAD))
    out_t.backward(to_torch(dout))
    errors = {"out": rel_error(out, to_numpy(out_t)), "dx": rel_error(dx, to_numpy(x_t.grad))}
    errors.update(grad_errors(links, theirs))
    return errors


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_encoder_layer_matches_torch(norm_first):
    assert_small(encoder_layer_errors(norm_first))


def decoder_layer_errors(norm_first: bool, seed: int = 0) -> Dict[str, float]:
    rng = np.random.default_rng(seed)
    ours = DecoderLayer(D, H, D_FF, dropout=0.0, init_rng=rng, drop_rng=np.random.default_rng(1),
                        norm_first=norm_first)
    for _, mod in ours.named_modules():
        randomize(mod.params, rng)
    theirs = torch.nn.TransformerDecoderLayer(D, H, dim_feedforward=D_FF, dropout=0.0, activation="relu",
                                              batch_first=True, norm_first=norm_first, dtype=torch.float64)
    theirs.train()
    links = (mha_links("self_attn.", ours.self_attn, "self_attn")
             + mha_links("multihead_attn.", ours.cross_attn, "cross_attn") + ffn_links(ours.ffn)
             + norm_links("norm1.", ours.self_attn_sublayer.norm, "norm1")
             + norm_links("norm2.", ours.cross_attn_sublayer.norm, "norm2")
             + norm_links("norm3.", ours.ffn_sublayer.norm, "norm3"))
    load_into_torch(links, theirs)

    x = rng.standard_normal((B, T, D))
    memory = rng.standard_normal((B, S, D))
    src = source_ids(rng, S)
    dout = rng.standard_normal((B, T, D))
    out = ours.forward(x, memory, self_mask=causal_mask(T), memory_mask=padding_mask(src, PAD))
    dx, dmemory = ours.backward(dout)

    x_t = to_torch(x, requires_grad=True)
    memory_t = to_torch(memory, requires_grad=True)
    out_t = theirs(x_t, memory_t, tgt_mask=torch.from_numpy(~causal_mask(T)[0, 0]),
                   memory_key_padding_mask=torch.from_numpy(src == PAD))
    out_t.backward(to_torch(dout))
    errors = {"out": rel_error(out, to_numpy(out_t)), "dx": rel_error(dx, to_numpy(x_t.grad)),
              "dmemory": rel_error(dmemory, to_numpy(memory_t.grad))}
    errors.update(grad_errors(links, theirs))
    return errors


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_decoder_layer_matches_torch(norm_first):
    assert_small(decoder_layer_errors(norm_first))


# --------------------------------------------------------------------------- cross-entropy
def ce_inputs(seed: int = 0):
    """Logits (B, T, V) and targets (B, T) with a few pad targets, including a pad
    row in the middle of a sequence, not only at its end."""
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.standard_normal((B, T, V))
    targets = rng.integers(1, V, size=(B, T))
    targets[0, 2] = PAD
    targets[1, T - 2:] = PAD
    return logits, targets


def torch_ce(logits: np.ndarray, targets: np.ndarray, eps: float, dloss: float = 1.0):
    """Torch's mean cross-entropy and its gradient with respect to the logits."""
    logits_t = to_torch(logits, requires_grad=True)
    loss_t = F.cross_entropy(logits_t.reshape(-1, V), torch.from_numpy(targets.reshape(-1)),
                             ignore_index=PAD, label_smoothing=eps)
    loss_t.backward(to_torch(np.array(dloss)))
    return loss_t.item(), to_numpy(logits_t.grad)


def cross_entropy_errors(eps: float, seed: int = 0) -> Dict[str, float]:
    logits, targets = ce_inputs(seed)
    loss, dlogits = cross_entropy(logits, targets, pad_id=PAD, label_smoothing=eps)
    loss_t, dlogits_t = torch_ce(logits, targets, eps)
    # The functional pair with an upstream gradient other than 1.
    dloss = 0.7
    _, cache = softmax_cross_entropy_forward(logits, targets, PAD, eps)
    dlogits_pair = softmax_cross_entropy_backward(dloss, cache)
    _, dlogits_pair_t = torch_ce(logits, targets, eps, dloss)
    return {"loss": abs(loss - loss_t) / abs(loss_t), "dlogits": rel_error(dlogits, dlogits_t),
            "dlogits(dloss=0.7)": rel_error(dlogits_pair, dlogits_pair_t)}


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_matches_torch(eps):
    logits, targets = ce_inputs()
    _, dlogits = cross_entropy(logits, targets, pad_id=PAD, label_smoothing=eps)
    assert np.all(dlogits[targets == PAD] == 0.0)
    assert_small(cross_entropy_errors(eps))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_all_pad_differs_from_torch_by_design(eps):
    """With every target pad, the mean over zero targets is 0/0. We define the loss
    as 0 (and its gradient as 0), so a batch of pure padding is a no-op for training;
    torch returns a NaN loss, though its gradient is 0 as well. This pins the one
    intended difference down."""
    logits, _ = ce_inputs()
    targets = np.full((B, T), PAD)
    loss, dlogits = cross_entropy(logits, targets, pad_id=PAD, label_smoothing=eps)
    assert loss == 0.0
    assert np.all(dlogits == 0.0)
    loss_t, dlogits_t = torch_ce(logits, targets, eps)
    assert np.isnan(loss_t)
    assert np.all(dlogits_t == 0.0)
