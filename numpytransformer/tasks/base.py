"""The Task interface: everything the trainer and the command line need from a task.

A task glues data, a model and a measure of success together. The trainer calls only what
:class:`~numpytransformer.training.trainer.TrainingTask` declares (the batches, their arrays, the
loss, the validation), which :class:`Task` inherits; the command line adds ``recipe``,
``check_settings``, ``build_model``, ``pretrain``, ``test_report``, ``evaluate``, ``check_input``, ``predict``, ``attention``, ``generate``
and :func:`task_from_dict`.

Adding a task is one file with a subclass and one line in :data:`TASKS`.
"""
from __future__ import annotations

import dataclasses
import importlib
from abc import abstractmethod
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple


from ..errors import NumpyTransformerError
from ..training.settings import ModelSettings
from ..training.trainer import TrainConfig, TrainingTask

__all__ = ["Task", "TASKS", "task_class", "task_from_dict"]


class Task(TrainingTask):
    """A task: data settings, model settings, and what to do with them.

    Subclasses set the class attributes and implement the abstract methods. ``data`` is an
    instance of :attr:`Data`, ``model`` a :class:`~numpytransformer.training.settings.ModelSettings`;
    ``state`` is what was learned from the data before training (a vocabulary) and is saved
    in every checkpoint, so that a checkpoint runs without the data.
    """

    #: The name on the command line (``train NAME``) and in checkpoints.
    name: ClassVar[str]
    #: The dataclass of the task's data settings.
    Data: ClassVar[type]
    #: The command that runs a trained model on new input.
    predict_command: ClassVar[str] = "predict"
    #: How many examples ``eval`` scores by default (0: the whole test split).
    default_eval_n: ClassVar[int] = 1000
    #: Whether the model's output is searched (``--beam`` applies) rather than read off or sampled;
    #: a task whose settings decide it sets it in ``__init__``.
    searches: bool = True
    #: One line of ``--help``.
    summary: ClassVar[str] = ""
    #: Whether :meth:`test_report` takes the ranks of a data-parallel run (``comm``) and shares the test
    #: among them; otherwise rank 0 alone reports.
    shares_test: ClassVar[bool] = False
    #: Fields of :attr:`Data` added since checkpoints of this format were first saved: an older
    #: checkpoint lacks them and is read with their defaults, the settings it was trained with.
    later_fields: ClassVar[Tuple[str, ...]] = ()

    def __init__(self, data, model: ModelSettings, data_dir: Optional[str] = None, state: Optional[dict] = None):
        if not isinstance(data, self.Data):
            raise NumpyTransformerError(f"data must be a {self.Data.__name__}, got {type(data).__name__}")
        if not isinstance(model, ModelSettings):
            raise NumpyTransformerError(f"model must be a ModelSettings, got {type(model).__name__}")
        self.data, self.model, self.data_dir = data, model, data_dir
        self.check_settings()  # before any data is read
        self.state = self.build_state() if state is None else state

    # ---- settings ----------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def recipe(cls, data) -> Tuple[ModelSettings, TrainConfig]:
        """The default model and training settings for ``data``. A recipe fixes its number of updates,
        not a time budget, so that its result does not depend on the machine's speed."""

    def check_settings(self) -> None:
        """Refuse data and model settings that do not go together (one line naming the options);
        by default every combination the settings' own checks let through is fine."""

    def build_state(self) -> dict:
        """What is learned from the training data before training (vocabularies); JSON."""
        return {}

    def to_dict(self) -> dict:
        return {"name": self.name, "data": dataclasses.asdict(self.data), "model": dataclasses.asdict(self.model),
                "state": self.state}

    # ---- model and training ---------------------------------------------------------------
    @abstractmethod
    def build_model(self):
        """A new model for these settings."""

    def pretrain(self, model, train: TrainConfig, log=print) -> None:
        """Before a new run trains: give ``model`` starting weights learned from the training data
        (the sentiment task's language-model pretraining); by default the initial weights stay."""

    # ---- after training ------------------------------------------------------------------
    @abstractmethod
    def test_report(self, model) -> Dict[str, float]:
        """The figures a finished run reports, on the held-out test split (a task that
        :attr:`shares_test` takes ``comm`` too, and returns them on every rank)."""

    @abstractmethod
    def evaluate(self, model, n: int, seed: int, beam: int = 1) -> Dict[str, float]:
        """``eval``: metrics on ``n`` held-out examples (0: all)."""

    def eval_count(self, n: int) -> int:
        """:meth:`evaluate`'s ``n``, checked; 0 gives :attr:`default_eval_n` (itself 0 for all)."""
        if not 0 <= n <= 10 ** 7:
            raise NumpyTransformerError(f"--n must be 0 (all) or a count up to 10000000, got {n}")
        return n or self.default_eval_n

    @abstractmethod
    def predict(self, model, lines: Sequence[str], beam: int = 1) -> List[str]:
        """The model's output for each input line."""

    def check_input(self, text: str) -> None:
        """Refuse one given input that holds nothing to run the model on. (An empty output is
        an answer, not an error: a model may put EOS first.)"""
        if not text.strip():
            raise NumpyTransformerError("the input is empty: give some text")

    def attention(self, model, text: str):
        """``(maps, labels, output)``: attention maps of every layer for one input."""
        raise NumpyTransformerError(f"the {self.name} task draws no attention maps")

    @staticmethod
    def labelled_maps(model, src: List[str], out: Optional[List[str]] = None):
        """The first example's attention maps of the last forward, by module name, and their
        (query, key) labels: encoder and decoder self-attention over their own tokens,
        cross-attention from the output to the source."""
        maps = {name: w[0] for name, w in model.attention_maps().items()}
        labels = {name: (src, src) if name.startswith("encoder") else (out, out) if "self_attn" in name
                  else (out, src) for name in maps}
        return maps, labels

    def generate(self, model, prompt: str, tokens: int, temperature: float, top_k=None, top_p=None,
                 seed: int = 0, min_p=None) -> str:
        """``generate``: continue ``prompt`` by sampling (language models only)."""
        raise NumpyTransformerError(f"generate needs a language-model checkpoint; this one holds a {self.name} model")

    @abstractmethod
    def example_input(self) -> str:
        """An input to suggest after training."""


