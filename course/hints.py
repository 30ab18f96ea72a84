"""The grader's formula-level hints: the last of its three steps.

A failing check first names the wrong tensor and the size of its error; the next failed
attempt adds the property the result breaks (RMSNorm's dx is orthogonal to x when eps = 0,
pad rows get no gradient) and any simple relation to the right answer; only after several failed attempts,
or with ``check --hints full``, does it add the line below, which is close to the answer.

The student edition's copy of this file is empty (``build`` writes :data:`STUDENT_EDITION`
in its place), so these lines reach a student only through the teacher's grader.
"""
from __future__ import annotations

from typing import Dict

__all__ = ["FORMULAS", "formula", "STUDENT_EDITION"]

#: exercise id -> what a hint is about (a tensor's name, or a property) -> the hint
FORMULAS: Dict[str, Dict[str, str]] = {
    "1.1": {"dx": "by the product rule dx = dout * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2/2) / sqrt(2 pi) "
                  "the density whose integral is Phi"},
    "1.2": {"dx": "by the product rule dx = dout * (g + x * g'), g' = (1 - tanh(u)^2) / 2 * C * (1 + 3 K x^2); "
                  "tanh(u) is 2 g - 1"},
    "2.1": {"out": "log Z = m + log(sum exp(z - m)) with m the row's max; add z_loss * sum of (log Z)^2 over the "
                   "counted rows / N",
            "dlogits": "d (z_loss (log Z)^2) / dz = 2 z_loss log Z softmax(z), times dloss / N, in counted rows only",
            "pad rows": "weigh each row's z-loss gradient by valid / N, as the cross-entropy part is"},
    "3.1": {"out": "out_even = x_even cos - x_odd sin, out_odd = x_even sin + x_odd cos, then interleave the "
                   "pairs back in place"},
    "3.2": {"dx": "the transpose of a rotation turns the other way: dx_even = d_even cos + d_odd sin, "
                  "dx_odd = -d_even sin + d_odd cos"},
    "4.1": {"weights": "scores = q k^T / sqrt(d_k) - m_h (offset + i - j), then the masked softmax of lesson 4",
            "out": "out = weights v with the biased, masked softmax weights"},
    "4.2": {"slopes": "h = 1 .. H (not from 0); m_h = 2 ** (-8 h / H)"},
    "5.1": {"out": "np.repeat along the head axis (each head G times in a row), not np.tile"},
    "5.2": {"dx": "q, k and v all read x: the three input gradients add",
            "dW_k": "first sum dk over the G query heads of each group (reshape (B, H_kv, G, T, d), sum axis 2), "
                    "then back through rotary and the projection",
            "dW_v": "sum dv over the G query heads of each group before the projection's backward"},
    "6.1": {"dgamma": "dgamma = dout * x_hat summed over every leading axis",
            "dx": "dx = r (g - x_hat mean(g x_hat)) with g = dout * gamma and r = 1 / rms",
            "scale": "is the -x_hat mean(g x_hat) term, the path through the root mean square, missing?"},
    "6.2": {"dx": "x feeds both W1 and V: dx = dh W1^T + dg V^T",
            "dW1": "dh = da * silu'(h), silu'(h) = s + h s (1 - s) with s = sigmoid(h); dW1 = x^T dh",
            "dV": "dg = dm * a (the other factor of the product); dV = x^T dg",
            "dW2": "dW2 = m^T dout with m = silu(h) * g"},
    "7.1": {"dx": "dh = attn.backward(drop_a.backward(dout)) + ffn.backward(drop_f.backward(dout)); "
                  "dx = dout + norm.backward(dh)"},
    "7.2": {"out": "h = norm(x) once; out = x + drop(attn(h)) + drop(ffn(h))"},
    "8.1": {"lr(step, total)": "peak * step / warmup up to warmup; then floor + (peak - floor) (1 + cos(pi p)) / 2 "
                               "with p = (step - warmup) / (total - warmup), clipped at 1"},
    "8.2": {"update": "c = b1 m + (1 - b1) g; p -= lr * sign(c), in place",
            "m": "the momentum is updated after the step, with b2: m = b2 m + (1 - b2) g"},
    "8.3": {"shadow": "shadow[k] = decay * shadow[k] + (1 - decay) * params[k]: the old average weighs decay, "
                      "the new weights 1 - decay"},
    "9.2": {"banned": "at step t the outputs hold t tokens: ban EOS (its column, every row) while t < min_len"},
    "9.1": {"banned": "for every i with hyp[i:i+n-1] == the last n - 1 tokens, ban hyp[i+n-1]; skip BOS"},
    "10.1": {"stats": "Counter of the n-grams of each side (spaces removed); matched = sum of Counter & Counter"},
    "10.2": {"chrF": "average P = m/h and R = m/r over the orders where h > 0 and r > 0, then "
                     "(1 + beta^2) P R / (beta^2 P + R) * 100"},
    "11.1": {"delta": "delta is the metric of the summed statistics of A minus B's, on the whole test set",
             "win_rate": "the share of resamples whose difference is > 0",
             "low": "np.quantile of the differences at (1 - level) / 2 and (1 + level) / 2",
             "high": "np.quantile of the differences at (1 - level) / 2 and (1 + level) / 2"},
    "12.1": {"out": "keep probs >= p * probs.max() (ties at the threshold kept), zero the rest, renormalise"},
    "12.2": {"out": "positions = np.arange(held, held + T), rotate q and k by them before the cache",
             "offset": "after the cache the new tokens sit at held .. held + T - 1, not at 0 .. T - 1"},
    "13.1": {"chunks": "at step s (d = N >> (s + 1)) rank r and its partner r ^ d share an aligned block of 2d chunks; "
                       "r sends the d of the half that holds the partner and adds the partner's into its own half; "
                       "every send of a step happens before any add",
             "messages": "one Message(step, sender, receiver, chunk) per chunk sent: N d per step, in any order"},
    "13.2": {"chunks": "at step s (d = 1 << s) rank r sends the d finished chunks of its aligned block of d and "
                       "replaces (does not add to) its copies of the partner's block; read only chunk r of rank r "
                       "at first",
             "messages": "one Message(step, sender, receiver, chunk) per chunk sent: N d per step, in any order"},
}


def formula(exercise_id: str, about: str) -> str:
    """The formula-level hint of ``exercise_id`` about ``about``, or ""."""
    return FORMULAS.get(exercise_id, {}).get(about, "")


#: The whole of this file in the student edition.
STUDENT_EDITION = '''"""The grader's formula-level hints are not part of the student edition.

The last step of a hint, close to the answer, comes from your teacher's grader (for example
on Gradescope), after several failed attempts or when your teacher allows it.
"""
from typing import Dict

FORMULAS: Dict[str, Dict[str, str]] = {}


def formula(exercise_id: str, about: str) -> str:
    return ""
'''
