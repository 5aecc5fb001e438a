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
. "$(dirname "$0")/agent_env.sh"
agent_env_start memory -on-cpu-sampling-rate="$rate"

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
