#!/usr/bin/env bash
# short_lived - how well ember unwinds processes that live less than a
# second: a C build of many small files (one gcc, cc1 and as per file, each
# well under a second) runs beside the agent, and for the samples of cc1
# and as (run as copies named uw_cc1 and uw_as) it reports the share of stacks unwound whole (no error frame
# at their root: the unwinder reached the outermost frame). Samples taken
# before the agent has read a new process's maps are walked by the kernel's
# frame pointers, which Debian's gcc, cc1 and as do not keep; they carry
# their raw stack too, which the agent unwinds by CFI once it has read the
# process (agent/rawstack.c): what still fails is mostly processes gone
# before the agent read them. At the end: the agent's CPU time and memory,
# and its raw-stack counters. Needs root.
# A stack counts as whole when its outermost frame is the program's entry:
# within _start of uw_cc1/uw_as (read from the ELF header's e_entry, compared
# with the root frame's binary and file offset, not its name), within the
# dynamic loader's entry (a process still being loaded) or in glibc's
# __libc_start_call_main/__libc_start_main. The same criterion serves the
# OpenTelemetry eBPF profiler, which uploads no symbols; ember's older
# criterion (no error frame at the root) is printed too.
# usage: bench/short_lived.sh [FILES] [RATE]
# EMBER_BENCH_PROJECT=ember builds a real C project instead of FILES
# generated units: ember-server from this repository's HEAD (git archive),
# with its own Makefile (make -j2, CC wrapped as below: ~120 compiles of
# -O2 -g, some over a second). Either way the share is also reported for
# the processes that really lived under a second (their wall time, taken
# by the parent that ran each, and their pid).
# EMBER_BENCH_AGENT names another agent binary (default build/bin/ember-agent).
# EMBER_BENCH_PROFILER=otel runs the OpenTelemetry eBPF profiler (binary named
# by EMBER_OTEL_PROFILER, default /tmp/otelprof/ebpf-profiler) at the same
# rate instead, reporting to ember-server over OTLP/gRPC.
set -eu
cd "$(dirname "$0")/.."
files=${1:-200}
rate=${2:-97}
tmp=$(mktemp -d /tmp/ember-short-XXXXXX)
port=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cleanup() {
  # The agent's CPU time over the whole run (start-up included), and its memory.
  [ -n "${agent:-}" ] && [ -r "/proc/$agent/stat" ] && awk -v t="$(getconf CLK_TCK)" \
    '{printf "agent CPU %.2f s; ", ($14 + $15) / t}' "/proc/$agent/stat" &&
    awk '/VmHWM|VmRSS|RssAnon|RssFile/{printf "%s %.1f MiB ", $1, $2 / 1024} END {print ""}' "/proc/$agent/status"
  [ -n "${agent:-}" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
  # The agent's last counters: raw stacks of new processes and how they fared.
  [ -n "${agent:-}" ] && grep -o 'raw_stacks=.*' "$tmp/agent.log" | tail -1
  [ -n "${server:-}" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
  [ -n "${mounted:-}" ] && umount /sys/kernel/tracing
  [ -n "${EMBER_BENCH_KEEP_LOG:-}" ] && cp "$tmp/agent.log" "$EMBER_BENCH_KEEP_LOG"
  rm -rf "$tmp"
}
trap cleanup EXIT

# The project: FILES translation units of a few dozen functions each, or
# ember itself.
project=${EMBER_BENCH_PROJECT:-generated}
case "$project" in
generated) ;;
ember) mkdir "$tmp/proj" && git archive HEAD | tar -x -C "$tmp/proj"; files=0 ;;
*) echo "EMBER_BENCH_PROJECT must be generated or ember" >&2; exit 2 ;;
esac
/usr/bin/python3 - "$tmp/src" "$files" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
for i in range(n):
    with open(f"{d}/u{i}.c", "w") as f:
        f.write("#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n")
        for k in range(15):
            f.write(f"int f{i}_{k}(const char *s, int n) {{ char b[64]; int h = {k};\n"
                    f"  for (int j = 0; j < n && s[j]; j++) h = h * 31 + s[j] * {k + 1};\n"
                    f"  snprintf(b, sizeof b, \"%d-%s\", h, s); return (int)strlen(b) + atoi(b); }}\n")
PY

# cc1 and as run as copies of their own (uw_cc1, uw_as) through gcc's
# -wrapper, so that their samples are told from other compilers on the host.
cc1_src=$(readlink -f "$(gcc -print-prog-name=cc1)")
as_src=$(readlink -f "$(command -v "$(gcc -print-prog-name=as)")")
cp "$cc1_src" "$tmp/uw_cc1"
cp "$as_src" "$tmp/uw_as"
# A small parent (cputime) runs each and writes its CPU time, user and
# system in microseconds from wait4 (`times` would cut each process to whole
# ticks), its wall time in microseconds and its pid to cpu/NAME.PID: the
# samples a profiler should see are the CPU times' sum by the rate.
mkdir "$tmp/cpu"
cat > "$tmp/cputime.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static long long now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long long t0 = now_us();
	pid_t pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		execv(argv[2], argv + 2);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) != pid)
		return 2;
	long long wall = now_us() - t0;
	FILE *f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%lld %lld %d\n", (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec +
			  (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec, wall, (int)pid) < 0 || fclose(f))
		return 2;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
