"""Command line: ``python -m numpytransformer COMMAND ...`` (``--help`` on each command)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from .checkpoint import CheckpointError, load_checkpoint, read_checkpoint_meta
from .trainer import TrainConfig, Trainer

__all__ = ["main"]


# ---- tasks the command line knows ------------------------------------------------------
def _task_from_dict(d: dict, data_dir: Optional[str] = None):
    name = d.get("name")
    if name == "reverse":
        from .tasks.reverse import ReversalTask

        return ReversalTask.from_dict(d)
    if name == "translate":
        from .tasks.translate import TranslationTask

        return TranslationTask.from_dict(d, data_dir=data_dir)
    if name == "sentiment":
        from .tasks.sentiment import SentimentTask

        return SentimentTask.from_dict(d, data_dir=data_dir)
    raise CheckpointError(f"the checkpoint's task {name!r} is not known to this version")


#: The ``train`` task whose checkpoints an inference command needs (the others take any).
_TASK_OF_COMMAND = {"classify": "sentiment", "translate": "translate"}
#: The command that runs a trained task on new input.
_COMMAND_OF_TASK = {"sentiment": "classify"}


def resolve_checkpoint(path: str, task: Optional[str] = None) -> Path:
    """Accept a checkpoint directory or a run directory (then its ``best``, else ``last``).

    ``task`` (e.g. ``"sentiment"``) names the ``train`` task in the hint of the error
    for a missing checkpoint; without it the hint lists them all.
    """
    p = Path(path)
    if (p / "checkpoint.json").is_file():
        return p
    for sub in ("best", "last"):
        if (p / sub / "checkpoint.json").is_file():
            return p / sub
    if not p.exists():
        what = task or "TASK (reverse, translate or sentiment)"
        raise CheckpointError(f"checkpoint {path!r} does not exist (train one first: "
                              f"python -m numpytransformer train {what} --out {path})")
    raise CheckpointError(f"{path!r} holds no checkpoint (no checkpoint.json in it, nor in best/ or last/)")


def load_for_inference(path: str, data_dir: Optional[str] = None, task_name: Optional[str] = None):
    """(task, model, path) from a checkpoint, the model in eval mode (``task_name``: see
    :func:`resolve_checkpoint`)."""
    ck = resolve_checkpoint(path, task_name)
    doc = read_checkpoint_meta(ck)
    task = _task_from_dict(doc["task"], data_dir)
    model = task.build_model()
    load_checkpoint(ck, model)
    model.eval()
    return task, model, ck


def _read_inputs(text: Optional[str]) -> List[str]:
    if text is not None:
        return [text]
    return [line.rstrip("\n") for line in sys.stdin]


# ---- train ---------------------------------------------------------------------------
_TRAIN_OPTIONS = (("epochs", "epochs", int, "passes over the training data"),
                  ("lr_factor", "lr-factor", float, "multiplier of the Noam schedule d^-0.5*min(s^-0.5, s*w^-1.5)"),
                  ("warmup", "warmup", int, "warm-up updates"),
                  ("label_smoothing", "label-smoothing", float, "label smoothing epsilon"),
                  ("clip_norm", "clip", float, "clip the global gradient norm (0: off)"),
                  ("accum_steps", "accum", int, "batches per update (gradient accumulation)"),
                  ("log_every", "log-every", int, "updates between progress lines"),
                  ("max_minutes", "max-minutes", float, "stop after the epoch that exceeds this many minutes (0: no limit)"))


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except the ``None`` of options whose default comes from a recipe."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def _add_train_options(p: argparse.ArgumentParser, out: str, recipes: Dict[str, TrainConfig]) -> None:
    """Training options; left unset, each takes its value from the task's recipe."""
    g = p.add_argument_group("training", "Unset options take the recipe's value, shown in brackets.")
    for field, flag, typ, text in _TRAIN_OPTIONS:
        shown = ", ".join(f"{name}: {getattr(r, field)}" for name, r in recipes.items())
        g.add_argument(f"--{flag}", dest=field, type=typ, default=None, help=f"{text} [{shown}]")
    g.add_argument("--out", default=out, help="run directory: checkpoints best/ and last/, history.json, curves.png")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.set_defaults(default_out=out)  # for messages: "--out runs/reverse (the default)"


