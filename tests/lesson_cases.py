"""The gradient-check cases of the pairs the lessons derive (linear, ReLU, the loss, embeddings, attention,
multi-head attention, LayerNorm, the FFN, learned positions, the language model's loss).

``tests/test_gradients.py`` runs each through the public ``check_pair``. Arrays are drawn with the
grader's generator (``course.trusted.rng``), so the cases are the ones these pairs were once graded on.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from course.trusted import KINK_TOL, MHA_PARAMS, PAD, SMOOTH_TOL, VALUE_TOL, rng, shapes


class Case(NamedTuple):
    """One gradient check of a lesson's pair."""

    name: str
    inputs: Dict[str, np.ndarray]  # float arrays the gradients are taken with respect to
    static: Dict[str, Any]  # the other arguments
    wrt: Tuple[Optional[str], ...] = ()  # the name of each value the backward returns; None: not checked
    tol: float = SMOOTH_TOL
    seed: int = 0  # of the random dout
    #: "numeric": checked by centred differences; "library": where they say nothing (at a kink, a pad row)
    reference: str = "numeric"

#: name -> (module, forward, backward) of each pair; its cases are ``pair_cases(name)``.
LESSON_PAIRS = {
    "1.1": ("core.linear", "linear_forward", "linear_backward"),
    "1.2": ("core.relu", "relu_forward", "relu_backward"),
    "2.1": ("core.losses", "softmax_cross_entropy_forward", "softmax_cross_entropy_backward"),
    "3.1": ("core.embedding", "embedding_forward", "embedding_backward"),
    "4.2": ("core.attention", "attention_forward", "attention_backward"),
    "5.2": ("core.multihead", "multihead_attention_forward", "multihead_attention_backward"),
    "6.1": ("core.layernorm", "layernorm_forward", "layernorm_backward"),
    "6.2": ("core.feedforward", "ffn_forward", "ffn_backward"),
    "12.1": ("core.positional", "learned_positional_forward", "learned_positional_backward"),
    "12.3": ("core.losses", "lm_loss_forward", "lm_loss_backward"),
}


def attention_masks() -> Dict[str, Optional[np.ndarray]]:
    """Masks for B=2, T=S=4, built with plain NumPy (padding (B,1,1,S), causal (1,1,T,T))."""
    ids = np.array([[1, 2, 3, PAD], [4, 5, PAD, PAD]])
    pad = (ids != PAD)[:, None, None, :]
    causal = np.tril(np.ones((4, 4), dtype=bool))[None, None]
    full = np.broadcast_to(causal & pad, (2, 1, 4, 4)).copy()
    full[0, 0, 1, :] = False  # query 1 of batch 0 may attend to nothing
    return {"no mask": None, "padding mask": pad, "causal mask": causal, "padding + causal mask": causal & pad,
            "padding + causal mask with a fully masked row": full}


FULLY_MASKED = "padding + causal mask with a fully masked row"


def attention_qkv() -> List[Tuple[str, np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]]:
    """(name, q, k, v, mask): every mask at (B, H, T, D/H) = (2, 2, 4, 3), then T != S and d_v != d_k."""
    r = rng(6)
    out = []
    for name, mask in attention_masks().items():
        q, k, v = (r.standard_normal((2, 2, 4, 3)) for _ in range(3))
        out.append((name, q, k, v, mask))
    q, k, v = r.standard_normal((2, 2, 3, 4)), r.standard_normal((2, 2, 5, 4)), r.standard_normal((2, 2, 5, 2))
    pad5 = (np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]) != PAD)[:, None, None, :]
    out.append(("no mask, T 3 != S 5", q, k, v, None))
    out.append(("padding mask, T 3 != S 5", q, k, v, pad5))
    return out


def _mha_params(D: int, seed: int) -> Dict[str, np.ndarray]:
    r = rng(seed)
    return {n: r.standard_normal((D, D) if n.startswith("W") else D) * 0.5 for n in MHA_PARAMS}


