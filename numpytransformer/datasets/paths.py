"""Where the real data sets live on disk.

The data are never copied into the repository. A loader finds them, in order:

1. the ``data_dir`` argument it was given;
2. the environment variable ``NUMPYTRANSFORMER_DATA`` (see :data:`DATA_ENV`);
3. ``<repo root>/../shared/data`` if that folder exists (the layout of the
   development checkout).
"""

from __future__ import annotations

import contextlib
import os
import zlib
from pathlib import Path
from typing import Optional, Sequence, Union

from ..errors import NumpyTransformerError

#: Name of the environment variable that points at the data folder.
DATA_ENV = "NUMPYTRANSFORMER_DATA"

# numpytransformer/datasets/paths.py -> parents[2] is the repository root.
_REPO_ROOT = Path(__file__).resolve().parents[2]
_FALLBACK_DIR = _REPO_ROOT.parent / "shared" / "data"


def default_data_dir() -> Optional[Path]:
    """Return the default data folder, or ``None`` when none is configured.

    Returns
    -------
    pathlib.Path or None
        ``$NUMPYTRANSFORMER_DATA`` if set and non-empty, else
        ``<repo root>/../shared/data`` if it exists, else ``None``.
    """
    env = os.environ.get(DATA_ENV, "").strip()
    if env:
        return _expand(env, f"${DATA_ENV}")
    if _FALLBACK_DIR.is_dir():
        return _FALLBACK_DIR
    return None


def resolve_data_dir(data_dir: Union[str, os.PathLike, None]) -> Optional[Path]:
    """Return ``data_dir`` as a path, or :func:`default_data_dir` when it is ``None``."""
    if data_dir is not None:
        return _expand(data_dir, "--data-dir")
    return default_data_dir()


def _expand(path, name: str) -> Path:
    try:
        return Path(path).expanduser()
    except RuntimeError as e:  # "~someone" of no known user
        raise NumpyTransformerError(f"{name} {path}: {e}") from None


@contextlib.contextmanager
def reading(path: Path, expected: str):
    """Errors of reading the data file ``path`` as one error naming it and what it should be:
    not gzip, a truncated or damaged file, text that is not UTF-8."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise NumpyTransformerError(f"{path} cannot be read ({type(e).__name__}: {e}); expected {expected}") from None


def missing_file_error(path: Union[Path, Sequence[Path], None], what: str, source: str) -> FileNotFoundError:
    """Build a FileNotFoundError that tells the user how to fix it.

    Parameters
    ----------
    path : pathlib.Path, sequence of pathlib.Path, or None
        The file that was looked for, or every place that was looked at (a data set
        that comes in more than one layout); ``None`` when no data folder is configured.
    what : str
        A short name of the data set, e.g. ``"Multi30K"``.
    source : str
        Where the public data can be downloaded.
    """
    if path is None:
        where = "no data folder is configured"
    elif isinstance(path, (str, os.PathLike)):
        where = f"file not found: {path}"
    else:
        where = "found none of " + ", ".join(str(p) for p in path)
    return FileNotFoundError(
        f"{what}: {where}. Pass --data-dir on the command line (data_dir=... in Python) or set "
        f"the environment variable {DATA_ENV} to the folder that holds the data (default: "
        f"<repo root>/../shared/data). The public data is at {source}."
    )
