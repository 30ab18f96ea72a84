"""numpytransformer: the Transformer of "Attention Is All You Need" in pure NumPy.

Every operation is a pair of pure functions ``*_forward(...) -> (out, cache)`` and
``*_backward(dout, cache) -> grads``, with thin modules on top; every backward pass
is checked against finite differences (:mod:`numpytransformer.core.gradcheck`). The pairs are written
as the lessons derive them; the Modules run the equal, faster forms of :mod:`numpytransformer.core.fast`
unless ``fast.use_fast(False)`` (or ``NUMPYTRANSFORMER_FAST=0``) asks for the textbook pairs.
"""
from .core import fast, gradcheck
from .nn.config import TransformerConfig
from .nn.gpt import TransformerLM
from .nn.models import Transformer, TransformerClassifier, TransformerTagger
from .training.optim import Adam, NoamSchedule, clip_grad_norm

__version__ = "0.1.0"

__all__ = ["fast", "gradcheck", "TransformerConfig", "Transformer", "TransformerTagger", "TransformerClassifier", "TransformerLM",
           "Adam", "NoamSchedule", "clip_grad_norm"]
