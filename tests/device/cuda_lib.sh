#!/bin/bash
# cuda_lib.sh - libembercuda.so on a real NVIDIA GPU with the real CUPTI,
# without the agent (a test-side socket stands in for it): the kernel split
# against CUDA events, launch overhead (100 000 empty kernels, without and
# with the library), and a PyTorch training step. See cuda_lib.py.
#
# Needs nvcc and PyTorch on the machine (the GPU machines of
# docs/internals/testing.md have both) and build/lib/libembercuda.so from
# `make gpu` here (carry build/lib), or CUPTI headers there to build it
# (make CUDA_HEADERS=.../extras/CUPTI/include gpu). libcupti is looked for
# in the CUDA toolkit and in PyTorch's wheels. Results in $OUT (default
# /tmp/ember-cuda-lib). One run takes about 2 minutes.
# Usage: tests/device/cuda_lib.sh   (from the repository root)
. "$(dirname "$0")/devenv.sh"
export OUT=${OUT:-/tmp/ember-cuda-lib}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpus.txt" || exit 1
if [ ! -f build/lib/libembercuda.so ]; then
  inc=$(dirname "$(find / -name cupti_activity.h -path '*CUPTI*' 2>/dev/null | head -1)")
  [ -n "$inc" ] || inc=$(dirname "$(find / -name cupti_activity.h 2>/dev/null | head -1)")
  make CUDA_HEADERS="$inc" gpu || exit 1
fi
nvcc_build "$OUT/cuda_split" tests/device/cuda_split.cu -O2 || exit 1
use_cupti
python3 tests/device/cuda_lib.py "$OUT/cuda_split" 2>&1 | tee "$OUT/cuda_lib.log"
exit "${PIPESTATUS[0]}"
