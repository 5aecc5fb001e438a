"""Builds and sends ember agent batches (ember.ingest.v1.Batch, see
lib/proto/ingest.proto) without the agent, root, BPF or a protobuf library.

The protobuf wire format is written by hand: a field is a varint key
(field number << 3 | wire type) followed by a varint (wire type 0) or a
length-prefixed payload (wire type 2: strings, bytes, sub-messages and
packed repeated integers). Fields at their default value are left out.

    b = Batch(sample_rate_hz=19)
    b.add(["main", "compute"], {"process.executable.name": "myapp"}, value=60)
    send_batch("http://127.0.0.1:8080", b.encode(sequence=1, start_ms=..., end_ms=...))
"""

import json
import subprocess
import time
import urllib.request
import uuid

# enum FrameType
FRAME_TYPES = {
    "kernel": 1, "native": 2, "cpython": 3, "go": 4, "jvm": 5, "v8": 6, "ruby": 7,
    "php": 8, "perl": 9, "dotnet": 10, "cuda_launch": 11, "cuda_kernel": 12,
    "cuda_sass": 13, "cuda_stall": 14, "error": 15,
    "cuda_memcpy": 16, "cuda_memset": 17, "cuda_sync": 18, "nvtx": 19,
}
# enum EventKind
EVENT_KINDS = {"on_cpu": 1, "off_cpu": 2, "cuda": 3, "alloc": 4}

# a GPU span's kind (lib/cuda_wire.h enum cuda_wire_kind)
SPAN_KINDS = {"kernel": 1, "memcpy": 2, "memset": 3, "sync": 4, "graph": 5}

VARINT, LEN = 0, 2


