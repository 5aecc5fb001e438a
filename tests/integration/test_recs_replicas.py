"""Recommendations shared by replicas: with --metadata postgres://... the
recommendations' states, suppressed hot traces, settings, history and
generations are in the shared PostgreSQL (server/query/recommend.h), so
what a user does through one replica holds on every other. Both replicas
are given the same batches (as a shared sample store would give them the
same data): each generates the same recommendations; a dismiss, a
suppress and a settings change made through one are seen through the
other; the history holds both replicas' actions; each generation number
is stored once, whoever generated it."""

import json

from conftest import pg_database
from ember_batch import Batch, send_batch  # tests/lib
from harness import DEFAULT_PROJECT, Server, http, wait_until

BASE = f"/public/api/v1/project/{DEFAULT_PROJECT}/recommendations"
SETTINGS = "/public/api/v1/settings/recommendations"
REGEX = ["main", "handle", "pcre2_compile_8", "compile_branch"]
ZLIB = ["main", "save", "deflate", "deflate_slow", "longest_match"]


def call(server, path, method="GET", body=None):
    st, out = http(method, server.url + path, None if body is None else json.dumps(body).encode(),
                   {"Content-Type": "application/json"} if body is not None else None)
    assert st == 200, (method, path, st, out)
    return json.loads(out)


def by_app(doc):
    return {r["application"]: r for r in doc["recommendations"]}


def test_replicas_share_recommendations_on_postgres(postgres_server, tmp_path):
    url = pg_database(postgres_server)
    a = Server(tmp_path / "a", None, "--metadata", url, "--recs-step=1s").start()
    b = Server(tmp_path / "b", None, "--metadata", url, "--recs-step=1s").start()
    try:
        batch = Batch()
        for frames, exe, n in ((REGEX, "web", 600), (ZLIB, "batch", 300)):
            batch.add(frames, {"process.executable.name": exe, "host.name": "h1"}, n, binary=exe)
        for s in (a, b):
            assert send_batch(s.url, batch.encode(1))["stored"]
        ra, rb = by_app(call(a, BASE + "/refresh", "POST")), by_app(call(b, BASE + "/refresh", "POST"))
        assert set(ra) == set(rb) == {"web", "batch"}, (ra, rb)
        assert {k: r["id"] for k, r in ra.items()} == {k: r["id"] for k, r in rb.items()}

        # Dismissed through a, dismissed through b.
        web = ra["web"]["id"]
        call(a, f"{BASE}/{web}/state", "POST", {"state": "dismissed"})
        assert by_app(call(b, BASE))["web"]["state"] == "dismissed"
        assert by_app(call(b, BASE))["batch"]["state"] == "active"
        call(b, f"{BASE}/{web}/state", "POST", {"state": "active"})
        assert by_app(call(a, BASE))["web"]["state"] == "active"

        # A setting changed through b: a's settings and its answers' costs.
        out = call(b, SETTINGS, "PUT", {"cost_per_core_hour": 1.0})
        assert out["overridden"] == ["cost_per_core_hour"], out
        s = call(a, SETTINGS)
        assert s["cost_per_core_hour"] == 1.0 and s["overridden"] == ["cost_per_core_hour"], s
        wait_until(lambda: call(a, BASE)["settings"]["cost_per_core_hour"] == 1.0, 20, interval=0.5,
                   what="replica a generating with b's price")

        # The regex trace suppressed through a: gone from b's next
        # generation that reads the store (a refresh here; the thread's).
        tid = next(t["id"] for t in ra["web"]["technical"]["hot_traces"] if t["pattern"] == "regex-compile")
        assert call(a, f"{BASE}/hot-traces/{tid}/suppress", "POST") == {"trace_id": tid, "state": "suppressed"}
        assert [x["trace_id"] for x in call(b, BASE + "/suppressed")["suppressed"]] == [tid]
        assert "web" not in by_app(call(b, BASE + "/refresh", "POST"))
        call(b, f"{BASE}/hot-traces/{tid}/suppress", "DELETE")
        assert "web" in by_app(call(a, BASE + "/refresh", "POST"))

        # One history, both replicas' actions, newest first.
        hist = [h["action"] for h in call(a, BASE + "/history?limit=20")["history"]]
        assert hist[:7] == ["refresh", "unsuppress", "refresh", "suppress", "settings", "state",
                            "state"], hist
        assert call(b, BASE + "/history?limit=20")["history"] == call(a, BASE + "/history?limit=20")["history"]

        # Both threads generate; each number is stored once and the
        # numbers go on from whichever replica stored the last.
        seqs = []

        def both_moved():
            seqs.append((call(a, BASE)["generation"]["seq"], call(b, BASE)["generation"]["seq"]))
            return len(seqs) > 1 and seqs[-1][0] > seqs[0][0] + 2 and seqs[-1][1] > seqs[0][1] + 2
        wait_until(both_moved, 30, interval=1.0, what="generations on both replicas")
        assert abs(seqs[-1][0] - seqs[-1][1]) <= 3, seqs
    finally:
        a.stop()
        b.stop()


def test_postgres_restarted_under_replicas(tmp_path):
    """PostgreSQL down: a dismiss answers 503 (never a crash, never a
    state half kept); back: the next dismiss holds on both replicas."""
    from clickhouse import Postgres
    pg = Postgres()
    pg.start()
    try:
        url = pg_database(pg)
        a = Server(tmp_path / "a", None, "--metadata", url).start()
        b = Server(tmp_path / "b", None, "--metadata", url).start()
        try:
            batch = Batch()
            batch.add(REGEX, {"process.executable.name": "web", "host.name": "h1"}, 600, binary="web")
            for s in (a, b):
                assert send_batch(s.url, batch.encode(1))["stored"]
            web = by_app(call(a, BASE))["web"]["id"]
            pg.stop()
            st, body = http("POST", f"{a.url}{BASE}/{web}/state", json.dumps({"state": "dismissed"}).encode(),
                            {"Content-Type": "application/json"})
            assert st == 503, (st, body)
            # the recommendations' own mapping answered (not an earlier
            # lookup that also needs the database)
            assert json.loads(body)["error"].startswith("the recommendations' database cannot be reached"), body
            assert a.running() and b.running()
            pg.start()
            call(a, f"{BASE}/{web}/state", "POST", {"state": "dismissed"})
            assert by_app(call(b, BASE))["web"]["state"] == "dismissed"
            assert [h["action"] for h in call(b, BASE + "/history")["history"]] == ["state"]
        finally:
            a.stop()
            b.stop()
    finally:
        pg.cleanup()