C
gcc -O2 -o "$tmp/cputime" "$tmp/cputime.c"
printf '%s\n' '#!/bin/sh' 'prog=$1; shift' 'case "$prog" in' \
  "*/cc1) exe=uw_cc1 ;;" "*/as|as) exe=uw_as ;;" \
  '*) exec "$prog" "$@" ;;' 'esac' \
  "exec $tmp/cputime $tmp/cpu/\$exe.\$\$ $tmp/\$exe \"\$@\"" > "$tmp/wrap"
chmod +x "$tmp/wrap"

profiler=${EMBER_BENCH_PROFILER:-ember}
grpc_port=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
build/bin/ember-server --listen "127.0.0.1:$port" --data-dir "$tmp/data" \
  --otlp-grpc-listen "127.0.0.1:$grpc_port" 2>"$tmp/server.log" &
server=$!
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
case "$profiler" in
ember)
  "${EMBER_BENCH_AGENT:-build/bin/ember-agent}" ${EMBER_BENCH_AGENT_FLAGS:-} -collection-agent="127.0.0.1:$port" -disable-tls \
    -reporter-interval=1s -on-cpu-sampling-rate="$rate" -lock-file= 2>"$tmp/agent.log" &
  agent=$! ;;
otel)
  # It attaches through tracefs; mount it for the run when the host has not.
  if [ ! -e /sys/kernel/tracing/events ]; then mount -t tracefs nodev /sys/kernel/tracing; mounted=1; fi
  "${EMBER_OTEL_PROFILER:-/tmp/otelprof/ebpf-profiler}" -collection-agent="127.0.0.1:$grpc_port" -disable-tls \
    -no-kernel-version-check -reporter-interval=1s -samples-per-second="$rate" >"$tmp/agent.log" 2>&1 &
  agent=$! ;;
*) echo "EMBER_BENCH_PROFILER must be ember or otel" >&2; exit 2 ;;
esac
sleep 10 # start-up: the host's files are read and their tables built (BPF loaded)

# Two compilers at a time; each gcc's wall time is recorded.
start_ms=$(($(date +%s%N) / 1000000))
if [ "$project" = ember ]; then
  make -C "$tmp/proj" -j2 CC="gcc -wrapper $tmp/wrap" build/bin/ember-server >"$tmp/make.log" 2>&1 ||
    { tail -20 "$tmp/make.log" >&2; exit 1; }
  : > "$tmp/ms"
