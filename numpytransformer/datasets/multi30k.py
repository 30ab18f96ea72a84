"""Loader of Multi30K task 1 (Elliott et al., 2016): image captions, German-English.

The raw files are expected at ``<data_dir>/multi30k/<name>.<lang>.gz``: gzip,
UTF-8, one sentence per line, line i of each language the translation of line
i of the other. Sizes: train 29,000, val 1,014, test (``test_2016_flickr``) 1,000.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import List, Tuple, Union

from ..errors import NumpyTransformerError
from .paths import missing_file_error, reading, resolve_data_dir

#: Split name -> file stem in the raw data.
SPLIT_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}

#: Where to download the raw data.
SOURCE = "the public Multi30K repository https://github.com/multi30k/dataset (folder data/task1/raw/)"


def _read_lines(path: Path) -> List[str]:
    # Iterating the file splits on newlines only; str.splitlines would also split on
    # rare Unicode separators inside a sentence and break the line alignment.
    with reading(path, "gzip-compressed UTF-8 text, a sentence a line"), gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]


def load_multi30k(
    split: str,
    data_dir: Union[str, os.PathLike, None] = None,
    src_lang: str = "de",
    tgt_lang: str = "en",
) -> List[Tuple[str, str]]:
    """Load one split of Multi30K as aligned sentence pairs.

    Parameters
    ----------
    split : {"train", "val", "test"}
        ``"test"`` is the 2016 Flickr test set (``test_2016_flickr.*``).
    data_dir : str or path, optional
        Folder that contains ``multi30k/``. Defaults to ``$NUMPYTRANSFORMER_DATA``,
        else ``<repo root>/../shared/data``.
    src_lang, tgt_lang : str, default "de", "en"
        Language suffixes of the files.

    Returns
    -------
    list of (str, str)
        ``(source sentence, target sentence)`` per line, raw text without the newline.

    Raises
    ------
    FileNotFoundError
        If a file is missing; the message says which and how to point at the data.
    ValueError
        If the two files have different numbers of lines.
    """
    if split not in SPLIT_FILES:
        raise ValueError(f"load_multi30k: split={split!r}; expected one of {sorted(SPLIT_FILES)}")
    for name, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if not isinstance(lang, str) or not lang:
            raise ValueError(f"load_multi30k: {name}={lang!r}; expected a language code such as 'de' or 'en'")
    if src_lang == tgt_lang:
        raise ValueError(f"load_multi30k: src_lang and tgt_lang are both {src_lang!r}; expected two languages")

    root = resolve_data_dir(data_dir)
    paths = []
    for lang in (src_lang, tgt_lang):
        path = None if root is None else root / "multi30k" / f"{SPLIT_FILES[split]}.{lang}.gz"
        if path is None or not path.is_file():
            raise missing_file_error(path, "Multi30K", SOURCE)
        paths.append(path)

    src, tgt = (_read_lines(p) for p in paths)
    if len(src) != len(tgt):
        raise NumpyTransformerError(
            f"load_multi30k: {paths[0]} has {len(src)} lines but {paths[1]} has {len(tgt)}; "
            "expected the same number (line i of one is the translation of line i of the other)"
        )
    return list(zip(src, tgt))
