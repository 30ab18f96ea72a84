"""Data parallelism over MPI: every rank holds the whole model and computes the gradient of
its share of each batch; one ``Allreduce`` sums the shares, and every rank takes the same step.

The gradient of a batch's summed loss is the sum of its shards' gradients (a sum over
targets splits into sums over disjoint parts of them):

.. math:: \\nabla_\\theta \\sum_{j \\in B} \\ell_j = \\sum_{r=0}^{N-1} \\nabla_\\theta \\sum_{j \\in B_r} \\ell_j

so N ranks that each weight their shard's mean-loss gradient by its share of the batch's
targets and sum the results hold the gradient a single process computes for the whole batch
(lesson 13 derives it and writes the ring allreduce by hand).

This module is all the trainer and the command line know of ranks. :func:`world` is the
communicator of this process: :class:`MPIComm` over MPI's world when ``mpiexec`` started it with
more than one rank, otherwise :class:`SingleProcess`, whose sum is the identity. Both offer the
same narrow interface: :meth:`~MPIComm.share` (this rank's rows of a batch, and their weight),
:meth:`~MPIComm.sum_gradients`, :meth:`~MPIComm.allreduce_sum` (any one array), :meth:`~MPIComm.my_rows`
(this rank's share of rows outside training), :meth:`~MPIComm.bcast`, :meth:`~MPIComm.seed_dropout` and
``is_writer`` (rank 0, the one writer of files and logs). mpi4py is imported only under
``mpiexec``, so a NumPy-only install keeps working.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import traceback
from typing import Dict, Optional

import numpy as np

from ..errors import NumpyTransformerError

__all__ = ["world", "launched_ranks", "launched_rank", "rank_rows", "SingleProcess", "MPIComm", "first_rank_speaks",
           "stop_run", "print_traceback_and_stop"]

#: What MPI launchers set in each rank's environment: the number of ranks (MPICH's hydra,
#: Open MPI, PMIx launchers).
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
#: And this process's rank.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def launched_ranks() -> int:
    """How many ranks the MPI launcher started, read from the environment (1 without one)."""
    for name in SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def launched_rank() -> int:
    """This process's rank, read from the MPI launcher's environment (0 without one)."""
    return next((int(os.environ[v]) for v in RANK_VARIABLES if os.environ.get(v, "").isdigit()), 0)


def rank_rows(rows, rank: int, size: int):
    """Rank ``rank``'s share of ``rows`` (a list or an array) split among ``size`` ranks: rows ``rank``,
    ``rank + size``, ``rank + 2 * size``, ... Interleaved rather than in blocks: rows sorted by length
    (a batch cut from length-sorted buckets, sentences longest first) would give the longest all to
    the last rank."""
    return rows[rank::size]


class SingleProcess:
    """One process, no MPI: the whole batch is this process's, and the sums and broadcasts
    return what they are given."""

    rank, size, is_writer, in_training = 0, 1, True, False

    def share(self, task, batch) -> tuple:
        """The whole batch, with weight 1."""
        return batch, 1.0

    def sum_gradients(self, grads: Dict[str, np.ndarray], *scalars: float) -> tuple:
        return scalars

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        """``array`` itself: the sum over one process."""
        return array

    def my_rows(self, rows):
        """All of ``rows``."""
        return rows

    def bcast(self, obj):
        return obj

    def bcast_arrays(self, arrays: Dict[str, np.ndarray]) -> None:
        """Nothing to do: the arrays are this process's."""

    def seed_dropout(self, model, epoch: int) -> None:
        """Nothing to do: the model's own generator goes on."""

    def only_writer_prints(self) -> None:
        """Nothing to do: this process is the writer."""

    @contextlib.contextmanager
    def training(self):
        """Nothing to mark: see :meth:`MPIComm.training`."""
        yield

    def abort(self, code: int) -> None:
        """Nothing to stop but this process, which returns ``code`` itself."""


