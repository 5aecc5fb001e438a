#!/bin/bash
# gpu_deep.sh - PC sampling on a real NVIDIA GPU: ember-server and
# ember-agent on the GPU machine (from build/devbundle: scripts/device-bundle.sh),
# libembercuda.so installed by the agent, and tests/device/pc_deep.cu (built
# here with nvcc): a memory-bound kernel (a dependent random walk through
# 64 MiB) and a compute-bound one (dependent FMAs in registers), run with
# EMBER_CUDA_ENABLE_PC_SAMPLING=true. Checked (tests/device/gpu_deep.py):
# both kernels have cuda_sass -> cuda_stall leaves carrying all their GPU
# time; the memory-bound kernel's top stall reason is a memory one and the
# compute-bound kernel's is not; every cuda_sass frame named by its SASS
# mnemonic; the PC-sampling overhead (each kernel's
# median CUDA-event time with sampling on against off, in %). One run:
# about 3 minutes. PC sampling needs the profiling privilege (root, or
# NVreg_RestrictProfilingToAdminUsers=0): the run says so when refused.
#
# Prepare here: make all gpu-test && scripts/device-bundle.sh,
# then on the device machine carry build/devbundle, build/lib and
# build/workloads and run: tests/device/gpu_deep.sh   (results in $OUT)
#
# EMBER_E2E_FAKE=1 runs the same script on this machine on the TEST-ONLY
# fake driver and CUPTI (tests/fake_cuda/), which load the checked-in
# tests/data/sass cubin of the same two kernels and replay scripted samples
# at its instructions, to check the script itself (no overhead figure).
. "$(dirname "$0")/devenv.sh"
# The SASS names need nvdisasm: the toolkit's beside nvcc on a GPU machine,
# the test-only build/cudatools one in fake mode.
if [ "${EMBER_E2E_FAKE:-0}" = 1 ]; then
  export EMBER_NVDISASM="$PWD/build/cudatools/nvidia/cu13/bin/nvdisasm"
else
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
  [ -n "$nvcc" ] && [ -x "$(dirname "$nvcc")/nvdisasm" ] && export EMBER_NVDISASM="$(dirname "$nvcc")/nvdisasm"
fi
echo "nvdisasm: ${EMBER_NVDISASM:-none found (SASS names not checked)}"
bundle_check gpu_deep pc_deep -O2 -g -lineinfo
