"""TEST-ONLY: a Python "CUDA program" for test_cuda_agent.py. It loads the
test stand-in for libembercuda.so (build/workloads/cuda_wire/libembercuda.so,
tests/workloads/cuda_wire_client.c) with ctypes, says hello to the agent,
prints {"pid": N}, waits for a line on stdin (the agent has probed the
library by then), "launches" from Python functions (train_step ->
launch_gemm / launch_softmax / launch_copy / sync_stream, each calling the
library's wire_launch with correlation ids 2001..2004) and reports the GPU
time under those ids. It launches in 20 rounds a quarter of a second apart,
with the same ids: the agent keeps the latest stack of an id, and by the
last round it has built the unwind tables of the interpreter and of the
ctypes machinery (a process's first stacks may end early, as its first
CPU samples may).

usage: py_cuda_wire_launch.py LIBRARY SOCKET"""
import ctypes
import json
import os
import sys
import time

KERNEL, MEMCPY, SYNC = 1, 2, 4


def launch_gemm(lib):
    lib.wire_launch(2001, KERNEL)


def launch_softmax(lib):
    lib.wire_launch(2002, KERNEL)


def launch_copy(lib):
    lib.wire_launch(2003, MEMCPY)


def sync_stream(lib):
    lib.wire_launch(2004, SYNC)


def train_step(lib):
    launch_copy(lib)
    launch_gemm(lib)
    launch_softmax(lib)
    sync_stream(lib)


def main(library, sock):
    lib = ctypes.CDLL(library)
    lib.wire_launch.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    lib.wire_report.argtypes = [ctypes.c_uint64]
    lib.wire_connect.argtypes = [ctypes.c_char_p]
    if lib.wire_connect(sock.encode()) != 0:
        sys.exit(1)
    print(json.dumps({"pid": os.getpid()}), flush=True)
    sys.stdin.readline()
    for _ in range(20):
        train_step(lib)
        time.sleep(0.25)
    if lib.wire_report(2000) != 0:
        sys.exit(1)
    time.sleep(1)  # a program goes on after its first report
    lib.wire_close()


main(sys.argv[1], sys.argv[2])
