"""The recommendations' background generations, lifecycle and Slack
notifications over HTTP, with batches built by hand (no agent):

- the background thread makes generations on its own (--recs-step=1s):
  the answer's generation moves on without a regenerate; a recommendation
  is new, then unchanged, then worsened when its code path doubles;
- regenerate, refresh and suppress/unsuppress a hot trace, each in the
  history; the settings' GET/PUT, refusals included;
- Slack: a local webhook receiver (test-only, Python http.server) gets
  Block Kit payloads with links back to --public-url for a new
  recommendation and for GPU XID events, at most --slack-max-messages per
  --slack-rate-window (the rest coalesced into one message), and the
  webhook URL (a secret) never appears in the server's log."""

import http.server as httpserver
import json
import os
import sqlite3
import threading
import time

import pytest

from conftest import StubHandler
from ember_batch import Batch, send_batch  # tests/lib
from harness import DEFAULT_PROJECT, Server, free_port, http, wait_until
from metrics_batch import MetricsBatch, post as post_metrics  # tests/lib

BASE = f"/public/api/v1/project/{DEFAULT_PROJECT}/recommendations"
REGEX = ["main", "handle", "pcre2_compile_8", "compile_branch"]
ZLIB = ["main", "save", "deflate", "deflate_slow", "longest_match"]
SEQ = [0]


def send_profile(server, stacks):
    """stacks: [(frames, executable, samples)] as one batch ending now."""
    b = Batch()
    for frames, exe, n in stacks:
        b.add(frames, {"process.executable.name": exe, "host.name": "h1"}, n, binary=exe)
    SEQ[0] += 1
    send_batch(server.url, b.encode(SEQ[0]))


def get(server, path):
    st, body = http("GET", server.url + path)
    assert st == 200, body
    return json.loads(body)


def post(server, path, method="POST", body=None):
    st, out = http(method, server.url + path, None if body is None else json.dumps(body).encode(),
                   {"Content-Type": "application/json"} if body is not None else None)
    return st, json.loads(out)


def rec_of(doc, app):
    return next((r for r in doc["recommendations"] if r["application"] == app), None)


