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
    "7.1": {"dx": "back through ffn_sublayer with the FFN's backward, then self_attn_sublayer with "
                  "self-attention's; each Residual adds its input's gradient to the sublayer's"},
    "7.2": {"dx": "post-LN: back through the LayerNorm first, then the residual and the sublayer's gradients add; "
                  "pre-LN: dout reaches x unchanged, plus the LayerNorm's backward of the sublayer's gradient",
            "dmemory": "the memory reaches the layer only through cross-attention's keys and values, so its gradient "
                       "is what the cross-attention sublayer's backward hands back beside dx"},
    "8.1": {"lr(step)": "lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step 0 counted as 1"},
    "8.2": {"update": "m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), p -= lr * m_hat / (sqrt(v_hat) + eps)",
            "m": "self.m holds the first moment b1 * m + (1 - b1) * g, not bias-corrected",
            "v": "self.v holds the second moment b2 * v + (1 - b2) * g^2, not bias-corrected"},
    "8.3": {"norm": "return the global norm before clipping, the square root of the sum of every squared entry",
            "grads": "every gradient is scaled by the same max_norm / norm, and only if norm > max_norm"},
    "10.1": {"correct": "each n-gram matches at most as often as it occurs in the one reference where it is most "
                        "frequent"},
    "9.1": {"tokens": "with use_cache feed only the last token, at position t, and the cache keeps the prefix; "
                      "without it feed the whole prefix; take the argmax of the last position's logits; a sentence "
                      "that produced EOS goes on with EOS and stops counting; stop when every sentence is done"},
    "9.2": {"tokens": "a finished beam extends only with EOS at no cost; the K best of the K*V candidates give each "
                      "new beam its parent (index // V) and token (index % V); lengths count tokens before EOS; every "
                      "layer's cache, 'k' and 'v', is reordered by the parents"},
    "11.1": {"values": "one value per seed, train(seed) for each seed in the order given",
             "std": "std = sqrt(sum((v - mean)^2) / (n - 1)), NumPy's std with ddof=1",
             "sem": "the standard error of the mean is std / sqrt(n)",
             "interval": "mean -/+ t_quantile(n - 1) * sem: Student's t, not the normal's 1.96, for few seeds"},
    "12.2": {"next_token_probs": "p_i proportional to exp(z_i / tau) (temperature 0: all mass on the argmax), then "
                                 "the top-k cut, then the top-p cut, each renormalised; ties go to the lower id",
             "top_k_filter(probs, 2)": "keep the k largest probabilities (ties to the lower id), zero the rest, "
                                       "renormalise",
             "top_p_filter(probs, 0.6)": "rank by probability; keep a token while the mass ranked above it is below "
                                         "p (the most likely one is always kept), then renormalise",
             "draws": "u = rng.random() once per draw; return the first id whose cumulative probability exceeds u"},
    "12.3": {"dlogits": "the softmax cross-entropy gradient of lesson 2 at every position, (p - onehot(next id)) "
                        "/ (B T), times dloss",
             "row sums": "p and the one-hot of the next id are both distributions: is the -1 at the target missing?"},
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
