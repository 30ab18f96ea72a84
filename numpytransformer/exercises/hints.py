"""The grader's formula-level hints: the last of its three steps.

A failing check first names the wrong tensor and the size of its error; the next failed
attempt adds the property the result breaks (rows of dS sum to 0, dx is orthogonal to
x_hat) and any simple relation to the right answer; only after several failed attempts,
or with ``check --hints full``, does it add the line below, which is close to the answer.

The student edition's copy of this file is empty (``build`` writes :data:`STUDENT_EDITION`
in its place), so these lines reach a student only through the teacher's grader.
"""
from __future__ import annotations

from typing import Dict

__all__ = ["FORMULAS", "formula", "STUDENT_EDITION"]

#: exercise id -> what a hint is about (a tensor's name, or a property) -> the hint
FORMULAS: Dict[str, Dict[str, str]] = {
    "1.1": {"dx": "dx = dout W^T, reshaped like x", "dW": "dW = x^T dout with every leading axis flattened into rows",
            "db": "db = dout summed over every leading axis (all rows), not just the first"},
    "1.2": {"dx": "dx = dout where x > 0 and 0 elsewhere (also at x == 0)"},
    "2.1": {"dlogits": "dlogits = dloss * (p - q) / N, q = (1 - eps) onehot(y) + eps / V, N the non-pad targets",
            "row sums": "p and q are both distributions, so each row of p - q sums to 0; is q's eps/V term or its "
                        "1 - eps missing?"},
    "3.1": {"dW": "dW[v] = scale * sum of dout over the positions whose id is v (np.add.at: repeats accumulate)",
            "repeats": "repeated ids must accumulate (np.add.at), not overwrite"},
    "3.2": {"pe": "PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d))",
            "pe (float32)": "compute the table in float64, then cast it"},
    "4.1": {"weights": "scale = 1/sqrt(d_k), d_k the last axis of q; weights = softmax(q k^T * scale) over the "
                       "allowed keys",
            "masked row": "mask with the finite MASK_VALUE, then zero the rows whose every key is masked",
            "large": "subtract each row's max before exp (the softmax helper does)",
            "dtypes": "a NumPy float64 scalar such as np.sqrt(d_k) turns float32 arrays into float64, use "
                      "q.dtype.type(...) or a Python float"},
    "4.2": {"dv": "dv = P^T dout: each key position collects the weights it got, times dout",
            "dq": "dQ = c dS K with dS = P * (dP - rowsum(dP * P)) and dP = dO V^T", "dk": "dK = c dS^T Q", "row sums": "is the -rowsum(dP * P) term missing?"},
    "5.1": {"split_heads(x, n_heads)": "reshape to (B, T, H, D/H), then swap the T and H axes",
            "merge_heads(heads)": "swap the H and T axes back, then reshape to (B, T, D)"},
    "5.2": {"db_k": "the key bias's gradient is 0: it shifts a whole row of scores, which softmax ignores",
            "dx_q": "in self-attention x feeds the q, k and v projections: the three gradients add"},
    "6.1": {"dgamma": "dgamma = dout * x_hat summed over every leading axis",
            "dbeta": "dbeta = dout summed over every leading axis",
            "dx": "dx = (dx_hat - mean(dx_hat) - x_hat * mean(dx_hat * x_hat)) / sqrt(var + eps), "
                  "dx_hat = dout * gamma",
            "mean": "is the -mean(dx_hat) term, the path through the mean, missing?",
            "variance": "is the -x_hat * mean(dx_hat * x_hat) term, the path through the variance, missing?"},
    "6.2": {"dx": "back through W2, then the ReLU's mask, then W1", "db1": "db1 is taken after the ReLU's mask"},
    "7.1": {"dx": "back through sub2 with the FFN's backward, then sub1 with self-attention's; each Residual adds "
                  "its input's gradient to the sublayer's"},
    "8.1": {"lr(step)": "lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 counted as 1"},
    "8.2": {"update": "m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), p -= lr * m_hat / (sqrt(v_hat) + eps)",
            "m": "self.m holds the first moment b1 * m + (1 - b1) * g, not bias-corrected",
            "v": "self.v holds the second moment b2 * v + (1 - b2) * g^2, not bias-corrected"},
    "8.3": {"norm": "return the global norm before clipping, the square root of the sum of every squared entry",
            "grads": "every gradient is scaled by the same max_norm / norm, and only if norm > max_norm"},
    "10.1": {"correct": "each n-gram matches at most as often as it occurs in the one reference where it is most "
                        "frequent"},
    "12.1": {"dx": "the addition hands dout through: dx = dout",
             "dP": "dP[offset + t] = dout[:, t] summed over the batch; rows the forward did not read are 0"},
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
