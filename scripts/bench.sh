#!/usr/bin/env bash
# `make bench`: runs every benchmark under bench/ and prints its figures.
# docs/performance.md quotes them.
set -eu
cd "$(dirname "$0")/.."
echo "== store_bench (ingest and flamegraph query)"
build/bench/store_bench
echo
echo "== wal_bench (one commit of the write-ahead log)"
build/bench/wal_bench
echo
echo "== metrics_bench (host metrics: ingest, disk, queries)"
build/bench/metrics_bench 100 20
echo
echo "== symbols_bench (symbol storage and lookup)"
build/bench/symbols_bench
echo
echo "== collect_bench (agent: a raw sample into the batch)"
build/bench/collect_bench
echo
echo "== encode_bench (agent: a batch encoded, ember's session protocol and OTLP)"
build/bench/encode_bench
echo
echo "== export_bench (a large flamegraph as JSON, pprof, folded, speedscope)"
build/bench/export_bench
echo
echo "== auth_bench (permission checks, tokens, password hashes)"
build/bench/auth_bench
echo
echo "== gpumetrics_bench (agent: one GPU metrics collection; needs an NVIDIA GPU)"
rc=0
build/bench/gpumetrics_bench 10 1000 || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 2 ] || exit "$rc" # 2: no NVML here, said above
echo
echo "== agent_overhead (needs root)"
bench/agent_overhead.sh "${EMBER_BENCH_SECONDS:-60}"
echo
echo "== offcpu_overhead (needs root)"
bench/offcpu_overhead.sh
echo
echo "== unwind churn at full size (needs root): 150 binaries of 16 000 functions, then a fresh one"
EMBER_CHURN_FUNCS=16000 /usr/bin/python3 -m pytest -q -s tests/integration/test_unwind_churn.py
echo
echo "== ui_render (headless Chromium)"
/usr/bin/python3 bench/ui_render.py
