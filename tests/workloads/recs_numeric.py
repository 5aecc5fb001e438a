"""recs_numeric - a planted interpreter-bound numeric loop for the
recommendations' integration test: `recs_numeric.py SECONDS [fixed]`
computes a sum of squares over an array in pure Python (or, fixed, with
NumPy) for SECONDS and prints {"iterations", "cpu_s", "wall_s",
"cpu_us_per_iteration"} (iterations: elements processed)."""
import json
import sys
import time

DATA = [float(i % 1000) / 7.0 for i in range(100_000)]


def sum_squares(values):
    total = 0.0
    for v in values:
        total += v * v + 0.5 * v
    return total


def sum_squares_numpy(arr):
    import numpy
    return float(numpy.dot(arr, arr) + 0.5 * arr.sum())


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    fixed = len(sys.argv) > 2 and sys.argv[2] == "fixed"
    arr = None
    if fixed:
        import numpy
        arr = numpy.array(DATA)
    w0, c0 = time.monotonic(), time.process_time()
    n = 0
    end = w0 + seconds
    while time.monotonic() < end:
        if fixed:
            sum_squares_numpy(arr)
        else:
            sum_squares(DATA)
        n += len(DATA)
    wall, cpu = time.monotonic() - w0, time.process_time() - c0
    print(json.dumps({"iterations": n, "cpu_s": cpu, "wall_s": wall,
                      "cpu_us_per_iteration": cpu * 1e6 / n if n else 0.0}))


if __name__ == "__main__":
    main()
