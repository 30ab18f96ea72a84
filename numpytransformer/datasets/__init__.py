"""Data sets and generators: reversal, an embedded translation pair, Multi30K, IMDB."""

from .batching import bucket_batches, pad_batch
from .imdb import clean_review, load_imdb, train_val_split
from .multi30k import load_multi30k
from .numbers import english_words, german_words, make_number_pairs
from .paths import DATA_ENV, default_data_dir
from .reverse import SymbolSequences, make_splits, seq2seq_batch, tagger_batch

__all__ = [
    "DATA_ENV",
    "SymbolSequences",
    "bucket_batches",
    "clean_review",
    "default_data_dir",
    "english_words",
    "german_words",
    "load_imdb",
    "load_multi30k",
    "make_number_pairs",
    "make_splits",
    "pad_batch",
    "seq2seq_batch",
    "tagger_batch",
    "train_val_split",
]
