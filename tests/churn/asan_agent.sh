#!/usr/bin/env bash
# asan_agent - runs ember-agent built with AddressSanitizer and
# UndefinedBehaviorSanitizer against a local ember-server for DURATION
# seconds (default 120) while tests/churn/proc_churn.sh starts processes
# with odd /proc states, with the flags of the run that once crashed
# (-enable-off-cpu -dwarf -pprof -tags -cluster-name). Reports whether the
# agent stayed up and every sanitizer report (errors and, at exit, leaks).
# Exits 1 when the agent died or a sanitizer reported anything.
# Build the agent first:
#   make BUILD=build/asan-run CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer' \
#        build/asan-run/bin/ember-agent
# usage: tests/churn/asan_agent.sh [DURATION]   (root: the agent loads BPF)
# EMBER_CHURN_AGENT names another agent binary; EMBER_CHURN_OUT keeps the
# logs in that directory (default: a temporary one, removed).
set -u
cd "$(dirname "$0")/../.."
duration=${1:-120}
agent_bin=${EMBER_CHURN_AGENT:-build/asan-run/bin/ember-agent}
[ -x "$agent_bin" ] || { echo "asan_agent: no agent at $agent_bin (see the header for how to build it)" >&2; exit 2; }
out=${EMBER_CHURN_OUT:-$(mktemp -d /tmp/ember-asan-XXXXXX)}
mkdir -p "$out"
port() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
sport=$(port)
pport=$(port)
cleanup() {
  [ -n "${agent:-}" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
  [ -n "${server:-}" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null
  [ -z "${EMBER_CHURN_OUT:-}" ] && rm -rf "$out"
}
trap cleanup EXIT

build/bin/ember-server --listen "127.0.0.1:$sport" --data-dir "$out/data" 2>"$out/server.log" &
server=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$sport/healthz" >/dev/null && break; sleep 0.1; done
ASAN_OPTIONS="log_path=$out/asan:detect_leaks=1:abort_on_error=0:halt_on_error=1" \
UBSAN_OPTIONS="log_path=$out/ubsan:print_stacktrace=1:halt_on_error=1" \
  "$agent_bin" -collection-agent="127.0.0.1:$sport" -disable-tls -enable-off-cpu -dwarf \
  -pprof="127.0.0.1:$pport" -tags="team:churn;asan" -cluster-name=churn-cluster \
  -project=churn 2>"$out/agent.log" &
agent=$!
sleep 5
tests/churn/proc_churn.sh "$duration" >"$out/churn.log" 2>&1
alive=yes
kill -0 "$agent" 2>/dev/null || alive=no
samples=$(curl -fs "http://127.0.0.1:$pport/metrics" | awk '/^ember_agent_samples_total/ {print $2}')
kill -TERM "$agent" 2>/dev/null
wait "$agent"
rc=$?
agent=
echo "asan_agent: $(cat "$out/churn.log" | tail -1)"
echo "asan_agent: agent alive at the end: $alive; exit status $rc; samples ${samples:-?}"
reports=$(ls "$out"/asan.* "$out"/ubsan.* 2>/dev/null)
if [ -n "$reports" ]; then
  for r in $reports; do echo "--- $r"; head -60 "$r"; done
fi
grep -E "runtime error|AddressSanitizer|LeakSanitizer" "$out/agent.log" | head -20
[ "$alive" = yes ] && [ "$rc" = 0 ] && [ -z "$reports" ] || exit 1
echo "asan_agent: no sanitizer report"
