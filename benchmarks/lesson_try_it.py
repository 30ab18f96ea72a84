"""Two "Try it yourself" experiments of the lessons, measured for INSTRUCTOR.md's answer key.

    python benchmarks/lesson_try_it.py warmup      # lesson 8: what dropping the warm-up changes (4 runs, ~3 min)
    python benchmarks/lesson_try_it.py lm          # lesson 12: pre-LN, post-LN, untied, 3 seeds (~3 min)

warmup: lesson 8's reversal run (10 symbols, lengths 1-12, 8 epochs, pre-LN d_model 64, Noam factor 0.1,
warm-up 100, so a peak of 1.25e-3) against (a) no warm-up with the same peak and the same decay (the rate
held at the peak for the first 100 updates, then the lesson's schedule), (b) the same without clipping,
(c) warmup=1 with lr_factor=0.01, the old version of the experiment (same peak, every later rate 10x lower).
lm: lesson 12's 200-update character GPT (section 5's settings) as it is, with post-LN, with post-LN and
warm-up 400, and untied, for seeds 0-2.
"""
from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace

import numpy as np

import numpytransformer as nt
from numpytransformer.tasks.lm import LanguageModelTask, LMData
from numpytransformer.tasks.reverse import ReversalTask, ReverseData
from numpytransformer.training.trainer import TrainConfig, Trainer


def warmup_run(variant: str) -> str:
    data = ReverseData(n_symbols=10, min_len=1, max_len=12, n_train=8000, n_val=300, n_test=1000, batch_size=64)
    model_settings, _ = ReversalTask.recipe(data)
    task = ReversalTask(data, model_settings)
    model = task.build_model()
    cfg = dict(epochs=8, lr_factor=0.1, warmup=100, label_smoothing=0.1, clip_norm=1.0, log_every=10 ** 6)
    if variant == "warmup1-factor0.01":
        cfg.update(warmup=1, lr_factor=0.01)
    if variant == "flat-peak-noclip":
        cfg.update(clip_norm=0.0)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(model, task, TrainConfig(**cfg), run_dir, log=lambda msg: None)
        if variant.startswith("flat-peak"):
            trainer.noam = lambda step: min(1.25e-3, nt.NoamSchedule(64, warmup=1, factor=0.1)(step))
        trainer.fit()
        report = task.test_report(model)
    lrs = [h["lr"] for h in trainer.history["steps"]]
    return (f"{variant:20s} lr at step 1 {lrs[0]:.2e}, peak {max(lrs):.2e}, at step 400 {lrs[399]:.2e}; "
            f"validation exact match by epoch {[round(e['exact_match'], 3) for e in trainer.history['epochs']]}; "
            f"mean loss of the first 100 updates {np.mean([h['loss'] for h in trainer.history['steps'][:100]]):.3f}; "
            f"test exact match {report['exact_match']:.3f}, token accuracy {report['token_accuracy']:.4f}; "
            f"{time.perf_counter() - start:.0f} s")


def lm_run(variant: str, seed: int) -> str:
    data = LMData(corpus="embedded", tokenization="char", block_size=64, batch_size=32, batches_per_epoch=100)
    settings, _ = LanguageModelTask.recipe(data)
    warmup = 50
    if variant.startswith("post"):
        settings = replace(settings, norm="post")
    if variant == "post-warmup400":
        warmup = 400
    if variant == "untied":
        settings = replace(settings, tie_embeddings=False)
    task = LanguageModelTask(data, replace(settings, seed=seed))
    model = task.build_model()
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(model, task, TrainConfig(epochs=2, lr_factor=1.0, warmup=warmup, label_smoothing=0.0,
                                                   clip_norm=1.0, log_every=10 ** 6), run_dir, log=lambda msg: None)
        trainer.fit()
    val = task.validate(model.eval())["val_loss"]
    return f"{variant:15s} seed {seed}: {model.num_parameters():,} parameters, validation loss {val:.3f} nats/char"


def main(argv) -> int:
    if argv[:1] == ["warmup"]:
        for variant in ("lesson", "flat-peak", "flat-peak-noclip", "warmup1-factor0.01"):
            print(warmup_run(variant), flush=True)
    elif argv[:1] == ["lm"]:
        for variant in ("pre-tied", "post", "post-warmup400", "untied"):
            vals = []
            for seed in range(3):
                line = lm_run(variant, seed)
                vals.append(float(line.split("validation loss ")[1].split()[0]))
                print(line, flush=True)
            print(f"{variant:15s} mean of 3 seeds: {np.mean(vals):.3f} (spread {min(vals):.3f}-{max(vals):.3f})", flush=True)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
