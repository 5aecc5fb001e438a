"""Two Python threads, each spinning in its own function (worker_a and
worker_b) for SECONDS; they take turns on the interpreter lock, so each
gets about half of the process's CPU time. Prints the CPU time each got.

usage: py_threads.py SECONDS"""
import json
import sys
import threading
import time


def spin_until(deadline):
    used = time.thread_time()
    x = 0
    while time.monotonic() < deadline:
        for i in range(200):
            x += i * i
    return time.thread_time() - used


def worker_a(deadline, out):
    out["worker_a"] = spin_until(deadline)


def worker_b(deadline, out):
    out["worker_b"] = spin_until(deadline)


def main(seconds):
    deadline = time.monotonic() + seconds
    out = {}
    threads = [threading.Thread(target=f, args=(deadline, out)) for f in (worker_a, worker_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out))


main(float(sys.argv[1]) if len(sys.argv) > 1 else 6)
