#!/usr/bin/env bash
# protocol_compare - what ember's session protocol (version 2) saves over
# OTLP Profiles, on the wire and in the agent. Profiles the same workload
# set twice for DURATION seconds each (default 300), once with the
# default -ember-protocol=true and once with -ember-protocol=false (OTLP
# Profiles over HTTP, gzip, as OpenTelemetry's eBPF profiler sends), at
# RATE Hz (default 97: on this 2-CPU host about the samples per second of
# a 16-core host at ember's default 19 Hz). The workload set: C, C++,
# Rust and Go programs with distinct call paths, a shell loop spawning
# short-lived processes, and a Python loop, all at once. Then a third
# time with -ember-protocol=false -otlp-transport=grpc (the same OTLP
# requests over gRPC to --otlp-grpc-listen).
# Reports per protocol: samples stored, bytes on the wire per sample
# (request bodies as sent, from the server's ember_ingest_bytes_total,
# start-up included), agent CPU per sample over the measured window
# (all threads, schedstat), of which reporting (the ember-reporter
# thread: encoding, compressing and sending) and encoding alone (the
# agent's encode_us, the reporter's CPU time in encoding), every thread's
# share (the main thread is ember-agent), the server's CPU per sample
# stored (every thread of ember-server over the window: receiving,
# decoding, storing), and the ratios. Needs root.
# Takes about 3 x (DURATION + 45) seconds. EMBER_BENCH_AGENT names another
# agent binary to measure (default build/bin/ember-agent).
# usage: bench/protocol_compare.sh [DURATION] [RATE]
set -eu
cd "$(dirname "$0")/.."
duration=${1:-300}
rate=${2:-97}
tmp=$(mktemp -d /tmp/ember-bench-XXXXXX)
cleanup() {
  [ -n "${agent:-}" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
  [ -n "${server:-}" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
  pkill -f "$tmp/loop" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
# %.0f: mawk's %d stops at 2^31-1 (2.1 s of CPU), which made the agent's
# whole CPU read as 0 once a run passed it.
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{s += $1} END {printf "%.0f\n", s}'; }
# The CPU of the agent's thread named $2 (ember-reporter: encoding,
# compressing and sending every batch; nothing else runs there).
thread_ns() {
  local t
  for t in /proc/"$1"/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = "$2" ] && awk '{print $1}' "$t/schedstat" && return
  done
  echo 0
}
# Every thread's CPU, one "name nanoseconds" line each (the main thread
# is ember-agent).
threads_ns() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "$(cat "$t/comm" 2>/dev/null) $(awk '{print $1}' "$t/schedstat" 2>/dev/null)"
  done
}
metric() { curl -fs "http://127.0.0.1:$port/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

cat > "$tmp/loop.sh" <<'SH'
#!/bin/sh
end=$(($(date +%s) + $1))
while [ "$(date +%s)" -lt "$end" ]; do ls -R /usr/share/doc > /dev/null; sha256sum /usr/bin/* > /dev/null 2>&1; done
SH
cat > "$tmp/loop.py" <<'PY'
import sys, time, json
end = time.time() + float(sys.argv[1])
def build(n): return [{"k": i, "v": str(i) * 3} for i in range(n)]
while time.time() < end:
    json.loads(json.dumps(build(2000)))
    sorted(str(i) for i in range(5000))
PY
chmod +x "$tmp/loop.sh"

free_port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
run() { # protocol-flag name [otlp-transport]
  port=$(free_port)
  local gport
  gport=$(free_port)
  rm -rf "$tmp/data"
  build/bin/ember-server --listen "127.0.0.1:$port" --otlp-grpc-listen "127.0.0.1:$gport" \
    --data-dir "$tmp/data" 2>"$tmp/server-$2.log" &
  server=$!
  for _ in $(seq 50); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  "${EMBER_BENCH_AGENT:-build/bin/ember-agent}" -collection-agent="127.0.0.1:$port" -disable-tls \
    -on-cpu-sampling-rate="$rate" -ember-protocol="$1" ${3:+-otlp-transport=$3} \
    ${3:+-otlp-grpc-endpoint=127.0.0.1:$gport} 2>"$tmp/agent-$2.log" &
  agent=$!
  sleep 5
  local secs=$((duration + 25)) pids=()
  build/workloads/unwind_cpp "$secs" >/dev/null & pids+=($!)
  build/workloads/unwind_c chain "$secs" >/dev/null & pids+=($!)
  build/workloads/unwind_rust "$secs" >/dev/null & pids+=($!)
  build/workloads/unwind_go "$secs" >/dev/null & pids+=($!)
  build/workloads/symbols_cpp "$secs" >/dev/null & pids+=($!)
  "$tmp/loop.sh" "$secs" & pids+=($!)
  /usr/bin/python3 "$tmp/loop.py" "$secs" & pids+=($!)
  # The agent first reads the workloads' files and builds their unwind
  # tables, on a machine the workloads keep busy (5 s was not always
  # enough for that here): the window starts 20 s in, in steady state.
  sleep 20
  local t0 t1 r0 r1 s0 s1 start_ms end_ms
  t0=$(cpu_ns "$agent")
  s0=$(cpu_ns "$server")
  r0=$(thread_ns "$agent" ember-reporter)
  threads_ns "$agent" > "$tmp/threads-$2-0"
  start_ms=$(($(date +%s%N) / 1000000))
  sleep "$duration"
  end_ms=$(($(date +%s%N) / 1000000))
  t1=$(cpu_ns "$agent")
  s1=$(cpu_ns "$server")
  r1=$(thread_ns "$agent" ember-reporter)
  threads_ns "$agent" > "$tmp/threads-$2-1"
  # Some workloads count CPU time, not wall time: stop them all now.
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  kill -TERM "$agent"; wait "$agent" || true; agent=
  local window
  window=$(curl -fs -X POST "http://127.0.0.1:$port/public/api/v1/project/00000000-0000-0000-0000-000000000000/flamegraph/json" \
    -d "{\"filter\":{\"start_ts\":$start_ms,\"end_ts\":$end_ms}}" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total"])')
  local enc
  enc=$(grep -o 'encode_us=[0-9]*' "$tmp/agent-$2.log" | tail -1 | cut -d= -f2)
  echo "$2 $(metric ember_ingest_samples_total) $(metric ember_ingest_bytes_total) $window $((t1 - t0)) $((r1 - r0)) $((s1 - s0)) $enc" >> "$tmp/results"
  kill -TERM "$server"; wait "$server" || true; server=
}

run true ember
run false otlp
run false grpc grpc
/usr/bin/python3 - "$duration" "$rate" "$tmp/results" "$tmp" <<'PY'
import sys
duration, rate, path, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def threads(name, end):
    out = {}
    for line in open(f"{tmp}/threads-{name}-{end}"):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = out.get(parts[0], 0) + int(parts[1])
    return out
rows = {}
for line in open(path):
    name, samples, byts, window, cpu_ns, rep_ns, srv_ns, *enc_us = line.split()
    rows[name] = dict(samples=int(samples), bytes=int(byts), window=int(window),
                      cpu_ns=int(cpu_ns), rep_ns=int(rep_ns), srv_ns=int(srv_ns),
                      enc_us=int(enc_us[0] if enc_us else 0))
print(f"workload set for {duration} s at {rate} Hz, once per protocol")
for name, r in rows.items():
    print(f"{name:6s} samples {r['samples']:8d}  wire {r['bytes'] / r['samples']:7.2f} bytes/sample "
          f"({r['bytes'] / 1024:.0f} KiB)  agent CPU {r['cpu_ns'] / max(r['window'], 1) / 1000:6.2f} us/sample "
          f"in the window ({r['window']} samples), of which reporting {r['rep_ns'] / max(r['window'], 1) / 1000:.2f} "
          f"(encoding {r['enc_us'] / r['samples']:.2f}) us/sample; server CPU "
          f"{r['srv_ns'] / max(r['window'], 1) / 1000:.2f} us/sample")
for name, r in rows.items():
    t0, t1 = threads(name, 0), threads(name, 1)
    per = sorted(((t1[k] - t0.get(k, 0)) / max(r['window'], 1) / 1000, k) for k in t1)
    print(f"{name:6s} per thread, us/sample: " + ", ".join(f"{k} {v:.2f}" for v, k in reversed(per) if v >= 0.005))
e, o = rows["ember"], rows["otlp"]
print(f"OTLP / ember: {(o['bytes'] / o['samples']) / (e['bytes'] / e['samples']):.1f}x the bytes per sample, "
      f"{(o['cpu_ns'] / o['window']) / (e['cpu_ns'] / e['window']):.2f}x the agent CPU per sample, "
      f"{(o['rep_ns'] / o['window']) / max(e['rep_ns'] / e['window'], 1e-9):.1f}x the reporting CPU per sample, "
      f"{(o['enc_us'] / o['samples']) / max(e['enc_us'] / e['samples'], 1e-9):.1f}x the encoding CPU per sample")
g = rows.get("grpc")
if g:
    print(f"OTLP gRPC / OTLP HTTP: {(g['bytes'] / g['samples']) / (o['bytes'] / o['samples']):.2f}x the bytes "
          f"per sample, {(g['cpu_ns'] / g['window']) / max(o['cpu_ns'] / o['window'], 1e-9):.2f}x the agent CPU, "
          f"{(g['srv_ns'] / g['window']) / max(o['srv_ns'] / o['window'], 1e-9):.2f}x the server CPU per sample")
PY
