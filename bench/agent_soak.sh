#!/usr/bin/env bash
# agent_soak - ember-agent on a host that keeps starting new programs, for
# MINUTES (default 30), at the default 19 Hz. As root, loopback only.
#
# The churn, all bounded by the deadline:
#   - DISTINCT generated C programs of 2 000 functions each, built without
#     frame pointers, each its own file (its own build ID): most run for
#     0.2-2 s, every tenth for a minute;
#   - a real C project compiled over and over: ember's own lib/*.c with
#     gcc -O2 (many short cc1/as processes);
#   - Python (the py_split workload), Go (unwind_go), and Python loading
#     large shared libraries (ssl, sqlite3, ctypes);
# Every INTERVAL seconds (EMBER_SOAK_INTERVAL, default 60) one line: the
# share of the interval's samples whose stack holds an error frame (asked
# of the server: the flamegraph of the interval), the unwind table's rows
# in use and capacity, tables reclaimed / evicted / reloaded / refused /
# loaded in part (the agent's -pprof counters), the agent's RSS and peak
# (VmHWM) and its CPU in the interval. The figures are in
# docs/performance.md ("A soak of process churn"). Exits 1 when the agent
# dies (the end of its log on stderr). tests/integration/test_agent_soak.py
# runs it for 2 minutes.
#
# usage: bench/agent_soak.sh [MINUTES] [DISTINCT]   (defaults 30, 300)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
distinct=${2:-300}
interval=${EMBER_SOAK_INTERVAL:-60}
[ "$(id -u)" -eq 0 ] || { echo "agent_soak: ember-agent needs root" >&2; exit 1; }
. bench/agent_env.sh
agent_env_start soak

# The generated programs: DISTINCT files, built before the clock starts.
echo "agent_soak: building $distinct distinct programs in $work/bin ..." >&2
mkdir -p "$work/bin" "$work/src" "$work/cc"
python3 - "$work/src" "$distinct" <<'PY'
import os, sys
out, n = sys.argv[1], int(sys.argv[2])
funcs = 2000
body = ["volatile long sk_sink;",
        "__attribute__((noinline)) long sk_ext(long v) { sk_sink += v; return v * 3; }"]
for i in range(funcs):
    body.append(f"__attribute__((noinline)) long sk_f{i}(long x) {{ long a = sk_ext(x + {i}); "
                f"long b = sk_ext(a ^ x); return a + b * {i % 89 + 1} + x; }}")
body.append("long (*const sk_table[])(long) = {" + ",".join(f"sk_f{i}" for i in range(funcs)) + "};")
body.append(f"const unsigned long sk_n = {funcs};")
open(os.path.join(out, "funcs.c"), "w").write("\n".join(body) + "\n")
main = r"""
#include <stdlib.h>
#include <time.h>
extern long (*const sk_table[])(long);
extern const unsigned long sk_n;
const char sk_tag[] = "soak-%d";
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 0.5, t0 = cpu();
	long x = sk_tag[0];
	for (unsigned long i = 0; cpu() - t0 < secs; i++)
		x += sk_table[(i * 7) % sk_n](x);
	return (int)(x & 1) * 0;
}
"""
for k in range(n):
    open(os.path.join(out, f"main{k}.c"), "w").write(main.replace("%d", str(k)))
PY
cflags="-O1 -fomit-frame-pointer -fno-inline"
gcc $cflags -c "$work/src/funcs.c" -o "$work/src/funcs.o"
for k in $(seq 0 $((distinct - 1))); do
  echo "gcc $cflags $work/src/main$k.c $work/src/funcs.o -o $work/bin/soak$k"
done | xargs -P 2 -I{} sh -c '{}'

deadline=$(( $(date +%s) + minutes * 60 ))
alive() { [ "$(date +%s)" -lt "$deadline" ]; }

# Distinct programs: short-lived mostly, every tenth a minute.
( k=0; while alive; do
    # (60 s of CPU each; bounded by the deadline, so none outlives the run)
    if [ $((k % 10)) -eq 9 ]; then
      timeout -s KILL $((deadline - $(date +%s) + 1)) "$work/bin/soak$((k % distinct))" 60 & else
      "$work/bin/soak$((k % distinct))" "0.$(( (k * 37) % 18 + 2 ))"; fi
    k=$((k + 1)); done; wait ) &
