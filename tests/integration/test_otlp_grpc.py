"""OTLP Profiles over gRPC (--otlp-grpc-listen): an independent gRPC client
(PyPI's grpcio, with requests from opentelemetry-proto; both installed by
scripts/install-test-pydeps.sh) calls ProfilesService/Export. The same
requests sent over gRPC to one server and over HTTP to another give equal
flamegraphs; gzip; the error statuses (unknown method, a bad message, an
oversized one, a missing or wrong token, a token of another project);
TLS with a private CA; and the agent exporting over gRPC."""

import json
import os
import socket
import sys
import time

import pytest

from conftest import require_root
from harness import ROOT, Server, free_port, http, run_workload, wait_until

sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))

import grpc  # noqa: E402
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402

import test_auth  # noqa: E402
import test_otlp  # noqa: E402
from harness import make_ca  # noqa: E402

EXPORT = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"


class GrpcServer(Server):
    """An ember-server with its gRPC listener on a port of its own."""

    def __init__(self, data_dir, *flags, ssl_context=None):
        self.grpc_port = free_port()
        super().__init__(data_dir, None, "--otlp-grpc-listen", f"127.0.0.1:{self.grpc_port}",
                         *flags, ssl_context=ssl_context)

    def channel(self, ca=None):
        target = f"127.0.0.1:{self.grpc_port}"
        if ca:
            return grpc.secure_channel(target, grpc.ssl_channel_credentials(ca.read_bytes()))
        return grpc.insecure_channel(target)


def export(channel, request, method=EXPORT, metadata=(), compression=None, raw=False):
    """One unary call; returns (status code, response or details)."""
    call = channel.unary_unary(
        method,
        request_serializer=(lambda b: b) if raw else (lambda m: m.SerializeToString()),
        response_deserializer=svc.ExportProfilesServiceResponse.FromString)
    try:
        resp = call(request, metadata=list(metadata), compression=compression, timeout=60)
        return grpc.StatusCode.OK, resp
    except grpc.RpcError as e:
        return e.code(), e.details()


@pytest.fixture
def pair(tmp_path):
    g = GrpcServer(tmp_path / "grpc").start()
    h = Server(tmp_path / "http", None, "--otlp-grpc-listen", "").start()
    yield g, h
    g.stop()
    h.stop()


def requests_of(start_ns):
    return [test_otlp.build_request(exe, start_ns + i * 1_000_000_000)
            for i, exe in enumerate(("grpc_a", "grpc_b", "grpc_a"))]


def test_grpc_equals_http(pair):
    g, h = pair
    start = time.time_ns() - 60_000_000_000
    with g.channel() as ch:
        for i, req in enumerate(requests_of(start)):
            code, resp = export(ch, req, compression=grpc.Compression.Gzip if i == 1 else None)
            assert code == grpc.StatusCode.OK, resp
            assert not resp.HasField("partial_success"), resp
    for req in requests_of(start):
        st, body = test_otlp.post(h, req.SerializeToString())
        assert st == 200, body
    for q in (None, 'process.executable.name == "grpc_a"', 'thread.name == "worker-2"'):
        fg_g, fg_h = g.flamegraph(q), h.flamegraph(q)
        fg_g.pop("query_stats", None)  # timings, and the layout of the store
        fg_h.pop("query_stats", None)
        assert fg_g["total"] > 0
        assert fg_g == fg_h, (json.dumps(fg_g)[:1500], json.dumps(fg_h)[:1500])
    assert g.flamegraph()["total"] == 300


