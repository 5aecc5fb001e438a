#!/usr/bin/env bash
# proc_churn - starts processes whose /proc entries are odd, for DURATION
# seconds (default 60), so that an agent sampling the host meets every
# state a process can be in while the agent reads it:
#   - zombies (a parent that never reaps its child),
#   - processes that exit while their files are read (short CPU bursts),
#   - an empty environment (env -i), an environment of about 1 MiB,
#   - SLURM_JOB_ID/NAME/USER and EMBER_JOB_TAG set, empty, or cut short,
#   - a command line of "python3" alone and Python scripts that exit
#     while their code objects are read,
#   - executables with odd names (spaces, parentheses, a newline) and
#     executables deleted while they run,
#   - processes that exec another program after their first samples.
# Kernel threads exist on every host anyway. Every loop is bounded: a
# round starts at most ROUND_PROCS processes and waits for them, and the
# script stops after DURATION seconds (or MAX_ROUNDS rounds).
# usage: tests/churn/proc_churn.sh [DURATION]
# Used by tests/churn/asan_agent.sh (the agent under AddressSanitizer).
# It runs at nice 19 (CHURN_NICE), so that a shared host's other work
# comes first: about 16 processes start at once each round.
set -u
renice -n "${CHURN_NICE:-19}" -p $$ >/dev/null 2>&1 || true
duration=${1:-60}
max_rounds=${MAX_ROUNDS:-100000}
tmp=$(mktemp -d /tmp/ember-churn-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# ~100 KiB per variable (one string may not exceed 128 KiB), ten of them.
chunk=$(head -c 100000 /dev/zero | tr '\0' x)
big_env=()
for i in 0 1 2 3 4 5 6 7 8 9; do big_env+=("EMBER_CHURN_BIG$i=$chunk"); done

# A copy of a shell under odd names, and one deleted while it runs.
cp /bin/dash "$tmp/odd name (x)" 2>/dev/null || cp /bin/sh "$tmp/odd name (x)"
cp "$tmp/odd name (x)" "$tmp/$(printf 'new\nline')"
burn='i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done'

end=$(( $(date +%s) + duration ))
round=0
started=0
while [ "$(date +%s)" -lt "$end" ] && [ "$round" -lt "$max_rounds" ]; do
  round=$((round + 1))
  pids=()
  # zombie: the child exits at once, its parent (now sleep) never reaps it
  (sh -c 'exit 0' & exec sleep 1) & pids+=($!)
  # short bursts that exit while the agent reads them
  for _ in 1 2 3 4; do sh -c "$burn" & pids+=($!); done
  # no environment at all
  env -i /bin/sh -c "$burn" & pids+=($!)
  # about 1 MiB of environment
  env "${big_env[@]}" /bin/sh -c "$burn" & pids+=($!)
  # SLURM and the job tag: set, empty, and a variable with no value
  env SLURM_JOB_ID=$((round % 100000)) SLURM_JOB_NAME="churn job $round" SLURM_JOB_USER=churn \
      EMBER_JOB_TAG="tag-$round" /bin/sh -c "$burn" & pids+=($!)
  env SLURM_JOB_ID= SLURM_JOB_NAME= SLURM_JOB_USER= EMBER_JOB_TAG= /bin/sh -c "$burn" & pids+=($!)
  env -i SLURM_JOB_ID EMBER_JOB_TAG /bin/sh -c "$burn" 2>/dev/null & pids+=($!)
  # Python: a script that exits mid-run, and "python3" alone on stdin
  /usr/bin/python3 -c 'import time
def spin(t):
    end = time.time() + t
    while time.time() < end: pass
spin(0.15)' & pids+=($!)
  echo 'sum(range(200000))' | SLURM_JOB_ID=$round /usr/bin/python3 & pids+=($!)
  # odd executable names, one deleted while it runs
  "$tmp/odd name (x)" -c "$burn" & pids+=($!)
  "$tmp/$(printf 'new\nline')" -c "$burn" & pids+=($!)
  cp "$tmp/odd name (x)" "$tmp/deleted-$round"
  "$tmp/deleted-$round" -c "$burn" & pids+=($!)
  sleep 0.05 # exec'd by then: deleted while it runs, not before
  rm -f "$tmp/deleted-$round"
  # exec into another program after the first samples
  sh -c "$burn; exec /usr/bin/python3 -c 'sum(range(300000))'" & pids+=($!)
  started=$((started + ${#pids[@]}))
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
done
echo "proc_churn: $round rounds, $started processes started"
