#!/usr/bin/env bash
# `make run`: starts ember-server with its store in ./data and ember-agent
# profiling this host, prints where the UI is, and stops both on Ctrl-C.
# Settings (environment): EMBER_RUN_LISTEN (127.0.0.1:8080),
# EMBER_RUN_DATA (./data), EMBER_RUN_AGENT_FLAGS (extra agent flags).
set -u
cd "$(dirname "$0")/.."
listen=${EMBER_RUN_LISTEN:-127.0.0.1:8080}
data=${EMBER_RUN_DATA:-./data}
url="http://$listen"
server_pid=""
agent_pid=""

stop() {
  trap - INT TERM
  echo
  echo "stopping ember..."
  [ -n "$agent_pid" ] && kill -TERM "$agent_pid" 2>/dev/null
  [ -n "$agent_pid" ] && wait "$agent_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null
  [ -n "$server_pid" ] && wait "$server_pid" 2>/dev/null
  echo "stopped."
  exit "${1:-0}"
}
trap 'stop 0' INT TERM

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    echo "ember-agent loads BPF programs and needs root: starting it with sudo."
    sudo_cmd=(sudo --preserve-env=EMBER_RUN_AGENT_FLAGS)
  else
    echo "ember-agent needs root (CAP_BPF, CAP_PERFMON): run 'make run' as root." >&2
    exit 1
  fi
fi

build/bin/ember-server --listen "$listen" --data-dir "$data" &
server_pid=$!
for _ in $(seq 1 100); do
  curl -fsS "$url/healthz" >/dev/null 2>&1 && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "ember-server did not start (see its messages above)." >&2
    exit 1
  fi
  sleep 0.1
done

# shellcheck disable=SC2086
"${sudo_cmd[@]}" build/bin/ember-agent -collection-agent="$listen" -disable-tls ${EMBER_RUN_AGENT_FLAGS:-} &
agent_pid=$!

echo
echo "  ember is running: open $url in a browser (the first samples appear after about 5 s)."
echo "  REST API: $url/public/api/v1/openapi.json   Stop with Ctrl-C."
echo

# Wait until one of them exits (or Ctrl-C); then stop the other.
while kill -0 "$server_pid" 2>/dev/null && kill -0 "$agent_pid" 2>/dev/null; do
  sleep 0.5
done
echo "a component exited unexpectedly." >&2
stop 1
