"""A MetricsBatch (lib/proto/ingest.proto) built by hand for the tests:
series are added by name, unit and labels, points by time and value;
encode() writes the protobuf, post() sends it to an ember-server's
POST /ingest/v1/metrics as ember-agent does (zstd). encode_raw() writes
any tables as given, consistent or not, for the tests of bad batches.

    b = MetricsBatch()
    s = b.series("process.utime", "cores", {"host.name": "h1", "process.executable.name": "app"})
    b.point(s, now_ms, 0.5)
    post(server.base, b)
"""

import json
import struct
import time
import urllib.request

from ember_batch import zstd_compress  # tests/lib


def _varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _bytes(n, data):
    return _varint(n << 3 | 2) + _varint(len(data)) + data


def _uint(n, v):
    return _varint(n << 3) + _varint(v)


def _packed(n, values):
    return _bytes(n, b"".join(_varint(v) for v in values)) if values else b""


class MetricsBatch:
    def __init__(self, project="default", agent_instance="00000000-0000-4000-8000-0000000b0b0e"):
        self.project, self.agent_instance = project, agent_instance
        self.strings, self._ids = [""], {"": 0}
        self.set_lengths, self.set_strings, self._sets = [], [], {}
        self.s_names, self.s_units, self.s_sets, self._series = [], [], [], {}
        self.p_series, self.p_times, self.p_values = [], [], []

    def _str(self, s):
        if s not in self._ids:
            self._ids[s] = len(self.strings)
            self.strings.append(s)
        return self._ids[s]

    def series(self, name, unit, labels):
        """The index of a series (created once per name and label set)."""
        items = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        if items not in self._sets:
            self._sets[items] = len(self.set_lengths)
            self.set_lengths.append(2 * len(items))
            for k, v in items:
                self.set_strings += [self._str(k), self._str(v)]
        key = (name, unit, items)
        if key not in self._series:
            self._series[key] = len(self.s_names)
            self.s_names.append(self._str(name))
            self.s_units.append(self._str(unit))
            self.s_sets.append(self._sets[items])
        return self._series[key]

    def point(self, series, ts_ms, value):
        self.p_series.append(series)
        self.p_times.append(int(ts_ms))
        self.p_values.append(float(value))

    def add(self, name, unit, labels, points):
        """A series and its points [(ts_ms, value), ...]."""
        s = self.series(name, unit, labels)
        for ts, value in points:
            self.point(s, ts, value)
        return s

    def encode(self, sequence=1):
        now = int(time.time() * 1000)
        start = min(self.p_times) if self.p_times else now - 1000
        return encode_raw(self.strings, self.set_lengths, self.set_strings, self.s_names,
                          self.s_units, self.s_sets, self.p_series, self.p_times, self.p_values,
                          project=self.project, seq=sequence, start_ms=start,
                          agent_instance=self.agent_instance)


def encode_raw(strings, set_lengths, set_strings, s_names, s_units, s_sets, p_series, p_times,
               p_values, project="default", seq=1, start_ms=None,
               agent_instance="00000000-0000-4000-8000-00000000abcd"):
    """The MetricsBatch of exactly these tables (string ids, label sets,
    series, points), ending now."""
    now = int(time.time() * 1000)
    m = _bytes(1, agent_instance.encode()) + _uint(2, seq)
    m += _bytes(3, project.encode()) + _uint(4, now - 1000 if start_ms is None else start_ms)
    m += _uint(5, now)
    for s in strings:
        m += _bytes(6, s.encode())
    m += _packed(7, set_lengths) + _packed(8, set_strings)
    m += _packed(9, s_names) + _packed(10, s_units) + _packed(11, s_sets)
    m += _packed(12, p_series) + _packed(13, p_times)
    if p_values:
        m += _bytes(14, b"".join(struct.pack("<d", v) for v in p_values))
    return m


def post(base_url, batch, sequence=1, timeout=10):
    """Sends a batch; returns the server's JSON answer (raises on an HTTP error)."""
    req = urllib.request.Request(
        base_url.rstrip("/") + "/ingest/v1/metrics", data=zstd_compress(batch.encode(sequence)),
        method="POST", headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())
