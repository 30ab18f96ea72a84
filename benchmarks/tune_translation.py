"""Choose a translation run's decoding settings on the validation split, never on the test split.

For a run directory with kept epochs (``--keep-epochs``), this prints the validation sacreBLEU
(greedy) of the average of the last k epochs for every k, then the beam-4 validation sacreBLEU of
the best average at each length penalty. ``--test`` then scores the chosen settings once on the
test split.

    python benchmarks/tune_translation.py runs/de-en --penalties 0.6 0.8 1.0 1.2 --test
"""
from __future__ import annotations

import argparse
import time

from numpytransformer.training.checkpoint import average_checkpoints
from numpytransformer.cli import _build_model, _read_task
from numpytransformer.training.trainer import kept_epochs


def sacrebleu(task, model, split: str, beam: int = 1, length_penalty: float = 0.6) -> float:
    return task.bleu(model, split, beam, length_penalty=length_penalty)["sacrebleu"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="a run directory whose epochs/ holds the kept epochs")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--penalties", type=float, nargs="+", default=[0.6, 0.8, 1.0, 1.2])
    p.add_argument("--test", action="store_true", help="score the chosen settings on the test split, once")
    args = p.parse_args()

    kept = kept_epochs(f"{args.run}/epochs")
    _, task = _read_task(kept[-1], args.data_dir)
    model = _build_model(kept[-1], task)
    scores = {}
    for k in range(1, len(kept) + 1):
        t = time.time()
        average_checkpoints(kept[-k:], model)
        model.eval()
        scores[k] = sacrebleu(task, model, "val")
        print(f"average of the last {k} epochs ({kept[-k].name}-{kept[-1].name}): val sacreBLEU greedy "
              f"{scores[k]:.2f} [{time.time() - t:.0f} s]", flush=True)
    k = max(scores, key=scores.get)
    average_checkpoints(kept[-k:], model)
    model.eval()
    beams = {}
    for lp in args.penalties:
        t = time.time()
        beams[lp] = sacrebleu(task, model, "val", args.beam, lp)
        print(f"last {k} averaged, beam {args.beam}, length penalty {lp}: val sacreBLEU {beams[lp]:.2f} "
              f"[{time.time() - t:.0f} s]", flush=True)
    lp = max(beams, key=beams.get)
    print(f"chosen on validation: the last {k} epochs averaged, length penalty {lp}")
    if args.test:
        print(f"test sacreBLEU: greedy {sacrebleu(task, model, 'test'):.2f}, beam {args.beam} "
              f"{sacrebleu(task, model, 'test', args.beam, lp):.2f}")


if __name__ == "__main__":
    main()
