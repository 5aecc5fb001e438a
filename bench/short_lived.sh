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
# usage: bench/short_lived.sh [FILES] [RATE]
# EMBER_BENCH_AGENT names another agent binary (default build/bin/ember-agent).
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
  [ -n "${EMBER_BENCH_KEEP_LOG:-}" ] && cp "$tmp/agent.log" "$EMBER_BENCH_KEEP_LOG"
  rm -rf "$tmp"
}
trap cleanup EXIT

# The project: FILES translation units of a few dozen functions each.
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
cp "$(gcc -print-prog-name=cc1)" "$tmp/uw_cc1"
cp "$(command -v "$(gcc -print-prog-name=as)")" "$tmp/uw_as"
printf '%s\n' '#!/bin/sh' 'prog=$1; shift' 'case "$prog" in' \
  "*/cc1) exec $tmp/uw_cc1 \"\$@\" ;;" "*/as|as) exec $tmp/uw_as \"\$@\" ;;" \
  '*) exec "$prog" "$@" ;;' 'esac' > "$tmp/wrap"
chmod +x "$tmp/wrap"

build/bin/ember-server --listen "127.0.0.1:$port" --data-dir "$tmp/data" 2>"$tmp/server.log" &
server=$!
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
"${EMBER_BENCH_AGENT:-build/bin/ember-agent}" ${EMBER_BENCH_AGENT_FLAGS:-} -collection-agent="127.0.0.1:$port" -disable-tls \
  -reporter-interval=1s -on-cpu-sampling-rate="$rate" 2>"$tmp/agent.log" &
agent=$!
sleep 8 # start-up: the host's files are read and their tables built

# Two compilers at a time; each gcc's wall time is recorded.
start_ms=$(($(date +%s%N) / 1000000))
ls "$tmp"/src/*.c | xargs -P 2 -I{} bash -c \
  't0=$(date +%s%N); gcc -wrapper '"$tmp/wrap"' -O2 -c {} -o {}.o; echo $((($(date +%s%N) - t0) / 1000000))' > "$tmp/ms"
end_ms=$(($(date +%s%N) / 1000000))
sleep 4 # the last batches

/usr/bin/python3 - "$port" "$start_ms" "$end_ms" "$tmp/ms" <<'PY'
import json, sys, urllib.request
port, start, end, msfile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ms = sorted(int(x) for x in open(msfile))
print(f"{len(ms)} compiles, gcc wall time median {ms[len(ms)//2]} ms, max {ms[-1]} ms, "
      f"{sum(m < 1000 for m in ms)} under 1 s")
def flame(q):
    body = {"filter": {"start_ts": start - 2000, "end_ts": end + 3000, "event_kind": "on_cpu",
                       "frame_mask": {"patterns": []}, "query": q}}
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/public/api/v1/project/00000000-0000-0000-0000-000000000000/flamegraph/json",
        data=json.dumps(body).encode(), method="POST")
    return json.load(urllib.request.urlopen(req, timeout=60))
tot = whole = 0
for exe in ("uw_cc1", "uw_as"):
    t = flame(f'process.executable.name == "{exe}"')
    err = sum(c["total"] for c in t["root"]["children"] if c["name"].startswith("["))
    print(f"{exe}: {t['total']} samples, {t['total'] - err} unwound whole "
          f"({100 * (t['total'] - err) / max(t['total'], 1):.1f}%); errors: "
          + ", ".join(f"{c['name']} {c['total']}" for c in t["root"]["children"] if c["name"].startswith("[")))
    tot += t["total"]
    whole += t["total"] - err
print(f"all: {whole}/{tot} samples of processes that lived under a second unwound whole "
      f"({100 * whole / max(tot, 1):.1f}%)")
PY