else
  ls "$tmp"/src/*.c | xargs -P 2 -I{} bash -c \
    't0=$(date +%s%N); gcc -wrapper '"$tmp/wrap"' -O2 -c {} -o {}.o; echo $((($(date +%s%N) - t0) / 1000000))' > "$tmp/ms"
fi
end_ms=$(($(date +%s%N) / 1000000))
sleep 6 # the last batches

/usr/bin/python3 - "$port" "$start_ms" "$end_ms" "$tmp/ms" "$profiler" "$tmp" \
  "$(basename "$cc1_src")" "$(basename "$as_src")" "$rate" <<'PY'
import json, os, re, subprocess, sys, urllib.request
port, start, end, msfile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
profiler, tmp = sys.argv[5], sys.argv[6]
# A frame's binary is the copy's name or, where the server knew the file by
# its build id first, the name of the original.
names = {"uw_cc1": {"uw_cc1", sys.argv[7]}, "uw_as": {"uw_as", sys.argv[8]}}
ms = sorted(int(x) for x in open(msfile))
if ms:
    print(f"{len(ms)} compiles, gcc wall time median {ms[len(ms)//2]} ms, max {ms[-1]} ms, "
          f"{sum(m < 1000 for m in ms)} under 1 s")
rate = int(sys.argv[9])
cpu = {"uw_cc1": 0.0, "uw_as": 0.0}
procs = []  # (exe, pid, wall seconds)
for f in os.listdir(f"{tmp}/cpu"):
    us, wall, pid = open(f"{tmp}/cpu/{f}").read().split()
    cpu[f.split(".")[0]] += int(us) / 1e6
    procs.append((f.split(".")[0], int(pid), int(wall) / 1e6))
walls = sorted(w for _, _, w in procs)
print(f"{len(procs)} cc1 and as processes, wall time median {walls[len(walls) // 2]:.2f} s, "
      f"max {walls[-1]:.2f} s, {sum(w < 1 for w in walls)} under 1 s")
def flame(q):
    body = {"filter": {"start_ts": start - 2000, "end_ts": end + 3000, "event_kind": "on_cpu",
                       "frame_mask": {"patterns": []}, "query": q}}
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/public/api/v1/project/00000000-0000-0000-0000-000000000000/flamegraph/json",
        data=json.dumps(body).encode(), method="POST")
    return json.load(urllib.request.urlopen(req, timeout=60))
def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout
def offset_of(path, vaddr):
    """The file offset of a virtual address, through the PT_LOAD holding it."""
    for m in re.finditer(r"LOAD\s+(0x\w+)\s+(0x\w+)\s+0x\w+\s+(0x\w+)", readelf("-l", path)):
        off, va, size = (int(x, 16) for x in m.groups())
        if va <= vaddr < va + size:
            return vaddr - va + off
    sys.exit(f"{path}: 0x{vaddr:x} is in no PT_LOAD")
def functions(path, names):
    """File-offset ranges of the named functions in path's symbols."""
    out = []
    for line in readelf("-s", path).splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[7].split("@")[0] in names:
            out.append((int(f[1], 16), int(f[1], 16) + int(f[2])))
    return out
# The program's entry, _start: glibc's x86-64 _start is 0x26 bytes, the root
# frame's address is its call's return address, inside it.
entry = {}
for exe in ("uw_cc1", "uw_as"):
    path = f"{tmp}/{exe}"
    e = int(re.search(r"Entry point address:\s+(0x\w+)", readelf("-h", path)).group(1), 16)
    entry[exe] = offset_of(path, e)
# Before the program's _start runs, the dynamic loader's does (ld.so's own
# entry, whose frame roots the stacks of a process still being loaded).
ldso = "/lib64/ld-linux-x86-64.so.2"
ld_entry = offset_of(ldso, int(re.search(r"Entry point address:\s+(0x\w+)", readelf("-h", ldso)).group(1), 16))
# glibc's start functions, from its separate debug file when there is one
# (__libc_start_call_main is local) and its dynamic symbols otherwise.
libc = "/lib/x86_64-linux-gnu/libc.so.6"
bid = re.search(r"Build ID:\s+(\w+)", readelf("-n", libc)).group(1)
dbg = f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug"
starts = functions(dbg if os.path.exists(dbg) else libc, {"__libc_start_call_main", "__libc_start_main"})
starts = [(offset_of(libc, a), offset_of(libc, a) + b - a) for a, b in starts]
def outermost_is_entry(exe, node):
    """The root frame is the program's entry: by its binary and file offset
    when it carries an address, by its name when symbolized."""
    name, binary = node["name"], node.get("binary", "")
    if "address" in node:
        a = int(node["address"], 16)
        if binary in names[exe]:
            return entry[exe] <= a < entry[exe] + 0x40
        if binary.startswith("libc.so"):
            return any(lo <= a < hi for lo, hi in starts)
        if binary.startswith("ld-linux"):
            return ld_entry <= a < ld_entry + 0x40
        return False
    return name in ("_start", "_dl_start_user") or (binary.startswith("libc.so") and
                                name in ("__libc_start_call_main", "__libc_start_main"))
def label(n):
    return n["name"] + (f" [{n.get('binary', '?')}]" if "address" in n else "")
tot = whole = old = 0
for exe in ("uw_cc1", "uw_as"):
    t = flame(f'process.executable.name == "{exe}"')
    roots = t["root"]["children"]
    err = sum(c["total"] for c in roots if c["name"].startswith("["))
    ent = sum(c["total"] for c in roots if outermost_is_entry(exe, c))
    print(f"{exe}: CPU {cpu[exe]:.2f} s (~{cpu[exe] * rate:.0f} samples at {rate} Hz), "
          f"{t['total']} samples, {ent} reach the entry "
          f"({100 * ent / max(t['total'], 1):.1f}%); {t['total'] - err} without an error frame "
          f"({100 * (t['total'] - err) / max(t['total'], 1):.1f}%)")
    print("  outermost frames: " + ", ".join(f"{label(c)} {c['total']}" for c in roots[:6]))
    tot += t["total"]
    whole += ent
    old += t["total"] - err
want = sum(cpu.values()) * rate
print(f"all ({profiler}): {whole}/{tot} samples of uw_cc1 and uw_as reach the "
      f"program's entry ({100 * whole / max(tot, 1):.1f}%); {old}/{tot} without an error frame "
      f"({100 * old / max(tot, 1):.1f}%); {tot} of ~{want:.0f} samples their CPU time implies "
      f"reported ({100 * tot / max(want, 1):.0f}%); whole ones are {100 * whole / max(want, 1):.1f}% of that")
# The processes that lived under a second, one by one.
stot = swhole = 0
for exe, pid, wall in procs:
    if wall >= 1:
        continue
    t = flame(f'process.executable.name == "{exe}" && process.pid == "{pid}"')
    stot += t["total"]
    swhole += sum(c["total"] for c in t["root"]["children"] if outermost_is_entry(exe, c))
print(f"under 1 s ({profiler}): {swhole}/{stot} samples of the {sum(w < 1 for w in walls)} cc1 and as "
      f"processes that lived under a second reach the program's entry ({100 * swhole / max(stot, 1):.1f}%)")
PY
