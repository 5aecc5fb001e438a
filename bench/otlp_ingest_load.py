#!/usr/bin/env python3
"""otlp_ingest_load - ember-server's OTLP ingest under load: the same
OTLP Profiles requests (opentelemetry-proto, scripts/install-test-pydeps.sh)
sent as fast as CLIENTS threads can for SECONDS each, once over gRPC
(grpcio, to --otlp-grpc-listen) and once over HTTP (keep-alive
connections, POST /v1development/profiles), to a fresh server each;
ENCODING identity (the default: the client does no per-request work) or
gzip (grpcio compresses each call; the HTTP client sends bodies
compressed once, up front). Reports requests and samples per second, and the
server's CPU (every thread, schedstat) per sample stored and per request.
The client runs on the same host: on a small host it competes with the
server for the cores, so the CPU per sample is the figure that carries.

usage: bench/otlp_ingest_load.py [SECONDS] [CLIENTS] [SAMPLES_PER_REQUEST] [ENCODING]

EMBER_SERVER_FLAGS (split at spaces) are added to the server's flags, e.g.
"--store clickhouse --clickhouse-url http://127.0.0.1:8123" to measure
ingest into ClickHouse (after `ember-server migrate`).
"""
import gzip
import http.client
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))

import grpc  # noqa: E402
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402
from opentelemetry.proto.common.v1 import common_pb2  # noqa: E402
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb  # noqa: E402
from otlp_build import cpu_profile, dictionary  # noqa: E402

EXPORT = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def build_request(samples, seed, t_ns):
    """One process's profile: 200 functions, samples stacks 4 to 24 deep."""
    rnd = random.Random(seed)
    d, s = dictionary(pb)
    for i in range(200):
        d.function_table.add(name_strindex=s(f"fn_{i}"), filename_strindex=s("app.c"))
        loc = d.location_table.add()
        loc.lines.add(function_index=i + 1, line=i)
        loc.attribute_indices.append(1)
    prof = cpu_profile(pb, s, 1_000_000_000 // 97, t_ns)
    for _ in range(samples):
        depth = rnd.randint(4, 24)
        d.stack_table.add(location_indices=[rnd.randint(1, 200) for _ in range(depth)])
        prof.samples.add(stack_index=len(d.stack_table) - 1, values=[1])
    req = svc.ExportProfilesServiceRequest()
    req.dictionary.CopyFrom(d)
    rp = req.resource_profiles.add()
    for k, v in (("host.name", "load-host"), ("process.executable.name", f"load_{seed % 50}")):
        rp.resource.attributes.add(key=k, value=common_pb2.AnyValue(string_value=v))
    rp.scope_profiles.add().profiles.append(prof)
    return req.SerializeToString()


def cpu_ns(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.split(" ")[0] == name:
                return float(line.split()[1])
    return 0.0


def run(transport, seconds, clients, bodies, zip_it):
    tmp = tempfile.mkdtemp(prefix="ember-load-")
    port, gport = free_port(), free_port()
    srv = subprocess.Popen([os.path.join(ROOT, "build", "bin", "ember-server"), "--listen",
                            f"127.0.0.1:{port}", "--otlp-grpc-listen", f"127.0.0.1:{gport}",
                            "--data-dir", tmp, *os.environ.get("EMBER_SERVER_FLAGS", "").split()],
                           stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        stop = time.monotonic() + seconds
        done = [0] * clients
        errors = [0] * clients

        def grpc_client(i):
            with grpc.insecure_channel(f"127.0.0.1:{gport}") as ch:
                call = ch.unary_unary(EXPORT, request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
                k = i
                while time.monotonic() < stop:
                    try:
                        call(bodies[k % len(bodies)], timeout=30,
                             compression=grpc.Compression.Gzip if zip_it else grpc.Compression.NoCompression)
                        done[i] += 1
                    except grpc.RpcError:
                        errors[i] += 1
                    k += clients

        zipped = [gzip.compress(b, 6) for b in bodies] if zip_it else bodies
        headers = {"Content-Type": "application/x-protobuf"}
        if zip_it:
            headers["Content-Encoding"] = "gzip"

        def http_client(i):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            k = i
            while time.monotonic() < stop:
                c.request("POST", "/v1development/profiles", zipped[k % len(zipped)], headers)
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    done[i] += 1
                else:
                    errors[i] += 1
                k += clients
            c.close()

        c0 = cpu_ns(srv.pid)
        s0 = metric(port, "ember_ingest_samples_total")
        t0 = time.monotonic()
        th = [threading.Thread(target=grpc_client if transport == "grpc" else http_client, args=(i,))
              for i in range(clients)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.monotonic() - t0
        c1 = cpu_ns(srv.pid)
        samples = metric(port, "ember_ingest_samples_total") - s0
        reqs = sum(done)
        return dict(reqs=reqs, errors=sum(errors), samples=samples, wall=wall, cpu_ns=c1 - c0)
    finally:
        srv.terminate()
        srv.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    zip_it = (sys.argv[4] if len(sys.argv) > 4 else "identity") == "gzip"
    t = time.time_ns() - 60_000_000_000
    bodies = [build_request(per, seed, t + seed * 1_000_000) for seed in range(64)]
    print(f"{clients} clients for {seconds:.0f} s each, requests of {per} samples "
          f"({sum(map(len, bodies)) // len(bodies)} bytes, {'gzip' if zip_it else 'identity'} on the wire), "
          f"{os.cpu_count()} CPUs")
    rows = {}
    for transport in ("grpc", "http"):
        r = run(transport, seconds, clients, bodies, zip_it)
        rows[transport] = r
        print(f"OTLP/{transport:4s} {r['reqs'] / r['wall']:7.1f} requests/s  "
              f"{r['samples'] / r['wall']:9.0f} samples/s  server CPU "
              f"{r['cpu_ns'] / max(r['samples'], 1) / 1000:.3f} us/sample "
              f"({r['cpu_ns'] / max(r['reqs'], 1) / 1e6:.2f} ms/request)  errors {r['errors']}")
    g, h = rows["grpc"], rows["http"]
    print(f"gRPC / HTTP: {(g['samples'] / g['wall']) / max(h['samples'] / h['wall'], 1):.2f}x the "
          f"samples/s, {(g['cpu_ns'] / max(g['samples'], 1)) / max(h['cpu_ns'] / max(h['samples'], 1), 1):.2f}x "
          f"the server CPU per sample")


if __name__ == "__main__":
    main()
