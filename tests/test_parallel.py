"""Data-parallel training over MPI: 2 ranks make the updates of one process, one writer,
checkpoints cross rank counts, and a rank that fails or is killed ends the whole run; under
mpiexec only ``train`` runs, and an error is printed once.

With ``-s`` the tests print what they measured: the differences between 2 ranks and one process,
and how long a fault took to end the run.

The MPI tests start ``mpiexec -n 2`` in a subprocess, with a timeout, on tiny reversal models;
they skip, saying why, where mpi4py or mpiexec is missing (``pip install -e ".[mpi]"``).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from numpytransformer.training.parallel import SingleProcess, launched_ranks, world
from numpytransformer.training.settings import ModelSettings
from numpytransformer.tasks.reverse import ReversalTask, ReverseData
from numpytransformer.tasks.sort import SortTask
from numpytransformer.tasks.translate import TranslateData, TranslationTask
from numpytransformer.training.trainer import without_timing

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))  # the wheel's
try:
    import mpi4py  # noqa: F401
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False
needs_mpi = pytest.mark.skipif(not (MPIEXEC and HAVE_MPI4PY), reason="needs mpi4py and an mpiexec on PATH "
                               "(pip install -e \".[mpi]\")")

#: A tiny reversal run: 161 sequences make 5 batches of 32 and one of a single row, which goes to
#: rank 0 and leaves rank 1 without a shard.
TINY = ["--n-symbols", "8", "--max-len", "6", "--n-train", "161", "--n-val", "20", "--n-test", "20",
        "--batch-size", "32", "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32",
        "--warmup", "10", "--log-every", "2", "--cooldown", "0"]


def _env():
    """The subprocess imports this checkout, with one BLAS thread per rank."""
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.pop("NUMPYTRANSFORMER_DEBUG", None)
    return env


def _run(argv, ranks=2, timeout=60):
    """``python ARGV`` under ``mpiexec -n ranks`` (ranks 1: a plain process)."""
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, *argv] if ranks > 1 else [sys.executable, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())


def _on_one_and_two_ranks(tmp_path, script_text, extra_args):
    """Run a script in one process, then on 2 ranks, each with a folder of its own (its first argument)
    and ``extra_args(folder)``; asserts both succeed and returns ``{ranks: folder}``."""
    script = tmp_path / "script.py"
    script.write_text(script_text)
    folders = {}
    for ranks in (1, 2):
        folder = folders[ranks] = tmp_path / f"ranks{ranks}"
        folder.mkdir()
        r = _run([str(script), str(folder), *extra_args(folder)], ranks)
        assert r.returncode == 0, r.stderr
    return folders


def _train(out, *flags, ranks=2, timeout=60):
    return _run(["-m", "numpytransformer", "train", "reverse", *TINY, *flags, "--out", str(out)], ranks, timeout)


def _weights(run_dir, which="last"):
    doc = json.loads((run_dir / which / "checkpoint.json").read_text())
    with np.load(run_dir / which / doc["files"]["weights"]["name"]) as z:
        return {k: z[k] for k in z.files}


def _assert_same_weights(w1, w2):
    """Each tensor equal to 1e-10 relative, but the attention key biases (b_k): their gradient is
    zero in exact arithmetic (softmax ignores a shift shared by a query's scores), so each run's
    b_k is round-off that Adam's normalised step turns into moves of about the learning rate.
    They are only checked to be that: tiny in both runs."""
    assert set(w1) == set(w2)
    for k in w1:
        if k.endswith("b_k"):
            assert np.abs(w1[k]).max() < 1e-8 and np.abs(w2[k]).max() < 1e-8, k
        else:
            np.testing.assert_allclose(w2[k], w1[k], rtol=1e-10, atol=1e-10 * np.abs(w1[k]).max(), err_msg=k)


# ---- without MPI ------------------------------------------------------------------------------
def test_one_process_needs_no_mpi():
    """Without mpiexec the world is one process, and training never imports mpi4py."""
    assert launched_ranks() == 1 and isinstance(world(), SingleProcess)
    script = ("import sys; from numpytransformer.cli import main; "
              "sys.argv[0] = 'x'; from numpytransformer.training.parallel import world; world(); "
              "assert 'mpi4py' not in sys.modules, 'mpi4py imported'; print('ok')")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_shards_cover_each_row_once(size):
    """The ranks' shards of a batch are its rows, each once, interleaved: rank r holds rows r,
    r + N, ...; a rank past the rows gets None."""
    task = ReversalTask(ReverseData(n_train=10, n_val=4, n_test=4), ModelSettings())
    batch = [np.array([i]) for i in range(3)]
    shards = [task.shard(batch, r, size) for r in range(size)]
    for r, shard in enumerate(shards):
        assert [int(s[0]) for s in shard or []] == list(range(r, 3, size))
    assert sum(shard is None for shard in shards) == max(size - 3, 0)
    split, idx = "train", np.arange(7)
    translation = object.__new__(TranslationTask)  # sharding reads no data
    parts = [translation.shard((split, idx), r, size) for r in range(size)]
    assert np.array_equal(np.sort(np.concatenate([p[1] for p in parts if p is not None])), idx)
    assert all(p is None or (p[0] == split and np.array_equal(p[1], idx[r::size])) for r, p in enumerate(parts))


@pytest.mark.parametrize("make", [
    lambda: ReversalTask(ReverseData(n_train=200, n_val=4, n_test=4), ModelSettings()),
    lambda: ReversalTask(ReverseData(n_train=200, n_val=4, n_test=4, formulation="tagger"), ModelSettings()),
    lambda: SortTask(ReverseData(n_train=200, n_val=4, n_test=4), ModelSettings()),
    lambda: TranslationTask(TranslateData(n_train=200, n_val=10, n_test=10, max_number=999, min_freq=1),
                            ModelSettings()),
], ids=["reverse", "tagger", "sort", "translate"])
def test_target_counts_from_lengths_equal_the_padded_counts(make):
    """The trainer counts each batch's targets at every update of a data-parallel run: the tasks
    that pad count from lengths, and get the non-pad targets of the padded batch."""
    task = make()
    for batch in task.train_batches(0)[:3]:
        targets = task.batch_arrays(batch)[1]
        assert task.target_count(batch) == int((targets != task.target_pad).sum())
        shard = task.shard(batch, 1, 3)
        assert task.target_count(shard) == int((task.batch_arrays(shard)[1] != task.target_pad).sum())


# ---- 2 ranks make one process's updates ------------------------------------------------------
EQUALITY_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from numpytransformer.training.parallel import SingleProcess, world
    from numpytransformer.training.settings import ModelSettings
    from numpytransformer.tasks.reverse import ReversalTask, ReverseData
    from numpytransformer.training.trainer import TrainConfig, Trainer

    out = sys.argv[1]
    task = ReversalTask(ReverseData(n_symbols=8, max_len=6, n_train=161, n_val=20, n_test=20, batch_size=32),
                        ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0, dtype="float64"))
    cfg = TrainConfig(epochs=2, warmup=5, accum_steps=2, clip_norm=0.5, log_every=10 ** 6)
    assert isinstance(Trainer(task.build_model(), task, cfg, out).comm, SingleProcess)  # MPI only when asked
    trainer = Trainer(task.build_model(), task, cfg, out, log=lambda m: None, comm=world())
    losses, step = [], trainer.train_step
    trainer.train_step = lambda group: (lambda r: (losses.append(r[0]), r)[1])(step(group))
    trainer.fit()
    if world().rank == 0:
        np.savez(out + "/final.npz", **trainer.model.parameters())
        json.dump({"losses": losses, "ranks": world().size}, open(out + "/losses.json", "w"))
""")


