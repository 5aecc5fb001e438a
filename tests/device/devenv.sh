# devenv.sh - sourced by the tests/device/*.sh scripts on a GPU machine:
# the CUDA compiler and the CUPTI library they run with.

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
