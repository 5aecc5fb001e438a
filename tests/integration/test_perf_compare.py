"""ember against `perf record --call-graph dwarf` on the same run of the
same workload (built without frame pointers): the five functions perf
finds hottest by self time have the same self shares in ember, within 3
percentage points. Needs root and the perf tool (Debian's linux-perf)."""

import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import require_root
from harness import WORKLOADS, wait_until

RATE = 499  # high, so that sampling noise stays far below the 3-point tolerance
SECONDS = 10


def perf_self_shares(data):
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                          "--no-demangle", "--sort", "sym", "-F", "overhead,sym", "-g", "none"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         check=True).stdout
    shares = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[[.k]\]\s+(.+?)\s*$", line)
        if m:
            shares[m.group(2)] = shares.get(m.group(2), 0.0) + float(m.group(1)) / 100
    return shares


def ember_self_shares(tree):
    shares = {}

    def walk(n):
        if n["self"] and n["frame_type"] not in ("root", "synthetic"):
            shares[n["name"]] = shares.get(n["name"], 0) + n["self"]
        for c in n["children"]:
            walk(c)
    walk(tree["root"])
    total = tree["total"]
    return {k: v / total for k, v in shares.items()}


@pytest.mark.parametrize("exe,args", [("unwind_cpp", ()), ("unwind_c", ("chain",))])
def test_top_functions_match_perf(server, agent_factory, tmp_path, exe, args):
    require_root()
    if not shutil.which("perf"):
        pytest.fail("perf is not installed (Debian package linux-perf)")
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    w = subprocess.Popen([os.path.join(WORKLOADS, exe), *args, str(SECONDS)],
                         stdout=subprocess.DEVNULL)
    time.sleep(0.5)  # both profilers have found the process
    data = str(tmp_path / "perf.data")
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(RATE), "--call-graph",
                    "dwarf", "-p", str(w.pid), "-o", data], check=True,
                   stderr=subprocess.DEVNULL, timeout=SECONDS + 30)
    w.wait(30)
    q = f'process.executable.name == "{exe}"'
    wait_until(lambda: server.flamegraph(q)["total"] > RATE * SECONDS * 0.8, 30, interval=1.0,
               what="ember's samples")
    time.sleep(2)
    perf = perf_self_shares(data)
    # The whole run (perf missed only its first half second; these
    # workloads do the same thing throughout), names as compiled, as perf
    # reports them with --no-demangle.
    tree = server.flamegraph(q, raw_names=True)
    ember = ember_self_shares(tree)
    top = sorted(perf, key=perf.get, reverse=True)[:5]
    print(f"\n{exe}: self shares of perf's top five ({tree['total']} ember samples)")
    print(f"{'function':70s} {'perf':>7s} {'ember':>7s}")
    for f in top:
        print(f"{f[:70]:70s} {100 * perf[f]:6.2f}% {100 * ember.get(f, 0):6.2f}%")
    for f in top:
        assert abs(perf[f] - ember.get(f, 0)) <= 0.03, (f, perf[f], ember.get(f, 0))