def test_otlp_senders_in_the_inventory(pair):
    """An OTLP profiler has no agent instance: the inventory lists it by
    the host.name its profiles carry ("otlp:HOST"), with its transport,
    user agent, address and samples, on gRPC as on HTTP; a second request
    adds to the same row."""
    g, h = pair
    start = time.time_ns() - 60_000_000_000
    with g.channel() as ch:
        for req in requests_of(start)[:2]:
            assert export(ch, req)[0] == grpc.StatusCode.OK
    for req in requests_of(start)[:2]:
        st, body = http("POST", h.url + "/v1development/profiles", req.SerializeToString(),
                        {"Content-Type": "application/x-protobuf", "User-Agent": "otel-profiler/0.1"})
        assert st == 200, body

    def row(server):
        status, body = http("GET", server.url + "/public/api/v1/agents")
        assert status == 200, body
        rows = [a for a in json.loads(body)["agents"] if a["instance"] == "otlp:otlp-host"]
        return rows[0] if rows and rows[0]["samples"] == 200 else None
    wait_until(lambda: row(g) and row(h), 20, what="the OTLP senders in the inventory")
    a, b = row(g), row(h)
    assert a["protocol"] == "otlp grpc" and a["version"].startswith("grpc-python"), a
    assert b["protocol"] == "otlp http" and b["version"] == "otel-profiler/0.1", b
    for r in (a, b):
        assert r["host"] == "otlp-host" and r["address"] == "127.0.0.1" and r["batches"] == 2, r


def test_partial_success_as_on_http(pair):
    """A profile of a sample type ember does not keep: the same
    partial_success over gRPC as over HTTP."""
    g, h = pair
    req = test_otlp.build_request("grpc_partial")
    extra = svc.ExportProfilesServiceRequest()
    extra.CopyFrom(req)
    p = extra.resource_profiles[0].scope_profiles[0].profiles[0]
    p.sample_type.type_strindex = len(req.dictionary.string_table)
    req.dictionary.string_table.append("wall-clock-ticks")
    req.resource_profiles.add().CopyFrom(extra.resource_profiles[0])
    with g.channel() as ch:
        code, resp = export(ch, req)
    assert code == grpc.StatusCode.OK, resp
    st, body = test_otlp.post(h, req.SerializeToString())
    assert st == 200, body
    want = svc.ExportProfilesServiceResponse.FromString(body)
    assert want.partial_success.rejected_profiles == 1, want
    assert resp == want


def test_errors(pair):
    g, _ = pair
    with g.channel() as ch:
        code, details = export(ch, test_otlp.build_request(), method=EXPORT[:-6] + "Nope")
        assert code == grpc.StatusCode.UNIMPLEMENTED, details
        assert "unknown method" in details
        code, details = export(ch, b"\xff\xff\xff", raw=True)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "invalid OTLP request" in details
        # A request that decodes but is not valid OTLP: an index out of range.
        bad = test_otlp.build_request()
        bad.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index = 999
        code, details = export(ch, bad)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        # Beyond the 64 MiB of the HTTP route.
        code, details = export(ch, b"\x0a" + b"\x00" * (64 << 20), raw=True)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        # A gzip bomb: small on the wire, beyond 64 MiB decoded.
        code, details = export(ch, b"\x0a\x80\x80\x80\x30" + b"\x00" * (70 << 20),
                               raw=True, compression=grpc.Compression.Gzip)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        # The connection still serves.
        code, resp = export(ch, test_otlp.build_request("grpc_after"))
        assert code == grpc.StatusCode.OK, resp
    assert g.flamegraph('process.executable.name == "grpc_after"')["total"] == 100


def test_ingest_tokens(tmp_path):
    g = GrpcServer(tmp_path / "data", "--ingest-tokens", "s3cret").start()
    try:
        with g.channel() as ch:
            code, details = export(ch, test_otlp.build_request("grpc_tok"))
            assert code == grpc.StatusCode.UNAUTHENTICATED, details
            code, details = export(ch, test_otlp.build_request("grpc_tok"),
                                   metadata=[("authorization", "Bearer wrong")])
            assert code == grpc.StatusCode.UNAUTHENTICATED, details
            code, resp = export(ch, test_otlp.build_request("grpc_tok"),
                                metadata=[("authorization", "Bearer s3cret")])
            assert code == grpc.StatusCode.OK, resp
        assert g.flamegraph('process.executable.name == "grpc_tok"')["total"] == 100
    finally:
        g.stop()


