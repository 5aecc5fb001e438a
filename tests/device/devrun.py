"""What the GPU-machine scripts (cuda_e2e.py, gpu_deep.py) share: ember's
server and agent run from build/devbundle (scripts/device-bundle.sh), the
programs they run injected with the library the agent installs, the checks
they print and count, the GPU flamegraph once it has settled, and the
results file they end with.
EMBER_E2E_FAKE=1 runs a script on the TEST-ONLY fake driver instead."""

import filecmp
import json
import os
import subprocess
import sys
import time

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


def stale_bundle():
    """Why build/devbundle is not the build it is run with, or None. A
    bundle made before the last build runs an older agent, whose library
    may lack what the script checks (a bundle from before PC sampling made
    gpu_deep.sh see 0 % of kernel time under cuda_sass): its binaries must
    be build/bin's (where this checkout has them; the GPU machine gets the
    bundle alone)."""
    for prog in ("ember-server", "ember-agent"):
        built = os.path.join(ROOT, "build", "bin", prog)
        packed = os.path.join(ROOT, "build", "devbundle", "real", prog)
        if os.path.exists(built) and not filecmp.cmp(built, packed, shallow=False):
            return f"build/devbundle/real/{prog} is not build/bin/{prog}"
    return None


def stale_library(installed):
    """Why the library the bundle's agent installed is not build/lib's
    (the one this checkout built, carried to the GPU machine), or None."""
    built = os.path.join(ROOT, "build", "lib", "libembercuda.so")
    if not filecmp.cmp(built, installed, shallow=False):
        return f"the agent installed another libembercuda.so than {built}"
    return None


def start(out, *server_flags):
    """ember-server (with server_flags) and ember-agent from the bundle,
    data and the CUDA profiler directory under out; the library the agent
    installs. Exits at once when the bundle is not this build's."""
    why = stale_bundle()
    if why:
        sys.exit(f"FAIL stale bundle: {why}; rerun: make all gpu-test && scripts/device-bundle.sh")
    os.makedirs(out, exist_ok=True)
    server = bundled(Server(os.path.join(out, "data"), None, *server_flags)).start()
    agent = bundled(Agent(server.url, f"-cuda-profiler-dir={os.path.join(out, 'profiler')}")).start()
    lib = os.path.join(out, "profiler", "libembercuda.so")
    try:
        wait_until(lambda: os.path.exists(lib) and f"CUDA_INJECTION64_PATH={lib}" in agent.output(), 30,
                   what="the agent to install the library")
        why = stale_library(lib)
    except BaseException:
        agent.stop()
        server.stop()
        raise
    if why:
        agent.stop()
        server.stop()
        sys.exit(f"FAIL stale bundle: {why}; rerun: make all gpu-test && scripts/device-bundle.sh")
    return server, agent, lib


def injected_env(lib):
    """This environment without EMBER_CUDA_* settings, the real driver
    loading lib as its injection library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_CUDA_")}
    env["CUDA_INJECTION64_PATH"] = lib
    return env


def run(cmd, env, timeout=300, show_stderr=lambda r: r.returncode != 0):
    """Runs cmd, printing it with its time and exit status, and the tail of
    its stderr where show_stderr(result) says so."""
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)[:90]} ({time.monotonic() - t0:.1f} s, exit {r.returncode})", flush=True)
    if show_stderr(r):
        print(r.stderr[-3000:])
    return r


def finish(server, agent, path):
    """Stops the agent and the server and writes results (with the failed
    checks) to path."""
    agent.stop()
    server.stop()
    results["failures"] = failures
    with open(path, "w") as f:
        json.dump(results, f, indent=1, default=str)


def settled(server, query, timeout=90):
    """The GPU flamegraph once its total is non-zero and the same three
    seconds in a row."""
    hist = []

    def done():
        hist.append(gpu_flamegraph(server, query)["total"])
        return hist[-1] > 0 and hist[-3:] == [hist[-1]] * 3
    wait_until(done, timeout, interval=1.0, what=f"GPU time of {query}")
    return gpu_flamegraph(server, query)
