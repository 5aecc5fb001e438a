"""A Python CUDA program with a known split of GPU time, for the GPU
profiling tests: it "launches" through the project's fake driver
(tests/fake_cuda/, found through LD_LIBRARY_PATH) with ctypes, from
<module> -> train_step, the way a training script's launches come from
its step function.

    python3 py_cuda_launch.py STEPS [SECONDS]

Each step launches "py_big" on stream 1 and "py_small" on stream 2 with
cuLaunchKernel; with FAKE_CUDA_KERNEL_NS="py_big=700000,py_small=300000"
their GPU time splits 70/30. With PY_CUDA_FORK set, it forks halfway
(as a DataLoader starting its workers does) and the child exits at once.
Prints "done STEPS" at the end."""

import ctypes
import os
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
cuda.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]


def kernel(name):
    f = ctypes.c_void_p()
    if cuda.cuModuleGetFunction(ctypes.byref(f), None, name.encode()) != 0:
        raise SystemExit(f"cuModuleGetFunction {name} failed")
    return f


def train_step(big, small):
    for f, stream in ((big, 1), (small, 2)):
        if cuda.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, None, None) != 0:
            raise SystemExit("cuLaunchKernel failed")


steps = int(sys.argv[1])
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
if cuda.cuInit(0) != 0:
    raise SystemExit("cuInit failed")
big, small = kernel("py_big"), kernel("py_small")
t0 = time.monotonic()
for i in range(steps):
    if seconds > 0:
        delay = t0 + seconds * i / steps - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    train_step(big, small)
    if i == steps // 2 and os.environ.get("PY_CUDA_FORK"):
        child = os.fork()
        if child == 0:
            sys.exit(0)  # runs the C atexit handlers, the library's too
        _, status = os.waitpid(child, 0)
        if status != 0:
            raise SystemExit(f"the forked child ended with status {status}")
print("done", steps, flush=True)
