"""The real OpenTelemetry eBPF profiler sending to ember-server over
OTLP/gRPC, on loopback: its samples of cpu_split land in the flamegraph,
and with cpu_split's symbols uploaded the server names its frames through
the file id both share.

Not part of `make test`: the profiler is a Go module with a BPF object of
its own, built outside the suite (docs/internals/otlp-grpc.md and
../shared/research/peer-benchmarks.md say how). Run it, as root, with

    EMBER_OTEL_PROFILER=/path/to/ebpf-profiler \
        /usr/bin/python3 -m pytest -q tests/peer/test_otel_profiler_grpc.py
"""

import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from conftest import require_root  # noqa: E402  (tests/integration)
from harness import ROOT, http, run_workload, wait_until  # noqa: E402
from test_otlp_grpc import GrpcServer  # noqa: E402


def test_opentelemetry_ebpf_profiler(tmp_path):
    """The real OpenTelemetry eBPF profiler, which sends OTLP Profiles over
    gRPC only, profiles cpu_split into ember-server; with cpu_split's
    symbols uploaded the server names its frames through the file id both
    share. Its binary is built outside the suite (a Go module with a BPF
    object of its own; docs/internals/otlp-grpc.md says how) and named by
    EMBER_OTEL_PROFILER."""
    binary = os.environ.get("EMBER_OTEL_PROFILER")
    if not binary:
        pytest.fail("EMBER_OTEL_PROFILER must name the OpenTelemetry eBPF profiler's binary")
    require_root()
    mounted = False
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=True)
        mounted = True
    g = GrpcServer(tmp_path / "data").start()
    prof = subprocess.Popen([binary, f"-collection-agent=127.0.0.1:{g.grpc_port}", "-disable-tls",
                             "-samples-per-second=20", "-reporter-interval=5s"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        subprocess.run([os.path.join(ROOT, "build", "bin", "ember"), "upload-symbols", "-e", g.url,
                        os.path.join(ROOT, "build", "workloads", "cpu_split")], check=True,
                       stdout=subprocess.DEVNULL)
        time.sleep(10)  # it loads its BPF programs
        run_workload("cpu_split", 6)

        def named():
            fg = g.flamegraph('process.executable.name == "cpu_split"')
            names = set()
            stack = [fg["root"]]
            while stack:
                n = stack.pop()
                names.add(n["name"])
                stack.extend(n.get("children", []))
            return fg["total"] > 50 and {"main", "run_workload"} <= names
        wait_until(named, 40, what="cpu_split from the OpenTelemetry eBPF profiler")
        st, body = http("GET", g.url + "/metrics")
        assert b"ember_otlp_rejected_total 0" in body, body
    finally:
        prof.terminate()
        prof.wait(30)
        g.stop()
        if mounted:
            subprocess.run(["umount", "/sys/kernel/tracing"], check=False)