def _ffn_inputs(x_shape, D_ff):
    D = x_shape[-1]
    for seed in range(12, 100):  # the first seed that puts no ReLU input near its kink
        r = rng(seed)
        inputs = {"x": r.standard_normal(x_shape), "W1": r.standard_normal((D, D_ff)),
                  "b1": r.standard_normal(D_ff), "W2": r.standard_normal((D_ff, D)), "b2": r.standard_normal(D)}
        if np.abs(inputs["x"] @ inputs["W1"] + inputs["b1"]).min() > 1e-3:
            return seed, inputs
    raise AssertionError("no seed keeps the ReLU inputs away from the kink")


def pair_cases(exercise_id: str) -> List[Case]:
    """The forward/backward calls of a lesson's pair (a key of LESSON_PAIRS)."""
    c: List[Case] = []
    if exercise_id == "1.1":
        for seed, x_shape, w_shape in ((1, (2, 3, 4), (4, 5)), (2, (5, 3), (3, 2)), (3, (1, 2, 6), (6, 1))):
            r = rng(seed)
            inputs = {"x": r.standard_normal(x_shape), "W": r.standard_normal(w_shape), "b": r.standard_normal(w_shape[1])}
            c.append(Case(shapes(x=inputs["x"], W=inputs["W"]), inputs, {}, ("x", "W", "b"), SMOOTH_TOL, seed))
    elif exercise_id == "1.2":
        for seed, shape in ((2, (2, 3, 4)), (3, (7,))):
            r = rng(seed)  # every |x| > 1e-3: far from the kink compared with the step h = 1e-5
            x = r.choice([-1.0, 1.0], size=shape) * r.uniform(1e-3, 3.0, size=shape)
            c.append(Case(shapes(x=x), {"x": x}, {}, ("x",), KINK_TOL, seed))
        c.append(Case("x = [-2, 0, 3, 0] (at the kink)", {"x": np.array([-2.0, 0.0, 3.0, 0.0])}, {}, ("x",),
                      0.0, 4, "library"))
    elif exercise_id == "2.1":
        targets = np.array([[1, 4, 2], [3, PAD, PAD]])
        for eps in (0.0, 0.1):
            for pad_id in (None, PAD):
                c.append(Case(f"logits (2, 3, 5), label_smoothing {eps}, pad_id {pad_id}",
                              {"logits": rng(13).standard_normal((2, 3, 5)) * 2},
                              {"targets": targets, "pad_id": pad_id, "label_smoothing": eps}, ("logits",), SMOOTH_TOL, 13))
        c.append(Case("logits (4, 7), label_smoothing 0.2", {"logits": rng(14).standard_normal((4, 7))},
                      {"targets": np.array([0, 6, 3, 3]), "pad_id": None, "label_smoothing": 0.2},
                      ("logits",), SMOOTH_TOL, 14))
        c.append(Case("every target is pad", {"logits": rng(15).standard_normal((2, 3, 5))},
                      {"targets": np.full((2, 3), PAD), "pad_id": PAD, "label_smoothing": 0.1}, ("logits",), 0.0, 15,
                      "library"))
    elif exercise_id == "3.1":
        c.append(Case("ids [[2, 2, 2]], scale 2 (one id three times)", {"W": np.zeros((4, 2))},
                      {"ids": np.array([[2, 2, 2]]), "scale": 2.0, "pad_id": None}, ("W",), SMOOTH_TOL, 3))
        ids = np.array([[1, 2, 2, PAD], [3, 1, PAD, PAD]])
        r = rng(4)
        for scale in (np.sqrt(3.0), 1.0):
            c.append(Case(f"ids (2, 4) with repeats, W (5, 3), scale {scale:.3g}, pad_id None",
                          {"W": r.standard_normal((5, 3))}, {"ids": ids, "scale": scale, "pad_id": None},
                          ("W",), SMOOTH_TOL, 4))
        c.append(Case("ids (2, 4) with repeats, W (5, 3), scale 2, pad_id 0", {"W": r.standard_normal((5, 3))},
                      {"ids": ids, "scale": 2.0, "pad_id": PAD}, ("W",), VALUE_TOL, 5, "library"))
    elif exercise_id == "4.2":
        for name, q, k, v, mask in attention_qkv():
            c.append(Case(f"{name}, {shapes(q=q, k=k, v=v)}", {"q": q, "k": k, "v": v}, {"mask": mask},
                          ("q", "k", "v"), SMOOTH_TOL if mask is None else KINK_TOL, 6))
    elif exercise_id == "5.2":
        masks = attention_masks()
        D, H = 6, 2
        for name in ("no mask", "padding + causal mask", FULLY_MASKED):
            c.append(Case(f"self-attention, {name}, x (2, 4, {D}), {H} heads",
                          {"x_q": rng(7).standard_normal((2, 4, D)), **_mha_params(D, 8)},
                          {"x_kv": None, "n_heads": H, "mask": masks[name]}, ("x_q", None, *MHA_PARAMS),
                          SMOOTH_TOL if name == "no mask" else KINK_TOL, 7))
        for name in ("no mask", "padding mask"):
            r = rng(9)
            c.append(Case(f"cross-attention, {name}, x_q (2, 3, {D}), x_kv (2, 4, {D}), {H} heads",
                          {"x_q": r.standard_normal((2, 3, D)), "x_kv": r.standard_normal((2, 4, D)), **_mha_params(D, 10)},
                          {"n_heads": H, "mask": masks[name]}, ("x_q", "x_kv", *MHA_PARAMS),
                          SMOOTH_TOL if name == "no mask" else KINK_TOL, 9))
    elif exercise_id == "6.1":
        for seed, shape, eps in ((11, (2, 3, 5), 1e-5), (12, (4, 6), 1e-5), (13, (3, 4), 0.0)):
            r = rng(seed)
            D = shape[-1]
            inputs = {"x": r.standard_normal(shape) * 2 + 1, "gamma": r.standard_normal(D), "beta": r.standard_normal(D)}
            c.append(Case(f"x {shape}, eps {eps:g}", inputs, {"eps": eps}, ("x", "gamma", "beta"), SMOOTH_TOL, seed))
    elif exercise_id == "6.2":
        for x_shape, D_ff in (((2, 3, 4), 6), ((5, 4), 3)):
            seed, inputs = _ffn_inputs(x_shape, D_ff)
            c.append(Case(f"x {x_shape}, d_ff {D_ff}", inputs, {}, ("x", "W1", "b1", "W2", "b2"), KINK_TOL, seed))
    elif exercise_id == "12.1":
        for seed, (B, T, D, max_len, offset) in ((20, (2, 3, 4, 5, 0)), (21, (3, 2, 4, 6, 3))):
            r = rng(seed)
            c.append(Case(f"x ({B}, {T}, {D}), P ({max_len}, {D}), offset {offset}",
                          {"x": r.standard_normal((B, T, D)), "P": r.standard_normal((max_len, D))},
                          {"offset": offset}, ("x", "P"), SMOOTH_TOL, seed))
    elif exercise_id == "12.3":
        c.extend(_lm_loss_cases())
    else:
        raise KeyError(f"{exercise_id} is not a lesson pair")
    return c


def _lm_loss_cases() -> List[Case]:
    out = []
    for seed, (B, T, V) in ((95, (2, 3, 5)), (96, (1, 4, 7)), (97, (3, 1, 4))):
        r = rng(seed)
        out.append(Case(f"logits ({B}, {T}, {V}), ids ({B}, {T + 1})", {"logits": r.standard_normal((B, T, V)) * 2},
                        {"ids": r.integers(0, V, size=(B, T + 1))}, ("logits",), SMOOTH_TOL, seed))
    return out


