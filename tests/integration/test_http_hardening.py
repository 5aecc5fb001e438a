"""What a hostile client can hold of ember-server's HTTP layer
(docs/internals/http.md): tokens checked before a body is read, a declared
length beyond a route's limit answered at once, bodies in memory bounded
in all and large uploads written to disk, slow connections cut, queries
admitted on threads of their own, TLS 1.2 at least. The last test runs
tests/hostile/hostile.py in its short form."""

import argparse
import json
import os
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
import warnings

from harness import DEFAULT_PROJECT, ROOT, Server, http, rss_kib

sys.path.insert(0, os.path.join(ROOT, "tests", "hostile"))
import hostile  # noqa: E402

MiB = 1 << 20


def raw(port, data, timeout=2.0, source=None):
    """Sends data on a fresh connection and returns (first line of the
    answer, seconds it took); the line is "" when the server closed."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0) if source else None) as s:
        s.sendall(data)
        try:
            got = s.recv(4096)
        except socket.timeout:
            return "no answer", time.monotonic() - t0
        except ConnectionResetError:
            got = b""
    return got.split(b"\r\n", 1)[0].decode(errors="replace"), time.monotonic() - t0


def test_declared_length_beyond_the_cap_is_answered_at_once(server):
    port = int(server.url.rsplit(":", 1)[1])
    fg = f"/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json"
    for method, path in (("POST", fg), ("POST", "/ingest/v1/batch"),
                         ("PUT", "/ingest/v1/symbols/" + "ab" * 16)):
        line, took = raw(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                               "Content-Length: 1073741824\r\n\r\nabc".encode())
        assert " 413 " in line and took < 2, (path, line, took)
    # A body a little over the cap is still read and answered 413, so a
    # client that sends it all before reading sees why.
    st, body = http("POST", server.url + fg, b"x" * (2 * MiB))
    assert st == 413 and b"larger than" in body
    assert server.healthy()


def test_tokens_are_checked_before_the_body(tmp_path):
    server = Server(tmp_path / "data", None, "--ingest-tokens", "sekrit").start()
    try:
        for method, path in (("PUT", "/ingest/v1/symbols/" + "cd" * 16),
                             ("POST", "/ingest/v1/batch"), ("POST", "/v1development/profiles")):
            # 200 MB declared, a few bytes sent: refused on the headers.
            line, took = raw(server.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                                          "Content-Length: 200000000\r\n\r\nabc".encode())
            assert " 401 " in line and took < 2, (path, line, took)
            line, took = raw(server.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                                          "Authorization: Bearer nope\r\n"
                                          "Content-Length: 200000000\r\n\r\nabc".encode())
            assert " 401 " in line and took < 2, (path, line, took)
        # A small body is read and the answer is the same 401 with its reason.
        st, body = http("POST", server.url + "/ingest/v1/batch", b"x" * 1000,
                        {"Content-Encoding": "zstd"})
        assert st == 401 and b"bearer token" in body
        st, body = http("GET", server.url + "/metrics")
        assert b"ember_ingest_unauthorized_total 7" in body
    finally:
        server.stop()


def symfile(extra_strings=0):
    """A valid ember symbol file (one function, do_work at 0x1000), its
    string table padded by extra_strings bytes."""
    strtab = b"\x00do_work\x00" + b"p" * extra_strings + (b"\x00" if extra_strings else b"")
    return (b"EMSYM002" + struct.pack("<IIIIQIIQ", 1, 2, 1, len(strtab), 0x1000, 0, 0, 0) +
            struct.pack("<QQQ", 0x1000, 0x1000, 0x1000) +
            struct.pack("<IIII", 0, 1, 0x100, 0) +
            struct.pack("<IIII", 1, 0xffffffff, 0, 0) + strtab)


def test_large_symbol_uploads_go_through_a_file(server):
    """Beyond 1 MiB a symbol upload is written to an unnamed file and read
    from there; zstd ones are decompressed into one: both are stored."""
    from ember_batch import zstd_compress
    big = symfile(3 * MiB)
    fid = "a1" * 16
    st, body = http("PUT", f"{server.url}/ingest/v1/symbols/{fid}", big)
    assert st == 201, body
    fid2 = "a2" * 16
    st, body = http("PUT", f"{server.url}/ingest/v1/symbols/{fid2}", zstd_compress(big),
                    {"Content-Encoding": "zstd"})
    assert st == 201, body
    st, body = http("POST", server.url + "/ingest/v1/symbols/missing",
                    {"file_ids": [fid, fid2, "a3" * 16]})
    assert json.loads(body)["missing"] == ["a3" * 16]
    # Truncated, from the file: refused as invalid.
    st, body = http("PUT", f"{server.url}/ingest/v1/symbols/{'a4' * 16}", big[:-10])
    assert st == 400, body
    # Nothing is left behind in the data dir.
    assert not [f for f in os.listdir(server.data_dir) if "tmp" in f.lower()]


def test_upload_floods_keep_memory_bounded(tmp_path):
    """8 concurrent 64 MiB symbol uploads, without and with the token: the
    server buffered each whole (8 unauthenticated 250 MB ones took it to
    1 GB); now its memory stays under 150 MiB."""
    server = Server(tmp_path / "data", None, "--ingest-tokens", hostile.TOKEN).start()
    try:
        args = argparse.Namespace(
            long=False, probe_timeout=3.0, rss_bound_mib=150)
        target = hostile.Target(server.port, server.proc.pid)
        for authenticated in (False, True):
            out, errors = hostile.scenario_upload(target, args, authenticated)
            assert not errors, (out, errors)
            assert out["peak_rss_mib"] < 150, out
        assert rss_kib(server.proc.pid) < 150 * 1024
    finally:
        server.stop()


def test_memory_for_bodies_is_bounded_in_all(tmp_path):
    """With --max-upload-memory 16, a request declaring 10 MiB holds 10 of
    them until it ends: another one declaring 10 MiB is answered 503 with
    Retry-After at once; when the first is gone, the memory is free again."""
    server = Server(tmp_path / "data", None, "--max-upload-memory", "16").start()
    try:
        head = (b"POST /ingest/v1/batch HTTP/1.1\r\nHost: x\r\nContent-Encoding: zstd\r\n"
                b"Content-Length: 10485760\r\n\r\n")
        first = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        first.sendall(head + b"x" * 1000)
        time.sleep(0.3)
        line, took = raw(server.port, head)
        assert " 503 " in line and took < 2, (line, took)
        first.close()
        time.sleep(0.5)
        st, body = http("POST", server.url + "/ingest/v1/batch", b"x" * (5 * MiB),
                        {"Content-Encoding": "zstd"})
        assert st == 400, body  # read whole and refused as a batch, not for memory
    finally:
        server.stop()


def slow_sockets(port, n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        socks.append(s)
    return socks


def closed_by_server(s):
    try:
        return s.recv(1) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def test_slow_connections_are_cut_and_do_not_crowd_out_others(tmp_path):
    """A client opening many connections that send a byte now and then:
    beyond --max-connections-per-client they are refused, the rest are cut
    at --header-timeout, and a client at another address is served
    meanwhile."""
    hostile.raise_nofile(2048)
    server = Server(tmp_path / "data", None, "--header-timeout", "2s",
                    "--max-connections-per-client", "50").start()
    socks = slow_sockets(server.port, 1100)
    try:
        t0 = time.monotonic()
        for i in range(5):
            for s in socks:
                try:
                    s.send(b"GET /healthz HTTP/1.1\r\n"[i:i + 1])
                except OSError:
                    pass
            # Another client (address) is answered at once.
            line, took = raw(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                             source="127.0.0.2")
            assert " 200 " in line and took < 1, (line, took)
            time.sleep(1)
        assert time.monotonic() - t0 > 4
        still = [s for s in socks if not closed_by_server(s)]
        assert not still, f"{len(still)} slow connections still open after 4 s"
        st, body = http("GET", server.url + "/metrics")
        assert b"ember_http_timeouts_total 0" not in body
    finally:
        for s in socks:
            s.close()
        server.stop()


def soft_nofile(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def test_open_file_limit_is_raised_for_the_connections(tmp_path):
    """Started with a soft open-file limit of 256, the server raises it
    (up to the hard limit) so that its 1 024 connections can be had; with a
    hard limit of 300 it says how many it can have instead."""
    import resource
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard >= 1024 + 256, "the test needs a hard open-file limit of 1280"
    server = Server(tmp_path / "data")
    server.argv = ["prlimit", f"--nofile=256:{hard}", "--"] + server.argv
    server.start()
    try:
        assert soft_nofile(server.proc.pid) >= 1024 + 256
    finally:
        server.stop()
    server = Server(tmp_path / "data2")
    server.argv = ["prlimit", "--nofile=300:300", "--"] + server.argv
    server.start()
    try:
        assert "allows 150 connections" in server.output(), server.output()
        assert server.healthy()
    finally:
        server.stop()


def redos_server(tmp_path, *flags):
    server = Server(tmp_path / "data", None, "--flush-after", "1s", *flags).start()
    names = ["a" * 22 + f"!{i}" for i in range(6)]
    st, body = http("POST", server.url + "/v1development/profiles",
                    hostile.otlp_request(names, exe="redos", ago_s=7200),
                    {"Content-Type": "application/x-protobuf"})
    assert st == 200, body
    time.sleep(3)  # written to a block
    return server


def test_queries_are_admitted_on_threads_of_their_own(tmp_path):
    """--query-threads 1 --query-queue 0: of 4 slow queries at once, those
    that find the thread busy are answered 503 with Retry-After; /healthz
    and ingest answer meanwhile."""
    server = redos_server(tmp_path, "--query-threads", "1", "--query-queue", "0")
    try:
        now = int(time.time() * 1000)
        body = {"filter": {"start_ts": now - 3 * 3600000, "end_ts": now - 3600000},
                "search": "^(a+)+$"}
        results = []

        def ask():
            t0 = time.monotonic()
            st, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}"
                            "/flamegraph/json", body, {"Content-Type": "application/json"},
                            timeout=120)
            results.append((st, time.monotonic() - t0, data))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        probe = hostile.Probe(server.port, 2.0)
        probe.one("healthz", "GET", "/healthz", None, {}, 200)
        probe.one("ingest", "POST", "/v1development/profiles", probe.body,
                  {"Content-Type": "application/x-protobuf"}, 200)
        for t in threads:
            t.join(180)
        assert not probe.failures, probe.failures
        statuses = sorted(st for st, _, _ in results)
        slowest = max(d for _, d, _ in results)
        # Unless the regex is cut short (a bound on the regex engine), the
        # first query holds the only thread and the others are refused.
        assert 503 in statuses or slowest < 0.2, (statuses, slowest)
        for st, _, data in results:
            assert st in (200, 400, 422, 503), data
            if st == 503:
                assert b"too many queries" in data
        st, data = http("GET", server.url + "/metrics")
        if 503 in statuses:
            assert b"ember_http_queries_refused_total 0" not in data
    finally:
        server.stop()


def test_health_answers_while_ingest_waits_for_a_query(tmp_path):
    """Slow queries over the live hour hold its part, which ingest needs
    for writing: the ingest requests wait, on threads of their own, and
    /healthz, on libmicrohttpd's, answers meanwhile."""
    server = Server(tmp_path / "data").start()
    try:
        names = ["a" * 22 + f"!{i}" for i in range(8)]
        st, body = http("POST", server.url + "/v1development/profiles",
                        hostile.otlp_request(names, exe="redos_live"),
                        {"Content-Type": "application/x-protobuf"})
        assert st == 200, body
        now = int(time.time() * 1000)
        query = {"filter": {"start_ts": now - 3600000, "end_ts": now + 60000},
                 "search": "^(a+)+$"}
        done = []

        def ask():
            http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}"
                 "/flamegraph/json", query, {"Content-Type": "application/json"}, timeout=120)
            done.append(1)

        def ingest():
            http("POST", server.url + "/v1development/profiles",
                 hostile.otlp_request(["f"], exe="live_ingest"),
                 {"Content-Type": "application/x-protobuf"}, timeout=120)

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        threads += [threading.Thread(target=ingest) for _ in range(8)]
        for t in threads[2:]:
            t.start()
        time.sleep(0.3)
        worst = 0.0
        for _ in range(10):
            if len(done) == 2:
                break
            line, took = raw(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert " 200 " in line, line
            worst = max(worst, took)
            time.sleep(0.2)
        for t in threads:
            t.join(180)
        assert worst < 1, worst
    finally:
        server.stop()


def make_cert(d):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(d / "k.pem"), "-out", str(d / "c.pem"),
                    "-subj", "/CN=127.0.0.1"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return d / "c.pem", d / "k.pem"


def handshake(port, version, ciphers="ALL:@SECLEVEL=0"):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers(ciphers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0 and 1.1 are
        ctx.minimum_version = version
        ctx.maximum_version = version
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with ctx.wrap_socket(s) as t:
                return t.version(), t.cipher()[0]
    except (ssl.SSLError, OSError):
        return None


def test_tls_1_2_at_least_with_modern_ciphers(tmp_path):
    cert, key = make_cert(tmp_path)
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.check_hostname = False
    server = Server(tmp_path / "data", None, "--tls-cert", str(cert), "--tls-key", str(key),
                    ssl_context=ctx).start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1]
        for v in old:
            assert handshake(server.port, v) is None, v
        got = handshake(server.port, ssl.TLSVersion.TLSv1_2)
        assert got and got[0] == "TLSv1.2" and ("GCM" in got[1] or "CHACHA" in got[1]), got
        got = handshake(server.port, ssl.TLSVersion.TLSv1_3)
        assert got and got[0] == "TLSv1.3", got
        # TLS 1.2 with only CBC ciphers (no AEAD) or no forward secrecy: refused.
        assert handshake(server.port, ssl.TLSVersion.TLSv1_2, "ECDHE-RSA-AES256-SHA") is None
        assert handshake(server.port, ssl.TLSVersion.TLSv1_2, "AES256-GCM-SHA384") is None
        st, body = http("GET", server.url + "/healthz", context=ctx)
        assert st == 200
    finally:
        server.stop()


def test_hostile_run_short_form(tmp_path):
    """tests/hostile/hostile.py in its short form: upload floods, a huge
    declared length, ~1000 slow connections and 8 parallel pathological
    regex queries, with /healthz and ingest answering throughout."""
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "hostile", "hostile.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    text = out.stdout.decode(errors="replace")
    assert out.returncode == 0, text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert {ln["scenario"] for ln in lines} == set(hostile.SCENARIOS), text
    assert all(ln["ok"] for ln in lines), text
    assert time.monotonic() - t0 < 120
