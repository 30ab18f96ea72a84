"""Command line: ``python -m numpytransformer COMMAND ...`` (``--help`` on each command).

``train TASK`` takes the flags declared on the fields of the task's data settings,
:class:`ModelSettings` and :class:`TrainConfig` (unset flags take the task's recipe). The other commands load a checkpoint
and ask its task to evaluate, predict, draw or generate.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import numpy as np

from .training.checkpoint import (
    CheckpointError,
    average_checkpoints,
    load_checkpoint,
    read_checkpoint_meta,
    save_checkpoint,
)
from .nn.config import SEED_MAX
from .nn.ensemble import Ensemble
from .errors import NumpyTransformerError
from .files import atomic_write
from .nn.models import Transformer, TransformerClassifier
from .training.parallel import first_rank_speaks, launched_ranks, print_traceback_and_stop, stop_run, world
from .training.settings import ModelSettings, add_flags, flag_of, given_values, whole_number
from .tasks.base import TASKS, task_class, task_from_dict
from .tasks.reverse import ReversalTask, ReverseData
from .pretrained.convert import CONVERTED, refusal
from .training.trainer import LATER_FIELDS, TrainConfig, Trainer, kept_epochs

__all__ = ["main", "build_parser", "load_for_inference", "load_ensemble"]


def read_stdin() -> str:
    """Standard input with Windows line ends as ``\n`` and without a byte-order mark."""
    return sys.stdin.read().replace("\r\n", "\n").removeprefix("\ufeff")


def resolve_checkpoint(path: str) -> Path:
    """A checkpoint directory, or a run directory (then its ``average/``, else ``best/``, else ``last/``)."""
    p = Path(path)
    p = p.parent if p.name == "checkpoint.json" and p.is_file() else p
    for ck in (p, p / "average", p / "best", p / "last"):
        if (ck / "checkpoint.json").is_file():
            return ck
    if not p.exists():
        raise CheckpointError(f"checkpoint {path!r} does not exist (train one first: "
                              f"python -m numpytransformer train TASK --out {path})")
    raise CheckpointError(f"{path!r} holds no checkpoint (no checkpoint.json in it, nor in average/, best/ or last/)")


def _read_task(ck: Path, data_dir: Optional[str] = None, for_resume: bool = False):
    """A checkpoint's document and its task; a bad task field names the file."""
    doc = read_checkpoint_meta(ck, for_resume=for_resume)
    if doc["task"].get("name") == CONVERTED:  # weights carried in from a Hugging Face directory, no task
        raise CheckpointError(refusal(ck, doc))
    try:
        return doc, task_from_dict(doc["task"], data_dir)
    except CheckpointError:
        raise
    except NumpyTransformerError as e:
        raise CheckpointError(f"{ck / 'checkpoint.json'}: field task: {e}") from None


def _build_model(ck: Path, task):
    """The task's model for the checkpoint ``ck``; settings an earlier version accepted name the file."""
    try:
        return task.build_model()
    except NumpyTransformerError as e:
        raise CheckpointError(f"{ck / 'checkpoint.json'}: this version refuses its model settings ({e})") from None


def load_for_inference(path: str, data_dir: Optional[str] = None, need: Optional[str] = None, beam: int = 1):
    """``(task, model, checkpoint path)``, the model in eval mode; ``need`` names the task the
    command requires (``translate`` needs a translation checkpoint), and a ``beam`` above 1
    needs a task that searches its output."""
    ck = resolve_checkpoint(path)
    doc, task = _read_task(ck, data_dir)
    if need is not None and task.name != need:
        raise NumpyTransformerError(f"this command needs a {need} checkpoint; {path} holds a {task.name} model "
                                    f"(use {task.predict_command})")
    if beam > 1 and not task.searches:
        raise NumpyTransformerError(f"--beam {beam}: the {task.name} model does not search its output; "
                                    "leave --beam out")
    model = _build_model(ck, task)
    load_checkpoint(ck, model, doc=doc)
    model.eval()
    return task, model, ck


def _trained_on(task, ck: Path) -> dict:
    """The digest of a checkpoint's training data; generated data records none, and its seed draws it."""
    return read_checkpoint_meta(ck)["data"] or {"seed": task.model.seed}


