#!/usr/bin/env bash
# The off-CPU sampler's cost (docs/performance.md), as root: a getppid()
# loop (every system call passes the sampler's exit hook) and a pipe
# ping-pong between two threads (two context switches per round trip),
# both pinned to CPU 1, REPS times each, with no agent, with ember-agent
# (on-CPU only) and with ember-agent -enable-off-cpu. Prints the medians.
#   bench/offcpu_overhead.sh [REPS] [SECONDS]     (defaults 7, 2)
set -eu
cd "$(dirname "$0")/.."
reps=${1:-7}
secs=${2:-2}
B=${EMBER_BUILD:-build}
load=$B/bench/offcpu_load
[ -x "$load" ] || { echo "build $load first (make bench)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/ember-offcpu-bench-XXXXXX)
server=
agent=
stop_agent() {
  if [ -n "$agent" ]; then kill -TERM "$agent" 2>/dev/null; wait "$agent" 2>/dev/null || true; fi
  agent=
}
cleanup() {
  stop_agent
  if [ -n "$server" ]; then kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$B/bin/ember-server" --listen "127.0.0.1:$port" --data-dir "$tmp/data" 2>"$tmp/server.log" &
server=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for mode in none on-cpu off-cpu; do
  if [ "$mode" != none ]; then
    flags=()
    [ "$mode" = off-cpu ] && flags=(-enable-off-cpu)
    "$B/bin/ember-agent" -collection-agent="127.0.0.1:$port" -disable-tls "${flags[@]}" \
      2>"$tmp/agent-$mode.log" &
    agent=$!
    sleep 5
    kill -0 "$agent" || { cat "$tmp/agent-$mode.log" >&2; exit 1; }
  fi
  sys=$(for _ in $(seq "$reps"); do taskset -c 1 "$load" syscalls "$secs"; done | median)
  rt=$(for _ in $(seq "$reps"); do taskset -c 1 "$load" pingpong "$secs"; done | median)
  printf '%-8s  getppid %6.1f ns   pipe round trip (2 switches) %6d ns\n' "$mode" "$sys" "$rt"
  stop_agent
done