class MPIComm:
    """MPI's world communicator with the collectives training needs."""

    def __init__(self):
        from mpi4py import MPI  # only here: a run without mpiexec never loads MPI

        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.is_writer = self.rank == 0  # one writer of files and logs: the other ranks hold the same weights
        self.in_training = False  # see training()
        self._flat = None  # the flat buffer of every gradient, allocated on the first sum

    def share(self, task, batch) -> tuple:
        """This rank's rows of ``batch`` (the task's ``shard``) and their weight, their share of the
        batch's targets: the ranks' weighted mean-loss gradients then sum to the batch's mean-loss
        gradient. ``(None, 0.0)`` for a batch of fewer rows than ranks that leaves this one none."""
        part = task.shard(batch, self.rank, self.size)
        if part is None:
            return None, 0.0
        return part, task.target_count(part) / task.target_count(batch)

    def sum_gradients(self, grads: Dict[str, np.ndarray], *scalars: float) -> tuple:
        """Sum ``grads`` in place over the ranks, and the ``scalars`` with them (a loss, a count),
        with one ``Allreduce`` on one flat buffer, as OpenAI baselines' ``mpi_adam`` and Horovod
        do: one message of the whole gradient instead of one per tensor (each pays the latency).
        Returns the summed scalars."""
        n = sum(g.size for g in grads.values())
        dtype = next(iter(grads.values())).dtype
        if self._flat is None or self._flat.size != n + len(scalars) or self._flat.dtype != dtype:
            self._flat = np.empty(n + len(scalars), dtype=dtype)
        flat, offset = self._flat, 0
        for g in grads.values():  # pack
            flat[offset:offset + g.size] = g.ravel()
            offset += g.size
        flat[n:] = scalars  # in the gradients' dtype: float32 counts exactly up to 2^24 targets
        self.comm.Allreduce(self.MPI.IN_PLACE, flat, op=self.MPI.SUM)
        offset = 0
        for g in grads.values():  # unpack
            g[...] = flat[offset:offset + g.size].reshape(g.shape)
            offset += g.size
        return tuple(float(s) for s in flat[n:])

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        """Sum ``array`` (C-contiguous, the same shape and dtype on every rank) in place over the ranks
        and return it: results that each rank computed for its own rows, zero elsewhere, become all of
        them on every rank."""
        self.comm.Allreduce(self.MPI.IN_PLACE, array, op=self.MPI.SUM)
        return array

    def my_rows(self, rows):
        """This rank's share of ``rows`` (:func:`rank_rows`)."""
        return rank_rows(rows, self.rank, self.size)

    def bcast(self, obj):
        """Rank 0's ``obj`` (a small picklable value: metrics, a decision) on every rank."""
        return self.comm.bcast(obj, root=0)

    def bcast_arrays(self, arrays: Dict[str, np.ndarray]) -> None:
        """Rank 0's values of ``arrays`` (a model's parameters) on every rank, in place: weights that
        each rank computed apart (pretraining) may differ in round-off between machines."""
        for a in arrays.values():
            self.comm.Bcast(a, root=0)

    def seed_dropout(self, model, epoch: int) -> None:
        """Give each rank its own dropout masks: rank 0 continues the model's (saved) generator, rank
        r > 0 draws from a stream of its own, started again at each epoch from ``(seed, r, epoch)``,
        so that a resume (at an epoch's end) on the same number of ranks is exact."""
        if self.rank:
            model.rng.bit_generator.state = np.random.default_rng(
                [model.cfg.seed, self.rank, epoch]).bit_generator.state

    def only_writer_prints(self) -> None:
        """Send the standard output of every rank but the writer to nothing (errors still reach stderr)."""
        if not self.is_writer:
            sys.stdout = open(os.devnull, "w")

    @contextlib.contextmanager
    def training(self):
        """Mark the block in which one rank may fail alone (training: rank 0 writes, each rank reads
        its own shard) while the others wait in a collective; :func:`stop_run` then aborts them.
        An exception leaves the mark set, for the :func:`stop_run` that reports it."""
        self.in_training = True
        yield
        self.in_training = False

    def abort(self, code: int) -> None:
        """End every rank of the run with exit status ``code``: one that stops alone would
        leave the others waiting in the next collective for ever."""
        self.comm.Abort(code)


@functools.lru_cache(maxsize=None)
def world():
    """This process's communicator: :class:`MPIComm` under ``mpiexec -n N`` with N > 1, else
    :class:`SingleProcess`. Each rank's BLAS runs one thread unless OMP_NUM_THREADS or
    OPENBLAS_NUM_THREADS says otherwise: the ranks already fill the cores."""
    n = launched_ranks()
    if n <= 1:
        return SingleProcess()
    try:
        from threadpoolctl import threadpool_limits

        comm = MPIComm()
    except ImportError as e:
        raise NumpyTransformerError(f"started by mpiexec with {n} ranks, but {e.name} is not installed: "
                                    "pip install -e \".[mpi]\"") from None
    if not any(os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")):
        threadpool_limits(1)
    return comm


@contextlib.contextmanager
def first_rank_speaks():
    """Inside the block, only the first rank's stdout and stderr are heard: under ``mpiexec`` every
    rank parses the same command line and meets the same error (or ``--help``), which one prints."""
    if not launched_rank():
        yield
        return
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        yield


def stop_run(message: str, code: int, alone: Optional[bool] = None) -> int:
    """Print ``message`` (``error: ...``) once to stderr and end the run with ``code`` on every rank.

    Under MPI an error is either met by every rank at the same point (a refused flag, a diverged
    loss, which every rank computes from the same sums): rank 0 prints it and every rank returns
    ``code``. Or this rank may have met it ``alone`` (by default: while training, see
    :meth:`MPIComm.training`) while the others wait in a collective: it prints it, flushed, then
    ends every rank with MPI's Abort.
    """
    try:
        comm = world()
    except NumpyTransformerError:  # no MPI to abort with: every rank met the same error and prints it
        comm = SingleProcess()
    if comm.in_training if alone is None else alone:
        print(message, file=sys.stderr, flush=True)
        # The line is in the pipe to mpiexec's forwarder, which the abort tears down: give it a
        # moment to read it first, or the run can end without saying why.
        time.sleep(0.5)
        comm.abort(code)
    elif comm.is_writer:
        print(message, file=sys.stderr, flush=True)
    return code


def print_traceback_and_stop() -> int:
    """An unexpected exception: its traceback, then :func:`stop_run` (status 1)."""
    return stop_run(traceback.format_exc().rstrip(), 1)