def load_ensemble(paths: List[str], data_dir: Optional[str] = None, need: Optional[str] = None, beam: int = 1):
    """``(task, model, checkpoint path)`` for one checkpoint, as :func:`load_for_inference`; for several,
    an :class:`~numpytransformer.nn.ensemble.Ensemble` of their models, which must share the task, its data
    settings, its vocabulary and the data they trained on (the first checkpoint's task encodes the inputs)."""
    task, model, ck = load_for_inference(paths[0], data_dir, need, beam)
    if len(paths) == 1:
        return task, model, ck
    if not isinstance(model, (Transformer, TransformerClassifier)):
        raise NumpyTransformerError(f"--checkpoint: an ensemble is of encoder-decoder models or of classifiers; "
                                    f"{paths[0]} holds a {task.name} model ({type(model).__name__}): give one")
    models, data = [model], _trained_on(task, ck)
    for path in paths[1:]:
        other, member, other_ck = load_for_inference(path, data_dir, need, beam)
        same_task = other.name == task.name
        differ = [f.name for f in dataclasses.fields(task.data)
                  if same_task and getattr(task.data, f.name) != getattr(other.data, f.name)]
        checks = (("task", same_task), (f"data settings ({', '.join(differ)})", not differ),
                  ("vocabulary", other.state == task.state),
                  ("training data (another seed's draw?)", _trained_on(other, other_ck) == data))
        for what, same in checks:
            if not same:
                raise NumpyTransformerError(f"--checkpoint {path}: not the same {what} as {paths[0]}; the members of "
                                            "an ensemble share their task, data settings, vocabulary and training data")
        models.append(member)
    return task, Ensemble(models).eval(), f"{ck} and {len(paths) - 1} more"


def _fmt(metrics: dict) -> str:
    """Metrics on one line; exact match per length (``exact_len7``) on a second."""
    main = " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()
                    if not k.startswith("exact_len"))
    lengths = "  ".join(f"{k[9:]}: {100 * v:.1f}%" for k, v in metrics.items() if k.startswith("exact_len"))
    return main + (f"\nexact match by length  {lengths}" if lengths else "")


# ---- train --------------------------------------------------------------------------------
def _check_out(args) -> None:
    """Refuse an unusable --out before any data is read."""
    out = Path(args.out)
    named = f"--out {args.out}" + (" (the default)" if args.out == f"runs/{args.task}" else "")
    has_run = (out / "last" / "checkpoint.json").is_file()
    if out.exists() and not out.is_dir():
        raise NumpyTransformerError(f"--out {args.out} is a file; expected a run directory (new or existing)")
    if args.resume and not has_run:
        raise NumpyTransformerError(f"--resume: {named} holds no run to continue (no last/checkpoint.json)")
    if not args.resume and has_run:
        raise NumpyTransformerError(f"{named} already holds a run: pass --resume to continue it, or choose another --out")
    # A new run may overwrite what a run killed in its first save left (best/, a last/ without its
    # checkpoint.json), never anything else: a run deletes a stale average/ and reads resolve order.
    others = [p.name for p in out.iterdir() if not p.name.startswith(".") and p.name not in ("best", "last")] \
        if out.is_dir() and not args.resume else []
    if others:
        raise NumpyTransformerError(f"{named} holds files but no run ({', '.join(sorted(others)[:3])}): choose a new "
                                    "or empty directory")
    nearest = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not os.access(nearest, os.W_OK) or not nearest.is_dir():
        raise NumpyTransformerError(f"--out {args.out}: cannot write a run there; choose another --out")