def test_token_of_another_project(tmp_path):
    pw = tmp_path / "admin-password"
    pw.write_text(test_auth.PASSWORD + "\n")
    g = GrpcServer(tmp_path / "data", "--auth", "local", "--admin-email", test_auth.ADMIN,
                   "--admin-password-file", str(pw)).start()
    try:
        s = test_auth.Session(g)
        admin = s.login(test_auth.ADMIN, test_auth.PASSWORD)[1]["access_token"]
        for name in ("alpha", "beta"):
            st, body = test_auth.otlp(g, admin, name)
            assert st == 200, body
        alpha = test_auth.project_ids(g, admin)["alpha"]
        st, tok = s.call("POST", "/public/api/v1/service-tokens",
                         {"name": "alpha agent", "scopes": ["ingest:**"], "project_ids": [alpha]})
        assert st == 201, tok
        auth = ("authorization", "Bearer " + tok["token"])
        with g.channel() as ch:
            code, details = export(ch, test_otlp.build_request("grpc_p"),
                                   metadata=[auth, ("ember-project", "beta")])
            assert code == grpc.StatusCode.PERMISSION_DENIED, details
            assert "Insufficient permissions" in details
            code, details = export(ch, test_otlp.build_request("grpc_p"), metadata=[auth])
            assert code == grpc.StatusCode.PERMISSION_DENIED, details  # "default"
            code, resp = export(ch, test_otlp.build_request("grpc_p"),
                                metadata=[auth, ("ember-project", "alpha")])
            assert code == grpc.StatusCode.OK, resp
        st, fg = test_auth.flamegraph(g, admin, alpha, exe="grpc_p")
        assert st == 200 and fg["total"] == 100, fg
    finally:
        g.stop()


def test_tls_with_a_private_ca(tmp_path):
    import ssl
    ca, cert, key = make_ca(tmp_path)
    g = GrpcServer(tmp_path / "data", "--tls-cert", str(cert), "--tls-key", str(key),
                   ssl_context=ssl.create_default_context(cafile=str(ca))).start()
    try:
        with g.channel(ca) as ch:
            code, resp = export(ch, test_otlp.build_request("grpc_tls"),
                                compression=grpc.Compression.Gzip)
            assert code == grpc.StatusCode.OK, resp
        # Plain gRPC to the TLS port fails.
        with g.channel() as ch:
            code, _ = export(ch, test_otlp.build_request("grpc_plain"))
            assert code == grpc.StatusCode.UNAVAILABLE
        assert g.flamegraph('process.executable.name == "grpc_tls"')["total"] == 100
        assert g.flamegraph('process.executable.name == "grpc_plain"')["total"] == 0
    finally:
        g.stop()


def test_agent_over_grpc(tmp_path, agent_factory):
    require_root()
    g = GrpcServer(tmp_path / "data", "--ingest-tokens", "agent-token").start()
    try:
        agent_factory(g.url, "-ember-protocol=false", "-otlp-transport=grpc",
                      f"-otlp-grpc-endpoint=127.0.0.1:{g.grpc_port}", "-auth-token=agent-token",
                      "-on-cpu-sampling-rate=97").start()
        run_workload("cpu_split", 3)

        def landed():
            fg = g.flamegraph('process.executable.name == "cpu_split"')
            return fg["total"] > 100
        wait_until(landed, 40, what="cpu_split samples over gRPC")
        st, body = http("GET", g.url + "/metrics")
        assert st == 200
        assert b"otlp" in body
    finally:
        g.stop()


