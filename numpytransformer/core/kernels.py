"""The functions the library runs where a pair has a fast form, chosen in one place.

``kernels.linear_forward`` is :func:`numpytransformer.core.fast.linear_forward` while the fast
forms are on (the default) and :func:`numpytransformer.core.linear.linear_forward` while they are
off, and so for every name of ``fast.TEXTBOOK``. The Modules, the loss and Adam call through
this namespace (``kernels.layernorm_forward(x, gamma, beta, eps)``): a forward reads an
attribute, and the choice is made once, when :func:`numpytransformer.core.fast.use_fast` binds
every name. ``fast.py`` binds them when it is imported, which the package does first.

The names live in a file of their own so that the loss, beside the pairs, can read them
without importing the fast forms, which import the loss.
"""
from types import SimpleNamespace

__all__ = ["kernels"]

#: name -> the function the library runs for it; bound by :func:`numpytransformer.core.fast.use_fast`
kernels = SimpleNamespace()
