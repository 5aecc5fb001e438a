"""A Python workload with a known split of CPU time between three
functions: each round runs alpha for 5 ms, beta for 3 ms and gamma for
2 ms of this thread's CPU time (50 % / 30 % / 20 %), in pure Python.
Each call's time is drawn around its mean (+-50 %) and each round's order
is shuffled: a strictly periodic workload could alias with the periodic
sampler (a 10 ms round against 499 Hz drifts by only 0.02 ms a round) and
put its samples in one phase of the round. Prints a JSON report with the
CPU time each really got.

usage: py_split.py SECONDS"""
import json
import random
import sys
import time


def spin(ms):
    end = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i
    return x


def alpha(scale):
    return spin(5 * scale)


def beta(scale):
    return spin(3 * scale)


def gamma(scale):
    return spin(2 * scale)


def main(seconds):
    used = {"alpha": 0.0, "beta": 0.0, "gamma": 0.0}
    fns = [("alpha", alpha), ("beta", beta), ("gamma", gamma)]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        random.shuffle(fns)
        for name, fn in fns:
            t0 = time.thread_time()
            fn(random.uniform(0.5, 1.5))
            used[name] += time.thread_time() - t0
    total = sum(used.values())
    print(json.dumps({"version": sys.version.split()[0],
                      "shares": {k: v / total for k, v in used.items()}}))


main(float(sys.argv[1]) if len(sys.argv) > 1 else 8)