pids+=($!)
# A real C project, compiled again and again.
( while alive; do
    for f in lib/*.c; do
      alive || break
      gcc -O2 -std=gnu11 -D_GNU_SOURCE -I. -Ilib -I"$B/gen" -c "$f" -o "$work/cc/x.o" 2>/dev/null || true
    done; done ) &
pids+=($!)
# Python, Go, large shared libraries.
( while alive; do
    python3 tests/workloads/py_split.py 2 >/dev/null 2>&1 || true
    [ -x "$B/workloads/unwind_go" ] && timeout 3 "$B/workloads/unwind_go" 2 >/dev/null 2>&1 || true
    python3 -c 'import ssl, sqlite3, ctypes, hashlib, json; [hashlib.sha256(str(i).encode()).digest() for i in range(300000)]' || true
  done ) &
pids+=($!)

python3 - "$port" "$pport" "$agent" "$interval" "$deadline" "$work/agent.log" <<'PY'
import json, sys, time, urllib.request
port, pport, agent, interval, deadline = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
agent_log = sys.argv[6]
hz = 100.0

def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)

def counters():
    out = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{pport}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
    return out

def proc():
    st = open(f"/proc/{agent}/stat").read().rsplit(")", 1)[1].split()
    if st[0] in "ZX":  # exited: a zombie of this script until it waits
        tail = open(agent_log, errors="replace").read().splitlines()[-20:]
        sys.exit("agent_soak: the agent died; the end of its log:\n" + "\n".join(tail))
    cpu = (int(st[11]) + int(st[12])) / hz
    rss = hwm = 0
    for line in open(f"/proc/{agent}/status"):
        if line.startswith("VmRSS:"): rss = int(line.split()[1]) / 1024
        if line.startswith("VmHWM:"): hwm = int(line.split()[1]) / 1024
    return cpu, rss, hwm

def errors(node):
    """Samples under an error frame (error frames end a stack: no nesting)."""
    if node.get("frame_type") == "error":
        return node["total"]
    return sum(errors(c) for c in node.get("children", []))

def c(m, name):
    return int(m.get("ember_agent_" + name, 0))

print(f"{'min':>4} {'samples':>8} {'error %':>8} {'rows used/cap':>20} {'reclaimed':>9} {'evicted':>8} "
      f"{'reloaded':>8} {'refused':>8} {'partial':>8} {'RSS MiB':>8} {'peak':>6} {'CPU %':>6}", flush=True)
t0 = time.time()
last_cpu, _, _ = proc()
last_t = t0
while time.time() < deadline:
    time.sleep(max(1, min(interval, deadline - time.time())))
    now = time.time()
    time.sleep(7)  # the agent reports every 5 s
    end_ms = int(now * 1000)
    fg = post("/public/api/v1/project/00000000-0000-0000-0000-000000000000/flamegraph/json",
              {"filter": {"start_ts": end_ms - int((now - last_t) * 1000), "end_ts": end_ms,
                          "event_kind": "on_cpu", "frame_mask": {"patterns": []}, "query": None},
               "max_nodes": 2000000})
    total = fg["total"]
    err = errors(fg["root"])
    m = counters()
    cpu, rss, hwm = proc()
    print(f"{(now - t0) / 60:4.0f} {total:8d} {100.0 * err / max(total, 1):8.2f} "
          f"{c(m, 'unwind_table_entries'):>10}/{c(m, 'unwind_table_entries_capacity'):<9} "
          f"{c(m, 'unwind_tables_reclaimed_total'):9d} {c(m, 'unwind_tables_evicted_total'):8d} "
          f"{c(m, 'unwind_tables_reloaded_total'):8d} {c(m, 'unwind_tables_refused_total'):8d} "
          f"{c(m, 'unwind_tables_partial_total'):8d} {rss:8.1f} {hwm:6.1f} "
          f"{100.0 * (cpu - last_cpu) / (now - last_t):6.2f}", flush=True)
    last_cpu, last_t = cpu, now
PY
