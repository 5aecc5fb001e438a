"""The unwind table on a host that keeps starting new programs, as root with
real BPF: 150 distinct binaries of 8 000 functions each (built without frame
pointers, each copy with its own build ID, so each is a new file with a
table of ~50 000 rows) run and exit; then a fresh binary of ~60 000 rows,
also without frame pointers, must still be unwound by ember's CFI unwinder:
>= 99 % of its samples reach main and its measured CPU split holds within 3
points. The table is 2 Mi rows (the old fixed size), so the churn fills it
several times over: the agent must give back the tables of programs that
exited (or evict the least recently sampled ones) and say so in its
counters. With a table that is never given back (the bump allocator before
this test) every table after the first ~40 binaries is refused and the
fresh binary is unwound by frame pointer: no sample reaches main."""

import json
import os
import re
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from conftest import require_root
from harness import free_port, wait_until

RATE = 97
# The full size (16 000 functions: ~100 000 rows a binary, the
# fresh one ~110 000) is the bench's (EMBER_CHURN_FUNCS=16000,
# scripts/bench.sh); make test runs half of it.
FUNCS = int(os.environ.get("EMBER_CHURN_FUNCS", "8000"))
COPIES = 150
TABLE_ROWS = 2 * 1024 * 1024
HERE = os.path.dirname(__file__)
CPU_SPLIT = os.path.join(HERE, "..", "workloads", "cpu_split.c")

CHURN_MAIN = r"""
#include <stdlib.h>
#include <time.h>
extern long (*const uw_table[])(long);
extern const unsigned long uw_nfuncs;
static double cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}
int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 0.2, t0 = cpu();
	long x = 1;
	for (unsigned long i = 0; cpu() - t0 < secs; i++)
		x += uw_table[i % uw_nfuncs](x);
	return (int)(x & 1) * 0;
}
"""

# cpu_split's main, linked with the generated functions so that its table
# is as large as a real program's (the functions are referenced, not run).
FRESH_REF = r"""
extern long (*const uw_table[])(long);
long (*const *uw_keep)(long) __attribute__((used)) = uw_table;
"""