def cmd_train(args) -> None:
    comm = world()  # under mpiexec -n N: train data-parallel on N ranks
    comm.only_writer_prints()
    cls = task_class(args.task)
    _check_out(args)
    given_train = given_values(args, TrainConfig)
    if args.resume:
        ck = Path(args.out) / "last"
        doc, task = _read_task(ck, args.data_dir, for_resume=True)
        if task.name != cls.name:
            raise NumpyTransformerError(f"--resume: {args.out} holds a {task.name} run, not a {cls.name} run")
        changed = [flag_of(c, k) for c, now in ((cls.Data, task.data), (ModelSettings, task.model))
                   for k, v in given_values(args, c).items() if getattr(now, k) != v]
        if changed:
            raise NumpyTransformerError(f"--resume continues the run as it was; only training options can change "
                                        f"(not {', '.join(changed)})")
        saved = {**LATER_FIELDS, **doc["train"]}  # an older run's checkpoint lacks the later fields
        missing = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in saved]
        try:
            if missing:  # no silent defaults
                raise TypeError(f"{', '.join(missing)} missing")
            train_cfg = dataclasses.replace(TrainConfig(**saved), **given_train)
        except (TypeError, NumpyTransformerError) as e:
            raise CheckpointError(f"{ck / 'checkpoint.json'}: field train does not fit ({e})") from None
        if doc["epoch"] >= train_cfg.epochs:
            raise NumpyTransformerError(f"--resume: {ck} holds epoch {doc['epoch']}, already at --epochs "
                                        f"{train_cfg.epochs}: nothing to train; raise --epochs to continue")
    else:
        data = cls.Data(**given_values(args, cls.Data))
        model_default, train_default = cls.recipe(data)
        model_settings = dataclasses.replace(model_default, **given_values(args, ModelSettings))
        train_cfg = dataclasses.replace(train_default, **given_train)
        print(f"reading the {cls.name} data ...", flush=True)
        task = cls(data, model_settings, data_dir=args.data_dir)
    model = task.build_model()
    trainer = Trainer(model, task, train_cfg, args.out, comm=comm)
    if args.resume:
        trainer.resume(doc)
    for title, settings in (("data", task.data), ("model", task.model), ("training", train_cfg)):
        print(f"{title}: " + ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(settings).items()), flush=True)
    ranks = f" on {comm.size} ranks" if comm.size > 1 else ""
    print(f"training {type(model).__name__} with {model.num_parameters():,} parameters ({task.name}){ranks}; "
          f"writing to {args.out}", flush=True)
    if not args.resume:  # every rank pretrains alike (same seed, same data); then all take rank 0's weights
        task.pretrain(model, train_cfg)
        comm.bcast_arrays(model.parameters())
    start, first = time.perf_counter(), trainer.optimizer.t
    with comm.training():
        trainer.fit()
    print(f"trained {trainer.optimizer.t - first} updates in {time.perf_counter() - start:.1f} s", flush=True)
    if task.shares_test:  # every rank tests its share, once rank 0 has written the checkpoint and names it
        ck = Path(comm.bcast(str(resolve_checkpoint(args.out)) if comm.is_writer else None))
    elif comm.is_writer:  # the final test runs once, on rank 0
        ck = resolve_checkpoint(args.out)
    else:
        return
    load_checkpoint(ck, model)
    model.eval()
    start = time.perf_counter()
    report = task.test_report(model, comm) if task.shares_test else task.test_report(model)
    if not comm.is_writer:
        return
    print(f"final (test, {ck.name} checkpoint): {_fmt(report)}\ntested in {time.perf_counter() - start:.1f} s")
    prompt = "--prompt " if task.predict_command == "generate" else ""
    print(f"checkpoint: {ck}   try: python -m numpytransformer {task.predict_command} --checkpoint {args.out} "
          f"{prompt}\"{task.example_input()}\"")


# ---- using a checkpoint ---------------------------------------------------------------------
@contextlib.contextmanager
def finite_outputs(ck):
    """Run a loaded model whose every step must stay finite. Weights that pass the load's checks
    but still overflow the forward pass stop the command with one line, instead of the padding
    (or the NaN metrics) that non-finite logits would give."""
    with np.errstate(over="raise", invalid="raise"):
        try:
            yield
        except FloatingPointError:
            raise CheckpointError(f"{ck}: the model's output is not finite: its weights are damaged; use "
                                  "another checkpoint or train again") from None


def cmd_eval(args) -> None:
    task, model, ck = load_ensemble(args.checkpoint, args.data_dir, beam=args.beam)
    with finite_outputs(ck):
        metrics = task.evaluate(model, n=args.n, seed=args.seed, beam=args.beam)
    print(f"{ck}: {_fmt(metrics)}")