class Receiver:
    """A Slack incoming webhook stand-in: records every POST (time, path, JSON)."""

    def __init__(self):
        self.posts = []
        outer = self

        class H(StubHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(n)
                outer.posts.append((time.time(), self.path, self.headers.get("Content-Type"), json.loads(data)))
                self.reply(200, b"ok", content_type=None)

        self.port = free_port()
        self.srv = httpserver.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def lifecycle_server(tmp_path):
    srv = Server(tmp_path / "data", None, "--recs-step=1s").start()
    yield srv
    srv.stop()


def test_background_generations_and_lifecycle(lifecycle_server):
    server = lifecycle_server
    send_profile(server, [(REGEX, "web", 600), (ZLIB, "batch", 300)])
    st, first = post(server, BASE + "/refresh")
    assert st == 200, first
    assert first["generation"]["trigger"] == "refresh"
    web = rec_of(first, "web")
    assert web and web["status"] == "new", first
    seq = first["generation"]["seq"]

    # The thread goes on by itself: a later generation, the same data unchanged.
    def moved():
        d = get(server, BASE)
        moved.d = d
        return d["generation"]["seq"] > seq + 1 and d["generation"]["trigger"] == "schedule"
    wait_until(moved, 20, interval=0.5, what="a background generation")
    assert rec_of(moved.d, "web")["status"] == "unchanged", moved.d

    # The regex path more than doubles: the next generation says worsened
    # (and the one after, unchanged again: read from the stored generations,
    # whatever the timing).
    send_profile(server, [(REGEX, "web", 1500)])
    db = sqlite3.connect(os.path.join(server.data_dir, "recs.db"), timeout=10)

    def worse():
        worse.rows = db.execute("SELECT seq, savings FROM rec_gen_item WHERE id = ? ORDER BY seq",
                                (web["id"],)).fetchall()
        worse.status = [r[0] for r in db.execute(
            "SELECT status FROM rec_gen_item WHERE id = ? AND status = 'worsened'", (web["id"],))]
        return worse.status
    wait_until(worse, 20, interval=0.5, what="the web recommendation worsened")
    ws = db.execute("SELECT seq, savings FROM rec_gen_item WHERE id = ? AND status = 'worsened'",
                    (web["id"],)).fetchone()
    before = db.execute("SELECT savings FROM rec_gen_item WHERE id = ? AND seq < ? ORDER BY seq DESC",
                        (web["id"], ws[0])).fetchone()
    assert ws[1] > before[0] * 1.25, (ws, before)
    assert db.execute("SELECT count(*) FROM rec_gen_item WHERE id = ? AND status = 'new'",
                      (web["id"],)).fetchone()[0] == 1
    db.close()

    # Regenerate: the analysis again, recorded.
    st, d = post(server, BASE + "/regenerate")
    assert st == 200 and d["generation"]["trigger"] == "regenerate", d

    # Suppress the regex trace: it leaves the analysis, then comes back.
    tid = next(t["id"] for t in rec_of(d, "web")["technical"]["hot_traces"] if t["pattern"] == "regex-compile")
    assert post(server, BASE + "/hot-traces/zz/suppress")[0] == 400
    assert post(server, BASE + "/hot-traces/00000000000000ab/suppress")[0] == 404
    assert post(server, BASE + f"/hot-traces/{tid}/suppress", "DELETE")[0] == 404
    st, out = post(server, BASE + f"/hot-traces/{tid}/suppress")
    assert st == 200 and out == {"trace_id": tid, "state": "suppressed"}, out
    d = get(server, BASE)
    assert rec_of(d, "web") is None, d  # its only hot trace
    assert d["generation"]["suppressed_traces"] == 1
    # Still out in the background's next generations.
    s0 = d["generation"]["seq"]
    wait_until(lambda: get(server, BASE)["generation"]["seq"] > s0, 20, interval=0.5, what="a generation")
    assert rec_of(get(server, BASE), "web") is None
    sup = get(server, BASE + "/suppressed")["suppressed"]
    assert [(s["trace_id"], s["application"], s["leaf"]) for s in sup] == [(tid, "web", "compile_branch")]
    st, out = post(server, BASE + f"/hot-traces/{tid}/suppress", "DELETE")
    assert st == 200 and out["state"] == "active"
    assert rec_of(get(server, BASE), "web") is not None
    assert get(server, BASE + "/suppressed")["suppressed"] == []

    hist = get(server, BASE + "/history?limit=10")["history"]
    actions = [h["action"] for h in hist]
    assert actions[:4] == ["unsuppress", "suppress", "regenerate", "refresh"], hist
    assert all(h["actor"] and h["at"] > 0 for h in hist)
    assert hist[1]["id"] == tid and hist[1]["to"] == "suppressed"
    assert http("GET", server.url + BASE + "/history?limit=0")[0] == 400


def test_settings(lifecycle_server):
    server = lifecycle_server
    path = "/public/api/v1/settings/recommendations"
    s = get(server, path)
    assert s["cost_per_core_hour"] == 0.04 and s["step_ms"] == 1000 and s["overridden"] == []
    for bad in ({"window_ms": 5}, {"window_ms": 2 * 86400000}, {"min_share": 5}, {"step_ms": "1m"},
                {"colour": 1}, [1]):
        st, out = post(server, path, "PUT", bad)
        assert st == 400 and out["error"], (bad, out)
    st, out = post(server, path, "PUT", {"cost_per_core_hour": 1.0, "min_share": 0.01})
    assert st == 200 and out["cost_per_core_hour"] == 1.0 and sorted(out["overridden"]) == ["cost_per_core_hour", "min_share"]
    # The new price is in the next answers' costs.
    send_profile(server, [(REGEX, "web", 600)])
    st, d = post(server, BASE + "/refresh")
    web = rec_of(d, "web")
    assert d["settings"]["cost_per_core_hour"] == 1.0
    assert abs(web["savings"]["annual_cost"] - web["savings"]["cores"] * 8766 * 1.0) <= 0.02 + 1e-6 * web["savings"]["annual_cost"], web["savings"]
    # Kept across a restart, over the flags; null goes back to the flag.
    server.restart()
    assert get(server, path)["cost_per_core_hour"] == 1.0
    st, out = post(server, path, "PUT", {"cost_per_core_hour": None})
    assert st == 200 and out["cost_per_core_hour"] == 0.04 and out["overridden"] == ["min_share"]
    hist = get(server, BASE + "/history")["history"]
    assert [h["id"] for h in hist if h["action"] == "settings"][:1] == ["cost_per_core_hour"]


def test_slack_notifications(tmp_path):
    rx = Receiver()
    secret = "T0000/B0000/s3cretXYZtoken"
    url_file = tmp_path / "hook"
    url_file.write_text(f"http://127.0.0.1:{rx.port}/services/{secret}\n")
    server = Server(tmp_path / "data", None, "--recs-step=1s", f"--slack-webhook-url-file={url_file}",
                    "--slack-max-messages=2", "--slack-rate-window=8s",
                    "--public-url=https://ember.example.com/").start()
    try:
        # A new recommendation.
        send_profile(server, [(REGEX, "web", 600)])
        st, d = post(server, BASE + "/refresh")
        rid = rec_of(d, "web")["id"]
        wait_until(lambda: len(rx.posts) >= 1, 15, interval=0.2, what="the first Slack message")
        t0, path, ctype, p = rx.posts[0]
        assert path == f"/services/{secret}" and ctype == "application/json"
        assert "New recommendation" in p["text"], p
        assert p["blocks"][0]["type"] == "header"
        sections = [b for b in p["blocks"] if b["type"] == "section"]
        assert len(sections) == 1 and sections[0]["text"]["type"] == "mrkdwn"
        link = f"https://ember.example.com/?view=recs&project={DEFAULT_PROJECT}&rec={rid}"
        assert f"<{link.replace('&', '&amp;')}|" in sections[0]["text"]["text"], sections
        assert p["blocks"][-1]["type"] == "context"

        # GPU XIDs: one now (the second message of the window), then two more
        # which must wait for the window and come together.
        def xid(code, meaning):
            b = MetricsBatch()
            s = b.series("hw.gpu.xid", "1", {"host.name": "gpu-host", "gpu.device.index": "0",
                                             "gpu.name": "Test GPU", "gpu.xid.code": str(code),
                                             "gpu.xid.meaning": meaning})
            b.point(s, int(time.time() * 1000), 1)
            post_metrics(server.url, b)
        xid(79, "GPU has fallen off the bus")
        wait_until(lambda: len(rx.posts) >= 2, 15, interval=0.2, what="the XID message")
        p = rx.posts[1][3]
        assert "GPU XID 79: GPU has fallen off the bus" in p["text"], p
        assert "gpu-host" in json.dumps(p) and "view=metrics" in json.dumps(p)
        xid(48, "Double-bit ECC error")
        time.sleep(1.1)
        xid(63, "Row remapping")
        # The window (8 s from the first message) holds two messages: no third before it ends.
        while time.time() < t0 + 7.5:
            assert len(rx.posts) == 2, [x[3]["text"] for x in rx.posts]
            time.sleep(0.2)
        wait_until(lambda: len(rx.posts) >= 3, 15, interval=0.2, what="the coalesced message")
        p = rx.posts[2][3]
        assert "2 notifications" in p["text"] and "2 GPU XID events" in p["text"], p
        texts = json.dumps(p)
        assert "XID 48" in texts and "XID 63" in texts
        assert rx.posts[2][0] >= t0 + 8 - 0.5
        time.sleep(2.5)
        assert len(rx.posts) == 3  # nothing told twice
        # No message of any window of 8 s holds more than 2.
        times = [x[0] for x in rx.posts]
        assert all(sum(1 for u in times if t <= u < t + 8 - 0.5) <= 2 for t in times)
    finally:
        server.stop()
        rx.stop()
    log = server.output()
    assert "s3cretXYZtoken" not in log and str(rx.port) + "/services" not in log, log
    assert "slack: notifications on" in log


def test_permissions_and_who(tmp_path):
    """The lifecycle needs project:update, the settings admin:settings:*;
    the history names the principal."""
    from test_auth import ADMIN, PASSWORD, Session, bearer
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    server = Server(tmp_path / "data", None, "--auth", "local", "--admin-email", ADMIN,
                    "--admin-password-file", str(pw)).start()
    try:
        s = Session(server)
        admin = s.login(ADMIN, PASSWORD)[1]["access_token"]
        tokens = {}
        for name, scopes in (("reader", ["project:read"]), ("editor", ["project:read", "project:update"])):
            st, tok = s.call("POST", "/public/api/v1/service-tokens", {"name": name, "scopes": scopes})
            assert st == 201, tok
            tokens[name] = tok["token"]
            tokens[name + "_id"] = tok["id"]
        settings = "/public/api/v1/settings/recommendations"
        assert bearer(server, "GET", BASE, tokens["reader"])[0] == 200
        assert bearer(server, "GET", BASE + "/history", tokens["reader"])[0] == 200
        for path in ("/regenerate", "/refresh", "/hot-traces/00000000000000ab/suppress"):
            st, body = bearer(server, "POST", BASE + path, tokens["reader"])
            assert st == 403 and "project:update" in body["error"], (path, body)
        assert bearer(server, "POST", BASE + "/regenerate", tokens["editor"])[0] == 200
        for tok in (tokens["reader"], tokens["editor"]):
            assert bearer(server, "GET", settings, tok)[0] == 403
            assert bearer(server, "PUT", settings, tok, b'{"step_ms": 5000}',
                          {"Content-Type": "application/json"})[0] == 403
        st, body = bearer(server, "PUT", settings, admin, b'{"step_ms": 5000}', {"Content-Type": "application/json"})
        assert st == 200 and body["step_ms"] == 5000, body
        hist = bearer(server, "GET", BASE + "/history", admin)[1]["history"]
        me = bearer(server, "GET", "/api/v1/auth/me", admin)[1]
        admin_id = json.dumps(me)
        assert hist[0]["action"] == "settings" and hist[0]["actor"] in admin_id, (hist, me)
        assert hist[1]["action"] == "regenerate" and hist[1]["actor"] == "token:" + tokens["editor_id"], hist
    finally:
        server.stop()