def test_one_process_sums_and_rows_are_the_identity():
    comm, a = SingleProcess(), np.arange(6.0)
    assert comm.allreduce_sum(a) is a and np.array_equal(a, np.arange(6.0))
    assert comm.my_rows([1, 2, 3]) == [1, 2, 3]


@needs_mpi
def test_two_ranks_share_rows_and_sum_arrays(tmp_path):
    """Each rank fills its own rows (``my_rows``); one ``allreduce_sum`` gives every rank all of them."""
    script = tmp_path / "rows.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        from numpytransformer.training.parallel import world
        comm = world()
        mine = comm.my_rows(np.arange(5))
        out = np.zeros((5, 2), dtype=np.float32)
        out[mine] = mine[:, None] + 1
        comm.allreduce_sum(out)
        assert list(mine) == [[0, 2, 4], [1, 3]][comm.rank], mine
        assert np.array_equal(out, np.arange(1, 6)[:, None].repeat(2, 1)), out
        open(f"{sys.argv[1]}/rank{comm.rank}", "w").close()
    """))
    r = _run([str(script), str(tmp_path)])
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "rank0").exists() and (tmp_path / "rank1").exists()


@needs_mpi
def test_two_ranks_make_the_updates_of_one_process(tmp_path):
    """float64, no dropout, --accum 2, clipping on, a batch of one row: the per-update losses and
    the final weights of 2 ranks equal one process's to 1e-10 relative (printed with -s). Under
    mpiexec a Trainer built without ``comm`` is one process."""
    folders = _on_one_and_two_ranks(tmp_path, EQUALITY_SCRIPT, lambda folder: [])
    runs = {ranks: (json.loads((out / "losses.json").read_text()), np.load(out / "final.npz"))
            for ranks, out in folders.items()}
    (one, w1), (two, w2) = runs[1], runs[2]
    assert (one["ranks"], two["ranks"]) == (1, 2)
    assert len(one["losses"]) == len(two["losses"]) == 6  # 2 epochs of 6 batches, 2 a group
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-10, atol=0)
    _assert_same_weights(dict(w1), dict(w2))
    losses = np.abs(np.subtract(two["losses"], one["losses"])) / np.abs(one["losses"])
    weights = max(np.abs(w2[k] - w1[k]).max() / np.abs(w1[k]).max() for k in w1.files if not k.endswith("b_k"))
    b_k = [k for k in w1.files if k.endswith("b_k")]
    size = max(np.abs(w[k]).max() for w in (w1, w2) for k in b_k)
    moved = max(np.abs(w2[k] - w1[k]).max() for k in b_k)
    print(f"\n2 ranks against 1 process: per-update losses differ by at most {losses.max():.1e} (relative), "
          f"final weights by at most {weights:.1e} (per tensor, relative to its largest entry; b_k excepted); "
          f"b_k at most {size:.1e} in either run, differing by at most {moved:.1e}")


@needs_mpi
def test_checkpoints_cross_rank_counts_and_rank_0_writes(tmp_path):
    """One process trains an epoch, 2 ranks resume it for a second: the same run as one process's
    2 epochs (float64, no dropout). The 2-rank run's checkpoint loads in one process, its history
    and progress lines record 2 ranks, and only rank 0 printed."""
    flags = ["--dtype", "float64", "--dropout", "0"]
    whole, split = tmp_path / "whole", tmp_path / "split"
    r = _train(whole, *flags, "--epochs", "2", ranks=1)
    assert r.returncode == 0, r.stderr
    r = _train(split, *flags, "--epochs", "1", ranks=1)
    assert r.returncode == 0, r.stderr
    r = _train(split, "--epochs", "2", "--resume", ranks=2)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("final (test") == 1 and r.stdout.count("resumed from") == 1  # rank 0 alone prints
    assert "ranks 2" in r.stdout and "on 2 ranks" in r.stdout
    h1, h2 = (json.loads((d / "history.json").read_text()) for d in (whole, split))
    assert [e["ranks"] for e in h2["epochs"]] == [1, 2]
    assert [s["loss"] for s in h2["steps"]] == [s["loss"] for s in h1["steps"]]
    for a, b in zip(h1["epochs"], h2["epochs"]):
        a, b = without_timing(a), without_timing(b)
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == pytest.approx(b[k], rel=1e-10, abs=1e-12), k
    _assert_same_weights(_weights(whole), _weights(split))
    r = _run(["-m", "numpytransformer", "eval", "--checkpoint", str(split), "--n", "20"], ranks=1)
    assert r.returncode == 0 and "token_accuracy" in r.stdout, r.stderr


@needs_mpi
def test_dropout_resume_is_exact_on_the_same_ranks(tmp_path):
    """With dropout each rank draws its own masks; 2 ranks resumed after epoch 1 train as 2 ranks
    uninterrupted do. Rank 0 alone removes the kept epochs beyond --keep-epochs."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    for out, epochs, resume in ((whole, "2", []), (split, "1", []), (split, "2", ["--resume"])):
        r = _train(out, "--dropout", "0.2", "--epochs", epochs, "--keep-epochs", "1", *resume)
        assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (whole / "epochs").iterdir()) == ["002"]
    h1, h2 = (json.loads((d / "history.json").read_text()) for d in (whole, split))
    assert [s["loss"] for s in h1["steps"]] == [s["loss"] for s in h2["steps"]]
    assert [without_timing(e) for e in h1["epochs"]] == [without_timing(e) for e in h2["epochs"]]


