# devenv.sh - sourced by the tests/device/*.sh scripts on a GPU machine:
# the CUDA compiler and the CUPTI library they run with, and the run of an
# end-to-end check against the bundled server and agent. Sourcing it sets
# -u and enters the repository root.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

# nvcc_build OUTPUT SOURCE [NVCC FLAGS...]: builds SOURCE with the machine's
# nvcc (on PATH or in /usr/local/cuda); fails when there is none.
nvcc_build() {
  local out=$1 src=$2 nvcc
  shift 2
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
  [ -n "$nvcc" ] || { echo "no nvcc"; return 1; }
  "$nvcc" "$@" -o "$out" "$src"
}

# use_cupti: puts the folder of the first libcupti found (the CUDA toolkit,
# then PyTorch's wheels) first on LD_LIBRARY_PATH for the C programs
# (PyTorch brings its own).
use_cupti() {
  local cupti
  cupti=$(find /usr/local/cuda*/extras/CUPTI/lib64 /usr/local/cuda*/lib64 \
            $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
            -name 'libcupti.so*' 2>/dev/null | head -1)
  echo "libcupti: ${cupti:-none found}"
  [ -n "$cupti" ] && export LD_LIBRARY_PATH="$(dirname "$cupti")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  return 0
}

# bundle_check NAME PROGRAM [NVCC FLAGS...]: the end-to-end check
# tests/device/NAME.py against ember-server and ember-agent from
# build/devbundle (scripts/device-bundle.sh), with tests/device/PROGRAM.cu
# built here by nvcc and CUPTI on the library path; with EMBER_E2E_FAKE=1
# on the fake driver instead (no nvcc, no GPU). Output and results in $OUT
# (default /tmp/ember-NAME); returns the check's exit status.
bundle_check() {
  local name=$1 prog=$2
  shift 2
  export OUT=${OUT:-/tmp/ember-${name//_/-}}
  mkdir -p "$OUT"
  [ -x build/devbundle/bin/ember-server ] || { echo "no build/devbundle (scripts/device-bundle.sh)"; return 1; }
  if [ "${EMBER_E2E_FAKE:-0}" != 1 ]; then
    nvidia-smi -L | tee "$OUT/gpus.txt" || return 1
    nvcc_build "$OUT/$prog" "tests/device/$prog.cu" "$@" || return 1
    use_cupti
  fi
  python3 "tests/device/$name.py" 2>&1 | tee "$OUT/$name.log"
  return "${PIPESTATUS[0]}"
}
