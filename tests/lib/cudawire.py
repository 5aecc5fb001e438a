"""The lib/cuda_wire.h messages libembercuda.so sends, read strictly, and a
test-side stand-in for the agent's socket that collects them.

parse() raises ValueError on anything lib/cuda_wire.h does not allow, so a
test that reads the library's output through it also checks the format."""

import os
import socket
import struct
import threading
import time

MAGIC = 0x55434D45
VERSION = 2
MAX_MSG = 65536
NAME_MAX = 1024
API_MAX = 64
HELLO, DEVICE, AGG, SPAN, STATS, PC = 1, 2, 3, 4, 5, 6
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_SYNC, KIND_GRAPH = 1, 2, 3, 4, 5

HDR = struct.Struct("<IHHII")
HELLO_S = struct.Struct("<IIIIQQ32s")
DEVICE_S = struct.Struct("<II16s64s")
AGG_S = struct.Struct("<QQQIHHIIIHH")
SPAN_S = struct.Struct("<QQQIHHIIIHH")
STATS_S = struct.Struct("<QQQQQQQII")
PC_S = struct.Struct("<QQQIHHIIIHHQQHHI")
STALL_MAX = 128
assert (HDR.size, HELLO_S.size, DEVICE_S.size, AGG_S.size, SPAN_S.size, STATS_S.size, PC_S.size) == \
    (16, 64, 88, 48, 48, 64, 72)


def _nvtx_ranges(body, start, n):
    """The NVTX path in body[start:start + n] (each range a length byte and
    its name): the ranges' names, outermost first."""
    names, q = [], start
    while q < start + n:
        names.append(body[q + 1:q + 1 + body[q]].decode())
        q += 1 + body[q]
    return names


def _pad8(n):
    return (n + 7) & ~7


def _cstr(b):
    return b.split(b"\0", 1)[0].decode()


