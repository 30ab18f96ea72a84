"""Why settings._kind caches the field types: what checking a settings object costs with and
without the cache (typing.get_type_hints evaluates every annotation of the class, and
check_fields asks for the type of each field).

Minimum of 5 blocks of 500 objects, wall time::

    python benchmarks/micro_settings_check.py
"""
import os
import sys
import timeit
import typing

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpytransformer.training.settings as settings
from numpytransformer.training.settings import ModelSettings  # noqa: E402
from numpytransformer.tasks.translate import TranslateData  # noqa: E402


def best(f, n=500):
    return min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6


classes = (ModelSettings, TranslateData)
for cls in classes:
    print(f"typing.get_type_hints({cls.__name__}): {best(lambda: typing.get_type_hints(cls)):.0f} us "
          f"({len(typing.get_type_hints(cls))} fields)")
cached = {cls: best(cls) for cls in classes}
settings._kind = settings._kind.__wrapped__  # the same function without its cache
for cls in classes:
    print(f"{cls.__name__}(): {cached[cls]:.0f} us with the cache, {best(cls):.0f} us without")
