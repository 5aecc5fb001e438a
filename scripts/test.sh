#!/usr/bin/env bash
# Runs every ember test and ends with one line: "N passed, N failed".
#   layers       scripts/check-layers.py: server folders include one way only
#   unit         build/tests/test_*   (cmocka, ASan + UBSan), one count per test case
#   fuzz         build/fuzz/fuzz_*    (libFuzzer from the seed corpus, EMBER_FUZZ_SECONDS each)
#   model        build/tests/test_store_model, the long run: EMBER_MODEL_LONG_STEPS
#                (12000) random steps of ingest, maintenance and restarts, every
#                answer checked against a reference model; the seed is the day's
#                date (printed), so each day explores new interleavings
#   integration  tests/integration    (pytest; real binaries, BPF as root)
#   browser      tests/browser        (pytest; headless Chromium)
# Logs and artifacts go to build/test-results/. Select suites with
# EMBER_TEST_SUITES="unit fuzz integration browser" (the default is all).
set -u
cd "$(dirname "$0")/.."
out=build/test-results
rm -rf "$out"
mkdir -p "$out"
suites=${EMBER_TEST_SUITES:-layers unit fuzz model integration browser}
fuzz_seconds=${EMBER_FUZZ_SECONDS:-12}
python=/usr/bin/python3
total_pass=0
total_fail=0
failed_names=()

report() { # suite passed failed
  printf '%-12s %4d passed, %d failed\n' "$1" "$2" "$3"
  total_pass=$((total_pass + $2))
  total_fail=$((total_fail + $3))
}

run_layers() {
  if "$python" scripts/check-layers.py >"$out/layers.log" 2>&1; then
    report layers 1 0
  else
    failed_names+=("layers (see $out/layers.log)")
    report layers 0 1
  fi
}

run_unit() {
  local pass=0 fail=0 t name log rc ok notok
  for t in build/tests/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    name=$(basename "$t")
    log="$out/unit-$name.log"
    CMOCKA_MESSAGE_OUTPUT=TAP ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 timeout 600 "$t" >"$log" 2>&1
    rc=$?
    ok=$(grep -c '^ok ' "$log")
    notok=$(grep -c '^not ok ' "$log")
    pass=$((pass + ok))
    fail=$((fail + notok))
    if [ "$rc" -ne 0 ] && [ "$notok" -eq 0 ]; then
      fail=$((fail + 1)) # crashed, leaked or sanitizer report
      failed_names+=("unit $name (exit $rc, see $log)")
    elif [ "$notok" -gt 0 ]; then
      while read -r line; do failed_names+=("unit $name: $line"); done < <(grep '^not ok ' "$log")
    fi
  done
  report unit "$pass" "$fail"
}

run_fuzz() {
  local pass=0 fail=0 f name work log
  for f in build/fuzz/fuzz_*; do
    [ -x "$f" ] && [ -f "$f" ] || continue
    name=$(basename "$f")
    work=build/fuzz-work/$name
    rm -rf "$work"
    mkdir -p "$work"
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
    log="$out/fuzz-$name.log"
    if timeout $((fuzz_seconds + 120)) "$f" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -timeout=10 \
         -artifact_prefix="$out/$name-" "$work" >"$log" 2>&1; then
      pass=$((pass + 1))
    else
      fail=$((fail + 1))
      failed_names+=("fuzz $name (see $log and $out/$name-*)")
    fi
  done
  report fuzz "$pass" "$fail"
}

run_model() {
  local log="$out/model.log" seed=${EMBER_MODEL_SEED:-$(date -u +%Y%m%d)}
  if EMBER_MODEL_STEPS=${EMBER_MODEL_LONG_STEPS:-12000} EMBER_MODEL_SEED=$seed \
       CMOCKA_MESSAGE_OUTPUT=TAP ASAN_OPTIONS=detect_leaks=1 \
       timeout 1200 build/tests/test_store_model >"$log" 2>&1; then
    report model 1 0
  else
    failed_names+=("model: seed $seed (see $log; rerun with EMBER_MODEL_SEED=$seed)")
    report model 0 1
  fi
}

run_pytest() { # suite dir
  local suite=$1 dir=$2 xml="$out/$1.xml" log="$out/$1.log"
  if [ -z "$(ls "$dir"/test_*.py 2>/dev/null)" ]; then
    report "$suite" 0 0
    return
  fi
  timeout 2400 "$python" -m pytest -v --durations=40 -p no:cacheprovider --junitxml="$xml" "$dir" >"$log" 2>&1
  local rc=$?
  local counts
  counts=$("$python" - "$xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception:
    print("0 1"); sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
t = f = 0
for s in suites:
    t += int(s.get("tests", 0)); f += int(s.get("failures", 0)) + int(s.get("errors", 0))
    sk = int(s.get("skipped", 0))
    # a skipped test did not pass: count it as failed so nothing hides
    f += sk
print(t - f, f)
PY
)
  local pass=${counts% *} fail=${counts#* }
  if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi
  if [ "$fail" -gt 0 ]; then
    while read -r line; do failed_names+=("$suite: $line"); done < <(grep -E '(FAILED|ERROR|SKIPPED)' "$log" | grep '::' | head -50)
  fi
  report "$suite" "$pass" "$fail"
}

for s in $suites; do
  case "$s" in
    layers) run_layers ;;
    unit) run_unit ;;
    fuzz) run_fuzz ;;
    model) run_model ;;
    integration) run_pytest integration tests/integration ;;
    browser) run_pytest browser tests/browser ;;
    *) echo "unknown suite $s" >&2; total_fail=$((total_fail + 1)) ;;
  esac
done

if [ ${#failed_names[@]} -gt 0 ]; then
  echo
  echo "failures:"
  printf '  %s\n' "${failed_names[@]}"
  echo
fi
echo "$total_pass passed, $total_fail failed" | tee "$out/summary"
[ "$total_fail" -eq 0 ]
