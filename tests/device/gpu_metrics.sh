#!/bin/bash
# gpu_metrics.sh - ember's GPU metrics on real NVIDIA hardware, end to end.
#
# Runs ember-server and ember-agent (build/bin, as root: the agent loads
# BPF) beside a known GPU load (gpu_load.py: 16 GiB held, bf16 matrix
# products for 40 s), samples nvidia-smi once a second as the reference,
# runs bench/gpumetrics_bench during the load (the cost of one collection
# and every point it reads), then gpu_check.py compares what the server
# stored with nvidia-smi and checks the load's own series and profile.
# Everything lands in $OUT (default /tmp/ember-gpu-check): smi.csv,
# apps.csv, load.json, bench.txt, check.json, server.log, agent.log.
# Shared libraries the machine lacks can be put in .devlibs/ (the
# device machine of docs/internals/testing.md has none of ember's).
# Usage: tests/device/gpu_metrics.sh   (from the repository root)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/ember-gpu-check}
mkdir -p "$OUT"
# ember's binaries only: the machine's own programs keep their libraries.
ember() { if [ -d .devlibs ]; then LD_LIBRARY_PATH=$PWD/.devlibs "$@"; else "$@"; fi; }
port=47123
data=$(mktemp -d /tmp/ember-gpu-data.XXXXXX)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$data"; }
trap cleanup EXIT

nvidia-smi -L | tee "$OUT/gpus.txt" || exit 1
( while true; do
    echo "$(date +%s%3N),$(nvidia-smi --query-gpu=utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu,clocks.sm,clocks.mem --format=csv,noheader,nounits -i 0)"
    sleep 1
  done ) > "$OUT/smi.csv" &
pids+=($!)

ember build/bin/ember-server --listen 127.0.0.1:$port --data-dir "$data" > "$OUT/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do curl -sf http://127.0.0.1:$port/healthz > /dev/null && break; sleep 0.2; done
ember build/bin/ember-agent -collection-agent=127.0.0.1:$port -disable-tls -reporter-interval=1s \
  -collect-metrics-interval=1s > "$OUT/agent.log" 2>&1 &
agent=$!
pids+=($agent)
for _ in $(seq 60); do grep -q started "$OUT/agent.log" && break; kill -0 $agent 2>/dev/null || break; sleep 0.5; done
grep -E "GPU metrics|started|error|cannot" "$OUT/agent.log" | head -20

python3 tests/device/gpu_load.py 40 16 > "$OUT/load.json" 2> "$OUT/load.err" &
load=$!
for _ in $(seq 120); do nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 0.5; done
sleep 12
ember build/bench/gpumetrics_bench 10 1000 > "$OUT/bench.txt" 2>&1
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$OUT/apps.csv"
tail -4 "$OUT/bench.txt"
wait $load || { echo "the GPU load failed"; cat "$OUT/load.err"; exit 1; }
cat "$OUT/load.json"
sleep 20
python3 tests/device/gpu_check.py http://127.0.0.1:$port "$OUT"
rc=$?
echo "gpu_check exit $rc"
exit $rc
