#!/bin/bash
# cuda_e2e.sh - GPU profiling end to end on a real NVIDIA GPU: ember-server
# and ember-agent on the GPU machine (from build/devbundle, which carries
# every library they load: scripts/device-bundle.sh), libembercuda.so
# installed by the agent, a CUDA C program with two kernels of known
# durations (~70/30) and a PyTorch training step. Checked: the kernel split
# in the server's GPU flamegraph within 3 points of the program's own CUDA
# event timings; the launching stacks (main -> train_step -> launch_k70,
# and <module> -> train_step for PyTorch) above the kernels; launch overhead
# added per launch with the agent running (median and p99 over 100 000
# empty-kernel launches, against no injection). One run: about 4 minutes.
#
# Prepare here: make all gpu-test && scripts/device-bundle.sh,
# then on the device machine carry build/devbundle, build/lib and
# build/workloads and run: tests/device/cuda_e2e.sh   (results in $OUT)
#
# EMBER_E2E_FAKE=1 runs the same script on this machine on the TEST-ONLY
# fake driver and CUPTI (tests/fake_cuda/) with the fake-driver workloads in
# place of nvcc's and PyTorch's programs, to check the script itself.
set -u
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/ember-cuda-e2e}
mkdir -p "$OUT"
[ -x build/devbundle/bin/ember-server ] || { echo "no build/devbundle (scripts/device-bundle.sh)"; exit 1; }
if [ "${EMBER_E2E_FAKE:-0}" != 1 ]; then
  nvidia-smi -L | tee "$OUT/gpus.txt" || exit 1
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
  [ -n "$nvcc" ] || { echo "no nvcc"; exit 1; }
  "$nvcc" -O2 -g -o "$OUT/cuda_split" tests/device/cuda_split.cu || exit 1
  cupti=$(find /usr/local/cuda*/extras/CUPTI/lib64 /usr/local/cuda*/lib64 \
            $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
            -name 'libcupti.so*' 2>/dev/null | head -1)
  echo "libcupti: ${cupti:-none found}"
  [ -n "$cupti" ] && export LD_LIBRARY_PATH="$(dirname "$cupti")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
python3 tests/device/cuda_e2e.py 2>&1 | tee "$OUT/cuda_e2e.log"
exit "${PIPESTATUS[0]}"
