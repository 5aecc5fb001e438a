#!/usr/bin/env bash
# agent_overhead - what ember-agent costs on this host with every core busy.
# Runs workloads built without frame pointers (so every stack goes through
# ember's DWARF-CFI unwinder), one per CPU, alternating unwind_cpp and
# unwind_c, for DURATION seconds (default 60) at RATE Hz (default 19) and
# reports: samples, agent CPU (user+sys of the agent process) per sample
# and as a share of one core, BPF program time (entry program plus the
# tail-called unwinder, which the kernel accounts to the entry program)
# per sample (kernel.bpf_stats_enabled), agent resident memory, and bytes
# sent per sample. Needs root.
# usage: bench/agent_overhead.sh [DURATION] [RATE]
# EMBER_BENCH_AGENT names another agent binary to measure (default
# build/bin/ember-agent).
# EMBER_BENCH_WORKLOAD="unwind_c recurse 200" runs that workload on every
# CPU instead (the duration is appended to its arguments);
# EMBER_BENCH_COMMAND="/usr/bin/python3 tests/workloads/py_split.py" runs
# any command so; EMBER_BENCH_AGENT_FLAGS adds agent flags (the Python
# unwinder's cost: the Python workload with and without -tracers=none).
set -eu
cd "$(dirname "$0")/.."
duration=${1:-60}
rate=${2:-19}
ncpu=$(nproc)
tmp=$(mktemp -d /tmp/ember-bench-XXXXXX)
port=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cleanup() {
  [ -n "${agent:-}" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
  [ -n "${server:-}" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
  sysctl -q kernel.bpf_stats_enabled="${old_stats:-0}" >/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Nanoseconds on CPU of every thread of a process (schedstat is exact;
# /proc/PID/stat counts 10 ms ticks).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%d\n", s}'; }
bpf_stats() { # run_time_ns run_cnt of the on-CPU program
  bpftool prog show --json | /usr/bin/python3 -c '
import json,sys
for p in json.load(sys.stdin):
    if p.get("name") == "oncpu_sample":
        print(p.get("run_time_ns", 0), p.get("run_cnt", 0)); break
else:
    print(0, 0)'
}

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -q kernel.bpf_stats_enabled=1
build/bin/ember-server --listen "127.0.0.1:$port" --data-dir "$tmp/data" 2>"$tmp/server.log" &
server=$!
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
"${EMBER_BENCH_AGENT:-build/bin/ember-agent}" -collection-agent="127.0.0.1:$port" -disable-tls \
  -on-cpu-sampling-rate="$rate" ${EMBER_BENCH_AGENT_FLAGS:-} 2>"$tmp/agent.log" &
agent=$!
sleep 5 # start-up (kallsyms, first symbol uploads) is not steady state

# The workloads start first: building the unwind tables of their files is
# a one-time cost per file, reported by the agent's stats line; the window
# measures the steady state.
pids=()
for i in $(seq "$ncpu"); do
  if [ -n "${EMBER_BENCH_COMMAND:-}" ]; then
    # shellcheck disable=SC2086
    $EMBER_BENCH_COMMAND $((duration + 10)) >/dev/null & pids+=($!)
  elif [ -n "${EMBER_BENCH_WORKLOAD:-}" ]; then
    # shellcheck disable=SC2086
    build/workloads/$EMBER_BENCH_WORKLOAD $((duration + 10)) >/dev/null & pids+=($!)
  elif [ $((i % 2)) -eq 1 ]; then build/workloads/unwind_cpp $((duration + 10)) >/dev/null & pids+=($!)
  else build/workloads/unwind_c chain $((duration + 10)) >/dev/null & pids+=($!); fi
done
sleep 5
read -r bpf_ns0 bpf_cnt0 < <(bpf_stats)
t0=$(cpu_ns "$agent")
start_ms=$(($(date +%s%N) / 1000000))
sleep "$duration"
end_ms=$(($(date +%s%N) / 1000000))
t1=$(cpu_ns "$agent")
read -r bpf_ns1 bpf_cnt1 < <(bpf_stats)
wait "${pids[@]}"
rss=$(awk '/VmRSS/{print $2}' "/proc/$agent/status")
hwm=$(awk '/VmHWM/{print $2}' "/proc/$agent/status")
sleep 3 # let the last batch arrive
total=$(curl -fs -X POST "http://127.0.0.1:$port/public/api/v1/project/00000000-0000-0000-0000-000000000000/flamegraph/json" \
  -d "{\"filter\":{\"start_ts\":$((start_ms - 2500)),\"end_ts\":$((end_ms - 2500))}}" |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
bytes=$(curl -fs "http://127.0.0.1:$port/metrics" | awk '/^ember_ingest_bytes_total/{print $2}')
allsamples=$(curl -fs "http://127.0.0.1:$port/metrics" | awk '/^ember_ingest_samples_total/{print $2}')

/usr/bin/python3 - "$duration" "$rate" "$ncpu" "$t0" "$t1" "$bpf_ns0" "$bpf_cnt0" \
  "$bpf_ns1" "$bpf_cnt1" "$rss" "$hwm" "$total" "$bytes" "$allsamples" <<'PY'
import sys
(duration, rate, ncpu, t0, t1, bns0, bc0, bns1, bc1, rss, hwm, total, byts, alls) = map(float, sys.argv[1:])
cpu_s = (t1 - t0) / 1e9
runs = bc1 - bc0
print(f"load: {int(ncpu)} busy threads for {int(duration)} s at {int(rate)} Hz")
print(f"samples stored for the window: {int(total)} (expected about {int(ncpu * rate * duration)})")
bpf_s = (bns1 - bns0) / 1e9
print(f"agent CPU: {cpu_s:.3f} s = {100 * cpu_s / duration:.3f}% of one core, "
      f"{1e6 * cpu_s / max(total, 1):.1f} us per sample")
print(f"BPF programs: {runs:.0f} runs, {(bns1 - bns0) / max(runs, 1) / 1000:.1f} us per sample "
      f"({100 * bpf_s / duration:.4f}% of one core)")
print(f"agent + BPF: {100 * (cpu_s + bpf_s) / duration:.3f}% of one core, "
      f"{1e6 * (cpu_s + bpf_s) / max(total, 1):.1f} us per sample")
print(f"agent memory: {rss / 1024:.1f} MiB resident, {hwm / 1024:.1f} MiB peak")
print(f"wire: {byts / max(alls, 1):.1f} bytes per sample sent (zstd protobuf, all processes)")
PY
