# agent_env.sh - sourced by the bench scripts that need an ember-server and
# an ember-agent on loopback (agent_memory.sh, agent_soak.sh); not run on
# its own.
#
#   agent_env_start NAME [AGENT FLAGS...]
#
# makes a work directory /tmp/ember-NAME-XXXXXX ($work), starts
# ember-server on a free port ($port, data in $work/data, log
# $work/server.log) and ember-agent reporting to it with -pprof on another
# free port ($pport, log $work/agent.log) and the flags given; $agent is
# the agent's pid. Every process started goes in $pids (a script adds its
# own background jobs there too); on exit they are stopped and $work is
# removed. EMBER_BUILD: the build directory (default build).

B=${EMBER_BUILD:-build}
pids=()

agent_env_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${work:-}" ] && rm -rf "$work"
}

agent_env_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

agent_env_start() {
  local name=$1
  shift
  work=$(mktemp -d "/tmp/ember-$name-XXXXXX")
  trap agent_env_cleanup EXIT
  port=$(agent_env_free_port)
  pport=$(agent_env_free_port)
  "$B/bin/ember-server" --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/server.log" 2>&1 &
  pids+=($!)
  sleep 1
  "$B/bin/ember-agent" -collection-agent="127.0.0.1:$port" -disable-tls -lock-file= \
    -pprof="127.0.0.1:$pport" "$@" >"$work/agent.log" 2>&1 &
  agent=$!
  pids+=($agent)
}
