#!/usr/bin/env bash
# install-test-cudatools.sh - NVIDIA's nvdisasm, from its PyPI wheel, into
# build/cudatools for the tests only: tests/unit/symbols/test_sass.c checks
# ember's reading of its output (server/symbols/sass.c) on the cubins in
# tests/data/sass/ with a live run. The product never ships it; on a host
# it uses the nvdisasm of the CUDA toolkit there. Idempotent.
. "$(dirname "$0")/install-test-lib.sh" # strict mode, in the repository root
target=build/cudatools
want="nvidia-cuda-nvdisasm==13.5.37"
installed "$target" "$want" && exit 0
pip_target "$target" "$want" --no-deps
test -x "$target/nvidia/cu13/bin/nvdisasm" || { echo "install-test-cudatools: no nvdisasm in the wheel" >&2; exit 1; }
mark_installed "$target" "$want"
