"""Run one exercise's functions on the trusted cases and record what they return.

The grader runs this file by path, from its own install, in a separate process::

    python -I probe.py STUDENT_ROOT EXERCISE_ID OUTPUTS.npz STATUS.json SALT [SWAPS.json]

That process imports the student's ``numpytransformer`` (from STUDENT_ROOT) and nothing of
the grader's but this file, ``trusted.py`` and ``gradcheck.py`` (its tolerances) beside it
(copied by the grader into a temporary folder first). SALT picks the cases (see ``trusted.SALT``). It only *records*: arrays go to
an ``.npz`` (read back without pickle), how the run ended to a small JSON file. Every
judgement is made afterwards in the grading process, which never imports the student's
code, so whatever that code changes at import (NumPy, the grader's helpers, its own
``gradcheck``) can change only its own answers.

SWAPS.json, written by the teacher's grader, holds the reference code of every exercise the
graded one depends on (the functions of its ``needs``, cut from the teacher's library). They
are put in place of the student's versions right after the import (:func:`swap_in`), so a bug
in one exercise costs that exercise alone, not every check that runs it.

The grading process also calls :func:`collect` on its own library, to get the values
the student's are compared with.
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import sys
import traceback
import types
from pathlib import Path

import numpy as np

try:
    from course import trusted
except ImportError:  # run by path: load trusted.py from beside this file, never from the student's tree
    _spec = importlib.util.spec_from_file_location("_numpytransformer_grader_trusted",
                                                   Path(__file__).resolve().parent / "trusted.py")
    trusted = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(trusted)


def put(out: dict, key: str, value) -> None:
    """Store ``value`` as a plain array under ``key``; None and non-numbers leave a marker instead."""
    if value is None:
        out[key + "#none"] = np.array(True)
        return
    if isinstance(value, (tuple, list)) and not all(np.isscalar(v) for v in value):
        out[key + "#type"] = np.array(f"a {type(value).__name__} of {len(value)}")
        return
    try:
        a = np.asarray(value)
    except Exception:  # something NumPy cannot make an array of
        a = None
    if a is None or a.dtype.kind not in "biuf":
        out[key + "#type"] = np.array(type(value).__name__ if a is None else f"an array of dtype {a.dtype}")
        return
    out[key] = np.array(a, copy=True)


def _copies(d: dict) -> dict:
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def pair_prefix(j: int) -> str:
    """Keys of the j-th (forward, backward) pair of an exercise: "", then "f1.", ..."""
    return f"f{j}." if j else ""


@contextlib.contextmanager
def _refused(function, message: str):
    """``function`` raises ``RuntimeError(message)`` while the block runs, however it is reached: by its
    name, an alias, an import in another module, a default argument or a closure, and so does every other
    function made from its code object. Their code is swapped (a function's ``__code__`` may be replaced
    by one with as many free variables: none here). A copy of its source is another function: not caught."""
    code = compile(f"def refused(*args, **kwargs):\n    raise RuntimeError({message!r})\n", "<grader>", "exec")
    stand_in = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    kept = function.__code__
    if kept.co_freevars:  # a wrapped or nested function: its code cannot be swapped for one without them
        raise RuntimeError(f"the grader runs {function.__qualname__} as the library defines it, a plain "
                           "function; keep it one (no decorator or wrapper)")
    sharing = [f for f in gc.get_referrers(kept) if isinstance(f, types.FunctionType) and f.__code__ is kept]
    for f in sharing:
        f.__code__ = stand_in
    try:
        yield
    finally:
        for f in sharing:
            f.__code__ = kept


def _refusal(forward: str, backward: str) -> str:
    return (f"{backward} called {forward}: a backward works from its cache and dout; running the forward "
            "again (a numerical gradient) is not a backward")


def probe_pair(lib, module: str, names, exercise_id: str) -> dict:
    """Each case through the pair: the forward, then the backward with the forward refused (however the
    backward reaches it), so that a backward cannot be finite differences of that forward."""
    out = {}
    for j in range(len(names) // 2):
        forward, backward = (getattr(lib(module), n) for n in names[2 * j:2 * j + 2])
        refusal = _refusal(names[2 * j], names[2 * j + 1])
        pre = pair_prefix(j)
        for i, case in enumerate(trusted.pair_cases(exercise_id)):
            y, cache = forward(**_copies(case.inputs), **_copies(case.static))
            put(out, f"{pre}c{i}.out", y)
            dout = trusted.rng(case.seed).standard_normal(np.shape(y))
            fields = cache._asdict() if hasattr(cache, "_asdict") else {}
            before = {k: v.copy() for k, v in fields.items() if isinstance(v, np.ndarray)}
            with _refused(forward, refusal):
                grads = backward(dout.copy(), cache)
            grads = grads if isinstance(grads, tuple) else (grads,)
            out[f"{pre}c{i}.count"] = np.array(len(grads))
            for name, g in zip(case.wrt, grads):
                put(out, f"{pre}c{i}.d{name}", g)
            changed = [k for k, v in before.items() if not np.array_equal(v, fields[k], equal_nan=True)]
            out[f"{pre}c{i}.cache_changed"] = np.array(", ".join(changed))
    return out


def _extract(result, path):
    """The part of ``result`` at ``path`` (see ``trusted.Call``)."""
    for step in path:
        if step == "isneginf":
            result = np.isneginf(np.asarray(result, dtype=np.float64))
        elif step == "sorted":  # a list whose order the contract leaves open: the messages of one step
            result = sorted(tuple(int(v) for v in item) for item in result)
        elif isinstance(step, int):
            result = result[step]
        else:
            result = getattr(result, step)
    return result


def put_tree(out: dict, key: str, value) -> None:
    """``put``, and for a list or tuple of arrays (or of lists) its length and each item as ``key[j]``."""
    if isinstance(value, (list, tuple)) and value and not all(np.isscalar(v) for v in value):
        out[key + "#len"] = np.array(len(value))
        for j, item in enumerate(value):
            put_tree(out, f"{key}[{j}]", item)
        return
    put(out, key, value)


def probe_calls(lib, module, names, exercise_id) -> dict:
    function = getattr(lib(module), names[0])
    out = {}
    for i, call in enumerate(trusted.call_cases(exercise_id)):
        args = {k: ([[c.copy() for c in row] for row in v] if k == "chunks_per_rank" else
                    v.copy() if isinstance(v, np.ndarray) else v) for k, v in call.args.items()}
        result = function(**args)
        for label, path in call.outputs.items():
            try:
                value = _extract(result, path)
            except Exception as e:  # a result of another shape than the contract's
                out[f"c{i}.{label}#type"] = np.array(f"not readable ({type(e).__name__})")
                continue
            put_tree(out, f"c{i}.{label}", value)
    return out


def build_block(lib, spec: dict):
    """The library's ``ParallelBlock`` as ``spec`` (one of trusted.BLOCKS) says, with the check's parameters,
    in training mode (dropout on where the spec has it)."""
    init_rng, drop_rng = lib("nn.models").make_rngs(spec["seed"])
    block = getattr(lib("nn.blocks"), "ParallelBlock")(spec["d_model"], spec["n_heads"], spec["d_ff"],
                                                       spec["dropout"], init_rng, drop_rng).train()
    params = block.parameters()
    for name, value in trusted.layer_params([(n, p.shape) for n, p in params.items()], spec["param_seed"]).items():
        params[name][...] = value
    return block


def probe_block(lib, module, names, exercise_id) -> dict:
    out = {}
    for i, spec in enumerate(trusted.BLOCKS):
        block = build_block(lib, spec)
        x, mask = trusted.block_inputs(spec)
        y = block.forward(x.copy(), mask)
        put(out, f"c{i}.out", y)
        if exercise_id == "7.2":
            continue
        block.zero_grad()
        with _refused(type(block).forward, _refusal("ParallelBlock.forward", "ParallelBlock.backward")):
            dx = block.backward(trusted.rng(spec["dout_seed"]).standard_normal(np.shape(y)))
        put(out, f"c{i}.dx", dx)
        for name, g in block.gradients().items():
            put(out, f"c{i}.d{name}", g)
    return out


def probe_cosine(lib, module, names, exercise_id) -> dict:
    CosineSchedule = getattr(lib(module), names[0])
    out = {}
    for i, (peak, warmup, min_ratio, total, steps) in enumerate(trusted.cosine_cases()):
        schedule = CosineSchedule(peak, warmup, min_ratio)
        put(out, f"c{i}.lr", [float(schedule(s, total)) for s in steps])
    return out


def probe_lion(lib, module, names, exercise_id) -> dict:
    Lion = getattr(lib(module), names[0])
    out = {}
    for i, (_, dtype, lr, betas, wd, params, grads_per_step, _) in enumerate(trusted.lion_cases()):
        live = {k: p.copy() for k, p in params.items()}
        rate = (lambda t: 0.05 / t) if lr == "0.05/t" else lr
        opt = Lion(dict(live), lr=rate, betas=betas, weight_decay=wd)
        for t, grads in enumerate(grads_per_step, start=1):
            opt.step({k: g.copy() for k, g in grads.items()})
            for k, p in live.items():
                out[f"c{i}.t{t}.{k}.same"] = np.array(opt.params[k] is p)
                put(out, f"c{i}.t{t}.{k}.p", p)
                put(out, f"c{i}.t{t}.{k}.m", opt.m[k])
    return out


def probe_ema(lib, module, names, exercise_id) -> dict:
    EMA = getattr(lib(module), names[0])
    out = {}
    for i, (decay, dtype) in enumerate(trusted.EMA_CASES):
        start, updates = trusted.ema_case(70 + i, dtype)
        ema = EMA({k: p.copy() for k, p in start.items()}, decay)
        for t, params in enumerate(updates, start=1):
            ema.update({k: p.copy() for k, p in params.items()})
            for k in start:
                put(out, f"c{i}.t{t}.{k}", ema.shadow.get(k) if isinstance(ema.shadow, dict) else None)
    return out


def probe_gqa_cache(lib, module, names, exercise_id) -> dict:
    """A rotary GroupedQueryAttention fed its input chunk by chunk through a KV cache; every chunk's output."""
    GroupedQueryAttention = getattr(lib(module), names[0])
    spec, out = trusted.GQA_CACHE, {}
    D, H = spec["d_model"], spec["n_heads"]
    for i, (H_kv, chunks) in enumerate(trusted.GQA_CACHE_RUNS):
        attn = GroupedQueryAttention(D, H, H_kv, np.random.default_rng(0), positions="rotary").eval()
        params = attn.parameters()
        for name, value in trusted.layer_params([(n, p.shape) for n, p in params.items()], spec["seed"] + i).items():
            params[name][...] = value
        x = trusted.rng(spec["x_seed"] + i).standard_normal((2, sum(chunks), D))
        cache, held = {}, 0
        for j, T in enumerate(chunks):
            # the new queries held .. held+T-1 see every key up to their own position
            mask = (np.arange(held + T)[None, :] <= (held + np.arange(T))[:, None])[None, None]  # (1, 1, T, held+T)
            put(out, f"c{i}.chunk{j}", attn.forward(x[:, held:held + T].copy(), mask=mask, kv_cache=cache))
            held += T
    return out


