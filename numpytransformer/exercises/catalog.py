"""The exercises: which fence of the library each one is, and what the student writes there.

The titles are the ones written after ``### BEGIN SOLUTION <id>:`` in the library;
``tests/test_exercises.py`` keeps the two in step.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple

__all__ = ["Exercise", "EXERCISES", "BY_ID", "LESSONS", "check_command"]


class Exercise(NamedTuple):
    id: str  # "<lesson>.<n>"
    file: str  # path of the fenced file, relative to the repository root
    function: str  # the function (or method) that holds the fence
    title: str  # what to compute, as in the fence
    needs: Tuple[str, ...] = ()  # exercises whose code this check also runs

    @property
    def lesson(self) -> int:
        return int(self.id.split(".")[0])


def check_command(exercise_id: str) -> str:
    return f"python -m numpytransformer.exercises check {exercise_id}"


EXERCISES: List[Exercise] = [
    Exercise("1.1", "numpytransformer/linear.py", "linear_backward",
             "dx, dW and db of the affine map out = x W + b"),
    Exercise("1.2", "numpytransformer/relu.py", "relu_backward",
             "dx of ReLU, dout where x > 0 and 0 elsewhere"),
    Exercise("2.1", "numpytransformer/losses.py", "softmax_cross_entropy_backward",
             "turn d (the softmax) into dloss * (p - q) / N, zero in pad rows"),
    Exercise("3.1", "numpytransformer/embedding.py", "embedding_backward",
             "dW, the scaled scatter-add of dout into the rows named by ids, pad row zero"),
    Exercise("3.2", "numpytransformer/positional.py", "sinusoidal_encoding",
             "pe, the float64 (max_len, d_model) table: sines in even columns, cosines in odd ones"),
    Exercise("4.1", "numpytransformer/attention.py", "attention_forward",
             "scale, the masked softmax weights of q k^T * scale, and out = weights v"),
    Exercise("4.2", "numpytransformer/attention.py", "attention_backward",
             "dq, dk and dv of scaled dot-product attention", ("4.1",)),
    Exercise("5.1", "numpytransformer/multihead.py", "split_heads, merge_heads",
             "split_heads and merge_heads, between (B, T, D) and (B, H, T, D/H)"),
    Exercise("5.2", "numpytransformer/multihead.py", "multihead_attention_backward",
             "dx_q, dx_kv and the 8 parameter gradients, in reverse order of the forward",
             ("1.1", "4.1", "4.2", "5.1")),
    Exercise("6.1", "numpytransformer/layernorm.py", "layernorm_backward",
             "dx, dgamma and dbeta of LayerNorm"),
    Exercise("6.2", "numpytransformer/feedforward.py", "ffn_backward",
             "dx, dW1, db1, dW2 and db2, back through W2, the ReLU and W1", ("1.1", "1.2")),
    Exercise("7.1", "numpytransformer/layers.py", "EncoderLayer.backward",
             "dx, back through the FFN sublayer, then the self-attention sublayer",
             ("1.1", "1.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.2")),
    Exercise("8.1", "numpytransformer/optim.py", "NoamSchedule.__call__",
             "the learning rate: linear warm-up to a peak at step warmup, then 1/sqrt(step) decay"),
    Exercise("8.2", "numpytransformer/optim.py", "Adam.step",
             "update the moments self.m, self.v and every parameter in place, bias-corrected"),
    Exercise("8.3", "numpytransformer/optim.py", "clip_grad_norm",
             "norm of all gradients; scale them all in place if norm > max_norm"),
    Exercise("10.1", "numpytransformer/bleu.py", "_segment_stats",
             "correct[n-1] and total[n-1], clipped matches and hypothesis n-grams of each order n"),
]

BY_ID: Dict[str, Exercise] = {e.id: e for e in EXERCISES}

#: lesson number -> its exercises, in order
LESSONS: Dict[int, List[Exercise]] = {}
for _e in EXERCISES:
    LESSONS.setdefault(_e.lesson, []).append(_e)