def test_agent_over_grpc_with_tls(tmp_path, agent_factory):
    """TLS (ALPN h2) from the agent, its certificate checked with
    -tls-ca-file: the agent's gRPC goes through libcurl's TLS, the
    server's through GnuTLS."""
    require_root()
    import ssl
    ca, cert, key = make_ca(tmp_path)
    g = GrpcServer(tmp_path / "data", "--tls-cert", str(cert), "--tls-key", str(key),
                   ssl_context=ssl.create_default_context(cafile=str(ca))).start()
    try:
        agent_factory(g.url, "-ember-protocol=false", "-otlp-transport=grpc",
                      f"-otlp-grpc-endpoint=127.0.0.1:{g.grpc_port}", f"-tls-ca-file={ca}",
                      "-project=grpctls", "-on-cpu-sampling-rate=97").start()
        run_workload("cpu_split", 3)

        def landed():
            st, body = http("GET", g.url + "/public/api/v1/projects", context=g.ssl)
            ids = {p["name"]: p["id"] for p in json.loads(body)["projects"]}
            if "grpctls" not in ids:
                return False
            return g.flamegraph('process.executable.name == "cpu_split"',
                                project=ids["grpctls"])["total"] > 100
        wait_until(landed, 40, what="cpu_split samples over gRPC with TLS")
    finally:
        g.stop()


def h2_frame(kind, flags, stream, payload):
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
            + payload)


def h2_literal(name, value):  # HPACK: a literal without indexing, new name
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def h2_frames(data):
    """(type, flags, stream) of each whole frame in data."""
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i:i + 3], "big")
        if i + 9 + n > len(data):
            break
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5:i + 9], "big") & 0x7fffffff))
        i += 9 + n
    return out