def cmd_predict(args) -> None:
    """``predict``, ``translate`` and ``classify``: one given text, or each line of stdin."""
    task, model, ck = load_ensemble(args.checkpoint, need=args.need, beam=args.beam)
    if args.text is not None:
        task.check_input(args.text)  # stdin keeps its empty lines; one given text must hold something
    lines = [args.text] if args.text is not None else read_stdin().split("\n")
    if args.text is None and lines[-1] == "":
        lines.pop()  # the last line's end, not an empty line after it
    with finite_outputs(ck):
        outputs = task.predict(model, lines, beam=args.beam)
    for out in outputs:
        print(out)


def cmd_generate(args) -> None:
    task, model, _ = load_for_inference(args.checkpoint)
    prompt = args.prompt if args.prompt is not None else read_stdin()
    print(task.generate(model, prompt, tokens=args.tokens, temperature=args.temperature, top_k=args.top_k,
                        top_p=args.top_p, seed=args.seed, min_p=args.min_p))


def cmd_attention(args) -> None:
    from .training.plotting import image_suffixes, plot_attention

    suffix = Path(args.out).suffix.lower()
    if suffix not in image_suffixes():
        raise NumpyTransformerError(f"--out {args.out}: expected an image file name ending in "
                                    f"{', '.join(image_suffixes())}, got {suffix or 'no suffix'}")
    task, model, _ = load_for_inference(args.checkpoint)
    maps, labels, output = task.attention(model, args.text)
    path = plot_attention(maps, labels, args.out, title=f"{args.text!r} -> {output!r}")
    n = sum(1 for name in maps if name != "pooled")
    print(f"output: {output}\nwrote {path} ({n} attention layer{'s' * (n != 1)} x {model.cfg.n_heads} heads)")


def cmd_average(args) -> None:
    if Path(args.out).exists():
        raise NumpyTransformerError(f"--out {args.out} already exists; choose a new directory")
    paths = []
    for p in map(Path, args.checkpoints):  # a checkpoint, a folder of them, or a run (its epochs/)
        p = p / "epochs" if (p / "last" / "checkpoint.json").is_file() else p
        if (p / "checkpoint.json").is_file():
            paths.append(p)
        else:  # a run's kept epochs in numeric order, else the folder's checkpoints by name
            paths += kept_epochs(p) or sorted(ck.parent for ck in p.glob("*/checkpoint.json"))
    paths = paths[-args.last:]
    if not paths:
        raise CheckpointError(f"no checkpoints in {', '.join(args.checkpoints)}")
    model = _build_model(paths[0], _read_task(paths[0])[1])
    doc = average_checkpoints(paths, model)
    meta = {k: doc[k] for k in ("task", "data", "train", "step", "epoch", "best_score", "history")}
    save_checkpoint(args.out, model, meta)
    print(f"averaged {len(paths)} checkpoints ({', '.join(p.name for p in paths)}) into {args.out}")


def cmd_sweep(args) -> None:
    from .sweep import DEFAULT_GRID, FACTORS, default_sweep_train, run_sweep, sweep_settings, write_report

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise NumpyTransformerError(f"--out {args.out} is a file; expected a folder for the sweep's runs and report")
    grid = {k: getattr(args, k) for k in FACTORS if getattr(args, k) is not None} or DEFAULT_GRID
    data = ReverseData(formulation=args.formulation, n_train=args.n_train)
    model = dataclasses.replace(ReversalTask.recipe(data)[0], seed=args.seed)
    runs = sweep_settings(data, model, default_sweep_train(args.epochs), grid, full_grid=args.grid)
    print(f"{len(runs)} runs of {args.epochs} epochs each, writing to {args.out}", flush=True)
    records = run_sweep(runs, args.out, log=lambda msg: print(msg, flush=True))
    md = write_report(records, args.out, title=f"Reversal ablation ({args.formulation}, {args.epochs} epochs a run)")
    print(md.read_text(), end="")


# ---- Hugging Face models ------------------------------------------------------------------------
def cmd_convert(args) -> None:
    from .pretrained.convert import to_checkpoint

    ck = to_checkpoint(args.directory, args.out, args.dtype)
    print(f"wrote {ck} (a checkpoint of {args.directory}); back to the Hugging Face layout with: "
          f"python -m numpytransformer export {args.out} --out DIR")


