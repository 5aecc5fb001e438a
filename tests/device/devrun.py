"""What the GPU-machine scripts (cuda_e2e.py, gpu_deep.py) share: ember's
server and agent run from build/devbundle (scripts/device-bundle.sh), the
checks they print and count, and the GPU flamegraph once it has settled.
EMBER_E2E_FAKE=1 runs a script on the TEST-ONLY fake driver instead."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from harness import Agent, Server, gpu_flamegraph, wait_until  # noqa: E402

FAKE = os.environ.get("EMBER_E2E_FAKE") == "1"
BUNDLE = os.path.join(ROOT, "build", "devbundle", "bin")
results, failures = {"fake_driver": FAKE}, []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def bundled(proc):
    """Runs the process's program from the bundle (its own libraries)."""
    proc.argv = [os.path.join(BUNDLE, os.path.basename(proc.argv[0]))] + proc.argv[1:]
    return proc


def start(out):
    """ember-server and ember-agent from the bundle, data and the CUDA
    profiler directory under out; the library the agent installs."""
    server = bundled(Server(os.path.join(out, "data"))).start()
    agent = bundled(Agent(server.url, f"-cuda-profiler-dir={os.path.join(out, 'profiler')}")).start()
    return server, agent, os.path.join(out, "profiler", "libembercuda.so")


def settled(server, query, timeout=90):
    """The GPU flamegraph once its total is non-zero and the same three
    seconds in a row."""
    hist = []

    def done():
        hist.append(gpu_flamegraph(server, query)["total"])
        return hist[-1] > 0 and hist[-3:] == [hist[-1]] * 3
    wait_until(done, timeout, interval=1.0, what=f"GPU time of {query}")
    return gpu_flamegraph(server, query)
