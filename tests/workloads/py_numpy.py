"""Python calling into numpy's C code: crunch() sorts large arrays, so
most of its time is in numpy's compiled sort under the crunch frame.

usage: py_numpy.py SECONDS"""
import sys
import time

import numpy as np


def crunch(rng):
    a = rng.random(200_000)
    a.sort(kind="quicksort")
    return a[0]


def main(seconds):
    rng = np.random.default_rng(1)
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        crunch(rng)
        n += 1
    print(n)


main(float(sys.argv[1]) if len(sys.argv) > 1 else 8)
