"""Validation, test and held-out figures of each checkpoint and of all of them as one ensemble.

Translation: cased sacreBLEU, greedy and beam 4, on the validation split, the test split and
(for runs trained with ``--holdout``) the held-out training pairs. Sentiment: validation
accuracy and loss (``eval`` gives the test split's). The ensemble averages the members'
probabilities (``numpytransformer/nn/ensemble.py``); choose by the validation rows.

    python benchmarks/ensemble_scores.py runs/en-de-0 runs/en-de-1
"""
from __future__ import annotations

import argparse
import time

from numpytransformer.cli import load_ensemble


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoints", nargs="+", help="checkpoint or run directories of one task and vocabulary")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--members", action="store_true", help="score each checkpoint alone too")
    args = p.parse_args()
    groups = ([[c] for c in args.checkpoints] if args.members else []) + [args.checkpoints]
    for paths in groups:
        task, model, what = load_ensemble(paths, args.data_dir)
        if task.name != "translate":
            print(f"{what}: " + " ".join(f"{k} {v:.4f}" for k, v in task.validate(model).items()), flush=True)
            continue
        splits = ("val", "test", "fresh") if task.data.holdout else ("val", "test")
        for split in splits:
            for beam in (1, 4):
                start = time.perf_counter()
                score = task.bleu(model, split, beam=beam)["sacrebleu"]
                print(f"{what}: {split} beam {beam} sacrebleu {score:.2f} [{time.perf_counter() - start:.0f} s]",
                      flush=True)


if __name__ == "__main__":
    main()
