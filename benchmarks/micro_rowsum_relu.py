"""Two microbenchmarks behind two fast forms of ``core/fast.py``: a row sum over short rows as
NumPy's reduction and as an einsum, and ReLU as a float-by-bool product and as ``np.maximum``.

float32, median CPU time of 7 blocks of 200 calls::

    OPENBLAS_NUM_THREADS=1 python benchmarks/micro_rowsum_relu.py
"""
import statistics, time
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def t(f, n=200, r=7):
    f(); out = []
    for _ in range(r):
        t0 = time.process_time()
        for _ in range(n): f()
        out.append((time.process_time() - t0) / n * 1e3)
    return statistics.median(out)
rng = np.random.default_rng(0)
p = rng.random((128, 4, 20, 20), dtype=np.float32)  # 10,240 rows of 20
x = rng.standard_normal((128, 20, 256), dtype=np.float32)
print(f"numpy {np.__version__}; rows of 20, shape {p.shape}")
print(f"p.sum(axis=-1, keepdims=True)      {t(lambda: p.sum(axis=-1, keepdims=True)):.3f} ms")
print(f"np.einsum('...j->...', p)[..., None] {t(lambda: np.einsum('...j->...', p)[..., None]):.3f} ms")
print(f"ReLU on {x.shape}")
print(f"x * (x > 0)            {t(lambda: x * (x > 0)):.3f} ms")
print(f"np.maximum(x, 0)       {t(lambda: np.maximum(x, 0)):.3f} ms")
print(f"x > 0 (the mask)       {t(lambda: x > 0):.3f} ms")
# How far the einsum's sums (no pairwise summation) leave a float32 softmax row from summing to 1.
from numpytransformer.core.fast import softmax  # noqa: E402  (the form whose row sums are einsums)

for V in (8000, 100_000):
    z = (rng.standard_normal((64, V)) * 3).astype(np.float32)
    print(f"softmax of 64 rows of {V:,} float32 logits (3 N(0,1)): largest |row sum - 1| "
          f"{np.abs(softmax(z).astype(np.float64).sum(axis=-1) - 1).max():.1e}")