def test_slow_client_and_limits(tmp_path):
    """A client that sends its headers and half a message holds no worker:
    others are answered meanwhile; its stream ends at the deadline
    (--header-timeout + --body-timeout). Connections from one address
    stop at --max-connections-per-client."""
    g = GrpcServer(tmp_path / "data", "--header-timeout", "1s", "--body-timeout", "1s",
                   "--ingest-threads", "1", "--max-connections-per-client", "3").start()
    slow = socket.create_connection(("127.0.0.1", g.grpc_port))
    try:
        hdr = b"".join(h2_literal(n, v) for n, v in (
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", EXPORT.encode()),
            (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")))
        slow.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
                     + h2_frame(1, 4, 1, hdr) + h2_frame(0, 0, 1, b"\0\0\0\x10\0" + b"\x0a" * 8))
        t0 = time.monotonic()
        with g.channel() as ch:
            code, resp = export(ch, test_otlp.build_request("grpc_fast"))
        assert code == grpc.StatusCode.OK, resp
        assert time.monotonic() - t0 < 1.5
        # The slow stream is answered (HEADERS with END_STREAM on stream 1)
        # within the deadline and a sweep.
        slow.settimeout(0.5)
        data, deadline = b"", time.monotonic() + 8
        while time.monotonic() < deadline and not any(
                t == 1 and f & 1 and s == 1 for t, f, s in h2_frames(data)):
            try:
                chunk = slow.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            data += chunk
        assert any(t == 1 and f & 1 and s == 1 for t, f, s in h2_frames(data)), h2_frames(data)
        assert time.monotonic() - t0 >= 1.5
        # The per-address limit: 3 held open, the 4th is closed at once.
        held = [socket.create_connection(("127.0.0.1", g.grpc_port)) for _ in range(2)]
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", g.grpc_port))
        extra.settimeout(3)
        assert extra.recv(100) == b""
        for s in held + [extra]:
            s.close()
    finally:
        slow.close()
        g.stop()


def test_busy_is_unavailable(tmp_path):
    """One ingest worker and no queue: calls that arrive while it stores a
    large request are answered UNAVAILABLE at once (clients retry it), and
    the server goes on answering."""
    g = GrpcServer(tmp_path / "data", "--ingest-threads", "1", "--ingest-queue", "0").start()
    try:
        big = test_otlp.build_request("grpc_big")
        prof = big.resource_profiles[0].scope_profiles[0].profiles[0]
        first = list(prof.samples)
        for _ in range(20000):
            prof.samples.extend(first)
        with g.channel() as ch:
            call = ch.unary_unary(EXPORT, request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=svc.ExportProfilesServiceResponse.FromString)
            futures = [call.future(big, timeout=120) for _ in range(6)]
            codes = []
            for f in futures:
                try:
                    f.result()
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
                    if e.code() == grpc.StatusCode.UNAVAILABLE:
                        assert "busy" in e.details(), e.details()
            assert grpc.StatusCode.OK in codes and grpc.StatusCode.UNAVAILABLE in codes, codes
            assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE}, codes
            code, resp = export(ch, test_otlp.build_request("grpc_after_busy"))
            assert code == grpc.StatusCode.OK, resp
    finally:
        g.stop()


def unauthorized_total(server):
    st, body = http("GET", server.url + "/metrics")
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith("ember_ingest_unauthorized_total "):
            return int(line.split()[1])
    raise AssertionError("no ember_ingest_unauthorized_total")


def test_credentials_are_checked_before_the_body(tmp_path):
    """A call without a token is refused on its headers: its answer (and a
    RST_STREAM telling the client to stop sending) comes while the client
    is still in the middle of a 16 MiB message, none of which the server
    waits for or holds."""
    g = GrpcServer(tmp_path / "data", "--ingest-tokens", "s3cret").start()
    sock = socket.create_connection(("127.0.0.1", g.grpc_port))
    try:
        before = unauthorized_total(g)
        hdr = b"".join(h2_literal(n, v) for n, v in (
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", EXPORT.encode()),
            (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")))
        # A message announced as 16 MiB; only its first 8 KiB are sent.
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"")
                     + h2_frame(1, 4, 1, hdr)
                     + h2_frame(0, 0, 1, b"\0" + (16 << 20).to_bytes(4, "big") + b"\x0a" * 8192))
        sock.settimeout(0.2)
        data, deadline = b"", time.monotonic() + 3
        while time.monotonic() < deadline and not any(
                t == 3 and s == 1 for t, f, s in h2_frames(data)):
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            data += chunk
        frames = h2_frames(data)
        assert any(t == 1 and f & 1 and s == 1 for t, f, s in frames), frames  # the answer
        assert any(t == 3 and s == 1 for t, f, s in frames), frames  # stop sending
        assert unauthorized_total(g) == before + 1
    finally:
        sock.close()
        g.stop()


def hold(port, n, tries=20):
    """n idle connections to port that the server kept (none closed by a
    limit): a connection the other listener held a moment ago is given
    back when the server has seen it close, so try again until it has."""
    for _ in range(tries):
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        time.sleep(0.5)
        alive = 0
        for s in held:
            try:
                alive += s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) != b""
            except BlockingIOError:
                alive += 1
            except ConnectionResetError:
                pass
        if alive == n:
            return held
        for s in held:
            s.close()
        time.sleep(0.5)
    raise AssertionError(f"the server did not keep {n} idle connections to port {port}")


def test_connections_share_one_budget_with_http(tmp_path):
    """--max-connections bounds both listeners together: while idle HTTP
    connections hold all of it a gRPC connection is closed at once, and
    while gRPC connections hold it an HTTP one is; a freed one is usable."""
    g = GrpcServer(tmp_path / "data", "--max-connections", "16").start()
    held = []
    try:
        held = hold(g.port, 16)
        extra = socket.create_connection(("127.0.0.1", g.grpc_port))
        extra.settimeout(3)
        assert extra.recv(100) == b""
        extra.close()
        for s in held:
            s.close()
        held = []
        time.sleep(0.5)
        with g.channel() as ch:
            code, resp = export(ch, test_otlp.build_request("grpc_budget"))
            assert code == grpc.StatusCode.OK, resp
        held = hold(g.grpc_port, 16)
        extra = socket.create_connection(("127.0.0.1", g.port))
        extra.settimeout(3)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            got = extra.recv(100)
        except ConnectionResetError:
            got = b""
        assert got == b"", got
        extra.close()
        for s in held:
            s.close()
        held = []
        time.sleep(0.5)
        assert http("GET", g.url + "/healthz")[0] == 200
    finally:
        for s in held:
            s.close()
        g.stop()