def parse(data):
    """One datagram -> (type, [entry dict, ...])."""
    if len(data) < HDR.size or len(data) > MAX_MSG:
        raise ValueError(f"datagram of {len(data)} bytes")
    magic, version, mtype, length, count = HDR.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"magic {magic:#x} version {version}")
    if length != len(data):
        raise ValueError(f"length {length} != datagram {len(data)}")
    body = data[HDR.size:]
    if mtype in (HELLO, DEVICE, STATS):
        s = {HELLO: HELLO_S, DEVICE: DEVICE_S, STATS: STATS_S}[mtype]
        if count != 1 or len(body) != s.size:
            raise ValueError(f"type {mtype}: count {count}, {len(body)} bytes")
        v = s.unpack(body)
        if mtype == HELLO:
            e = dict(pid=v[0], cupti_version=v[1], driver_version=v[2], flags=v[3], cupti_ns=v[4],
                     realtime_ns=v[5], lib_version=_cstr(v[6]))
        elif mtype == DEVICE:
            e = dict(index=v[0], uuid=v[2], name=_cstr(v[3]))
        else:
            e = dict(zip(["launches", "launches_sampled", "activities", "records_dropped",
                          "messages_dropped", "overhead_ns", "pc_samples", "pc_state", "reserved"], v))
            if e["reserved"] or e["pc_state"] > 3:
                raise ValueError(f"STATS pc_state {e['pc_state']} reserved {e['reserved']}")
        return mtype, [e]
    if mtype not in (AGG, SPAN, PC) or count == 0:
        raise ValueError(f"type {mtype} count {count}")
    entries, off = [], 0
    for _ in range(count):
        if mtype == PC:
            if off + PC_S.size > len(body):
                raise ValueError("truncated PC")
            (stack_id, total_ns, cnt, tid, kind, api_len, device, stream, context, name_len, stall_len, cubin_id,
             pc_offset, nvtx_len, reserved16, reserved) = PC_S.unpack_from(body, off)
            if not (1 <= api_len <= API_MAX and 1 <= name_len <= NAME_MAX and 1 <= stall_len <= STALL_MAX
                    and kind in (1, 5) and cnt >= 1) or reserved16 or reserved:
                raise ValueError(f"PC api_len {api_len} name_len {name_len} stall_len {stall_len} kind {kind}")
            # API, name, stall reason, then the launch's NVTX path (as an AGG entry's)
            p = off + PC_S.size
            end = p + api_len + name_len + stall_len
            if end + nvtx_len > len(body):
                raise ValueError("PC strings past the end")
            nvtx = _nvtx_ranges(body, end, nvtx_len)
            nxt = off + _pad8(PC_S.size + api_len + name_len + stall_len + nvtx_len)
            if any(body[end + nvtx_len:nxt]):
                raise ValueError("non-zero padding")
            entries.append(dict(stack_id=stack_id, total_ns=total_ns, count=cnt, tid=tid, kind=kind, device=device,
                                stream=stream, context=context, api=body[p:p + api_len].decode(),
                                name=body[p + api_len:p + api_len + name_len].decode(),
                                stall=body[p + api_len + name_len:end].decode(), cubin_id=cubin_id,
                                pc_offset=pc_offset, nvtx=nvtx))
            off = nxt
            continue
        if off + AGG_S.size > len(body):  # AGG and SPAN entries are both 48 bytes
            raise ValueError(f"truncated {'AGG' if mtype == AGG else 'SPAN'}")
        if mtype == AGG:
            (stack_id, total_ns, cnt, tid, kind, api_len, device, stream, context, name_len,
             nvtx_len) = AGG_S.unpack_from(body, off)
            e = dict(stack_id=stack_id, total_ns=total_ns, count=cnt, tid=tid, kind=kind,
                     device=device, stream=stream, context=context)
        else:
            (start, end_ns, stack_id, tid, kind, name_len, device, stream, context, api_len,
             nvtx_len) = SPAN_S.unpack_from(body, off)
            e = dict(start_ns=start, end_ns=end_ns, stack_id=stack_id, tid=tid, kind=kind,
                     device=device, stream=stream, context=context)
        if not (1 <= api_len <= API_MAX and 1 <= name_len <= NAME_MAX and 1 <= kind <= 5):
            raise ValueError(f"api_len {api_len} name_len {name_len} kind {kind}")
        # the launch: API, name, NVTX path (ranges as a length byte and the name)
        p = off + AGG_S.size
        end = p + api_len + name_len
        if end + nvtx_len > len(body):
            raise ValueError("strings past the end")
        nvtx = _nvtx_ranges(body, end, nvtx_len)
        e.update(api=body[p:p + api_len].decode(), name=body[p + api_len:end].decode(), nvtx=nvtx)
        entries.append(e)
        nxt = off + _pad8(AGG_S.size + api_len + name_len + nvtx_len)
        if any(body[end + nvtx_len:nxt]):
            raise ValueError("non-zero padding")
        off = nxt
    if off != len(body):
        raise ValueError(f"{len(body) - off} bytes after the entries")
    return mtype, entries


class Listener:
    """A SOCK_SEQPACKET socket at `path`, accepting connections in a thread
    and keeping every datagram (per connection, in order)."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = []  # list of lists of (type, entries)
        self.lock = threading.Lock()
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        readers = []
        while not self.done:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            msgs = []
            with self.lock:
                self.connections.append(msgs)
            t = threading.Thread(target=self._read, args=(conn, msgs), daemon=True)
            t.start()
            readers.append(t)
        for t in readers:
            t.join(5)

    def _read(self, conn, msgs):
        conn.settimeout(0.2)
        with conn:
            while True:
                try:
                    data = conn.recv(MAX_MSG + 1)
                except socket.timeout:
                    if self.done:
                        return
                    continue
                if not data:
                    return
                with self.lock:
                    msgs.append(parse(data))

    def close(self):
        self.done = True
        self.thread.join(5)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def messages(self, wait=0.5):
        time.sleep(wait)  # the last datagrams of a process that just exited
        with self.lock:
            return [list(c) for c in self.connections]
