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
    section: str = ""  # where the lesson derives it, for the grader's hints ("lesson 6 §2")
    difficulty: str = ""  # "easy", "medium" or "hard"
    minutes: int = 0  # a fair time estimate for a student who has read the lesson
    points: int = 0  # for a results.json (Gradescope's format)

    @property
    def lesson(self) -> int:
        return int(self.id.split(".")[0])


def check_command(exercise_id: str) -> str:
    return f"python -m course check {exercise_id}"


EXERCISES: List[Exercise] = [
    Exercise("1.1", "numpytransformer/core/linear.py", "linear_backward",
             "dx, dW and db of the affine map out = x W + b", (), "lesson 1 §2", "easy", 20, 5),
    Exercise("1.2", "numpytransformer/core/relu.py", "relu_backward",
             "dx of ReLU, shaped like x, with derivative 0 at the kink", (), "lesson 1 §4", "easy", 10, 3),
    Exercise("2.1", "numpytransformer/core/losses.py", "softmax_cross_entropy_backward",
             "turn d (the softmax) into dloss * dL/dlogits, zero in pad rows", (), "lesson 2 §4-5", "medium", 30, 8),
    Exercise("3.1", "numpytransformer/core/embedding.py", "embedding_backward",
             "dW, the scaled scatter-add of dout into the rows named by ids, pad row zero", (), "lesson 3 §2-4",
             "medium", 25, 6),
    Exercise("3.2", "numpytransformer/core/positional.py", "sinusoidal_encoding",
             "pe, the float64 (max_len, d_model) table: sines in even columns, cosines in odd ones", (),
             "lesson 3 §5", "easy", 20, 4),
    Exercise("4.1", "numpytransformer/core/attention.py", "attention_forward",
             "scale, the masked softmax weights of q k^T * scale, and out = weights v", (), "lesson 4 §1-4",
             "medium", 40, 8),
    Exercise("4.2", "numpytransformer/core/attention.py", "attention_backward",
             "dq, dk and dv of scaled dot-product attention", ("4.1",), "lesson 4 §6", "hard", 60, 12),
    Exercise("5.1", "numpytransformer/core/multihead.py", "split_heads, merge_heads",
             "split_heads and merge_heads, between (B, T, D) and (B, H, T, D/H)", (), "lesson 5 §2", "easy", 20, 4),
    Exercise("5.2", "numpytransformer/core/multihead.py", "multihead_attention_backward",
             "dx_q, dx_kv and the 8 parameter gradients, in reverse order of the forward",
             ("1.1", "4.1", "4.2", "5.1"), "lesson 5 §5", "hard", 60, 12),
    Exercise("6.1", "numpytransformer/core/layernorm.py", "layernorm_backward",
             "dx, dgamma and dbeta of LayerNorm", (), "lesson 6 §2", "hard", 50, 10),
    Exercise("6.2", "numpytransformer/core/feedforward.py", "ffn_backward",
             "dx, dW1, db1, dW2 and db2, back through W2, the ReLU and W1", ("1.1", "1.2"), "lesson 6 §3",
             "easy", 15, 4),
    Exercise("7.1", "numpytransformer/nn/blocks.py", "EncoderLayer.backward",
             "dx, back through the FFN sublayer, then the self-attention sublayer",
             ("1.1", "1.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.2", "7.2"), "lesson 7 §1", "medium", 20, 5),
    Exercise("8.1", "numpytransformer/training/optim.py", "NoamSchedule.__call__",
             "the learning rate: linear warm-up to a peak at step warmup, then 1/sqrt(step) decay", (),
             "lesson 8 §3", "easy", 10, 3),
    Exercise("8.2", "numpytransformer/training/optim.py", "Adam.step",
             "update the moments self.m, self.v and every parameter in place, bias-corrected", (),
             "lesson 8 §2", "medium", 30, 6),
    Exercise("8.3", "numpytransformer/training/optim.py", "global_norm, clip_grad_norm",
             "norm of all gradients; scale them all in place if norm > max_norm", (), "lesson 8 §4",
             "easy", 15, 4),
    Exercise("10.1", "numpytransformer/text/bleu.py", "_segment_stats",
             "correct[n-1] and total[n-1], clipped matches and hypothesis n-grams of each order n", (),
             "lesson 10 §4", "medium", 30, 6),
    Exercise("12.1", "numpytransformer/core/positional.py", "learned_positional_backward",
             "dx and dP of the addition of learned positions; rows the forward did not read get zero", (), "lesson 12",
             "easy", 15, 4),
    Exercise("7.2", "numpytransformer/nn/blocks.py", "Residual.backward, DecoderLayer.backward",
             "dx (and dmemory) through a sublayer connection, pre- or post-LN, and back through the decoder's three "
             "sublayers", ("1.1", "1.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.2"), "lesson 6 §4, lesson 7 §2",
             "hard", 45, 12),
    Exercise("9.1", "numpytransformer/nn/decoding.py", "_greedy",
             "the greedy loop: the last position's logits (from the KV cache or the whole prefix), the argmax, EOS "
             "bookkeeping", (), "lesson 9 §2, §4", "medium", 30, 6),
    Exercise("9.2", "numpytransformer/nn/decoding.py", "_beam",
             "one beam step: finished beams kept, the K best of K*V candidates, their parents, lengths and "
             "reordered caches", (), "lesson 9 §3, §5", "hard", 60, 10),
    Exercise("11.1", "numpytransformer/sweep.py", "over_seeds",
             "train once per seed, then the mean, the sample std, the standard error and the 95% t-interval", (),
             "lesson 11 §5", "easy", 20, 6),
    Exercise("12.2", "numpytransformer/nn/sampling.py", "top_k_filter, top_p_filter, _probs, sample_from",
             "the distribution at temperature tau, cut to the top k and the top p, renormalised; one draw from it",
             (), "lesson 12 §6", "medium", 40, 10),
    Exercise("12.3", "numpytransformer/core/losses.py", "lm_loss_forward, lm_loss_backward",
             "the mean next-token loss (targets: ids shifted by one) and its gradient dlogits", ("2.1",),
             "lesson 2 §4, lesson 12 §5", "medium", 25, 6),
]
# Kept in lesson order (the list above grows at its end).
EXERCISES.sort(key=lambda e: tuple(map(int, e.id.split("."))))

BY_ID: Dict[str, Exercise] = {e.id: e for e in EXERCISES}

#: lesson number -> its exercises, in order
LESSONS: Dict[int, List[Exercise]] = {}
for _e in EXERCISES:
    LESSONS.setdefault(_e.lesson, []).append(_e)
