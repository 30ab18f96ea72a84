"""How far a BLEU figure on 1,000 sentences can move by chance: sacreBLEU's bootstrap interval.

Decodes a translation checkpoint's splits (the test split, and the held-out pairs of a run
trained with ``--holdout``) with beam 4 at the checkpoint's length penalty, and prints each
split's cased sacreBLEU with the 95% interval of sacreBLEU's bootstrap (the sentences drawn
again with replacement, 1,000 times). The interval measures the sentences' sampling, not the
training's: another seed moves a figure too (RESULTS.md gives both).

    python benchmarks/bleu_intervals.py runs/en-de --beam 4
"""
from __future__ import annotations

import argparse

from sacrebleu.metrics import BLEU

from numpytransformer.cli import load_for_inference


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", help="a translation checkpoint or run directory")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--samples", type=int, default=1000, help="bootstrap samples")
    args = p.parse_args()
    task, model, ck = load_for_inference(args.checkpoint, args.data_dir, need="translate")
    for split in ("test", "fresh") if task.data.holdout else ("test",):
        hyps, refs = task.hypotheses(model, split, beam=args.beam)
        score = BLEU().corpus_score(hyps, [refs], n_bootstrap=args.samples)
        # _mean and _ci: the bootstrap's mean and half-width, which sacreBLEU's own format() prints as "μ = m ± ci"
        print(f"{ck}: {split} ({len(refs)} pairs) beam {args.beam}: sacreBLEU {score.score:.2f}, "
              f"bootstrap mean {score._mean:.2f}, 95% interval +-{score._ci:.2f}", flush=True)


if __name__ == "__main__":
    main()
