#!/usr/bin/env bash
# install-test-nvtx.sh - NVIDIA's NVTX v3 headers (header-only), from the
# PyPI wheel nvidia-nvtx, into build/nvtx for the tests only: the NVTX
# workload (tests/workloads/cuda_nvtx.c) is built against the real nvtx3
# headers so that its ranges reach libembercuda.so through the very
# loader (NVTX_INJECTION64_PATH -> InitializeInjectionNvtx2) a user's
# program uses. The product never ships them and gpu/ does not include
# them: the injection ABI libembercuda.so implements is written out in
# gpu/nvtx_inject.h. Idempotent.
. "$(dirname "$0")/install-test-lib.sh" # strict mode, in the repository root
target=build/nvtx
want="nvidia-nvtx==13.4.92"
installed "$target" "$want" && exit 0
pip_target "$target" "$want" --no-deps
hdr=$(find "$target" -path '*include/nvtx3/nvToolsExt.h' | head -1)
test -n "$hdr" || { echo "install-test-nvtx: no include/nvtx3/nvToolsExt.h in the wheel" >&2; exit 1; }
ln -sfn "$(dirname "$(dirname "${hdr#$target/}")")" "$target/include"
mark_installed "$target" "$want"
