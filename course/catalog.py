"""The exercises: which fence of the library each one is, and what the student writes there.

A lesson derives a component; its exercises ask for a sibling that no lesson derives (GELU
beside ReLU, rotary beside sinusoidal positions, RMSNorm beside LayerNorm ...), a real option
of the models, whose reference solution is fenced in the library. The titles are the ones
written after ``### BEGIN SOLUTION <id>:`` there; ``tests/test_exercises.py`` keeps the two in
step. The project (:data:`PROJECTS`) is graded by the teacher with the rubric of
``lessons/PROJECT.md``, not by the grader.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Tuple

__all__ = ["Exercise", "EXERCISES", "PROJECTS", "CATALOG", "BY_ID", "LESSONS", "check_command"]


class Exercise(NamedTuple):
    id: str  # "<lesson>.<n>", or "P" for the project
    file: str  # path of the fenced file (the project: its rubric), relative to the repository root
    function: str  # the function (or method) that holds the fence
    title: str  # what to compute, as in the fence
    needs: Tuple[str, ...] = ()  # exercises whose code this check also runs
    section: str = ""  # the lesson section whose method it transfers, for the grader's hints
    difficulty: str = ""  # "easy", "medium" or "hard"
    minutes: int = 0  # a fair time estimate for a student who has read the lesson
    points: int = 0  # for a results.json (Gradescope's format)
    kind: str = "exercise"  # "exercise" (autograded) or "project" (graded by the teacher)

    @property
    def lesson(self) -> int:
        """The lesson it follows (the project: the last one it builds on)."""
        return 13 if self.kind == "project" else int(self.id.split(".")[0])


def check_command(exercise_id: str) -> str:
    return f"python -m course check {exercise_id}"


#: The autograded exercises, in lesson order.
EXERCISES: List[Exercise] = [
    Exercise("1.1", "numpytransformer/core/gelu.py", "gelu_backward",
             "dx of the exact GELU, x Phi(x) with Phi the standard normal's distribution function", (),
             "sibling of lesson 1 §4", "medium", 30, 6),
    Exercise("1.2", "numpytransformer/core/gelu.py", "gelu_backward",
             "dx of GPT-2's tanh GELU, x (1 + tanh(u)) / 2 with u = C (x + K x^3)", (),
             "sibling of lesson 1 §4", "medium", 25, 5),
    Exercise("2.1", "numpytransformer/core/losses.py", "softmax_cross_entropy_forward, softmax_cross_entropy_backward",
             "PaLM's z-loss: log Z of every row, z_loss times the mean of its square over the counted rows added to "
             "the loss; its gradient added to d", (), "sibling of lesson 2 §4", "medium", 40, 4),
    Exercise("3.1", "numpytransformer/core/rotary.py", "rotary_forward",
             "rotate each (even, odd) pair of features by the angle of its row's position", (),
             "sibling of lesson 3 §5-6", "medium", 35, 4),
    Exercise("3.2", "numpytransformer/core/rotary.py", "rotary_backward",
             "dx of the rotation of each (even, odd) pair, shaped like x", ("3.1",),
             "sibling of lesson 3 §6", "easy", 20, 4),
    Exercise("4.1", "numpytransformer/core/alibi.py", "alibi_attention_forward",
             "the bias -m_h (i - j), added to the scaled scores, then attention's masked softmax", (),
             "sibling of lesson 4 §1-3", "easy", 25, 4),
    Exercise("4.2", "numpytransformer/core/alibi.py", "alibi_slopes",
             "the slopes m_h = 2^(-8h/H) of the heads h = 1 .. H, in float64", (), "sibling of lesson 4 §3",
             "easy", 10, 2),
    Exercise("5.1", "numpytransformer/core/gqa.py", "repeat_kv",
             "each key or value head repeated for the group of query heads that reads it", (),
             "sibling of lesson 5 §2", "easy", 15, 2),
    Exercise("5.2", "numpytransformer/core/gqa.py", "gqa_backward",
             "dx and the 8 parameter gradients of grouped-query attention",
             ("3.1", "3.2", "4.1", "4.2", "5.1"), "sibling of lesson 5 §5", "hard", 75, 9),
    Exercise("6.1", "numpytransformer/core/rmsnorm.py", "rmsnorm_backward",
             "dx and dgamma of RMSNorm, gamma times x over the root mean square of its row", (),
             "sibling of lesson 6 §2", "medium", 40, 4),
    Exercise("6.2", "numpytransformer/core/swiglu.py", "swiglu_backward",
             "dx, dW1, dV and dW2, back through W2, the gate product, silu and the two projections", (),
             "sibling of lesson 6 §3", "hard", 50, 8),
    Exercise("7.1", "numpytransformer/nn/blocks.py", "ParallelBlock.backward",
             "dx, with the gradients of the sublayers' and the norm's parameters accumulated",
             ("7.2",), "sibling of lesson 7 §1", "medium", 35, 4),
    Exercise("7.2", "numpytransformer/nn/blocks.py", "ParallelBlock.forward",
             "one shared norm of x, the attention and the FFN on it, their dropped outputs added to x", (),
             "sibling of lesson 7 §1", "easy", 15, 3),
    Exercise("8.1", "numpytransformer/training/optim.py", "CosineSchedule.__call__",
             "the rate at step: the linear rise, the half cosine from peak to floor, then the floor", (),
             "sibling of lesson 8 §3", "easy", 20, 3),
    Exercise("8.2", "numpytransformer/training/optim.py", "Lion.step",
             "the direction c from the momentum and the gradient, the signed step of every parameter in place, then "
             "the momentum self.m", (), "sibling of lesson 8 §2", "easy", 20, 3),
    Exercise("8.3", "numpytransformer/training/optim.py", "EMA.update",
             "for every parameter, the average moved one step towards the new weights, into self.shadow", (),
             "sibling of lesson 8 §2", "easy", 15, 2),
    Exercise("9.2", "numpytransformer/nn/decoding.py", "_ban_early_eos",
             "while the outputs hold fewer than min_len tokens, EOS's score set to -inf (in place)", (),
             "sibling of lesson 9 §2", "easy", 15, 2),
    Exercise("9.1", "numpytransformer/nn/decoding.py", "_block_repeats",
             "for each hypothesis, every token that followed an earlier occurrence of its last n - 1 tokens, banned",
             (), "sibling of lesson 9 §2", "medium", 40, 4),
    Exercise("10.1", "numpytransformer/text/chrf.py", "chrf_statistics",
             "per order n, the counts of the hypothesis's and the reference's character n-grams and of the matched "
             "ones", (), "sibling of lesson 10 §4", "medium", 30, 3),
    Exercise("10.2", "numpytransformer/text/chrf.py", "chrf_from_statistics",
             "the mean precision and recall over the orders both sides have, then their F-beta score in percent", (),
             "sibling of lesson 10 §4", "easy", 20, 2),
    Exercise("11.1", "numpytransformer/sweep.py", "paired_bootstrap",
             "n resamples (each rows = rng.integers(0, S, size=S), one draw for both systems), the differences of the "
             "metric, the share A wins, the percentile interval and delta", (), "sibling of lesson 11 §5", "medium",
             30, 4),
    Exercise("12.1", "numpytransformer/nn/sampling.py", "min_p_filter",
             "the threshold p times the largest probability, the probabilities below it set to 0, the rest "
             "renormalised", (), "sibling of lesson 12 §6", "easy", 15, 3),
    Exercise("12.2", "numpytransformer/nn/modules.py", "GroupedQueryAttention._forward_cached",
             "the positions of the new tokens, after the held ones, and q and k rotated by them", ("3.1", "5.1"),
             "sibling of lesson 12 §7", "easy", 20, 3),
    Exercise("13.1", "numpytransformer/training/collectives.py", "halving_reduce_scatter",
             "log2 N steps; at each every rank sends its partner the half of its block that holds the partner, and "
             "adds the half it receives into its own", (), "sibling of lesson 13 §3", "hard", 50, 8),
    Exercise("13.2", "numpytransformer/training/collectives.py", "doubling_all_gather",
             "log2 N steps; at each every rank sends its partner every finished chunk it holds, and keeps the "
             "partner's in their place", (), "sibling of lesson 13 §3", "medium", 30, 3),
]
# Kept in lesson order.
EXERCISES.sort(key=lambda e: tuple(map(int, e.id.split("."))))

#: What the teacher grades by hand, with a rubric.
PROJECTS: List[Exercise] = [
    Exercise("P", "lessons/PROJECT.md", "project",
             "modernise the GPT with two siblings of your choice, ablate them on Tiny Shakespeare at equal training "
             "time, and report with curves", (), "lessons 12-13", "hard", 600, 40, "project"),
]

#: Everything a student is graded on: the exercises, then the project.
CATALOG: List[Exercise] = EXERCISES + PROJECTS

BY_ID: Dict[str, Exercise] = {e.id: e for e in EXERCISES}

#: lesson number -> its exercises, in order
LESSONS: Dict[int, List[Exercise]] = {}
for _e in EXERCISES:
    LESSONS.setdefault(_e.lesson, []).append(_e)
