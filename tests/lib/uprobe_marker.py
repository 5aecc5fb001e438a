"""Records every call to a function of a shared library with a uprobe
(perf_event_open, the kernel's uprobe PMU), keeping the thread and the
first two integer arguments -- what ember-agent's uprobe on
ember_cuda_launch_marker sees, without BPF. Root only; the tests use it to
check that the library calls the marker with the ids its aggregates name.

    with MarkerProbe(lib_path, "ember_cuda_launch_marker") as probe:
        ...run the program...
    probe.calls  -> [(pid, tid, arg0, arg1), ...]
"""

import ctypes
import mmap
import os
import struct
import subprocess

PERF_SAMPLE_TID = 1 << 1
PERF_SAMPLE_REGS_USER = 1 << 12
PERF_RECORD_SAMPLE = 9
PERF_REGS_X86_SI, PERF_REGS_X86_DI = 4, 5
NR_PERF_EVENT_OPEN = 298  # x86_64
PAGES = 256


class PerfEventAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
                ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
                ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64),
                ("branch_sample_type", ctypes.c_uint64), ("sample_regs_user", ctypes.c_uint64),
                ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
                ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
                ("sample_max_stack", ctypes.c_uint16), ("reserved", ctypes.c_uint16)]


def file_offset(path, symbol):
    """The file offset of `symbol` (what a uprobe is placed at)."""
    syms = subprocess.run(["nm", "-D", "--defined-only", path], check=True, stdout=subprocess.PIPE,
                          text=True).stdout
    vaddr = next(int(line.split()[0], 16) for line in syms.splitlines() if line.split()[-1] == symbol)
    segs = subprocess.run(["readelf", "-lW", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in segs.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            off, va, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if va <= vaddr < va + filesz:
                return vaddr - va + off
    raise ValueError(f"{symbol} is in no LOAD segment of {path}")


class MarkerProbe:
    def __init__(self, path, symbol):
        self.path = os.path.realpath(path).encode()
        self.offset = file_offset(path, symbol)
        self.fds, self.maps, self.calls = [], [], []

    def __enter__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        pmu = int(open("/sys/bus/event_source/devices/uprobe/type").read())
        self._path_buf = ctypes.create_string_buffer(self.path)
        for cpu in range(os.cpu_count()):
            a = PerfEventAttr()
            a.type = pmu
            a.size = ctypes.sizeof(a)
            a.config = 0  # entry, not return
            a.config1 = ctypes.addressof(self._path_buf)
            a.config2 = self.offset
            a.sample_period = 1
            a.sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_REGS_USER
            a.sample_regs_user = (1 << PERF_REGS_X86_DI) | (1 << PERF_REGS_X86_SI)
            fd = libc.syscall(NR_PERF_EVENT_OPEN, ctypes.byref(a), -1, cpu, -1, 0)
            if fd < 0:
                err = ctypes.get_errno()
                self.__exit__(None, None, None)
                raise OSError(err, f"perf_event_open(uprobe): {os.strerror(err)}")
            self.fds.append(fd)
            self.maps.append(mmap.mmap(fd, (PAGES + 1) * mmap.PAGESIZE))
        return self

    def _drain(self, m):
        head = struct.unpack_from("<Q", m, 1024)[0]
        data_off, data_size = mmap.PAGESIZE, PAGES * mmap.PAGESIZE
        if head > data_size:
            raise RuntimeError("uprobe ring wrapped: too many calls for this helper")
        pos = 0
        while pos < head:
            typ, misc, size = struct.unpack_from("<IHH", m, data_off + pos)
            if typ == PERF_RECORD_SAMPLE:
                pid, tid, abi, si, di = struct.unpack_from("<IIQQQ", m, data_off + pos + 8)
                if abi:
                    self.calls.append((pid, tid, di, si))
            pos += size

    def __exit__(self, *exc):
        for m in self.maps:
            self._drain(m)
            m.close()
        for fd in self.fds:
            os.close(fd)
        self.maps, self.fds = [], []
        return False
