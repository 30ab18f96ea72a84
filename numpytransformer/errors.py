"""The project's one error type.

Every bad input that reaches a public entry point (a module, a model, the loss, the
config, checkpoint loading, the command line) raises :class:`NumpyTransformerError`
with one line that names the argument and says what was expected. The command line
prints that line and exits with status 2; any other exception is a bug.
"""

__all__ = ["NumpyTransformerError"]


class NumpyTransformerError(ValueError):
    """Bad input: the message names the argument (or file and field) and what was expected.

    A subclass of ``ValueError``, so ``except ValueError`` keeps working.
    """
