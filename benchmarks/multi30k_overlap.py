"""How like the rest of Multi30K's training text is a held-out set? Why ``--holdout`` draws at random.

For the file's last 1,000 training pairs, 1,000 drawn at random (``--holdout 1000``'s draw), the
validation and the test split, this prints the share of their word n-grams that occur in the
training pairs left over, and their mean length; then the mean length of each block of 1,000
training lines, in file order. A set that shares fewer n-grams with the training text is harder
to translate, whatever the model.

    python benchmarks/multi30k_overlap.py        # NUMPYTRANSFORMER_DATA: the data folder
"""
from __future__ import annotations

import numpy as np

from numpytransformer.datasets.multi30k import load_multi30k
from numpytransformer.tasks.translate import holdout_split


def ngrams(sentence: str, n: int) -> list:
    words = sentence.split()
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def main() -> None:
    train, val, test = (load_multi30k(split) for split in ("train", "val", "test"))
    kept, drawn = holdout_split(train, 1000)  # as --holdout 1000
    held = {"the file's last 1,000": (train[-1000:], train[:-1000]), "1,000 drawn at random": (drawn, kept),
            "validation": (val, train), "test_2016_flickr": (test, train)}
    print(f"{'set':24} {'side':5} {'words':>6} {'1-grams':>8} {'2-grams':>8} {'4-grams':>8}  (share seen in training)")
    for name, (pairs, rest) in held.items():
        for side, lang in ((0, "de"), (1, "en")):
            shares = []
            for n in (1, 2, 4):
                seen = {g for p in rest for g in ngrams(p[side], n)}
                grams = [g for p in pairs for g in ngrams(p[side], n)]
                shares.append(f"{100 * sum(g in seen for g in grams) / len(grams):7.1f}%")
            words = np.mean([len(p[side].split()) for p in pairs])
            print(f"{name:24} {lang:5} {words:6.2f} {' '.join(shares)}")
    blocks = [np.mean([len(p[1].split()) for p in train[i:i + 1000]]) for i in range(0, len(train), 1000)]
    print("English words a sentence, each block of 1,000 training lines in file order:")
    print(" ".join(f"{b:.1f}" for b in blocks))


if __name__ == "__main__":
    main()
