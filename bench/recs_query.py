"""The recommendations on a real ember-server: 60 batches of 2 000 rows
(an hour, 120 000 rows, 20 applications). GET .../recommendations?kind=cpu
twice (answered from the last generation, which the background thread
made while the batches were sent); POST .../regenerate (the analysis
again over the same hot traces) and POST .../refresh (read again, then
the analysis), with the generation's own elapsed_ms; and the server's
CPU over 20 s of background generations at --recs-step=2s (the thread
alone: no request), per generation.
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
    srv = Server(os.path.join(tempfile.mkdtemp(), "data"), None, "--recs-step=2s").start()
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
    base = f"{srv.url}/public/api/v1/project/{DEFAULT_PROJECT}/recommendations"
    times = []
    for i in range(2):
        t = time.time()
        st, body = http("GET", base + "?kind=cpu", timeout=300)
        times.append((time.time() - t) * 1000)
        assert st == 200, body
    n = len(json.loads(body)["recommendations"])
    gen = {}
    for what in ("regenerate", "refresh"):
        t = time.time()
        st, out = http("POST", f"{base}/{what}", timeout=300)
        assert st == 200, out
        gen[what] = ((time.time() - t) * 1000, json.loads(out)["generation"]["elapsed_ms"])
    seq0 = json.loads(http("GET", base)[1])["generation"]["seq"]
    cpu0 = cpu_seconds(srv.proc.pid)
    time.sleep(20)
    cpu = cpu_seconds(srv.proc.pid) - cpu0
    gens = json.loads(http("GET", base)[1])["generation"]["seq"] - seq0
    srv.stop()
    print(f"{shape}: GET (from the last generation: the thread made one while the batches were sent) "
          f"{times[0]:.0f} ms, {times[1]:.0f} ms; "
          f"regenerate {gen['regenerate'][0]:.0f} ms (generation {gen['regenerate'][1]} ms), "
          f"refresh {gen['refresh'][0]:.0f} ms (generation {gen['refresh'][1]} ms); "
          f"background: {gens} generations in 20 s, server CPU {cpu * 1000 / max(1, gens):.0f} ms each "
          f"({cpu / 20 * 100:.1f} % of a core); {n} recommendations, {len(body)} bytes")


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

if __name__ == "__main__":
    run("skewed")
    run("random")
