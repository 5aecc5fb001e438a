#!/usr/bin/env python3
"""The GPU timeline read from the fleet store: N spans stored through a
`--store clickhouse` server (two ClickHouse 18.16 shards started here, as
the tests start them), then the timeline query timed -- without a filter
(the request's limit of spans read) and with a CEL filter (up to 200 000
spans read, their origins decoded, the filter applied in ember).

usage: python3 bench/gpu_timeline_ch.py [SPANS] [ORIGINS]   (after make)
"""
import json
import os
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from clickhouse import ClickHouseCluster  # noqa: E402
from ember_batch import Batch, send_session_batch  # noqa: E402
from harness import BIN, DEFAULT_PROJECT, Server, http  # noqa: E402
import subprocess  # noqa: E402

spans = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
origins = int(sys.argv[2]) if len(sys.argv) > 2 else 200
per_batch = 20000
cl = ClickHouseCluster().start()
tmp = tempfile.mkdtemp(prefix="ember-tl-bench-")
try:
    a, b = cl.servers
    urls = ("--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-database", "tl",
            "--clickhouse-cluster", "ember_test")
    subprocess.run([os.path.join(BIN, "ember-server"), "migrate", *urls], check=True,
                   stdout=subprocess.DEVNULL)
    srv = Server(os.path.join(tmp, "srv"), None, "--store", "clickhouse", *urls,
                 "--gpu-span-max", str(max(spans, 65536))).start()
    now = time.time_ns()
    first = now - 600 * 1_000_000_000
    t0 = time.monotonic()
    seq = 0
    for at in range(0, spans, per_batch):
        bt = Batch(agent_instance="tl-bench", sample_rate_hz=19)
        for i in range(at, min(spans, at + per_batch)):
            o = i % origins
            frames = ["main", f"train_step_{o % 17}", f"layer_{o}",
                      ("cudaLaunchKernel", "cuda_launch", "libcudart.so.12"),
                      (f"kernel_{o}", "cuda_kernel", "")]
            attrs = {"host.name": f"gpu{o % 8}", "process.pid": str(1000 + o % 32)}
            start = first + i * 2000
            bt.add_span(frames, attrs, start, start + 1500, "kernel", o % 8, 7)
        seq += 1
        assert send_session_batch(srv.url, bt.encode_session(sequence=seq, start_ms=first // 1_000_000,
                                                             end_ms=now // 1_000_000), timeout=120)["stored"]
    print(f"stored {spans} spans ({origins} origins) in {time.monotonic() - t0:.1f} s")
    for label, query, limit in (("no filter, limit 20 000", None, 20000),
                                ("CEL filter (reads up to 200 000)", 'host.name == "gpu3"', 20000)):
        times = []
        for _ in range(3):
            t = time.monotonic()
            st, body = http("POST", f"{srv.url}/public/api/v1/project/{DEFAULT_PROJECT}/gpu/timeline",
                            {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "query": query},
                             "limit": limit}, {"Content-Type": "application/json"}, timeout=300)
            times.append(time.monotonic() - t)
            assert st == 200, body[:300]
        doc = json.loads(body)
        print(f"{label}: {len(doc['spans'])} spans answered, truncated={doc['truncated']}, "
              f"{len(body)} bytes; {', '.join(f'{x * 1000:.0f}' for x in times)} ms")
    srv.stop()
finally:
    cl.cleanup()
