#!/usr/bin/env bash
# agent_memory - ember-agent's resident memory through rustc compiles: rustc
# maps librustc_driver (~150 MB) and libLLVM (~200 MB), whose unwind
# tables the agent builds and whose symbols it extracts and uploads, the
# largest transient jobs a host gives it. As root, loopback only.
#
# Starts a server and an agent (RATE Hz, default 19), waits WARMUP seconds
# (default 12), then runs `rustc -O` on a one-line program COMPILES times
# (default 3), 4 s apart, printing the agent's VmRSS and VmHWM at rest and
# after each, then its memory gauges (-pprof /metrics). The bound is 100 MB
# of VmHWM (docs/internals/agent.md, "Memory"); the figures are in
# docs/performance.md ("Agent memory").
#
# usage: bench/agent_memory.sh [COMPILES] [RATE]   (EMBER_BUILD: the build dir)
set -euo pipefail
compiles=${1:-3}
rate=${2:-19}
warmup=${EMBER_MEMORY_WARMUP:-12}
[ "$(id -u)" -eq 0 ] || { echo "agent_memory: ember-agent needs root" >&2; exit 1; }
rustc=$(command -v rustc || echo "$HOME/.cargo/bin/rustc")
[ -x "$rustc" ] || { echo "agent_memory: no rustc (install rustup)" >&2; exit 1; }
B=${EMBER_BUILD:-build}
work=$(mktemp -d /tmp/ember-memory-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$B/bin/ember-server" --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/server.log" 2>&1 &
pids+=($!)
sleep 1
"$B/bin/ember-agent" -collection-agent="127.0.0.1:$port" -disable-tls -lock-file= \
  -on-cpu-sampling-rate="$rate" -pprof="127.0.0.1:$pport" >"$work/agent.log" 2>&1 &
agent=$!
pids+=($agent)

mem() { awk '/^VmRSS:|^VmHWM:/ {printf "%s %.1f MB  ", $1, $2 * 1024 / 1e6}' "/proc/$agent/status"; echo; }
echo 'fn main() { println!("hello"); }' >"$work/hello.rs"
sleep "$warmup"
echo "at rest:        $(mem)"
for i in $(seq "$compiles"); do
  "$rustc" -O "$work/hello.rs" -o "$work/hello$i"
  sleep 4
  echo "after rustc $i:  $(mem)"
done
curl -s "http://127.0.0.1:$pport/metrics" |
  grep -E '^ember_agent_(resident|memory_|queued_bytes|session_dictionary_bytes)' || true
