"""The recommendations query (GET .../recommendations?kind=cpu) on a real
ember-server: 60 batches of 2 000 rows (an hour, 120 000 rows, 20
applications), computed (hot traces read from the store, then the
patterns), answered from the cache, and computed again after --recs-step.
Two shapes: 300 distinct stacks with skewed values (recommendations to
make) and every row its own random stack (nothing over the threshold, the
most stacks to symbolize and hash).

    PYTHONPATH=build/pydeps python3 bench/recs_query.py
"""
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from ember_batch import Batch, send_batch  # noqa: E402
from harness import DEFAULT_PROJECT, Server, http  # noqa: E402

FNS = [f"fn_{i}" for i in range(400)] + ["malloc", "memcpy", "pcre2_compile_8", "deflate_slow", "vsnprintf"]


def run(shape):
    random.seed(1)
    srv = Server(os.path.join(tempfile.mkdtemp(), "data"), None, "--recs-step=1s").start()
    now = int(time.time() * 1000)
    pool = [["main"] + [random.choice(FNS) for _ in range(random.randint(3, 12))] for _ in range(300)]
    for m in range(60):
        b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000cc", sample_rate_hz=19, host_cpus=16)
        for s in range(2000):
            app = f"svc-{s % 20}"
            if shape == "skewed":
                frames, value = pool[s % len(pool)], max(1, 3000 // (1 + s % len(pool)))
            else:
                frames, value = ["main"] + [random.choice(FNS) for _ in range(random.randint(3, 12))], random.randint(1, 50)
            b.add(frames, {"host.name": f"h{s % 8}", "process.executable.name": app}, value, binary=app)
        start = now - 3_600_000 + m * 60_000
        assert send_batch(srv.url, b.encode(sequence=m + 1, start_ms=start, end_ms=start + 5000))["stored"]
    url = f"{srv.url}/public/api/v1/project/{DEFAULT_PROJECT}/recommendations?kind=cpu"
    times = []
    for i in range(3):
        t = time.time()
        st, body = http("GET", url, timeout=300)
        times.append((time.time() - t) * 1000)
        assert st == 200, body
        n = len(json.loads(body)["recommendations"])
        if i == 1:
            time.sleep(1.1)
    srv.stop()
    print(f"{shape}: computed {times[0]:.0f} ms, cached {times[1]:.0f} ms, computed again {times[2]:.0f} ms; "
          f"{n} recommendations, {len(body)} bytes")


if __name__ == "__main__":
    run("skewed")
    run("random")