def cmd_export(args) -> None:
    from .pretrained.convert import export_checkpoint

    out = export_checkpoint(resolve_checkpoint(args.checkpoint), args.out, overwrite=args.overwrite)
    print(f"wrote {out} (config.json, model.safetensors and the tokenizer's files)")


def _check_npy_out(path: str) -> None:
    """Refuse an --out the embeddings cannot be written to, before any work."""
    out = Path(path)
    if out.suffix != ".npy":
        raise NumpyTransformerError(f"--out {path}: expected a file name ending in .npy")
    if out.is_dir():
        raise NumpyTransformerError(f"--out {path} is a directory; expected a .npy file name")
    nearest = next(p for p in (out.parent, *out.parent.absolute().parents) if p.exists())
    if not nearest.is_dir() or not os.access(nearest, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise NumpyTransformerError(f"--out {path}: cannot write there; choose another --out")


def cmd_embed(args) -> None:
    import io

    from .pretrained.sentence import SentenceEncoder, check_texts

    comm = world()  # under mpiexec -n N: each rank embeds every N-th batch
    comm.only_writer_prints()
    if args.out is None and args.query is None:
        raise NumpyTransformerError("embed needs --out X.npy (the embeddings) or --query TEXT (the nearest sentences)")
    if args.out is not None:
        _check_npy_out(args.out)
    if args.query is not None and not args.query.strip():
        raise NumpyTransformerError("--query is empty: give some text")
    texts = read_stdin().split("\n")
    if texts[-1] == "":
        texts.pop()  # the last line's end, not an empty line after it
    check_texts(texts)
    encoder = SentenceEncoder.from_directory(args.model)
    vectors = encoder.embed(texts + ([args.query] if args.query is not None else []), args.batch_size, comm)
    if args.query is not None:
        vectors, q = vectors[:-1], vectors[-1]
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        scores = unit @ (q / max(float(np.linalg.norm(q)), 1e-12))  # cosine similarity
        for i in np.argsort(-scores, kind="stable")[:args.top]:
            print(f"{scores[i]:.4f}  {texts[i]}")
    if args.out is not None and comm.is_writer:
        buf = io.BytesIO()
        np.save(buf, vectors, allow_pickle=False)
        atomic_write(args.out, buf.getvalue())
        print(f"wrote {args.out}: {vectors.shape[0]} x {vectors.shape[1]} float32 ({encoder.pooling} pooling"
              f"{', normalised' if encoder.normalize else ''}, at most {encoder.max_length} pieces a sentence)")


# ---- parser ---------------------------------------------------------------------------------
SEED = whole_number(0, SEED_MAX)
POSITIVE = whole_number(1, 10 ** 6)

# Arguments several commands take.
CHECKPOINT = dict(required=True, help="a checkpoint directory or a run directory")
CHECKPOINTS = dict(required=True, action="append", help="a checkpoint directory or a run directory; given more than "
                   "once (encoder-decoder models or classifiers trained on the same data and vocabulary), the "
                   "models predict as an ensemble that averages their probabilities")
BEAM = dict(type=whole_number(1, 1000), default=1, help="beam size, up to 1000; 1 is greedy (default %(default)s)")
DATA_DIR = dict(default=None, help="folder of the real data sets (default: $NUMPYTRANSFORMER_DATA, "
                                   "else ../shared/data)")


def _command(sub, name: str, func, help: str, **kw) -> argparse.ArgumentParser:
    """A sub-command that runs ``func(args)``."""
    p = sub.add_parser(name, help=help, **kw)
    p.set_defaults(func=func)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m numpytransformer",
                                     description="The Transformer in pure NumPy: train, evaluate, predict and inspect.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = sub.add_parser("train", help="train a model on a task", description="Train a model on a task.")
    tsub = train.add_subparsers(dest="task", metavar="TASK", required=True)
    for name in TASKS:
        cls = task_class(name)
        p = _command(tsub, name, cmd_train, cls.summary, description=f"{cls.__doc__.splitlines()[0]} Unset options "
                     "take the task's recipe; the defaults shown are the default data settings' (a data "
                     "default that depends on the other data settings is shown as its rule; every run prints "
                     "the settings it uses). A recipe fixes its epochs, not its minutes: a slower machine takes "
                     "longer for the same result (--max-minutes sets a limit of your own).")
        model, train_cfg = cls.recipe(cls.Data())
        add_flags(p, cls.Data, cls.Data(), "data")
        add_flags(p, ModelSettings, model, "model")
        add_flags(p, TrainConfig, train_cfg, "training")
        p.add_argument("--data-dir", **DATA_DIR)
        p.add_argument("--out", default=f"runs/{name}", help="run directory: best/, last/, history.json, curves.png (and "
                       "epochs/, average/ with --keep-epochs)")
        p.add_argument("--resume", action="store_true", help="continue the run in --out from its last epoch")

    ev = _command(sub, "eval", cmd_eval, "metrics of a checkpoint on held-out data", aliases=["evaluate"])
    ev.add_argument("--checkpoint", **CHECKPOINTS)
    ev.add_argument("--n", type=whole_number(0, 10 ** 7, "0 (all) or a count up to 10000000"), default=0,
                    help="how many held-out examples (default: the task's; 0: all of a test split, or the "
                         "default count of generated ones)")
    ev.add_argument("--seed", type=SEED, default=1, help="seed of the fresh sample (default %(default)s)")
    ev.add_argument("--beam", **BEAM)
    ev.add_argument("--data-dir", **DATA_DIR)

    for name, need, text, example in (
            ("predict", None, "run a checkpoint on an input", '"3 5 4 2 1"'),
            ("translate", "translate", "translate with a checkpoint", '"Ein Mann fährt Fahrrad."'),
            ("classify", "sentiment", "sentiment of a review with a checkpoint", '"This film was a delight."')):
        p = _command(sub, name, cmd_predict, text, description=f"{text[0].upper()}{text[1:]}: one input, or each "
                     "line of standard input (an empty line gives an empty line).")
        p.add_argument("--checkpoint", **CHECKPOINTS)
        p.add_argument("text", nargs="?", metavar="TEXT", help=f"e.g. {example}; omitted: one per line from stdin")
        p.add_argument("--beam", **BEAM)
        p.set_defaults(need=need)

    at = _command(sub, "attention", cmd_attention, "heatmaps of every layer and head for one input")
    at.add_argument("--checkpoint", **CHECKPOINT)
    at.add_argument("text", metavar="TEXT")
    at.add_argument("--out", default="attention.png", help="image path (default %(default)s)")

    ge = _command(sub, "generate", cmd_generate, "sample text from a language model")
    ge.add_argument("--checkpoint", **CHECKPOINT)
    ge.add_argument("--prompt", default=None, help="text to continue (omitted: read from stdin)")
    ge.add_argument("--tokens", type=POSITIVE, default=500, help="tokens to generate (default %(default)s)")
    ge.add_argument("--temperature", type=float, default=0.8, help="softmax temperature (default %(default)s)")
    ge.add_argument("--top-k", type=POSITIVE, default=None, help="sample from the k most likely tokens")
    ge.add_argument("--top-p", type=float, default=None, help="sample from the smallest set of mass p (nucleus)")
    ge.add_argument("--min-p", type=float, default=None, help="sample from the tokens at least p times as likely as "
                    "the most likely one (min-p)")
    ge.add_argument("--seed", type=SEED, default=0, help="seed of the sampling (default %(default)s)")

    av = _command(sub, "average", cmd_average, "average the weights of the last epochs of a run", description=(
        "Average checkpoints of one run (train with --keep-epochs N, then average OUT/epochs) into a new checkpoint."))
    av.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                    help="checkpoint directories, a folder of them, or a run directory (its epochs/)")
    av.add_argument("--last", type=POSITIVE, default=1000, help="only the last N of them (epochs in numeric order)")
    av.add_argument("--out", required=True, help="the new checkpoint directory")

    sw = _command(sub, "sweep", cmd_sweep, "ablation on reversal: which design choice matters most", description=(
        "Train one reversal model per setting, one factor at a time around the default (or every combination "
        "with --grid); write sweep.md/.csv/.json/.png into --out."))
    for flag, text in (("--layers", "encoder and decoder depths"), ("--heads", "attention heads"),
                       ("--d-model", "model widths"), ("--warmup", "Noam warm-up updates")):
        sw.add_argument(flag, type=POSITIVE, nargs="+", default=None, help=text)
    sw.add_argument("--epochs", type=POSITIVE, default=3, help="epochs of every run (default %(default)s)")
    sw.add_argument("--grid", action="store_true", help="every combination instead of one factor at a time")
    sw.add_argument("--formulation", choices=["seq2seq", "tagger"], default="seq2seq")
    sw.add_argument("--n-train", type=POSITIVE, default=ReverseData().n_train, metavar="N",
                    help="training sequences (default %(default)s)")
    sw.add_argument("--seed", type=SEED, default=0, help="seed of every run's model (default %(default)s)")
    sw.add_argument("--out", default="runs/sweep", help="folder for the runs and the report (default %(default)s)")

    co = _command(sub, "convert", cmd_convert, "a Hugging Face directory (BERT, GPT-2) as a checkpoint", description=(
        "Write a Hugging Face directory (config.json, model.safetensors) as a checkpoint in RUN/last/, its "
        "tokenizer's files kept beside it. It holds no task of this library (generate, eval and train refuse "
        "it); export writes it back."))
    co.add_argument("directory", metavar="DIR", help="a Hugging Face model directory")
    co.add_argument("--out", required=True, help="the new run directory")
    co.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="floating-point type of the weights (default %(default)s)")

    ex = _command(sub, "export", cmd_export, "a checkpoint as a Hugging Face directory", description=(
        "Write a checkpoint of an encoder (as BERT) or a language model (as GPT-2) as a Hugging Face directory: "
        "config.json, model.safetensors and the tokenizer's files a converted checkpoint kept."))
    ex.add_argument("checkpoint", metavar="RUN", help="a checkpoint directory or a run directory")
    ex.add_argument("--out", required=True, help="the Hugging Face directory to write")
    ex.add_argument("--overwrite", action="store_true", help="replace --out if it holds files")

    em = _command(sub, "embed", cmd_embed, "sentence embeddings with a sentence-transformers model", description=(
        "Embed each line of standard input with a sentence-transformers directory (its pooling, normalisation "
        "and longest input): --out writes them as float32 (N, D); --query prints the nearest lines with their "
        "cosine similarity, best first. Under mpiexec -n N the batches are shared among N ranks."))
    em.add_argument("--model", required=True, metavar="DIR", help="a sentence-transformers model directory")
    em.add_argument("--out", default=None, help="the .npy file of the embeddings")
    em.add_argument("--query", default=None, metavar="TEXT", help="print the lines nearest to TEXT")
    em.add_argument("--top", type=POSITIVE, default=5, help="how many lines --query prints (default %(default)s)")
    em.add_argument("--batch-size", type=whole_number(1, 4096), default=32,
                    help="sentences a forward pass, neighbours in length (default %(default)s)")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    with first_rank_speaks():  # under mpiexec every rank meets the same parse error (or --help)
        args = build_parser().parse_args(argv)
    if launched_ranks() > 1 and args.command not in ("train", "embed"):  # each rank would run it, and write
        return stop_run(f"error: {args.command} runs in one process, not on {launched_ranks()} ranks: start it "
                        "without mpiexec (only train and embed run on several)", 2)
    try:
        return _run(args)
    except Exception:  # under mpiexec: a rank that stops alone would leave the others waiting
        if launched_ranks() > 1 and not os.environ.get("NUMPYTRANSFORMER_DEBUG"):
            return print_traceback_and_stop()
        raise


def _run(args) -> int:
    """Run the command; an expected error is one line on stderr and status 2 (on every rank)."""
    try:
        args.func(args)
    except BrokenPipeError:  # the reader went away ("... | head"): what was saved stays saved
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the final flush is quiet
        except (OSError, ValueError):
            pass
        if launched_ranks() > 1:  # rank 0 alone prints: the others would wait in the next allreduce for ever
            return stop_run("error: the output was closed (broken pipe)", 141, alone=True)
        return 141
    except (NumpyTransformerError, OSError, FloatingPointError) as e:
        if os.environ.get("NUMPYTRANSFORMER_DEBUG"):
            raise
        # A diverged loss or validation: every rank computed it from the same sums.
        return stop_run(f"error: {e}", 2, alone=False if isinstance(e, FloatingPointError) else None)
    except KeyboardInterrupt:
        return stop_run("interrupted", 130)
    return 0