PROBE_KINDS = {"pair": probe_pair, "calls": probe_calls, "block": probe_block, "cosine": probe_cosine,
               "lion": probe_lion, "ema": probe_ema, "gqa_cache": probe_gqa_cache}


def collect(exercise_id: str, lib) -> dict:
    """Every value the exercise's check judges, computed with ``lib(name)`` -> the module ``name``."""
    kind, module, names = trusted.PROBES[exercise_id]
    return PROBE_KINDS[kind](lib, module, names, exercise_id)


def _load_package(root: Path):
    """Import ``root/numpytransformer`` as ``numpytransformer``, whatever else is installed."""
    pkg = root / "numpytransformer"
    spec = importlib.util.spec_from_file_location("numpytransformer", pkg / "__init__.py",
                                                  submodule_search_locations=[str(pkg)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["numpytransformer"] = module
    sys.path.insert(0, str(root))
    spec.loader.exec_module(module)
    return module


def swap_in(swaps) -> None:
    """Put each reference function of ``swaps`` in place of the student's.

    A swap is ``{"module": "linear", "qualname": "linear_backward", "source": "def ..."}`` (the
    source as text, or compiled).
    The reference ``def`` runs in the student's module, so it uses that module's helpers; a
    module function is also replaced wherever another module imported it by name
    (``from .linear import linear_backward``), a method on its class, and the kernels the
    Modules run (``core.kernels``) are bound again, to the functions now in place.
    """
    modules = {name: m for name, m in sys.modules.items() if name == "numpytransformer"
               or name.startswith("numpytransformer.")}
    for swap in swaps:
        module = importlib.import_module(f"numpytransformer.{swap['module']}")
        *owner, name = swap["qualname"].split(".")
        namespace: dict = {}
        code = swap["source"]
        if isinstance(code, str):
            code = compile(code, f"<reference of {swap['qualname']}>", "exec")
        exec(code, module.__dict__, namespace)
        if owner:
            target = module
            for part in owner:
                target = getattr(target, part)
            setattr(target, name, namespace[name])
            continue
        old = module.__dict__.get(name)
        for m in list(modules.values()) + [module]:
            if m is module or (old is not None and getattr(m, name, None) is old):
                setattr(m, name, namespace[name])
    fast = sys.modules.get("numpytransformer.core.fast")
    if fast is not None:  # the kernels were bound to the functions the swaps replaced: bind them again
        fast.use_fast(fast.enabled())


def _where(exc: BaseException, pkg: Path) -> str:
    """``numpytransformer/file.py:line`` of the innermost frame in the student's package."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename).resolve()
        if pkg in path.parents:
            return f"{path.relative_to(pkg.parent).as_posix()}:{frame.lineno}"
    return ""


def main(argv) -> int:
    root, exercise_id, outputs, status_path = Path(argv[0]).resolve(), argv[1], argv[2], argv[3]
    trusted.SALT = int(argv[4]) if len(argv) > 4 else 0
    swaps = []
    if len(argv) > 5:  # compiled, and the file removed, before the student's code runs
        swaps = [dict(s, source=compile(s["source"], f"<reference of {s['qualname']}>", "exec"))
                 for s in json.loads(Path(argv[5]).read_text(encoding="utf-8"))]
        Path(argv[5]).unlink()
    status = {"status": "ok"}
    arrays = {}
    try:
        _load_package(root)
        swap_in(swaps)
        arrays = collect(exercise_id, lambda name: importlib.import_module(f"numpytransformer.{name}"))
    except NotImplementedError as e:
        status = {"status": "not implemented", "message": str(e), "where": _where(e, root / "numpytransformer")}
    except BaseException as e:  # the student's code raised: the grader reports it on one line
        status = {"status": "error", "type": type(e).__name__, "message": " ".join(str(e).split())[:500],
                  "where": _where(e, root / "numpytransformer")}
    np.savez(outputs, **arrays)
    Path(status_path).write_text(json.dumps(status), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