def _train_config(args, recipe: TrainConfig) -> TrainConfig:
    """The recipe with the options given; a bad value is a ValueError naming its flag."""
    values = {field: getattr(args, field) for field, *_ in _TRAIN_OPTIONS if getattr(args, field) is not None}
    # On the command line 0 turns clipping and the time budget off (None in TrainConfig).
    off = {"clip_norm": "(0: off)", "max_minutes": "(0: no limit)"}
    for field in off:
        if values.get(field) == 0:
            values[field] = None
    try:
        return dataclasses.replace(recipe, **values)
    except ValueError as e:
        # TrainConfig names its fields ("accum_steps must be at least 1, got 0"): name the flags.
        message = str(e)
        for field, flag, *_ in _TRAIN_OPTIONS:
            if message.startswith(field + " "):
                message = f"--{flag}{message[len(field):]}".replace("(or None: off)", off.get(field, ""))
        raise ValueError(message) from None


def _check_training_args(args, recipe: TrainConfig) -> None:
    """Reject bad training options and an unusable --out before any data is read (IMDB
    takes half a minute to read and encode)."""
    _train_config(args, recipe)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {args.out} is a file; expected a run directory (new or existing)")
    has_run = (out / "last" / "checkpoint.json").exists()
    named = f"--out {args.out}" + (" (the default)" if args.out == getattr(args, "default_out", None) else "")
    if args.resume and not has_run:
        raise ValueError(f"--resume: {named} holds no run to continue (no last/checkpoint.json)")
    if not args.resume and has_run:
        raise ValueError(f"{named} already holds a run: pass --resume to continue it, or choose another --out")
    # Write a file where the run will go now, not after the first epoch (creating nothing:
    # a run that fails to start leaves no empty directory behind).
    nearest = next(p for p in (out, *out.absolute().parents) if p.exists())
    try:
        if not nearest.is_dir():
            raise NotADirectoryError(f"{nearest} is a file")
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as e:
        raise ValueError(f"--out {args.out}: cannot write a run there ({e.strerror or e}); "
                         "choose another --out") from None


def _resumed_task_dict(args) -> Optional[dict]:
    """With --resume, the task settings the run was started with (the command line's are ignored)."""
    if not args.resume:
        return None
    return read_checkpoint_meta(Path(args.out) / "last")["task"]


class ReportLost(BrokenPipeError):
    """The output of ``train`` (or ``sweep``) was closed when all its work was done and saved:
    only a report lost its reader, so this is not an error (exit 0)."""


def _run_training(task, args, recipe: TrainConfig, about: str = "") -> None:
    """Train (or resume) and report on the test split; ``about`` is printed first: what the data is."""
    model = task.build_model()
    if args.resume:
        # Continue with the settings the run was started with; options given now override them.
        recipe = TrainConfig(**read_checkpoint_meta(Path(args.out) / "last")["train"])
    cfg = _train_config(args, recipe)
    trainer = Trainer(model, task, cfg, args.out)
    try:
        # A checkpoint that cannot be resumed is refused before anything is printed, so that
        # its error is not lost with a closed output; --out was checked before the data was read.
        if args.resume:
            trainer.resume()
        if about:
            print(about, flush=True)
        print("training settings: " + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg).items()),
              flush=True)
        print(f"training {type(model).__name__} with {model.num_parameters():,} parameters "
              f"({task.to_dict()['name']}); writing to {args.out}", flush=True)
        start, first_update = time.perf_counter(), trainer.optimizer.t
        trainer.fit()
        print(f"trained {trainer.optimizer.t - first_update} updates in {time.perf_counter() - start:.1f} s",
              flush=True)
        _report_on_test(task, model, Path(args.out))
    except BrokenPipeError:
        # Every finished epoch is saved, so a run with all of them done lost only a report.
        if trainer.epoch >= cfg.epochs:
            raise ReportLost() from None
        raise  # cut short: main says how to continue


