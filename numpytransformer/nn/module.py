"""The thin module layer that sits on top of the pure forward/backward functions.

A :class:`Module` holds two dicts with the same keys, ``params`` and ``grads``.
``forward`` keeps what the backward pass needs (the *cache*), ``backward(dout)``
returns the gradient with respect to the input and *accumulates* (``+=``) the
parameter gradients, so that a weight used twice (tied embeddings) receives the
sum of both contributions, exactly as the chain rule says.

A module's ``forward`` is a public entry point: it checks its inputs (dtype, shape,
finite values, ids in range) and raises
:class:`~numpytransformer.errors.NumpyTransformerError` naming the bad one, while
the pure functions it calls assume good inputs. Inside a model, whose public method
has already checked what came in, the modules skip these checks
(:func:`~numpytransformer.validation.needs_checks` is False there).
"""
from __future__ import annotations

from typing import Dict, Iterator, List, Tuple

import numpy as np

from ..validation import check_bool

__all__ = ["Module", "ModuleList"]


class Module:
    """Base class: parameters, gradients, children, train/eval mode.

    Children are registered by plain attribute assignment (``self.norm = LayerNorm(...)``),
    so nested names such as ``encoder.layers.0.self_attn.W_q`` come for free.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_children", {})
        self.params: Dict[str, np.ndarray] = {}
        self.grads: Dict[str, np.ndarray] = {}
        self.training = True
        self._cache = None

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Module):
            self._children[name] = value
        object.__setattr__(self, name, value)

    # ---- parameters -------------------------------------------------------
    def add_param(self, name: str, value: np.ndarray) -> np.ndarray:
        """Register a parameter and a zero gradient of the same shape and dtype."""
        self.params[name] = value
        self.grads[name] = np.zeros_like(value)
        return value

    def named_modules(self, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        """Yield ``(dotted_name, module)`` for this module and every descendant."""
        yield prefix, self
        for name, child in self._children.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def parameters(self) -> Dict[str, np.ndarray]:
        """All parameters by dotted name. The arrays are the live ones, not copies."""
        out = {}
        for prefix, mod in self.named_modules():
            for k, v in mod.params.items():
                out[f"{prefix}.{k}" if prefix else k] = v
        return out

    def gradients(self) -> Dict[str, np.ndarray]:
        """All gradients by dotted name, with the same keys as :meth:`parameters`."""
        out = {}
        for prefix, mod in self.named_modules():
            for k, v in mod.grads.items():
                out[f"{prefix}.{k}" if prefix else k] = v
        return out

    def zero_grad(self) -> None:
        """Set every gradient to zero in place (the optimiser keeps references)."""
        for _, mod in self.named_modules():
            for g in mod.grads.values():
                g.fill(0)

    def num_parameters(self) -> int:
        return int(sum(p.size for p in self.parameters().values()))

    # ---- modes ------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Switch dropout on (``mode=True``) or off, for this module and its children."""
        mode = check_bool(mode, "mode")
        for _, mod in self.named_modules():
            mod.training = mode
        return self

    def eval(self) -> "Module":
        return self.train(False)

    # ---- forward/backward bookkeeping ---------------------------------------
    def _pop_cache(self):
        """Return the forward cache and release it; a clear error if there is none."""
        cache = self._cache
        if cache is None:
            raise RuntimeError(
                f"{type(self).__name__}.backward was called before forward "
                "(or twice for one forward): run forward first"
            )
        self._cache = None
        return cache

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, dout):  # pragma: no cover - abstract
        raise NotImplementedError


class ModuleList(Module):
    """An ordered list of modules whose parameters are named ``0.W``, ``1.W`` ..."""

    def __init__(self, modules: List[Module]) -> None:
        super().__init__()
        self._items = list(modules)
        for i, m in enumerate(self._items):
            self._children[str(i)] = m

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> Module:
        return self._items[i]
