"""Adding a task is one file and one registry line: the sort task (tasks/sort.py) is that example,
and docs/library.md shows it verbatim."""
from pathlib import Path

import numpy as np

from numpytransformer.cli import main
from numpytransformer.training.settings import ModelSettings
from numpytransformer.tasks.base import TASKS, Task, task_class
from numpytransformer.tasks.sort import SortTask

ROOT = Path(__file__).resolve().parents[1]


def test_sort_is_registered_and_a_task():
    assert task_class("sort") is SortTask and issubclass(SortTask, Task)
    assert TASKS["sort"] == "numpytransformer.tasks.sort:SortTask"


def test_the_docs_show_the_sort_task_as_it_is():
    code = (ROOT / "numpytransformer" / "tasks" / "sort.py").read_text()
    body = code[code.index("class SortTask"):].strip()
    assert body in (ROOT / "docs" / "library.md").read_text()


def test_sort_targets_and_batches():
    task = SortTask(SortTask.Data(n_symbols=6, max_len=5, n_train=200, n_val=20, n_test=20),
                    ModelSettings(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0))
    seq = np.array([7, 4, 8, 4])  # symbols 4 1 5 1 as ids
    (src, tgt_in), tgt_out = task.batch_arrays([seq])
    assert src.tolist() == [[7, 4, 8, 4]]
    assert tgt_in.tolist() == [[1, 4, 4, 7, 8]] and tgt_out.tolist() == [[4, 4, 7, 8, 2]]


def test_train_sort_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "sort"
    assert main(["train", "sort", "--n-symbols", "5", "--max-len", "5", "--n-train", "1500", "--n-val", "50",
                 "--n-test", "50", "--d-model", "32", "--d-ff", "64", "--layers", "1", "--epochs", "6",
                 "--lr-factor", "0.5", "--log-every", "1000", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(out), "--n", "200"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    exact = float(line.split("exact_match ")[1].split()[0])
    assert exact > 0.5, line  # chance is far below: 5 symbols, lengths 1-5