#: The tasks the command line knows: name -> "module:class" (imported when used).
TASKS: Dict[str, str] = {
    "reverse": "numpytransformer.tasks.reverse:ReversalTask",
    "translate": "numpytransformer.tasks.translate:TranslationTask",
    "sentiment": "numpytransformer.tasks.sentiment:SentimentTask",
    "sort": "numpytransformer.tasks.sort:SortTask",
    "lm": "numpytransformer.tasks.lm:LanguageModelTask",
}


def task_class(name: str):
    """The Task subclass registered as ``name``."""
    if name not in TASKS:
        raise NumpyTransformerError(f"unknown task {name!r}: expected one of {', '.join(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def task_from_dict(d, data_dir: Optional[str] = None) -> Task:
    """Rebuild a task from :meth:`Task.to_dict` (a checkpoint's ``task`` field), checking it."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise NumpyTransformerError("task must be a dict with a 'name'")
    cls = task_class(d["name"])
    for key, kind in (("data", dict), ("model", dict), ("state", dict)):
        if not isinstance(d.get(key), kind):
            raise NumpyTransformerError(f"task.{key} must be a JSON object, got {type(d.get(key)).__name__}")
    missing = [f"task.{key}.{f.name}" for key, c in (("data", cls.Data), ("model", ModelSettings))
               for f in dataclasses.fields(c)
               if f.name not in d[key] and not (key == "data" and f.name in cls.later_fields)]  # no silent defaults
    if missing:
        raise NumpyTransformerError(f"task settings are incomplete: {', '.join(missing)} missing")
    try:
        data, model = cls.Data(**d["data"]), ModelSettings(**d["model"])
    except TypeError as e:  # a field missing or unknown
        raise NumpyTransformerError(f"task settings do not fit this version ({e})") from None
    try:
        return cls(data, model, data_dir=data_dir, state=d["state"])
    except NumpyTransformerError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a damaged vocabulary
        raise NumpyTransformerError(f"task.state does not fit the {cls.name} task ({type(e).__name__}: {e})") from None
