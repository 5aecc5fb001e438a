"""A GPU load of known shape for tests/device/gpu_metrics.sh: holds HOLD_GIB
of device memory, then multiplies 8192x8192 bf16 matrices back to back for
BUSY_S seconds (the GPU fully busy), then exits. Prints JSON: its pid, the
bytes it allocated, the products done and when the busy phase began and
ended (Unix ms)."""
import json
import os
import sys
import time

import torch

busy_s = float(sys.argv[1]) if len(sys.argv) > 1 else 40.0
hold_gib = float(sys.argv[2]) if len(sys.argv) > 2 else 16.0
dev = torch.device("cuda")
hold = torch.empty(int(hold_gib * (1 << 30)), dtype=torch.uint8, device=dev)
hold.fill_(1)
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
torch.cuda.synchronize()
t0 = time.time()
n = 0
while time.time() - t0 < busy_s:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
t1 = time.time()
print(json.dumps({"pid": os.getpid(), "allocated": torch.cuda.memory_allocated(),
                  "reserved": torch.cuda.memory_reserved(), "products": n,
                  "tflops": 2 * 8192 ** 3 * n / (t1 - t0) / 1e12,
                  "busy_start_ms": int(t0 * 1000), "busy_end_ms": int(t1 * 1000)}), flush=True)
