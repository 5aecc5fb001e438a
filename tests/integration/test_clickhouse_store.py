"""ember-server --store clickhouse (server/store/clickhouse/chstore.c) against
the embedded store: the same batches into an embedded server, a server on
one ClickHouse 18.16 and a server on two shards behind Distributed tables
answer every query the same, byte for byte but for query statistics; and
a ClickHouse stopped mid-ingest makes ingest answer 503 with Retry-After
(and every query, rather than answer from the shards that are left),
the client retries, and after the restart nothing is lost or counted
twice."""

import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from ember_batch import Batch, send_batch, send_session_batch  # noqa: E402
from harness import BIN, ROOT, Server, http, run_threads  # noqa: E402
from harness import api_post as post  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402,I100
from opentelemetry.proto.common.v1 import common_pb2  # noqa: E402
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb  # noqa: E402
from otlp_build import cpu_profile, dictionary  # noqa: E402

HOUR = 3600000
T0 = (int(time.time() * 1000) // HOUR - 2) * HOUR
BATCHES = 4
HZ = 19
HOSTS = {
    "ch1": dict(cpus=16, attrs={"process.executable.name": "api", "k8s.namespace.name": "prod",
                                "k8s.pod.name": "api-1"},
                stacks=[(["main", "serve", "parse"], 30), (["main", "serve", "compute"], 60),
                        (["main", "gc"], 10)]),
    "ch2": dict(cpus=8, attrs={"process.executable.name": "api", "k8s.namespace.name": "prod",
                               "k8s.pod.name": "api-2"},
                stacks=[(["main", "serve", "parse"], 20),
                        (["main", "serve", "compress", ("deflate", "native", "libz.so.1")], 40)]),
    "ch3": dict(cpus=4, attrs={"process.executable.name": "batch", "k8s.namespace.name": "dev",
                               "weird": "it's \\ \"quoted\"\nnewline"},
                stacks=[(["main", "work", "compute"], 50), (["main", "rec", "rec", "rec"], 10)]),
}
FILE_FRAME = 15  # ch2 also sends an unnamed frame in a file (by file id), as the agent does
TOTAL = BATCHES * (sum(v for h in HOSTS.values() for _, v in h["stacks"]) + FILE_FRAME)


def migrate(*args):
    r = subprocess.run([os.path.join(BIN, "ember-server"), "migrate", *args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def fleet_flags(cluster, database):
    """Both shards running and database migrated on them (cluster
    ember_test): the flags of a server that stores there."""
    a, b = cluster.servers
    if b.proc is None:
        b.start()
    args = ("--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-database", database,
            "--clickhouse-cluster", "ember_test")
    migrate(*args)
    return ("--store", "clickhouse") + args


def batch(host, i, agent_prefix="agent-", extra=None):
    spec = HOSTS[host]
    b = Batch(agent_instance=agent_prefix + host, host_cpus=spec["cpus"], sample_rate_hz=HZ)
    attrs = dict(spec["attrs"], **{"host.name": host})
    for frames, value in spec["stacks"]:
        b.add(frames, attrs, value=value)
    if host == "ch2":
        b.add(["main", b.file_frame("00112233445566778899aabbccddeeff", "libfoo.so", 0x1234)],
              attrs, value=FILE_FRAME)
    if extra:  # a stack no batch before named: new dictionary rows
        b.add(["main", extra], attrs, value=1)
    start = T0 + i * 10000
    return b.encode(sequence=i + 1, start_ms=start, end_ms=start + 10000)


def otlp_request():
    """An OTLP request without an agent instance: a native frame in a
    mapped file (name, build id, an address to symbolize), a Python frame,
    inlined functions."""
    d, s = dictionary(pb)

    def fn(name, filename="app.py"):
        d.function_table.add(name_strindex=s(name), filename_strindex=s(filename))
        return len(d.function_table) - 1

    def loc(*fns, mapping=0, address=0, kind=None):
        lo = d.location_table.add(mapping_index=mapping, address=address)
        for f in fns:
            lo.lines.add(function_index=f, line=7)
        lo.attribute_indices.append(1)
        if kind:
            a = d.attribute_table.add(key_strindex=s("profile.frame.type"))
            a.value.string_value = kind
            lo.attribute_indices[0] = len(d.attribute_table) - 1
        return len(d.location_table) - 1

    d.mapping_table.add(memory_start=0x400000, memory_limit=0x500000, file_offset=0x1000,
                        filename_strindex=s("/usr/lib/libz.so.1"))
    bid = d.attribute_table.add(key_strindex=s("process.executable.build_id.gnu"))
    bid.value.string_value = "0123456789abcdef0123"
    d.mapping_table[1].attribute_indices.append(len(d.attribute_table) - 1)
    main = loc(fn("main"))
    inl = loc(fn("helper_inlined"), fn("work"))
    py = loc(fn("handler", "server.py"), kind="cpython")
    raw = loc(mapping=1, address=0x401234)
    prof = cpu_profile(pb, s, 1_000_000_000 // 20, (T0 + 20000) * 1_000_000)
    for stack, n in (([inl, main], 70), ([py, main], 9), ([raw, main], 5)):
        d.stack_table.add(location_indices=stack)
        prof.samples.add(stack_index=len(d.stack_table) - 1, values=[n])
    req = svc.ExportProfilesServiceRequest()
    req.dictionary.CopyFrom(d)
    rp = req.resource_profiles.add()
    for k, v in (("host.name", "otlp-host"), ("process.executable.name", "otlp_app")):
        rp.resource.attributes.add(key=k, value=common_pb2.AnyValue(string_value=v))
    rp.scope_profiles.add().profiles.append(prof)
    return req.SerializeToString()


@pytest.fixture(scope="module")
def servers(clickhouse_cluster, tmp_path_factory):
    a, b = clickhouse_cluster.servers
    migrate("--clickhouse-url", a.url, "--clickhouse-database", "single")
    migrate("--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-database", "fleet",
            "--clickhouse-cluster", "ember_test")
    emb = Server(tmp_path_factory.mktemp("emb"))
    one = Server(tmp_path_factory.mktemp("ch1"), None, "--store", "clickhouse",
                 "--clickhouse-url", a.url, "--clickhouse-database", "single")
    two = Server(tmp_path_factory.mktemp("ch2"), None, "--store", "clickhouse",
                 "--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-database", "fleet",
                 "--clickhouse-cluster", "ember_test")
    started = [s.start() for s in (emb, one, two)]
    otlp = otlp_request()
    for s in started:
        for host in HOSTS:
            for i in range(BATCHES):
                assert send_batch(s.url, batch(host, i))["stored"]
        status, body = http("POST", s.url + "/v1development/profiles", otlp,
                            {"Content-Type": "application/x-protobuf"})
        assert status == 200, body
    # A replica on the same shards that reads every series' sums in pieces
    # of 3 rows' worth (a fleet's hour goes in pieces of 4 M): by label
    # set, each piece its own query.
    os.environ["EMBER_CLICKHOUSE_SUMS_PIECE_ROWS"] = "3"
    try:
        pieces = Server(tmp_path_factory.mktemp("ch3"), None, "--store", "clickhouse",
                        "--clickhouse-url", f"{a.url},{b.url}", "--clickhouse-database", "fleet",
                        "--clickhouse-cluster", "ember_test").start()
    finally:
        del os.environ["EMBER_CLICKHOUSE_SUMS_PIECE_ROWS"]
    started.append(pieces)
    yield {"embedded": emb, "clickhouse": one, "two shards": two, "in pieces": pieces}
    for s in started:
        s.stop()


def strip_stats(x):
    if isinstance(x, dict):
        return {k: strip_stats(v) for k, v in x.items() if not k.endswith("query_stats")}
    if isinstance(x, list):
        return [strip_stats(v) for v in x]
    return x


def flt(query=None, start=T0, end=T0 + HOUR):
    return {"start_ts": start, "end_ts": end, "event_kind": "on_cpu", "query": query}


QUERIES = [
    ("flamegraph/json", {"filter": flt()}),
    ("flamegraph/json", {"filter": flt('host.name == "ch1"')}),
    ("flamegraph/json", {"filter": flt('k8s.pod.name.startsWith("api") && host.name != "ch2"')}),
    ("flamegraph/json", {"filter": flt('weird.contains("quoted")')}),
    ("flamegraph/json", {"filter": flt('host.name.matches("^ch[23]$")'),
                         "synthetic_frames": ["host"]}),
    ("flamegraph/json", {"filter": flt(start=T0 + 10000, end=T0 + 20000)}),
    ("flamegraph/json", {"filter": flt('host.name == "otlp-host"'),
                         "synthetic_frames": ["executable"]}),
    # a filter whose SQL is longer than a URL may be (4000 bytes, each escaped as \\xHH):
    # sent in the query's body
    ("flamegraph/json", {"filter": flt('host.name != "' + "\u00e9" * 2000 + '"')}),
    # a form cel_sql refuses (RE2 has no lookahead): not pushed down, filtered in ember
    ("flamegraph/json", {"filter": flt('host.name.matches("ch(?=[12])")')}),
    ("top_functions", {"filter": flt(), "sort": "total", "limit": 50}),
    ("top_functions", {"filter": flt('k8s.namespace.name == "prod"')}),
    ("top_functions", {"filter": flt(), "cpu_mode": "absolute"}),
    ("timeseries", {"filter": flt(end=T0 + 60000), "group_by": "host", "num_buckets": 6}),
    ("timeseries", {"filter": flt(), "num_buckets": 60}),
    ("timeseries", {"filter": flt(start=T0 + 5000, end=T0 + 35000), "group_by": "executable",
                    "num_buckets": 4}),
    ("top_entities", {"filter": flt(), "entity": "host"}),
    ("top_entities", {"filter": flt(), "entity": "host", "cpu_mode": "absolute"}),
    ("top_entities", {"filter": flt(), "entity": "pod"}),
    ("top_entities", {"filter": flt(), "entity": "shared_object"}),
    ("top_functions", {"filter": flt('host.name == "otlp-host"'), "sort": "total"}),
    ("events", {"filter": flt('host.name == "otlp-host"'), "limit": 20}),
    ("labels", {"filter": flt()}),
    ("sandwich", {"filter": flt(), "function": "serve"}),
    ("diff", {"baseline": flt('host.name == "ch1"'), "comparison": flt('host.name == "ch2"')}),
]


@pytest.mark.parametrize("what,body", QUERIES, ids=[f"{w}-{i}" for i, (w, _) in enumerate(QUERIES)])
def test_same_answers(servers, what, body):
    answers = {}
    for name, s in servers.items():
        status, ans = post(s, what, body)
        assert status == 200, (name, ans)
        answers[name] = json.dumps(strip_stats(ans), sort_keys=True)
    assert answers["clickhouse"] == answers["embedded"]
    assert answers["two shards"] == answers["embedded"]
    assert answers["in pieces"] == answers["embedded"]


def test_the_answers_hold_the_data(servers):
    # Not equal by being empty: the totals are the batches'.
    status, ans = post(servers["clickhouse"], "top_functions",
                       {"filter": flt("!(host.name == 'otlp-host')"), "sort": "total"})
    assert status == 200 and ans["total"] == TOTAL
    tree = servers["clickhouse"].flamegraph(start_ms=T0, end_ms=T0 + HOUR,
                                            query='host.name == "otlp-host"')
    assert tree["total"] == 84
    names = json.dumps(tree)
    assert "libz.so.1" in names and "helper_inlined" in names and "handler" in names
    tree = servers["two shards"].flamegraph(start_ms=T0, end_ms=T0 + HOUR, query='host.name == "ch3"')
    assert tree["total"] == BATCHES * 60
    tree = servers["two shards"].flamegraph(start_ms=T0, end_ms=T0 + HOUR, query='host.name == "ch2"')
    assert "libfoo.so" in json.dumps(tree)


def test_the_filter_is_pushed_down(servers):
    # ClickHouse answers only what the filter selects: fewer bytes come
    # back for one host than for all (without the pushdown, the same).
    s = servers["two shards"]
    read = {}
    for q in (None, 'host.name == "ch1"'):
        status, ans = post(s, "flamegraph/json", {"filter": flt(q)})
        assert status == 200
        read[q] = ans["query_stats"]["bytes_read"]
    assert 0 < read['host.name == "ch1"'] < read[None] * 0.6, read


def test_tls_to_clickhouse(servers, clickhouse_cluster, tmp_path):
    """--clickhouse-url https://…: both shards over TLS, their certificates
    verified against --clickhouse-ca-file; every query answers as the
    server on the same shards over plain HTTP does. Without the CA the
    certificate does not verify: migrate and the server refuse, naming it,
    and nothing is sent in the clear instead."""
    a, b = clickhouse_cluster.servers
    urls = ("--clickhouse-url", f"{a.https_url},{b.https_url}", "--clickhouse-database", "tls",
            "--clickhouse-cluster", "ember_test")
    ca = ("--clickhouse-ca-file", clickhouse_cluster.ca)
    r = subprocess.run([os.path.join(BIN, "ember-server"), "migrate", *urls],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1 and "certificate" in r.stderr, r.stderr
    r = subprocess.run([os.path.join(BIN, "ember-server"), "migrate", *urls,
                        "--clickhouse-ca-file", str(tmp_path / "absent.pem")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode != 0 and "--clickhouse-ca-file" in r.stderr, r.stderr
    migrate(*urls, *ca)
    r = subprocess.run([os.path.join(BIN, "ember-server"), "--data-dir", str(tmp_path / "no-ca"),
                        "--listen", "127.0.0.1:0", "--store", "clickhouse", *urls],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode != 0 and "certificate" in r.stderr, r.stderr
    s = Server(tmp_path / "srv", None, "--store", "clickhouse", *urls, *ca).start()
    try:
        for host in HOSTS:
            for i in range(BATCHES):
                assert send_batch(s.url, batch(host, i))["stored"]
        status, body = http("POST", s.url + "/v1development/profiles", otlp_request(),
                            {"Content-Type": "application/x-protobuf"})
        assert status == 200, body
        for what, body in QUERIES:
            got, want = post(s, what, body), post(servers["two shards"], what, body)
            assert got[0] == want[0] == 200, (what, got[1])
            assert json.dumps(strip_stats(got[1]), sort_keys=True) == \
                json.dumps(strip_stats(want[1]), sort_keys=True), (what, body)
        assert s.flamegraph(start_ms=T0, end_ms=T0 + HOUR)["total"] == TOTAL + 84
    finally:
        s.stop()


def test_retried_batch_counts_once(servers, clickhouse_cluster):
    a, _ = clickhouse_cluster.servers
    s = servers["two shards"]
    ans = send_batch(s.url, batch("ch1", 0))
    assert ans.get("duplicate") or ans.get("stored"), ans
    assert a.query("SELECT sum(value) FROM fleet.samples WHERE labels GLOBAL IN (SELECT hash "
                   "FROM fleet.label_sets WHERE has(values, 'ch1'))").strip() == \
        str(BATCHES * 100)


def send_status(url, raw):
    """POSTs a batch; (status, Retry-After, answer)."""
    import urllib.error
    import urllib.request
    from ember_batch import zstd_compress
    req = urllib.request.Request(
        url + "/ingest/v1/batch", data=zstd_compress(raw), method="POST",
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, None, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After"), json.loads(e.read())


def test_a_shard_stopped_mid_ingest(clickhouse_cluster, tmp_path):
    """Last in the module: it stops and restarts a shard. Batches sent while
    it is down get 503 with Retry-After; the client retries them (and
    resends some that were stored) after it returns: every batch counts
    once, in ClickHouse and in ember's answers."""
    a, b = clickhouse_cluster.servers
    s = Server(tmp_path / "srv", None, *fleet_flags(clickhouse_cluster, "fault")).start()
    try:
        half = BATCHES // 2 * len(HOSTS)
        # the second half (sent while the shard is down) names new stacks
        pending = [batch(h, i, "fault-", f"late_{h}_{i}" if i >= BATCHES // 2 else None)
                   for i in range(BATCHES) for h in HOSTS]
        want = TOTAL + (len(pending) - half)
        for raw in pending[:half]:
            assert send_status(s.url, raw)[0] == 200
        b.stop()
        refused = []
        for raw in pending[half:]:
            status, retry_after, ans = send_status(s.url, raw)
            assert status == 503 and retry_after and int(retry_after) > 0, (status, ans)
            assert "error" in ans
            refused.append(raw)
        # Every query while the shard is down: no answer (503, the reason
        # named) rather than the other shard's half of one.
        for what, body in QUERIES:
            status, ans = post(s, what, body)
            assert status == 503 and "clickhouse" in ans.get("error", ""), (what, body, status, ans)
        b.start()
        # the agent's retry, and a resend of batches it had stored
        for raw in refused + pending[:half]:
            for _ in range(50):
                status, retry_after, ans = send_status(s.url, raw)
                if status != 503:
                    break
                time.sleep(0.2)
            assert status == 200 and (ans["stored"] or ans["duplicate"]), ans
        assert a.query("SELECT sum(value) FROM fault.samples").strip() == str(want)
        assert a.query("SELECT count() FROM fault.batches").strip() == str(len(pending))
        # every dictionary row a sample needs is there: rows a failed batch
        # did not get acknowledged were sent again with its retry
        assert a.query("SELECT count() FROM fault.samples WHERE stack GLOBAL NOT IN "
                       "(SELECT hash FROM fault.stacks)").strip() == "0"
        assert a.query("SELECT count() FROM fault.samples WHERE labels GLOBAL NOT IN "
                       "(SELECT hash FROM fault.label_sets)").strip() == "0"
        assert a.query("SELECT count() FROM (SELECT arrayJoin(frames) AS f FROM fault.stacks) "
                       "WHERE f GLOBAL NOT IN (SELECT hash FROM fault.frames)").strip() == "0"
        assert a.query("SELECT count() FROM fault.frames WHERE file != 0 AND file GLOBAL NOT IN "
                       "(SELECT hash FROM fault.files)").strip() == "0"
        status, ans = post(s, "top_functions", {"filter": flt()})
        assert status == 200 and ans["total"] == want
        assert any(f["name"] == "late_ch3_3" for f in ans["functions"])
    finally:
        s.stop()
        if b.proc is None:
            b.start()


def replica_flags(cluster, postgres, database):
    """The flags of replicas on both shards (database migrated) and a fresh
    PostgreSQL database."""
    from conftest import pg_database
    return fleet_flags(cluster, database) + ("--metadata", pg_database(postgres))


def test_replicas_split_by_role_one_of_each_killed(clickhouse_cluster, postgres_server, tmp_path):
    """Stateless replicas on one ClickHouse (two shards) and one PostgreSQL:
    two ingest replicas (--roles ingest,symbols) and two query replicas
    (--roles query,ui). Each answers its roles alone (404 naming the role
    left out, before the body). An ingest replica killed (SIGKILL) between
    batches: the client sends the rest to the other and resends the last
    one it had acknowledged (an agent's retry of a batch whose answer it
    lost): every batch counts once. A query replica killed: the other
    answers the same."""
    import urllib.error
    bad = subprocess.run([os.path.join(BIN, "ember-server"), "--roles", "ingest,qeury", "--data-dir",
                          str(tmp_path / "bad")], stderr=subprocess.PIPE, text=True, timeout=30)
    assert bad.returncode != 0 and '--roles: unknown role "qeury"' in bad.stderr, bad.stderr
    common = replica_flags(clickhouse_cluster, postgres_server, "replicas")
    ing = [Server(tmp_path / f"ingest{k}", None, *common, "--roles", "ingest,symbols") for k in range(2)]
    qry = [Server(tmp_path / f"query{k}", None, *common, "--roles", "query,ui") for k in range(2)]
    started = []
    try:
        for s in ing + qry:
            started.append(s.start())
        pending = [batch(h, i, "replica-") for i in range(BATCHES) for h in HOSTS]
        # Each serves its roles alone; /healthz and /metrics everywhere.
        status, _, ans = send_status(qry[0].url, pending[0])
        assert status == 404 and "--roles leave out ingest" in ans["error"], ans
        status, ans = post(ing[0], "top_functions", {"filter": flt()})
        assert status == 404 and "--roles leave out query" in ans["error"], ans
        status, body = http("GET", ing[0].url + "/")
        assert status == 404 and b"leave out ui" in body, body
        status, body = http("PUT", qry[0].url + "/ingest/v1/symbols/00112233445566778899aabbccddeeff",
                            b"x", {"Content-Type": "application/octet-stream"})
        assert status == 404 and b"leave out symbols" in body, body
        for s in ing + qry:
            assert http("GET", s.url + "/healthz")[0] == 200
        status, body = http("GET", qry[1].url + "/")
        assert status == 200 and b"<html" in body.lower()
        # Half the batches to the first ingest replica, which is then killed.
        half = len(pending) // 2
        for raw in pending[:half]:
            assert send_status(ing[0].url, raw)[0] == 200
        ing[0].proc.kill()
        ing[0].proc.wait()
        for raw in pending[half:]:
            try:
                send_status(ing[0].url, raw)
                raise AssertionError("a killed replica answered")
            except urllib.error.URLError:
                pass
            status, _, ans = send_status(ing[1].url, raw)
            assert status == 200 and ans["stored"], ans
        status, _, ans = send_status(ing[1].url, pending[half - 1])
        assert status == 200 and ans["duplicate"], ans
        answers = []
        for s in qry:
            status, ans = post(s, "top_functions", {"filter": flt()})
            assert status == 200 and ans["total"] == TOTAL, ans
            answers.append(strip_stats(ans))
        assert answers[0] == answers[1]
        qry[0].proc.kill()
        qry[0].proc.wait()
        status, ans = post(qry[1], "top_functions", {"filter": flt()})
        assert status == 200 and strip_stats(ans) == answers[1]
        status, fg = post(qry[1], "flamegraph/json", {"filter": flt()})
        assert status == 200 and fg["total"] == TOTAL
    finally:
        for s in started:
            s.stop()


def test_two_replicas_racing_one_batch_count_it_once(clickhouse_cluster, postgres_server, tmp_path):
    """An agent's retry can reach a second replica while the first still
    inserts the batch (a slow ClickHouse, a load balancer's retry). Each
    batch here goes to two replicas at the same moment, 24 times: it is
    stored once (the replicas claim a batch in PostgreSQL before they
    insert it; the loser answers 503 and the retry then finds it stored).
    PostgreSQL stopped: ingest answers 503 until it is back."""
    import threading
    a = clickhouse_cluster.servers[0]
    common = replica_flags(clickhouse_cluster, postgres_server, "race")
    reps = [Server(tmp_path / f"r{k}", None, *common) for k in range(2)]
    started = []
    try:
        for s in reps:
            started.append(s.start())
        # two rounds of every batch, under agent ids of their own: 24 batches
        pending = [batch(h, i, f"race{r}-") for r in range(2) for i in range(BATCHES) for h in HOSTS]
        answers = []
        for raw in pending:
            got = [None, None]

            def send(k, raw=raw, got=got):
                for _ in range(200):
                    status, _, ans = send_status(reps[k].url, raw)
                    if status != 503:
                        got[k] = (status, ans)
                        return
                    time.sleep(0.05)
                got[k] = (503, None)
            run_threads(send, 2, args=lambda k: (k,))
            answers.append(got)
        for got in answers:
            assert all(g[0] == 200 for g in got), got
            assert sorted(bool(g[1]["stored"]) for g in got) == [False, True], got
        assert a.query("SELECT count() FROM race.batches").strip() == str(len(pending))
        status, ans = post(reps[0], "top_functions", {"filter": flt()})
        assert status == 200 and ans["total"] == 2 * TOTAL, (ans.get("total"), 2 * TOTAL)
        # PostgreSQL stopped: no claim, no insert (503, the agent keeps the
        # batch); restarted: the next try stores it.
        late = batch("ch1", 0, "race-late-")
        postgres_server.stop()
        try:
            status, retry_after, ans = send_status(reps[0].url, late)
            assert status == 503 and retry_after, (status, ans)
        finally:
            postgres_server.start()
        for _ in range(100):
            status, _, ans = send_status(reps[0].url, late)
            if status != 503:
                break
            time.sleep(0.1)
        assert status == 200 and ans["stored"], ans
    finally:
        for s in started:
            s.stop()


def test_a_real_agent_into_clickhouse(clickhouse_cluster, agent_factory, tmp_path):
    """ember-agent's session batches (the protocol it speaks: definitions
    once per session) into a --store clickhouse server on two shards: the
    cpu_split workload's call chain arrives whole and symbolized (the
    server names native frames from the files' symbols the agent uploads,
    which needs each frame's file stored in ClickHouse)."""
    from conftest import require_root
    from harness import find, run_workload, subtree_total, wait_until
    require_root()
    s = Server(tmp_path / "srv", None, *fleet_flags(clickhouse_cluster, "agent")).start()
    try:
        agent_factory(s.url, "-on-cpu-sampling-rate=97").start()
        run_workload("cpu_split", 6)

        def main():
            tree = s.flamegraph(query='process.executable.name == "cpu_split"')
            return find(tree["root"], "main", binary="cpu_split")

        def settled():
            m = main()
            settled.history.append(m["total"] if m else 0)
            return settled.history[-1] > 0 and settled.history[-3:] == [settled.history[-1]] * 3
        settled.history = []
        wait_until(settled, 40, interval=1.0, what="the workload's samples in ClickHouse")
        m = main()
        assert m["total"] > 300, m["total"]
        chain = m
        for name in ("run_workload", "run_cycle", "run_slot"):
            chain = next((c for c in chain["children"] if c["name"] == name), None)
            assert chain is not None, f"{name} missing from the call chain"
            assert chain["frame_type"] == "native" and chain["binary"] == "cpu_split"
        assert subtree_total(m, "hot_a") > 0 and subtree_total(m, "hot_b") > 0
    finally:
        s.stop()


def test_symbols_reach_every_replica(clickhouse_cluster, postgres_server, agent_factory, tmp_path):
    """Two replicas on one ClickHouse and one PostgreSQL; the agent sends
    its batches and uploads its symbol files to the first only. The second
    names the same frames (it copies the symbols the first stored in
    PostgreSQL, --symbols-sync), and so does a third started afterwards on
    an empty data dir. With PostgreSQL stopped an upload is refused (503),
    stored nowhere; once it is back the retry reaches every replica."""
    from conftest import require_root
    from harness import find, run_workload, tiny_symfile, wait_until
    require_root()
    a, b = clickhouse_cluster.servers
    if b.proc is None:
        b.start()
    common = replica_flags(clickhouse_cluster, postgres_server, "symshare") + ("--symbols-sync", "500ms")
    reps = [Server(tmp_path / "r0", None, *common), Server(tmp_path / "r1", None, *common)]
    started = []
    try:
        for s in reps:
            started.append(s.start())
        agent_factory(reps[0].url, "-on-cpu-sampling-rate=97").start()
        run_workload("cpu_split", 4)

        def named(s):
            tree = s.flamegraph(query='process.executable.name == "cpu_split"')
            m = find(tree["root"], "main", binary="cpu_split")
            return m is not None and find(m, "run_slot", binary="cpu_split") is not None
        wait_until(lambda: named(reps[0]), 40, interval=1.0, what="the workload named on the replica it went to")
        wait_until(lambda: reps[1].healthy() and named(reps[1]), 20, interval=0.5,
                   what="the workload named on the other replica")
        late = Server(tmp_path / "r2", None, *common)
        started.append(late.start())
        wait_until(lambda: named(late), 20, interval=0.5, what="the workload named on a replica started later")
        # PostgreSQL stopped: an upload is refused (503) and stored nowhere;
        # back, it is stored and copied to the other replicas.
        fid, put = "cd" * 16, f"/ingest/v1/symbols/{'cd' * 16}?name=libw.so"

        def missing(s):
            return json.loads(http("POST", s.url + "/ingest/v1/symbols/missing", {"file_ids": [fid]})[1])["missing"]
        postgres_server.stop()
        try:
            status, body = http("PUT", reps[0].url + put, tiny_symfile())
            assert status == 503, (status, body)
        finally:
            postgres_server.start()
        assert missing(reps[0]) == [fid]
        for _ in range(100):
            status, body = http("PUT", reps[0].url + put, tiny_symfile())
            if status != 503:
                break
            time.sleep(0.1)
        assert status == 201, (status, body)
        for s in (reps[1], late):
            wait_until(lambda s=s: missing(s) == [], 20, interval=0.5, what="the upload copied to every replica")
    finally:
        for s in started:
            s.stop()


def test_retention_drops_old_days(clickhouse_cluster, tmp_path):
    """--retention on --store clickhouse: the server drops the samples' day
    partitions wholly past it when it starts (and hourly), on every shard;
    the newer days stay."""
    a, b = clickhouse_cluster.servers
    flags = fleet_flags(clickhouse_cluster, "ret")
    now = int(time.time())
    for srv in (a, b):
        for age_days in (5, 3, 0):
            srv.query(f"INSERT INTO ret.samples_local (project, kind, ts, stack, labels, hz, value, "
                      f"batch) VALUES ('p', 'on_cpu', toDateTime({now - age_days * 86400}), 1, 1, "
                      f"19, {age_days + 1}, 1)")
    s = Server(tmp_path / "srv", None, *flags, "--retention", "2d").start()
    try:
        def dropped():
            return all(x.query("SELECT groupArray(value) FROM ret.samples_local").strip() == "[1]"
                       for x in (a, b))
        from harness import wait_until
        wait_until(dropped, 20, what="the days past the retention to be dropped")
    finally:
        s.stop()


def test_concurrent_batches_and_resends_count_once(clickhouse_cluster, tmp_path):
    """Many clients at once (the backend sends concurrent batches as one
    group): every batch counts once, also when the same batch is sent twice
    at the same time."""
    import threading
    a = clickhouse_cluster.servers[0]
    s = Server(tmp_path / "srv", None, *fleet_flags(clickhouse_cluster, "conc")).start()
    try:
        raws = [batch(h, i, f"conc{k}-") for k in range(4) for h in HOSTS for i in range(BATCHES)]
        errors = []

        together = threading.Barrier(3)

        def client():
            # three clients send each batch at the same instant
            for raw in raws:
                together.wait()
                for _ in range(50):
                    status, _, ans = send_status(s.url, raw)
                    if status != 503:
                        break
                    time.sleep(0.1)
                if status != 200:
                    errors.append((status, ans))
        run_threads(client, 3)
        assert not errors, errors[:3]
        assert a.query("SELECT sum(value), uniqExact(batch) FROM conc.samples").strip() == \
            f"{4 * TOTAL}\t{len(raws)}"
        status, ans = post(s, "top_functions", {"filter": flt()})
        assert status == 200 and ans["total"] == 4 * TOTAL
    finally:
        s.stop()


# --- the GPU timeline's spans on every replica ---------------------------------------

SEC = 1_000_000_000
LAUNCH = ("cudaLaunchKernel", "cuda_launch", "libcudart.so.12")


def span_batch(seq, first_ns, agent="spans-agent", hosts=("g1", "g2"), per=20):
    """A session batch of GPU spans (and their GPU time) from two hosts:
    three launch stacks each (one through a library frame the server names
    by file), kernels, copies and a sync on two devices and streams."""
    b = Batch(agent_instance=agent, sample_rate_hz=19)
    spans = 0
    for h, host in enumerate(hosts):
        attrs = {"host.name": host, "process.executable.name": "train",
                 "gpu.device.index": str(h), "cuda.stream.id": str(7 + h)}
        stacks = (
            (["main", "train_step", LAUNCH, ("sgemm_kernel", "cuda_kernel", "")], "kernel"),
            (["main", "load", ("cudaMemcpyAsync", "cuda_launch", ""), ("HtoD", "cuda_memcpy", "")],
             "memcpy"),
            (["main", b.file_frame("00112233445566778899aabbccddeeff", "libtorch.so", 0x4242),
              ("cudaStreamSynchronize", "cuda_launch", "")], "sync"),
        )
        for i in range(per):
            frames, kind = stacks[i % 3]
            start = first_ns + (seq * 1000 + h * 100 + i) * 1_000_000
            end = start + (i + 1) * 10_000
            b.add_span(frames, attrs, start, end, kind, h, 7 + h)
            b.add(frames, attrs, end - start, kind="cuda")
            spans += 1
    return b.encode_session(sequence=seq, start_ms=first_ns // 1_000_000,
                            end_ms=first_ns // 1_000_000 + 5000), spans


def timeline_of(server, query=None, start_ms=946684800000, end_ms=4102444800000):
    """The timeline's spans as a sorted list of plain tuples: each span with
    its stack's frames and its labels written out (the answer's numbering
    of stacks and label sets is its own)."""
    status, t = post(server, "gpu/timeline", {"filter": {"start_ts": start_ms, "end_ts": end_ms,
                                                         "query": query}, "limit": 20000})
    assert status == 200, t
    assert not t["truncated"]
    return sorted((s["start_ns"], s["end_ns"], s["device"], s["stream"], s["kind"], s["name"],
                   json.dumps(t["stacks"][s["stack"]], sort_keys=True),
                   json.dumps(t["label_sets"][s["labels"]], sort_keys=True))
                  for s in t["spans"])


def test_gpu_timeline_on_every_replica(clickhouse_cluster, tmp_path):
    """With --store clickhouse the GPU timeline's spans are stored in
    ClickHouse (gpu_spans, gpu_span_origins): two replicas each given
    half of an agent's batches draw the same whole timeline, span for span
    (stacks and attributes included), as an embedded server given all of
    them; a resent batch adds nothing; a replica started afterwards on an
    empty disk draws it too; spans past --gpu-span-retention are not
    drawn."""
    a_ch = clickhouse_cluster.servers[0]
    flags = fleet_flags(clickhouse_cluster, "spans")
    # an hour of spans stored five hours ago: the first insert's retention
    # drops it, from both tables
    old_hour = int(time.time()) // 3600 - 5
    a_ch.query(f"INSERT INTO spans.gpu_spans_local VALUES ('p', {old_hour}, 1, 2, 0, 0, 1, 5)")
    a_ch.query(f"INSERT INTO spans.gpu_span_origins_local VALUES ({old_hour}, 5, 'x')")

    def old_parts():
        return a_ch.query("SELECT count() FROM system.parts WHERE database = 'spans' AND active "
                          f"AND partition = '{old_hour}'").strip()
    assert old_parts() == "2"
    emb = Server(tmp_path / "emb").start()
    ra = Server(tmp_path / "ra", None, *flags).start()
    rb = Server(tmp_path / "rb", None, *flags).start()
    rc = None
    try:
        now_ns = time.time_ns()
        first = now_ns - 60 * SEC
        b1, n1 = span_batch(1, first)
        b2, n2 = span_batch(2, first)
        for s, raw in ((ra, b1), (emb, b1), (rb, b2), (emb, b2)):
            assert send_session_batch(s.url, raw)["stored"]
        want = timeline_of(emb)
        assert len(want) == n1 + n2
        assert old_parts() == "0"
        status, text = http("GET", ra.url + "/metrics")
        assert status == 200
        text = text.decode() if isinstance(text, bytes) else text
        assert f"ember_gpu_spans_stored_total {n1}" in text and "ember_gpu_spans_hours_dropped_total 2" in text
        assert timeline_of(ra) == want and timeline_of(rb) == want
        assert a_ch.query("SELECT count() FROM spans.gpu_spans").strip() == str(n1 + n2)
        # each distinct origin (stack x attributes) once per batch
        assert a_ch.query("SELECT count() FROM spans.gpu_span_origins").strip() == str(2 * 6)
        # a filter over the spans' attributes, and a time range
        q = 'host.name == "g2"'
        assert timeline_of(ra, q) == timeline_of(emb, q) and len(timeline_of(ra, q)) == (n1 + n2) // 2
        lo, hi = first // 1_000_000 + 1500, first // 1_000_000 + 2100
        assert timeline_of(rb, None, lo, hi) == timeline_of(emb, None, lo, hi)
        assert 0 < len(timeline_of(rb, None, lo, hi)) < n1 + n2
        # a limit: the newest spans (by end), said to be truncated; with a
        # filter, the newest of those it keeps
        for query, limit in ((None, 10), ('host.name == "g1"', 5)):
            status, t = post(ra, "gpu/timeline", {"filter": {"start_ts": 946684800000,
                                                             "end_ts": 4102444800000,
                                                             "query": query}, "limit": limit})
            assert status == 200 and t["truncated"] and len(t["spans"]) == limit, t
            ends = [x[1] for x in (timeline_of(emb, query))]
            assert sorted(s["end_ns"] for s in t["spans"]) == sorted(ends)[-limit:]
        # the first batch again (an agent's retry): a duplicate, nothing added
        ans = send_session_batch(rb.url, b1)
        assert ans.get("duplicate"), ans
        assert timeline_of(ra) == want
        # a replica started later, its disk empty
        rc = Server(tmp_path / "rc", None, *flags).start()
        assert timeline_of(rc) == want
        # spans that ended two hours ago are past the retention (30 minutes)
        old, _ = span_batch(3, now_ns - 7200 * SEC, agent="old-agent")
        assert send_session_batch(ra.url, old)["stored"]
        assert a_ch.query("SELECT count() FROM spans.gpu_spans").strip() == str(n1 + n2 + 40)
        assert timeline_of(rb) == want
    finally:
        for s in (emb, ra, rb, rc):
            if s:
                s.stop()