def _report_on_test(task, model, out: Path) -> None:
    """The figure a run reports: the held-out test split, with the best validation checkpoint.

    The report names the checkpoint it really loaded."""
    which = next((w for w in ("best", "last") if (out / w / "checkpoint.json").is_file()), None)
    if which is None:
        raise ValueError(f"training wrote no checkpoint into {out}: nothing to report")
    load_checkpoint(out / which, model)
    model.eval()
    metrics = task.final_report(model)
    shown = "best checkpoint" if which == "best" else "last checkpoint: no best/ was written"
    print(f"final (test split, {shown}): " + " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    command = _COMMAND_OF_TASK.get(task.to_dict()["name"], "predict")
    print(f"checkpoint: {out / which}   try: python -m numpytransformer {command} --checkpoint {out} "
          f"\"{task.example_input()}\"")


def cmd_train_translate(args) -> None:
    from .tasks.translate import RECIPES, TranslateSettings, TranslationTask

    _check_training_args(args, RECIPES[args.dataset][0])

    recipe, data_defaults = RECIPES[args.dataset]
    if args.batch_tokens is None:
        args.batch_tokens = data_defaults["batch_tokens"]
    src_lang, tgt_lang = args.direction.split("-")
    s = TranslateSettings(dataset=args.dataset, src_lang=src_lang, tgt_lang=tgt_lang, tokenizer=args.tokenizer,
                          lowercase=not args.cased, bpe_merges=args.bpe_merges, min_freq=args.min_freq,
                          seed=args.seed, batch_tokens=args.batch_tokens, d_model=args.d_model,
                          n_heads=args.heads, n_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout,
                          tie_embeddings=args.tie, dtype=args.dtype, norm_first=args.norm == "pre")
    resumed = _resumed_task_dict(args)
    if resumed is not None:
        task = TranslationTask.from_dict(resumed, data_dir=args.data_dir)
    else:
        print(f"building the {args.dataset} vocabularies ...", flush=True)
        task = TranslationTask(s, data_dir=args.data_dir)
    _run_training(task, args, recipe)


def cmd_train_sentiment(args) -> None:
    from .tasks.sentiment import SENTIMENT_TRAIN, SentimentSettings, SentimentTask

    _check_training_args(args, SENTIMENT_TRAIN)

    s = SentimentSettings(tokenizer=args.tokenizer, lowercase=not args.cased, bpe_merges=args.bpe_merges,
                          vocab_size=args.vocab_size, min_freq=args.min_freq, max_tokens=args.max_tokens,
                          truncate=args.truncate, val_fraction=args.val_fraction, n_train=args.n_train,
                          n_test=args.n_test, seed=args.seed, batch_tokens=args.batch_tokens,
                          max_batch_size=args.max_batch_size, d_model=args.d_model, n_heads=args.heads,
                          n_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout, pooling=args.pooling,
                          dtype=args.dtype, norm_first=args.norm == "pre")
    resumed = _resumed_task_dict(args)
    if resumed is not None:
        task = SentimentTask.from_dict(resumed, data_dir=args.data_dir)
    else:
        print("reading IMDB and building the vocabulary ...", flush=True)
        start = time.perf_counter()
        task = SentimentTask(s, data_dir=args.data_dir)
        for split in ("train", "val"):
            task.split_ids(split)
        dropped = task.n_val_duplicates
        print(f"vocabulary of {len(task.vocab):,} tokens; {len(task.split_ids('train')[1]):,} training and "
              f"{len(task.split_ids('val')[1]):,} validation reviews ({dropped} validation "
              f"review{'s' if dropped != 1 else ''} dropped: the same text as a training review), encoded in "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    _run_training(task, args, SENTIMENT_TRAIN, about=task.describe())


def cmd_train_reverse(args) -> None:
    from .tasks.reverse import DEFAULT_TRAIN, ReversalTask, ReverseSettings

    _check_training_args(args, DEFAULT_TRAIN)

    s = ReverseSettings(formulation=args.formulation, n_symbols=args.n_symbols, min_len=args.min_len,
                        max_len=args.max_len, n_train=args.n_train, n_val=args.n_val, n_test=args.n_test,
                        seed=args.seed, batch_size=args.batch_size, d_model=args.d_model,
                        n_heads=args.heads, n_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout,
                        dtype=args.dtype, norm_first=args.norm == "pre")
    resumed = _resumed_task_dict(args)
    task = ReversalTask.from_dict(resumed) if resumed is not None else ReversalTask(s)
    _run_training(task, args, DEFAULT_TRAIN)


def cmd_sweep(args) -> None:
    from .sweep import main_sweep
    from .tasks.reverse import ReverseSettings

    grid = {name: getattr(args, name) for name in ("layers", "heads", "d_model", "warmup")
            if getattr(args, name) is not None}
    if not grid:  # the default ablation: depth, heads, width and warm-up
        grid = {"layers": [1, 2, 3, 4], "heads": [1, 2, 4, 8], "d_model": [32, 64, 128], "warmup": [25, 100, 400]}
    if args.epochs < 1:
        raise ValueError(f"--epochs must be at least 1, got {args.epochs}")
    base = ReverseSettings(seed=args.seed, formulation=args.formulation)
    if args.n_train is not None:
        if args.n_train < 1:
            raise ValueError(f"--n-train must be at least 1, got {args.n_train}")
        base.n_train = args.n_train
    # Flushed line by line, so that "| tee log" shows each run as it ends.
    md = main_sweep(grid, args.out, args.epochs, full_grid=args.grid, base=base,
                    log=lambda msg: print(msg, flush=True))
    try:
        print(Path(md).read_text(), flush=True)
    except BrokenPipeError:  # every run and the report are written: only the showing is lost
        raise ReportLost() from None


# ---- inference -----------------------------------------------------------------------
def cmd_eval(args) -> None:
    if args.seed < 0:
        raise ValueError(f"--seed must be 0 or more, got {args.seed}")
    if args.beam < 1:
        raise ValueError(f"--beam must be at least 1 (1: greedy), got {args.beam}")
    task, model, ck = load_for_inference(args.checkpoint, args.data_dir)
    n = args.n if args.n is not None else getattr(task, "default_eval_n", 1000)
    metrics = task.evaluate_fresh(model, n=n, seed=args.seed, beam=args.beam)
    print(f"{ck}: " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))


def cmd_predict(args) -> None:
    if args.beam < 1:
        raise ValueError(f"--beam must be at least 1 (1: greedy), got {args.beam}")
    task, model, _ = load_for_inference(args.checkpoint, task_name=_TASK_OF_COMMAND.get(args.command))
    lines = _read_inputs(args.sequence)
    for out in task.predict_text(model, lines, beam=args.beam):
        print(out)


def cmd_classify(args) -> None:
    task, model, _ = load_for_inference(args.checkpoint, task_name="sentiment")
    name = task.to_dict()["name"]
    if name != "sentiment":
        raise ValueError(f"classify needs a sentiment checkpoint; {args.checkpoint} is a {name} model "
                         "(use predict)")
    # One text must say something; stdin keeps its empty lines (an empty line out for each).
    if args.text is not None and not task.tokens(args.text):
        raise ValueError("TEXT has no words once cleaned (<br /> tags, HTML entities and spaces removed); "
                         "expected a review with at least one word")
    for out in task.predict_text(model, _read_inputs(args.text)):
        print(out)


def cmd_attention(args) -> None:
    from .plotting import image_suffixes, plot_attention

    suffix, allowed = Path(args.out).suffix.lower(), image_suffixes()
    if suffix not in allowed:
        raise ValueError(f"--out {args.out}: expected an image file name ending in "
                         f"{', '.join(allowed)}, got {suffix or 'no suffix'}")
    task, model, _ = load_for_inference(args.checkpoint)
    if task.to_dict()["name"] == "sentiment" and not task.tokens(args.sequence):
        raise ValueError("SEQUENCE has no words once cleaned (<br /> tags, HTML entities and spaces removed); "
                         "expected a review with at least one word")
    maps, labels, output = task.attention(model, args.sequence)
    path = plot_attention(maps, labels, args.out, title=f"{args.sequence!r} -> {output!r}")
    # A classifier adds the row it pools, which is not one more attention layer.
    n = sum(1 for name in maps if name != "pooled")
    extra = " and the pooled row" if "pooled" in maps else ""
    print(f"output: {output}\nwrote {path} ({n} attention layer{'s' if n != 1 else ''} x {model.cfg.n_heads} "
          f"heads{extra})")


# ---- parser ------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m numpytransformer",
        description="The Transformer in pure NumPy: train, evaluate, predict and inspect.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser("train", help="train a model on a task", description="Train a model on a task.")
    tsub = train.add_subparsers(dest="task", metavar="TASK", required=True)

    rev = tsub.add_parser("reverse", help="sequence reversal (the default quick demo)",
                          description="Train a Transformer to reverse sequences of integer symbols, "
                                      "e.g. '3 5 4 2 1' -> '1 2 4 5 3'.",
                          formatter_class=_Formatter)
    from .tasks.reverse import ReverseSettings

    d = ReverseSettings()
    g = rev.add_argument_group("data and model")
    g.add_argument("--formulation", choices=["seq2seq", "tagger"], default=d.formulation,
                   help="encoder-decoder with BOS/EOS, or encoder-only per-position tagger")
    g.add_argument("--n-symbols", type=int, default=d.n_symbols, help="symbols are 1..N")
    g.add_argument("--min-len", type=int, default=d.min_len)
    g.add_argument("--max-len", type=int, default=d.max_len)
    g.add_argument("--n-train", type=int, default=d.n_train, help="distinct training sequences")
    g.add_argument("--n-val", type=int, default=d.n_val)
    g.add_argument("--n-test", type=int, default=d.n_test)
    g.add_argument("--batch-size", type=int, default=d.batch_size, help="sequences per batch")
    g.add_argument("--d-model", type=int, default=d.d_model)
    g.add_argument("--heads", type=int, default=d.n_heads)
    g.add_argument("--layers", type=int, default=d.n_layers, help="layers in the encoder (and in the decoder)")
    g.add_argument("--d-ff", type=int, default=d.d_ff)
    g.add_argument("--dropout", type=float, default=d.dropout)
    g.add_argument("--norm", choices=["pre", "post"], default="pre" if d.norm_first else "post",
                   help="residual LayerNorm placement: pre-LN trains reversal faster; post-LN is the paper's")
    g.add_argument("--dtype", choices=["float32", "float64"], default=d.dtype)
    g.add_argument("--seed", type=int, default=d.seed)
    from .tasks.reverse import DEFAULT_TRAIN

    _add_train_options(rev, "runs/reverse", {"recipe": DEFAULT_TRAIN})
    rev.set_defaults(func=cmd_train_reverse)

    from .tasks.translate import RECIPES, TranslateSettings

    t = TranslateSettings()
    mt = tsub.add_parser("translate", help="translation: Multi30K de<->en, or embedded number words",
                         description="Train a translation model. With no --dataset it trains on the embedded "
                                     "English->German number-words pair, which needs no download.",
                         formatter_class=_Formatter)
    g = mt.add_argument_group("data and model")
    g.add_argument("--dataset", choices=["numbers", "multi30k"], default=t.dataset)
    g.add_argument("--data-dir", default=None,
                   help="folder holding multi30k/ (default: $NUMPYTRANSFORMER_DATA, else ../shared/data)")
    g.add_argument("--direction", choices=["de-en", "en-de"], default="de-en", help="Multi30K direction")
    g.add_argument("--tokenizer", choices=["word", "bpe"], default=t.tokenizer)
    g.add_argument("--bpe-merges", type=int, default=t.bpe_merges)
    g.add_argument("--cased", action="store_true", help="keep case (default: lower-case, as the tutorials)")
    g.add_argument("--min-freq", type=int, default=t.min_freq, help="rarer tokens become <unk>")
    g.add_argument("--batch-tokens", type=int, default=None,
                   help="token budget of a batch, padding included (default: 3000 for multi30k, 1000 for numbers)")
    g.add_argument("--d-model", type=int, default=t.d_model)
    g.add_argument("--heads", type=int, default=t.n_heads)
    g.add_argument("--layers", type=int, default=t.n_layers)
    g.add_argument("--d-ff", type=int, default=t.d_ff)
    g.add_argument("--dropout", type=float, default=t.dropout)
    g.add_argument("--tie", action="store_true", help="tie the target embedding and the output projection")
    g.add_argument("--norm", choices=["pre", "post"], default="post",
                   help="residual LayerNorm placement: post-LN is the paper's")
    g.add_argument("--dtype", choices=["float32", "float64"], default=t.dtype)
    g.add_argument("--seed", type=int, default=t.seed)
    _add_train_options(mt, "runs/translate", {name: r[0] for name, r in RECIPES.items()})
    mt.set_defaults(func=cmd_train_translate)

    from .tasks.sentiment import SENTIMENT_TRAIN, SentimentSettings

    c = SentimentSettings()
    sa = tsub.add_parser("sentiment", help="IMDB movie reviews: positive or negative",
                         description="Train the encoder-only classifier on the IMDB reviews (25,000 for "
                                     "training and validation; the 25,000 test reviews are scored once, at "
                                     "the end).",
                         formatter_class=_Formatter)
    g = sa.add_argument_group("data and model")
    g.add_argument("--data-dir", default=None,
                   help="folder holding imdb/imdb.csv.gz, or the extracted archive as imdb/aclImdb/ or aclImdb/ "
                        "(default: $NUMPYTRANSFORMER_DATA, else ../shared/data)")
    g.add_argument("--tokenizer", choices=["word", "bpe"], default=c.tokenizer)
    g.add_argument("--bpe-merges", type=int, default=c.bpe_merges)
    g.add_argument("--cased", action="store_true", help="keep case (default: lower-case)")
    g.add_argument("--vocab-size", type=int, default=c.vocab_size, help="largest vocabulary, specials included")
    g.add_argument("--min-freq", type=int, default=c.min_freq, help="rarer tokens become <unk>")
    g.add_argument("--max-tokens", type=int, default=c.max_tokens, help="longer reviews are cut")
    g.add_argument("--truncate", choices=["head+tail", "head"], default=c.truncate,
                   help="keep the first and last halves (reviews often conclude at the end), or the start")
    g.add_argument("--val-fraction", type=float, default=c.val_fraction,
                   help="share of the training reviews held out for validation")
    g.add_argument("--n-train", type=int, default=None,
                   help="use a stratified random subset of about this many training reviews (before the validation "
                        "split; each class gives its rounded share)")
    g.add_argument("--n-test", type=int, default=None,
                   help="score a stratified random subset of about this many test reviews")
    g.add_argument("--batch-tokens", type=int, default=c.batch_tokens, help="token budget of a batch, padding "
                                                                             "included")
    g.add_argument("--max-batch-size", type=int, default=c.max_batch_size, help="most reviews in a batch")
    g.add_argument("--d-model", type=int, default=c.d_model)
    g.add_argument("--heads", type=int, default=c.n_heads)
    g.add_argument("--layers", type=int, default=c.n_layers)
    g.add_argument("--d-ff", type=int, default=c.d_ff)
    g.add_argument("--dropout", type=float, default=c.dropout)
    g.add_argument("--pooling", choices=["mean", "first"], default=c.pooling,
                   help="mean of the token vectors, or the vector of a <bos> put in front")
    g.add_argument("--norm", choices=["pre", "post"], default="post",
                   help="residual LayerNorm placement: post-LN is the paper's")
    g.add_argument("--dtype", choices=["float32", "float64"], default=c.dtype)
    g.add_argument("--seed", type=int, default=c.seed)
    _add_train_options(sa, "runs/sentiment", {"recipe": SENTIMENT_TRAIN})
    sa.set_defaults(func=cmd_train_sentiment)

    ev = sub.add_parser("eval", aliases=["evaluate"], help="metrics of a checkpoint on held-out data",
                        description="Evaluate a checkpoint on held-out data (for reversal: freshly generated "
                                    "sequences that were not trained on).")
    ev.add_argument("--checkpoint", required=True, help="a checkpoint directory or a run directory")
    ev.add_argument("--n", type=int, default=None,
                    help="how many held-out examples (default 1000; sentiment: the whole test split)")
    ev.add_argument("--seed", type=int, default=1, help="seed of the fresh sample (default %(default)s)")
    ev.add_argument("--beam", type=int, default=1, help="beam size; 1 is greedy decoding (default %(default)s)")
    ev.add_argument("--data-dir", default=None,
                    help="data folder for tasks with real data (translation, sentiment)")
    ev.set_defaults(func=cmd_eval)

    # predict and translate are one command under two names, each with its own example.
    for name, help_text, description, example in (
            ("predict", "run a checkpoint on an input",
             "Predict the output for one input, or for each line of standard input.", '"3 5 4 2 1"'),
            ("translate", "translate with a checkpoint",
             "Translate one sentence, or each line of standard input (an empty line gives an empty line).",
             '"Ein Mann fährt Fahrrad."')):
        pr = sub.add_parser(name, help=help_text, description=description)
        pr.add_argument("--checkpoint", required=True)
        pr.add_argument("sequence", nargs="?", help=f"e.g. {example}; omitted: read one per line from stdin")
        pr.add_argument("--beam", type=int, default=1, help="beam size; 1 is greedy (default %(default)s)")
        pr.set_defaults(func=cmd_predict)

    cl = sub.add_parser("classify", help="sentiment of a review with a checkpoint",
                        description="Print the label and its probability (e.g. 'positive 0.93') for one "
                                    "text, or for each line of standard input (an empty line gives an "
                                    "empty line, so the output stays aligned with the input).")
    cl.add_argument("--checkpoint", required=True)
    cl.add_argument("text", nargs="?", metavar="TEXT",
                    help='a review, e.g. "This film was a delight."; omitted: read one review a line from stdin')
    cl.set_defaults(func=cmd_classify)

    at = sub.add_parser("attention", help="heatmaps of every layer and head",
                        description="Save attention heatmaps of every layer and head for one input as a PNG.")
    at.add_argument("--checkpoint", required=True)
    at.add_argument("sequence")
    at.add_argument("--out", default="attention.png", help="PNG path (default %(default)s)")
    at.set_defaults(func=cmd_attention)

    sw = sub.add_parser("sweep", help="ablation on reversal: which design choice matters most",
                        description="Train one reversal model per setting, varying one factor at a time "
                                    "around the default model (or every combination with --grid), and "
                                    "write sweep.md, sweep.csv, sweep.json and sweep.png into --out.",
                        formatter_class=_Formatter)
    sw.add_argument("--layers", type=int, nargs="+", default=None, help="encoder and decoder depths")
    sw.add_argument("--heads", type=int, nargs="+", default=None, help="attention heads")
    sw.add_argument("--d-model", type=int, nargs="+", default=None, help="model widths")
    sw.add_argument("--warmup", type=int, nargs="+", default=None, help="Noam warm-up updates")
    sw.add_argument("--epochs", type=int, default=3,
                    help="epochs of every run (the same number of updates for all; default %(default)s)")
    sw.add_argument("--grid", action="store_true", help="every combination instead of one factor at a time")
    sw.add_argument("--formulation", choices=["seq2seq", "tagger"], default="seq2seq",
                    help="encoder-decoder, or encoder-only per-position tagger (default %(default)s)")
    sw.add_argument("--n-train", type=int, default=None, help="training sequences (default: the task's)")
    sw.add_argument("--seed", type=int, default=0)
    sw.add_argument("--out", default="runs/sweep", help="folder for the runs and the report (default %(default)s)")
    sw.set_defaults(func=cmd_sweep)
    return parser


def _to_devnull(stream) -> None:
    """Point a closed stream's file at /dev/null, so that Python's final flush does not fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(null, stream.fileno())
    except (OSError, ValueError):  # not a file (e.g. captured in a test)
        pass
    finally:
        os.close(null)


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except BrokenPipeError as e:  # the reader went away (e.g. "| head"); caught before OSError, its base
        _to_devnull(sys.stdout)
        # "predict ... | head -n 1" got what it asked for, and training that had finished
        # saved everything before its closing report: neither is an error.
        if args.command not in ("train", "sweep") or isinstance(e, ReportLost):
            return 0
        # A run cut short is; the trainer saved last/ on its way out, if it had begun.
        if args.command == "sweep":
            then = "run the same command again to continue (finished runs are kept)"
        elif (Path(args.out) / "last" / "checkpoint.json").is_file():
            then = f"continue with --resume --out {args.out}"
        else:
            then = "nothing was saved"
        try:
            print(f"error: {'the sweep' if args.command == 'sweep' else 'training'} stopped because its output "
                  f"was closed; {then}", file=sys.stderr)
        except OSError:  # stderr went into the same closed pipe ("2>&1 | head")
            _to_devnull(sys.stderr)
        return 141  # 128 + SIGPIPE, as the shell reports a command killed by a closed pipe
    except (ValueError, OSError, FloatingPointError) as e:  # CheckpointError is a ValueError
        if os.environ.get("NUMPYTRANSFORMER_DEBUG"):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
