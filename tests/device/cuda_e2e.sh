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
. "$(dirname "$0")/devenv.sh"
bundle_check cuda_e2e cuda_split -O2 -g