def varint(n):
    """The base-128 varint of a non-negative integer (negative int64 values
    are sent as their 64-bit two's complement, as protobuf does)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire_type):
    return varint(field << 3 | wire_type)


def field_varint(field, n):
    return key(field, VARINT) + varint(n) if n else b""


def field_bytes(field, data):
    return key(field, LEN) + varint(len(data)) + data


def field_string(field, s):
    return field_bytes(field, s.encode()) if s else b""


def field_packed(field, values):
    if not values:
        return b""
    return field_bytes(field, b"".join(varint(v) for v in values))


class Batch:
    """Interns strings, frames, stacks and resources the way the agent does,
    into the per-batch tables of one ember.ingest.v1.Batch."""

    def __init__(self, project="default", agent_instance=None, sample_rate_hz=19, host_cpus=0):
        self.project = project
        self.host_cpus = host_cpus
        self.agent_instance = agent_instance or str(uuid.uuid4())
        self.sample_rate_hz = sample_rate_hz
        self.strings = [""]
        self._string_ids = {"": 0}
        self.frames = []  # (type, name id, binary id[, file index (1-based), address])
        self._frame_ids = {}
        self.files = []  # (16-byte file id, name string id)
        self.stacks = []  # tuples of frame indexes, outermost first
        self._stack_ids = {}
        self.resources = []  # tuples of string ids: key, value, key, value, ...
        self._resource_ids = {}
        self.samples = []  # (stack, resource, kind, value)
        self.spans = []  # (stack, resource, start_ns, end_ns, kind, device, stream)

    def string(self, s):
        if s not in self._string_ids:
            self._string_ids[s] = len(self.strings)
            self.strings.append(s)
        return self._string_ids[s]

    def frame(self, name, frame_type="native", binary=""):
        k = (FRAME_TYPES[frame_type], self.string(name), self.string(binary))
        if k not in self._frame_ids:
            self._frame_ids[k] = len(self.frames)
            self.frames.append(k)
        return self._frame_ids[k]

    def file_frame(self, file_id_hex, name, address):
        """A native frame with no name: offset `address` in the file with
        this id (32 hex digits) and base name, named by the server from
        the file's symbols (as the agent sends frames it has not named)."""
        fid = bytes.fromhex(file_id_hex)
        entry = (fid, self.string(name))
        if entry not in self.files:
            self.files.append(entry)
        k = (FRAME_TYPES["native"], 0, 0, self.files.index(entry) + 1, address)
        if k not in self._frame_ids:
            self._frame_ids[k] = len(self.frames)
            self.frames.append(k)
        return self._frame_ids[k]

    def sass_frame(self, cubin, offset):
        """A cuda_sass frame as ember-agent sends PC sampling's instructions:
        no name, the cubin ("cubin:<crc>") as its binary, the PC offset as
        its address (the server names it "<binary>+0x<offset>")."""
        k = (FRAME_TYPES["cuda_sass"], 0, self.string(cubin), 0, offset)
        if k not in self._frame_ids:
            self._frame_ids[k] = len(self.frames)
            self.frames.append(k)
        return self._frame_ids[k]

    def stack(self, frames, binary="myapp"):
        """frames: outermost first; each a name (a native frame in binary),
        a (name, type) or a (name, type, binary) tuple, or a frame index
        from file_frame()."""
        ids = []
        for f in frames:
            if isinstance(f, int):
                ids.append(f)
                continue
            if isinstance(f, str):
                f = (f, "native")
            name, frame_type = f[0], f[1]
            ids.append(self.frame(name, frame_type, f[2] if len(f) > 2 else
                                  ("vmlinux" if frame_type == "kernel" else binary)))
        k = tuple(ids)
        if k not in self._stack_ids:
            self._stack_ids[k] = len(self.stacks)
            self.stacks.append(k)
        return self._stack_ids[k]

    def resource(self, attributes):
        k = tuple(i for kv in attributes.items() for i in (self.string(kv[0]), self.string(kv[1])))
        if k not in self._resource_ids:
            self._resource_ids[k] = len(self.resources)
            self.resources.append(k)
        return self._resource_ids[k]

    def add(self, frames, attributes, value, kind="on_cpu", binary="myapp"):
        self.samples.append((self.stack(frames, binary), self.resource(attributes),
                             EVENT_KINDS[kind], value))

    def add_span(self, frames, attributes, start_ns, end_ns, kind, device, stream, binary="myapp"):
        """A GPU timeline span (protocol version 2 only: encode_session):
        kind is a SPAN_KINDS name; frames its launching stack."""
        self.spans.append((self.stack(frames, binary), self.resource(attributes), start_ns, end_ns,
                           SPAN_KINDS[kind], device, stream))

    def encode_session(self, sequence=1, session=None, start_ms=None, end_ms=None):
        """The batch as the first ember.ingest.v1.SessionBatch of a new
        session (every table's base 0, as ember-agent sends it after a
        start or a resync): stacks become a tree of nodes, samples are in
        node order (their node ids as deltas), spans name their nodes."""
        now = int(time.time() * 1000)
        end_ms = now if end_ms is None else end_ms
        start_ms = end_ms - 5000 if start_ms is None else start_ms
        nodes, node_ids, leaf = [], {}, []
        for frames in self.stacks:
            parent = 0  # parent node id + 1; 0: outermost
            for f in frames:
                if (parent, f) not in node_ids:
                    node_ids[(parent, f)] = len(nodes)
                    nodes.append((parent, f))
                parent = node_ids[(parent, f)] + 1
            leaf.append(parent - 1)
        out = [
            field_string(1, session or str(uuid.uuid4())),
            field_string(2, self.agent_instance),
            field_varint(3, sequence),
            field_string(4, self.project),
            field_varint(5, start_ms),
            field_varint(6, end_ms),
            field_varint(7, self.sample_rate_hz),
            field_varint(8, self.host_cpus),
        ]
        out += [field_bytes(10, s.encode()) for s in self.strings]
        for fid, name in self.files:
            out.append(field_bytes(12, field_bytes(1, fid) + field_varint(2, name)))
        frames = [(f[0], f[1], f[2], f[3] if len(f) > 3 else 0, f[4] if len(f) > 3 else 0) for f in self.frames]
        out += [field_packed(14, [f[0] for f in frames]), field_packed(15, [f[3] for f in frames]),
                field_packed(16, [f[4] for f in frames]), field_packed(17, [f[1] for f in frames]),
                field_packed(18, [f[2] for f in frames])]
        out += [field_packed(20, [n[0] for n in nodes]), field_packed(21, [n[1] for n in nodes])]
        out += [field_packed(23, [len(r) for r in self.resources]),
                field_packed(24, [i for r in self.resources for i in r])]
        rows = sorted((leaf[st], res, kind, value) for st, res, kind, value in self.samples)
        prev, deltas = 0, []
        for node, *_ in rows:
            deltas.append(node - prev)
            prev = node
        out += [field_packed(25, deltas), field_packed(26, [r[1] for r in rows]),
                field_packed(27, [r[2] for r in rows]), field_packed(28, [r[3] for r in rows])]
        sp = self.spans
        out += [field_packed(29 + i, [x[i] if i else leaf[x[0]] for x in sp]) for i in range(7)]
        return b"".join(out)

    def encode(self, sequence, start_ms=None, end_ms=None):
        """The Batch message, uncompressed."""
        now = int(time.time() * 1000)
        end_ms = now if end_ms is None else end_ms
        start_ms = end_ms - 5000 if start_ms is None else start_ms
        out = [
            field_string(1, self.agent_instance),
            field_varint(2, sequence),
            field_string(3, self.project),
            field_varint(4, start_ms),
            field_varint(5, end_ms),
            field_varint(6, self.sample_rate_hz),
        ]
        # strings[0] is "" and must be sent (an empty length-delimited field).
        out += [field_bytes(7, s.encode()) for s in self.strings]
        for fid, name in self.files:
            out.append(field_bytes(8, field_bytes(1, fid) + field_varint(2, name)))
        for frame_type, name, binary, *at in self.frames:
            where = field_varint(2, at[0]) + field_varint(3, at[1]) if at else b""
            out.append(field_bytes(9, field_varint(1, frame_type) + where +
                                   field_varint(4, name) + field_varint(5, binary)))
        for frames in self.stacks:
            out.append(field_bytes(10, field_packed(1, frames)))
        for attrs in self.resources:
            out.append(field_bytes(11, field_packed(1, attrs)))
        for stack, resource, kind, value in self.samples:
            out.append(field_bytes(12, field_varint(1, stack) + field_varint(2, resource) +
                                   field_varint(3, kind) + field_varint(4, value)))
        out.append(field_varint(13, self.host_cpus))
        return b"".join(out)


def zstd_compress(data):
    """zstd through the zstd command-line tool (Debian package zstd)."""
    return subprocess.run(["zstd", "-q", "-c"], input=data, stdout=subprocess.PIPE,
                          check=True).stdout


def send_session_batch(base_url, raw, timeout=10):
    """POSTs an encoded SessionBatch (protocol version 2); its JSON answer."""
    return send_batch(base_url, raw, timeout, route="/ingest/v2/batch")


def send_batch(base_url, raw, timeout=10, route="/ingest/v1/batch", headers=None):
    """POSTs an encoded batch to ember-server (with more headers); returns
    its JSON answer."""
    req = urllib.request.Request(
        base_url.rstrip("/") + route, data=zstd_compress(raw), method="POST",
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())
