"""GELU (Hendrycks and Gimpel, 2016): ``out = x * Phi(x)``, the activation of BERT and GPT-2.

ReLU gates its input by a step, ``x * [x > 0]``; GELU gates it by the probability
``Phi(x)`` that a standard normal variable is below ``x``, a smooth step. Two forms are
in use: the exact one with the error function (BERT's ``"gelu"``) and GPT-2's tanh
approximation (``"gelu_new"``). The method is lesson 1 (Backprop by hand), §4's for ReLU;
the activation sits where ReLU sits in the FFN of lesson 6 (LayerNorm, the FFN and
residuals), §3.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["gelu_forward", "gelu_backward", "erf", "TANH_C", "TANH_K"]

#: The tanh form's constants: ``Phi(x) ~ (1 + tanh(C (x + K x^3))) / 2`` with ``C = sqrt(2 / pi)``.
TANH_C = math.sqrt(2.0 / math.pi)
TANH_K = 0.044715

# math.erf is correctly rounded to within an ulp; applied element by element it is slow but
# exact, which is what a reference needs.
_erf_of_each = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function elementwise, in ``x``'s dtype, from :func:`math.erf` (float64 inside)."""
    return _erf_of_each(np.asarray(x, dtype=np.float64)).astype(np.result_type(x, np.float32))


class GELUCache(NamedTuple):
    x: np.ndarray
    approximate: bool
    gate: np.ndarray  # Phi(x) (exact) or (1 + tanh(u)) / 2 (tanh form), shaped like x


def gelu_forward(x: np.ndarray, approximate: bool = False):
    """:math:`\\text{GELU}(x) = x\\,\\Phi(x)` elementwise. Returns ``(out, cache)``.

    .. math:: \\Phi(x) = \\tfrac12\\big(1 + \\text{erf}(x/\\sqrt2)\\big)
              \\quad\\text{or, with ``approximate``,}\\quad
              \\Phi(x) \\approx \\tfrac12\\big(1 + \\tanh(\\sqrt{2/\\pi}\\,(x + 0.044715\\,x^3))\\big)

    ``approximate=False`` is ``torch.nn.functional.gelu(x)``; ``approximate=True`` is GPT-2's
    ``gelu_new`` (``gelu(x, approximate="tanh")``). Assumes a finite float ``x``. The method is
    lesson 1 (Backprop by hand), §4's; the activation is the FFN's of lesson 6, §3.

    Parameters
    ----------
    x : ndarray, any shape
    approximate : bool

    Returns
    -------
    out : ndarray, shaped like ``x``
    cache : GELUCache
    """
    if approximate:
        u = TANH_C * (x + TANH_K * x ** 3)
        th = np.tanh(u)
        gate = 0.5 * (1.0 + th)
    else:
        gate = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    out = x * gate
    return out, GELUCache(x, bool(approximate), gate)


def gelu_backward(dout: np.ndarray, cache: GELUCache) -> np.ndarray:
    """dx of GELU, shaped like ``x``; ``cache.gate`` is the forward's ``g(x)``.

    .. solution-only::

        ``out = x g(x)``, so by the product rule ``dout/dx = g(x) + x g'(x)``: for the exact form
        ``g = Phi`` and ``g' = phi``, the normal density; for the tanh form
        ``g' = (1 - tanh^2 u) C (1 + 3 K x^2) / 2``.

    Sibling of lesson 1 (Backprop by hand), §4's ReLU backward.
    """
    x = cache.x
    if cache.approximate:
        ### BEGIN SOLUTION 1.2: dx of GPT-2's tanh GELU, x (1 + tanh(u)) / 2 with u = C (x + K x^3)
        th = 2.0 * cache.gate - 1.0  # tanh(u), from the forward's gate
        dgate = 0.5 * (1.0 - th ** 2) * TANH_C * (1.0 + 3.0 * TANH_K * x ** 2)  # the chain rule through tanh(u(x))
        dx = dout * (cache.gate + x * dgate)
        ### END SOLUTION
    else:
        ### BEGIN SOLUTION 1.1: dx of the exact GELU, x Phi(x) with Phi the standard normal's distribution function
        dgate = np.exp(-0.5 * x ** 2) / math.sqrt(2.0 * math.pi)  # the normal density phi(x)
        dx = dout * (cache.gate + x * dgate)
        ### END SOLUTION
    return dx