DRAWS_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from numpytransformer import cli
    from numpytransformer.training.parallel import launched_rank
    from numpytransformer.training.trainer import Trainer

    draws, step = {}, Trainer.train_step

    def recording(self, group):  # what this rank's dropout generator draws next, at each epoch's first update
        if self.epoch not in draws:
            copy = np.random.default_rng()
            copy.bit_generator.state = self.model.rng.bit_generator.state
            draws[self.epoch] = copy.random(4).tolist()
        return step(self, group)

    Trainer.train_step = recording
    code = cli.main(["train", "reverse", *sys.argv[2:]])
    with open(f"{sys.argv[1]}/draws{launched_rank()}.json", "w") as f:
        json.dump(draws, f)
    sys.exit(code)
""")


@needs_mpi
def test_each_rank_draws_its_own_dropout_masks(tmp_path):
    """At the first update of every epoch, rank 1's dropout generator is not rank 0's (a rank 1 that
    reused rank 0's stream would drop the same units of its rows); rank 0's starts where one
    process's does."""
    folders = _on_one_and_two_ranks(tmp_path, DRAWS_SCRIPT, lambda folder: [
        *TINY, "--dropout", "0.2", "--epochs", "2", "--out", str(folder / "run")])
    draws = {ranks: [json.loads((folder / f"draws{rank}.json").read_text()) for rank in range(ranks)]
             for ranks, folder in folders.items()}
    (one,), (rank0, rank1) = draws[1], draws[2]
    assert sorted(rank0) == sorted(rank1) == ["0", "1"]
    for epoch in rank0:
        assert rank0[epoch] != rank1[epoch], epoch
    assert rank1["0"] != rank1["1"]  # started again each epoch, from the epoch
    assert rank0["0"] == one["0"]


# ---- faults -------------------------------------------------------------------------------------
FAIL_SCRIPT = textwrap.dedent("""
    import sys
    from numpytransformer import cli
    from numpytransformer.errors import NumpyTransformerError
    from numpytransformer.training.parallel import world
    from numpytransformer.tasks.reverse import ReversalTask

    how = sys.argv[1]
    real = ReversalTask.loss

    def failing(self, logits, targets, smoothing):
        loss, n, dlogits = real(self, logits, targets, smoothing)
        if world().rank == 1:
            if how == "raise":
                raise NumpyTransformerError("batch 0: a bad sequence on rank 1")
            if how == "pipe":
                raise BrokenPipeError(32, "Broken pipe")
            loss = float("nan")
        return loss, n, dlogits

    ReversalTask.loss = failing
    sys.exit(cli.main(["train", "reverse", *sys.argv[2:]]))
""")


@needs_mpi
@pytest.mark.parametrize("how, message", [
    ("raise", "error: batch 0: a bad sequence on rank 1"),  # only rank 1 fails: rank 0 waits in the allreduce
    ("nan", "error: the loss became nan: training diverged"),  # every rank sees the summed loss
    ("pipe", "error: the output was closed (broken pipe)"),  # as when rank 0 prints into "| head"
])
def test_a_rank_that_raises_stops_every_rank(tmp_path, how, message):
    script = tmp_path / "fail.py"
    script.write_text(FAIL_SCRIPT)
    start = time.perf_counter()
    r = _run([str(script), how, *TINY, "--out", str(tmp_path / "run")], timeout=60)
    seconds = time.perf_counter() - start
    assert r.returncode == (141 if how == "pipe" else 2), (r.returncode, r.stderr)
    assert r.stderr.count(message) == 1, r.stderr
    assert seconds < 30
    print(f"\n{how} on rank 1: mpiexec exited {seconds:.2f} s after the launch, status {r.returncode}")


@needs_mpi
def test_a_refused_flag_is_one_line_on_two_ranks(tmp_path):
    start = time.perf_counter()
    r = _train(tmp_path / "nothing", "--resume")
    assert r.returncode == 2
    assert r.stderr.count("error: --resume:") == 1, r.stderr
    print(f"\nrefused flag: mpiexec exited {time.perf_counter() - start:.2f} s after the launch")


@needs_mpi
def test_a_parse_error_is_printed_once_on_two_ranks(tmp_path):
    """argparse's usage and error: every rank parses the same flags, rank 0 alone prints."""
    r = _train(tmp_path / "nothing", "--heads", "abc")
    assert r.returncode == 2
    assert r.stderr.count("usage:") == 1 and r.stderr.count("error: argument --heads") == 1, r.stderr


@needs_mpi
@pytest.mark.parametrize("command", ["eval", "sweep"])
def test_only_train_runs_under_mpiexec(tmp_path, command):
    """Another command on 2 ranks is refused with one line: each rank would run it on its own (and
    write the same files)."""
    out = tmp_path / "out"
    argv = {"eval": ["--checkpoint", str(out)], "sweep": ["--epochs", "1", "--n-train", "20", "--out", str(out)]}
    r = _run(["-m", "numpytransformer", command, *argv[command]])
    assert r.returncode == 2, r.stderr
    assert r.stderr.count(f"error: {command} runs in one process, not on 2 ranks") == 1, r.stderr
    assert not out.exists()


def _rank_pid(out_dir, rank):
    """The pid of the training process of ``rank`` whose command line names ``out_dir``."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if str(out_dir).encode() in cmd and f"PMI_RANK={rank}".encode() in env and b"numpytransformer" in cmd:
            return int(proc.name)
    return None


@needs_mpi
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the ranks through /proc (Linux)")
@pytest.mark.parametrize("victim", [0, 1])
def test_a_killed_rank_ends_the_run_and_last_resumes(tmp_path, victim):
    """SIGKILL to one rank (the writer, or not) after the first epoch is saved: mpiexec ends the
    other within seconds, last/ loads, and --resume on 2 ranks finishes the run."""
    out = tmp_path / "run"
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "numpytransformer", "train", "reverse", *TINY,
           "--epochs", "1000", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline = time.time() + 60
        while not (out / "last" / "checkpoint.json").exists() and time.time() < deadline:
            time.sleep(0.05)
        pid = _rank_pid(out, victim)
        assert pid is not None, "rank not found"
        os.kill(pid, signal.SIGKILL)
        killed = time.perf_counter()
        proc.wait(timeout=30)
        seconds = time.perf_counter() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert seconds < 10, seconds
    print(f"\nSIGKILL to rank {victim}: mpiexec exited {seconds:.3f} s later, status {proc.returncode}")
    assert not [p for p in (_rank_pid(out, 0), _rank_pid(out, 1)) if p]  # no rank left behind
    r = _run(["-m", "numpytransformer", "eval", "--checkpoint", str(out / "last"), "--n", "20"], ranks=1)
    assert r.returncode == 0, r.stderr
    saved = json.loads((out / "last" / "checkpoint.json").read_text())["epoch"]
    r = _train(out, "--resume", "--epochs", str(saved + 1))
    assert r.returncode == 0, r.stderr
    assert f"resumed from {out / 'last'} after epoch {saved}" in r.stdout
    assert json.loads((out / "last" / "checkpoint.json").read_text())["epoch"] == saved + 1