def generate(path):
    """FUNCS functions that each keep three values across two calls: a
    prologue and epilogue of pushes and pops, so ~7 CFI rows each."""
    out = ["volatile long uw_sink;",
           "__attribute__((noinline)) long uw_ext(long v) { uw_sink += v; return v * 3; }"]
    for i in range(FUNCS):
        out.append(f"__attribute__((noinline)) long uw_f{i}(long x) {{ long a = uw_ext(x + {i}); "
                   f"long b = uw_ext(a ^ x); long c = uw_ext(b + a); return a + b * {i % 97 + 1} + c + x; }}")
    out.append("long (*const uw_table[])(long) = {" + ",".join(f"uw_f{i}" for i in range(FUNCS)) + "};")
    out.append(f"const unsigned long uw_nfuncs = {FUNCS};")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def build_id(path):
    notes = subprocess.run(["readelf", "-n", path], check=True, capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", notes)
    assert m, "no GNU build ID in " + path
    return bytes.fromhex(m.group(1))


def copies(src, dst_dir, n):
    """n copies of src, each with a different build ID (hence a different
    file id too: the note is in the first 4 KiB)."""
    data = open(src, "rb").read()
    bid = build_id(src)
    assert data.count(bid) == 1
    paths = []
    for i in range(n):
        new = (b"%08d" % i) + bid[8:]
        p = os.path.join(dst_dir, f"uw_churn{i:03d}")
        with open(p, "wb") as f:
            f.write(data.replace(bid, new))
        os.chmod(p, 0o755)
        paths.append(p)
    return paths


def stats(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/stats", timeout=10) as r:
        return json.load(r)


def total_named(node, name):
    if node["name"] == name:
        return node["total"]
    return sum(total_named(c, name) for c in node["children"])


def test_fresh_binary_unwound_after_150_binaries(server, agent_factory, tmp_path, monkeypatch):
    require_root()
    gen = tmp_path / "gen.c"
    generate(gen)
    cc = ["gcc", "-std=gnu11", "-O1", "-fomit-frame-pointer", "-fno-inline"]
    subprocess.run(cc + ["-c", str(gen), "-o", str(tmp_path / "gen.o")], check=True)
    (tmp_path / "churn.c").write_text(CHURN_MAIN)
    subprocess.run(cc + [str(tmp_path / "churn.c"), str(tmp_path / "gen.o"), "-Wl,--build-id",
                         "-o", str(tmp_path / "churn")], check=True)
    (tmp_path / "ref.c").write_text(FRESH_REF)
    fresh = str(tmp_path / "uw_fresh")
    subprocess.run(cc + [CPU_SPLIT, str(tmp_path / "ref.c"), str(tmp_path / "gen.o"),
                         "-o", fresh], check=True)
    bins = copies(str(tmp_path / "churn"), str(tmp_path), COPIES)

    # The size by environment variable, which an agent that does not know
    # the flag ignores (so this test also runs against older agents).
    monkeypatch.setenv("EMBER_UNWIND_TABLE_ROWS", str(TABLE_ROWS))
    port = free_port()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", f"-pprof=127.0.0.1:{port}").start()

    # The churn: each copy runs 0.2 s of CPU (sampled, so the agent reads
    # it and builds its table), four at a time, and exits.
    with ThreadPoolExecutor(4) as pool:
        for rc in pool.map(lambda p: subprocess.run([p, "0.2"], timeout=120).returncode, bins):
            assert rc == 0
    before = stats(port)
    print("after the churn:", {k: v for k, v in before.items() if k.startswith("unwind_table")})
    # What the walks broken in queued tables cost: raw stacks sent, skipped
    # (ring buffer past a quarter), unwound late, expired.
    print("raw stacks:", {k: v for k, v in before.items() if "raw_stacks" in k})
    # The agent has built the tables it was asked for (or refused them).
    def drained():
        s = stats(port)
        done = sum(s.get(k, 0) for k in ("unwind_tables_loaded_total", "unwind_tables_reloaded_total",
                                         "unwind_tables_failed_total", "unwind_tables_refused_total"))
        return s["unwind_tables_queued_total"] <= done + 2
    for _ in range(60):
        if drained():
            break
        time.sleep(1)

    seconds = 10
    report = json.loads(subprocess.run([fresh, str(seconds)], check=True, stdout=subprocess.PIPE,
                                       timeout=300).stdout)
    q = 'process.executable.name == "uw_fresh"'
    expected = RATE * report["cpu_seconds"] * 0.5

    def enough():
        t = server.flamegraph(q)
        return t if t["total"] >= expected else None
    wait_until(enough, 60, interval=1.0, what="samples of uw_fresh")
    wait_until(lambda: server.flamegraph(q)["total"] == server.flamegraph(q)["total"], 5)
    tree = server.flamegraph(q)
    total = tree["total"]
    reached = total_named(tree["root"], "main")
    after = stats(port)
    print({k: v for k, v in after.items() if k.startswith("unwind_table")})
    print(f"uw_fresh: {reached}/{total} samples reach main ({100 * reached / total:.1f}%)")
    assert reached / total >= 0.99, f"only {reached}/{total} samples reach main"
    for fn in ("hot_a", "hot_b", "cold_c"):
        share = total_named(tree["root"], fn) / total
        print(f"{fn}: {100 * share:.1f}% sampled, {100 * report[fn]:.1f}% measured")
        assert abs(share - report[fn]) <= 0.03, fn
    # The churn went through the table more than once: tables were given
    # back (their programs exited) or evicted (least recently sampled).
    assert after["unwind_tables_reclaimed_total"] + after["unwind_tables_evicted_total"] > 0
    assert after["unwind_table_entries"] <= after["unwind_table_entries_capacity"]
