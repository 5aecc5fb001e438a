"""server/http/openapi.json checked against real answers: a real
ember-server (--auth local, data ingested by hand) is called on every route
of server/http/routes.c, and each answer, success and error, is validated
(jsonschema from build/pydeps) against the schema the document gives for
its status and content type. A route missing from the document (or a
documented path no route serves), a status or content type the document
does not list, an answer that fails its schema, or a route that no call
below reached fails the test. Objects in the document are read as closed
(a field the schema does not name fails) unless the schema says
additionalProperties itself; "nullable" is read as OpenAPI 3.0 means it.
Each JSON request the server accepts, and each request example of the
document, is validated against its request schema too, and a wrong answer
is shown to be refused (the validator is not idle)."""

import copy
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

import pytest

from ember_batch import Batch, zstd_compress
from harness import BUILD, DEFAULT_PROJECT, ROOT, Server, http
from metrics_batch import encode_raw as metrics_batch
import test_otlp

OPENAPI = os.path.join(ROOT, "server", "http", "openapi.json")
ROUTES = os.path.join(ROOT, "server", "http", "routes.c")
ADMIN = "admin@example.com"
PASSWORD = "correct horse battery staple"
WIDE = {"start_ts": 946684800000, "end_ts": 4102444800000}


def jsonschema_modules():
    for name in [m for m in sys.modules if m.split(".")[0] in ("attr", "attrs")]:
        if "/dist-packages/" in (getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]  # jsonschema needs build/pydeps' attrs, not Debian's
    sys.path.insert(0, os.path.join(BUILD, "pydeps"))
    import jsonschema
    import referencing
    import referencing.jsonschema
    return jsonschema, referencing


def as_json_schema(node):
    """OpenAPI 3.0's schema dialect as JSON Schema (draft 4): nullable
    becomes a "null" type, and an object schema that names its properties
    is closed unless it says additionalProperties itself."""
    if isinstance(node, list):
        return [as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) for k, v in node.items() if k not in ("nullable", "example")}
    if node.get("nullable"):
        if "type" in out:
            t = out["type"]
            out["type"] = (t if isinstance(t, list) else [t]) + ["null"]
        if "enum" in out:
            out["enum"] = out["enum"] + [None]
        if "$ref" in out or "oneOf" in out or "allOf" in out:
            out = {"anyOf": [{k: v for k, v in out.items()}, {"type": "null"}]}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


class Document:
    URI = "urn:ember:openapi"

    def __init__(self):
        self.jsonschema, referencing = jsonschema_modules()
        with open(OPENAPI) as f:
            self.raw = json.load(f)
        self.doc = as_json_schema(self.raw)
        resource = referencing.Resource.from_contents(
            self.doc, default_specification=referencing.jsonschema.DRAFT4)
        self.registry = referencing.Registry().with_resource(self.URI, resource)
        self.checked = {}  # (METHOD, route pattern) -> [status, ...]

    def pointer(self, ref):
        node = self.doc
        for part in ref.lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            node = self.pointer(node["$ref"])
        return node

    def validator(self, pointer):
        """A validator for the schema at pointer, its $refs resolved in the
        document."""
        return self.jsonschema.Draft4Validator({"$ref": self.URI + "#" + pointer},
                                               registry=self.registry)

    def operation(self, method, path):
        """(document path, operation) for a concrete request path."""
        paths = self.doc["paths"]
        exact = [p for p in paths if p == path]
        templated = [p for p in paths if re.fullmatch(template_regex(p), path)]
        for p in exact + templated:
            if method.lower() in paths[p]:
                return p, paths[p][method.lower()]
        raise AssertionError(f"{method} {path}: not in openapi.json")

    def check_request(self, method, path, body):
        """Validates a JSON request body the server accepted against the
        request schema of its operation."""
        dpath, op = self.operation(method, path)
        content = (op.get("requestBody") or {}).get("content", {})
        if "application/json" not in content or "schema" not in content["application/json"]:
            return
        ptr = "/paths/{}/{}/requestBody/content/application~1json/schema".format(
            dpath.replace("~", "~0").replace("/", "~1"), method.lower())
        errors = list(self.validator(ptr).iter_errors(body))
        assert not errors, (method, dpath, "request", [e.message for e in errors], body)

    def check(self, method, path, status, ctype, body, route=None):
        """Validates one real answer; returns its JSON (or bytes)."""
        dpath, op = self.operation(method, path)
        responses = op.get("responses", {})
        key = str(status)
        assert key in responses, f"{method} {dpath}: answered {status}, not documented ({list(responses)})"
        resp = self.deref(responses[key])
        media = (ctype or "").split(";")[0].strip()
        content = {k.split(";")[0].strip(): k for k in resp.get("content", {})}
        self.checked.setdefault((method, route or dpath), []).append(status)
        if status == 204 or (not body and not content):
            assert not body, f"{method} {dpath} {status}: a body the document does not list"
            return None
        assert media in content, f"{method} {dpath} {status}: {media} not documented ({list(content)})"
        if media != "application/json":
            return body
        where = self.deref(responses[key])["content"][content[media]]
        assert "schema" in where, f"{method} {dpath} {status}: no schema for JSON"
        ptr = "/paths/{}/{}/responses/{}".format(dpath.replace("~", "~0").replace("/", "~1"),
                                                method.lower(), key)
        if "$ref" in responses[key]:  # a shared response: validate at its own place
            ptr = responses[key]["$ref"].lstrip("#")
        ptr += "/content/" + content[media].replace("~", "~0").replace("/", "~1") + "/schema"
        doc = json.loads(body)
        errors = sorted(self.validator(ptr).iter_errors(doc), key=lambda e: list(e.path))
        assert not errors, "{} {} {}: {}\n{}".format(
            method, dpath, status, "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:8]),
            json.dumps(doc)[:2000])
        return doc


def template_regex(pattern):
    return "".join("[^/]+" if part.startswith("{") else re.escape(part)
                   for part in re.split(r"(\{[^}]+\})", pattern))


def route_table():
    with open(ROUTES) as f:
        src = f.read()
    return [(m, p) for m, p in re.findall(r'\{\s*"(GET|POST|PUT|DELETE)",\s*"([^"]+)"', src)
            if p != "*"]


class Client:
    """Calls the server and validates every answer against the document."""

    def __init__(self, server, doc):
        self.server = server
        self.doc = doc
        self.token = None

    def call(self, method, path, body=None, headers=None, token=True, route=None,
             query="", expect=None):
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        if token and self.token:
            h["Authorization"] = "Bearer " + self.token
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(self.server.url + path + query, data=data, method=method,
                                     headers=h)
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(req, timeout=60) as r:
                status, ctype, raw, hd = r.status, r.headers.get("Content-Type"), r.read(), r.headers
        except urllib.error.HTTPError as e:
            status, ctype, raw, hd = e.code, e.headers.get("Content-Type"), e.read(), e.headers
        if expect is not None:
            assert status == expect, (method, path, status, raw[:500])
        if 200 <= status < 300 and body is not None and not isinstance(body, bytes):
            self.doc.check_request(method, path, body)
        doc = self.doc.check(method, path, status, ctype, raw, route)
        return status, doc, hd


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def q(path):
    return f"/public/api/v1/project/{DEFAULT_PROJECT}/{path}"


@pytest.fixture(scope="module")
def doc():
    return Document()


@pytest.fixture
def local(tmp_path):
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    srv = Server(tmp_path / "data", None, "--auth", "local", "--admin-email", ADMIN,
                 "--admin-password-file", str(pw), "--recs-step=1s", "--recs-min-share=0.1").start()
    yield srv
    srv.stop()


def ingest_profiles(c):
    now = int(time.time() * 1000)
    b = Batch(agent_instance="openapi", project="default")
    attrs = {"process.executable.name": "oa_app", "thread.name": "main", "host.name": "h1",
             "process.pid": "42"}
    for i in range(20):
        b.add(["main", "handle", "pcre2_compile_8"], attrs, value=40)
        b.add(["main", "handle", "parse"], attrs, value=10)
        b.add(["main", ("read", "kernel")], attrs, value=5)
        b.add(["main", "wait"], attrs, value=2_000_000, kind="off_cpu")
    raw = zstd_compress(b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 1000))
    zstd = {"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"}
    st, ans, _ = c.call("POST", "/ingest/v1/batch", raw, zstd, expect=200)
    assert ans["stored"] is True
    # the same again: a duplicate, also 200
    st, ans, _ = c.call("POST", "/ingest/v1/batch", raw, zstd, expect=200)
    assert ans["duplicate"] is True
    c.call("POST", "/ingest/v1/batch", zstd_compress(b"\xff not protobuf"), zstd, expect=400)
    c.call("POST", "/ingest/v1/batch", raw, {"Content-Type": "application/x-protobuf"}, expect=415)
    # OTLP, in JSON (the protobuf answer is not JSON: its content type is checked)
    from google.protobuf import json_format
    req = test_otlp.build_request("oa_otlp")
    c.call("POST", "/v1development/profiles", json_format.MessageToJson(req).encode(),
           {"Content-Type": "application/json"}, query="?project=default", expect=200)
    c.call("POST", "/v1development/profiles", req.SerializeToString(),
           {"Content-Type": "application/x-protobuf"}, query="?project=default", expect=200)
    c.call("POST", "/v1development/profiles", b"{", {"Content-Type": "application/json"},
           query="?project=default", expect=400)
    # host metrics
    strings = ["", "test.metric", "cores", "host.name", "a", "b", "process.pid", "1", "2"]
    raw = metrics_batch(strings, [4, 4], [3, 4, 6, 7, 3, 5, 6, 8], [1, 1], [2, 2], [0, 1],
                        [0, 1, 0, 1], [now - 500, now - 500, now - 200, now - 200],
                        [1.0, 3.0, 2.0, 5.0])
    c.call("POST", "/ingest/v1/metrics", zstd_compress(raw),
           {"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"}, expect=200)
    c.call("POST", "/ingest/v1/metrics", zstd_compress(b"\xff\xff\xff not protobuf"), zstd,
           expect=400)
    # the agent's session protocol: a batch of no session it opened is
    # refused with {"error", "resync"}
    c.call("POST", "/ingest/v2/batch", zstd_compress(b"\xff not protobuf"), zstd)
    # symbols
    fid = "cd" * 16
    c.call("POST", "/ingest/v1/symbols/missing", {"file_ids": [fid]}, expect=200)
    c.call("POST", "/ingest/v1/symbols/missing", b"[]", expect=400)
    import struct
    strtab = b"\x00do_work\x00"
    symfile = (b"EMSYM002" + struct.pack("<IIIIQIIQ", 1, 2, 1, len(strtab), 0x1000, 0, 0, 0) +
               struct.pack("<QQQ", 0x1000, 0x1000, 0x1000) +
               struct.pack("<IIII", 0, 1, 0x100, 0) +
               struct.pack("<IIII", 1, 0xffffffff, 0, 0) + strtab)
    c.call("PUT", "/ingest/v1/symbols/" + fid, symfile, {"Content-Type": "application/octet-stream"},
           query="?name=libw.so", expect=201)
    c.call("PUT", "/ingest/v1/symbols/" + fid, symfile, {"Content-Type": "application/octet-stream"},
           expect=200)
    c.call("PUT", "/ingest/v1/symbols/xyz", symfile, {"Content-Type": "application/octet-stream"},
           expect=400)
    # cubins (PC sampling's SASS names)
    with open(os.path.join(ROOT, "tests", "data", "sass", "pc_kernels_sm90.cubin"), "rb") as f:
        cubin = f.read()
    c.call("PUT", "/ingest/v1/cubins/00000000c0b1c0b1", cubin, {"Content-Type": "application/octet-stream"},
           expect=201)
    c.call("PUT", "/ingest/v1/cubins/00000000c0b1c0b1", cubin, {"Content-Type": "application/octet-stream"},
           expect=200)
    c.call("PUT", "/ingest/v1/cubins/00000000c0b1c0b1", b"\x7fELF not a cubin", {"Content-Type": "application/octet-stream"},
           expect=400)
    c.call("PUT", "/ingest/v1/cubins/xyz", cubin, {"Content-Type": "application/octet-stream"}, expect=400)
    return now


def test_the_document_and_the_route_table_agree(doc):
    """Each route of routes.c (but the UI's files) is in the document, and
    each documented operation is served by a route."""
    routes = route_table()
    doc_ops = [(m.upper(), p) for p, ops in doc.raw["paths"].items() for m in ops
               if m in ("get", "post", "put", "delete")]
    for m, p in routes:
        assert (m, p) in doc_ops, f"{m} {p}: not in openapi.json"
    for dm, dp in doc_ops:
        assert any(m == dm and (p == dp or re.fullmatch(template_regex(p), dp)) for m, p in routes), \
            f"{dm} {dp}: in openapi.json but no route serves it"


def test_every_route_answers_as_documented(local, doc):
    routes = route_table()
    c = Client(local, doc)
    # --- health, signing in -------------------------------------------------
    c.call("GET", "/healthz", expect=200)
    c.call("GET", "/api/v1/auth/config", expect=200)
    c.call("GET", "/api/v1/auth/me", expect=401)
    c.call("GET", "/public/api/v1/projects", expect=401)
    c.call("POST", "/api/v1/auth/login", {"email": ADMIN, "password": "wrong"}, expect=401)
    c.call("POST", "/api/v1/auth/login", b"{", expect=400)
    st, login, hd = c.call("POST", "/api/v1/auth/login", {"email": ADMIN, "password": PASSWORD},
                           expect=200)
    cookies = "; ".join(h.split(";")[0] for h in hd.get_all("Set-Cookie"))
    csrf = re.search(r"ember_csrf=([^;]+)", cookies).group(1)
    c.token = login["access_token"]
    c.call("GET", "/api/v1/auth/me", expect=200)
    c.call("POST", "/api/v1/auth/refresh", b"", {"Cookie": cookies, "X-Ember-CSRF": csrf},
           token=False, expect=200)
    c.call("POST", "/api/v1/auth/refresh", b"", token=False, expect=401)
    c.call("GET", "/api/v1/oauth2/login", token=False)
    c.call("GET", "/api/v1/oauth2/callback", token=False, query="?code=x&state=y")
    c.call("GET", "/metrics", expect=200)

    # --- service tokens, users, roles, audit ------------------------------
    st, tok, _ = c.call("POST", "/public/api/v1/service-tokens",
                        {"name": "openapi", "scopes": ["**:*"]}, expect=201)
    c.call("POST", "/public/api/v1/service-tokens", {"name": ""}, expect=400)
    c.call("GET", "/public/api/v1/service-tokens", expect=200)
    c.call("GET", "/public/api/v1/service-tokens", token=False, expect=401)
    st, role, _ = c.call("POST", "/public/api/v1/roles",
                         {"name": "oa-reader", "patterns": ["project:read"]}, expect=201)
    c.call("POST", "/public/api/v1/roles", {"name": "x"}, expect=400)
    c.call("GET", "/public/api/v1/roles", expect=200)
    c.call("PUT", f"/public/api/v1/roles/{role['id']}",
           {"name": "oa-reader", "patterns": ["project:read", "project:update"]}, expect=200)
    st, user, _ = c.call("POST", "/public/api/v1/users",
                         {"email": "reader@example.com", "password": "a long enough password",
                          "given_name": "Reader"}, expect=201)
    c.call("POST", "/public/api/v1/users", {"email": "bad"}, expect=400)
    c.call("GET", "/public/api/v1/users", expect=200)
    c.call("PUT", f"/public/api/v1/users/{user['id']}/roles", {"roles": ["oa-reader"]}, expect=200)
    c.call("PUT", f"/public/api/v1/users/{user['id']}/roles", {"roles": 5}, expect=400)
    c.call("DELETE", f"/public/api/v1/roles/{role['id']}", expect=200)
    c.call("DELETE", f"/public/api/v1/service-tokens/{tok['id']}", expect=200)
    c.call("GET", "/public/api/v1/audit", query="?limit=50", expect=200)

    # --- ingest -------------------------------------------------------------
    now = ingest_profiles(c)

    # --- queries --------------------------------------------------------------
    c.call("GET", "/public/api/v1/projects", expect=200)
    fq = {"filter": dict(WIDE, event_kind="on_cpu"), "synthetic_frames": ["executable"]}
    st, fg, _ = c.call("POST", q("flamegraph/json"), fq, expect=200)
    assert fg["total"] > 0
    for fmt in ("pprof", "folded", "speedscope"):
        c.call("POST", q("flamegraph/" + fmt), fq, expect=200)
    c.call("POST", q("flamegraph/json"), {"filter": {"start_ts": 5, "end_ts": 1}}, expect=400)
    c.call("POST", "/public/api/v1/project/123e4567-e89b-12d3-a456-426614174000/flamegraph/json",
           fq, expect=404)
    c.call("POST", q("flamegraph/json"), fq, token=False, expect=401)
    for kind in ("on_cpu", "off_cpu"):
        f = {"filter": dict(WIDE, event_kind=kind)}
        st, tf, _ = c.call("POST", q("top_functions"), dict(f, limit=5), expect=200)
        assert tf["functions"]
        c.call("POST", q("sandwich"), dict(f, function="handle"), expect=200)
        c.call("POST", q("diff"), {"baseline": dict(WIDE, event_kind=kind, end_ts=now - 30_000),
                                   "comparison": dict(WIDE, event_kind=kind)}, expect=200)
        c.call("POST", q("top_entities"), dict(f, entity="executable"), expect=200)
        c.call("POST", q("labels"), dict(f), expect=200)
        c.call("POST", q("labels"), dict(f, name="host.name"), expect=200)
        c.call("POST", q("timeseries"), dict(f, group_by="process.executable.name",
                                             num_buckets=10), expect=200)
        c.call("POST", q("events"), dict(f, limit=5), expect=200)
    st, tl, _ = c.call("POST", q("gpu/timeline"), {"filter": WIDE, "limit": 10}, expect=200)
    assert tl["spans"] == [] and tl["truncated"] is False  # no CUDA agent here
    c.call("POST", q("gpu/timeline"), {"filter": dict(WIDE, query="host.name ==")}, expect=400)
    c.call("POST", q("sandwich"), {"filter": WIDE}, expect=400)
    c.call("POST", q("top_functions"), b"{not json", expect=400)
    mf = {"filter": {"start_ts": now - 1000, "end_ts": now}}
    c.call("POST", q("metrics"), dict(mf, metric="test.metric", group_by="host.name"), expect=200)
    c.call("POST", q("metrics"), dict(mf, metric="no.such.metric"), expect=404)
    c.call("POST", q("metrics/names"), mf, expect=200)
    c.call("POST", q("metrics/names"), {"filter": {"start_ts": 5}}, expect=400)
    c.call("POST", q("metrics"), dict(mf, metric="test.metric", percentiles=True), expect=200)
    c.call("POST", q("gpu/topology"), mf, expect=200)
    c.call("POST", q("gpu/topology"), dict(mf, host="no-such-host"), expect=404)
    c.call("POST", q("gpu/topology"), {"filter": {"start_ts": 5}}, expect=400)

    # --- recommendations ------------------------------------------------------
    deadline, rs = time.monotonic() + 20, []
    while time.monotonic() < deadline and not rs:
        st, recs, _ = c.call("GET", q("recommendations"), query="?kind=cpu", expect=200)
        rs = recs["recommendations"]
        time.sleep(0.5)
    assert rs, "no recommendation for the planted pcre2_compile"
    c.call("GET", q("recommendations"), query="?kind=gpu", expect=400)
    c.call("POST", q(f"recommendations/{rs[0]['id']}/state"), {"state": "dismissed"}, expect=200)
    c.call("POST", q("recommendations/0123456789abcdef/state"), {"state": "gone"}, expect=400)
    c.call("GET", q("recommendations"), query="?kind=all", expect=200)
    st, gen, _ = c.call("POST", q("recommendations/regenerate"), expect=200)
    c.call("POST", q("recommendations/refresh"), expect=200)
    tid = next(t["id"] for r in gen["recommendations"] for t in r["technical"]["hot_traces"])
    c.call("POST", q(f"recommendations/hot-traces/{tid}/suppress"), expect=200)
    c.call("POST", q("recommendations/hot-traces/zz/suppress"), expect=400)
    c.call("GET", q("recommendations/suppressed"), expect=200)
    c.call("DELETE", q(f"recommendations/hot-traces/{tid}/suppress"), expect=200)
    c.call("DELETE", q(f"recommendations/hot-traces/{tid}/suppress"), expect=404)
    c.call("GET", q("recommendations/history"), query="?limit=10", expect=200)
    for _ in range(50):  # the inventory is written within a second
        st, agents, _ = c.call("GET", "/public/api/v1/agents", expect=200)
        if agents["total"]:
            break
        time.sleep(0.1)
    assert agents["total"] >= 1 and agents["agents"][0]["reporting"], agents
    st, csv, hd = c.call("GET", "/public/api/v1/agents", query="?format=csv", expect=200)
    assert hd["Content-Type"].startswith("text/csv"), hd["Content-Type"]
    c.call("GET", "/public/api/v1/agents", query="?format=xml", expect=400)
    settings = "/public/api/v1/settings/recommendations"
    c.call("GET", settings, expect=200)
    c.call("PUT", settings, {"cost_per_core_hour": 0.05}, expect=200)
    c.call("PUT", settings, {"min_share": 5}, expect=400)
    c.call("PUT", settings, {"cost_per_core_hour": None}, expect=200)
    # The assistant: this server has no LLM (tests/integration/test_llm.py has one).
    c.call("GET", "/public/api/v1/assistant/config", expect=200)
    c.call("POST", q("assistant"), {"messages": [{"role": "user", "content": "hi"}]}, expect=503)
    c.call("GET", "/public/api/v1/settings/llm", expect=200)
    c.call("PUT", "/public/api/v1/settings/llm", {"model_examine": "m"}, expect=409)

    # --- MCP --------------------------------------------------------------------
    st, init, hd = c.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                            "params": {"protocolVersion": "2025-06-18",
                                                       "capabilities": {},
                                                       "clientInfo": {"name": "t", "version": "1"}}},
                          {"Accept": "application/json, text/event-stream"}, expect=200)
    sid = hd["Mcp-Session-Id"]
    c.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
           {"Accept": "application/json, text/event-stream", "Mcp-Session-Id": sid}, expect=200)
    c.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
           {"Accept": "application/json, text/event-stream"}, expect=400)
    c.call("GET", "/mcp", headers={"Mcp-Session-Id": sid}, expect=405)
    c.call("DELETE", "/mcp", headers={"Mcp-Session-Id": sid}, expect=204)
    c.call("DELETE", "/mcp", headers={"Mcp-Session-Id": sid}, expect=404)

    c.call("POST", "/api/v1/auth/logout", b"", {"Cookie": cookies, "X-Ember-CSRF": csrf},
           token=False, expect=200)

    # Every route was reached, and at least one error answer was validated
    # for most of them.
    reached = {(m, p) for (m, p) in doc.checked}
    for m, p in routes:
        assert any(m == cm and (cp == p or re.fullmatch(template_regex(p), cp))
                   for cm, cp in reached), f"{m} {p}: no answer was checked"


def test_request_examples_match_their_schemas(doc):
    """Every request example in the document validates against the
    request schema beside it."""
    n = 0
    for path, ops in doc.raw["paths"].items():
        for method, op in ops.items():
            content = (op.get("requestBody") or {}).get("content", {}).get("application/json")
            if not content or "example" not in content:
                continue
            ptr = "/paths/{}/{}/requestBody/content/application~1json/schema".format(
                path.replace("~", "~0").replace("/", "~1"), method)
            errors = list(doc.validator(ptr).iter_errors(content["example"]))
            assert not errors, (method, path, [e.message for e in errors])
            n += 1
    assert n >= 10


def test_a_wrong_answer_is_refused(local, doc):
    """The validator is not idle: a real answer with a field of the wrong
    type, one missing or one the document does not name fails."""
    c = Client(local, doc)
    st, login, _ = c.call("POST", "/api/v1/auth/login", {"email": ADMIN, "password": PASSWORD},
                          expect=200)
    c.token = login["access_token"]
    st, fg, _ = c.call("POST", q("flamegraph/json"), {"filter": WIDE}, expect=200)
    st, projects, _ = c.call("GET", "/public/api/v1/projects", expect=200)
    good = json.dumps(projects).encode()
    doc.check("GET", "/public/api/v1/projects", 200, "application/json", good)
    for mutate in (lambda d: d["projects"][0].__setitem__("id", 5),
                   lambda d: d["projects"][0].pop("name"),
                   lambda d: d.__setitem__("surprise", True),
                   lambda d: d.pop("projects")):
        bad = copy.deepcopy(projects)
        mutate(bad)
        with pytest.raises(AssertionError):
            doc.check("GET", "/public/api/v1/projects", 200, "application/json",
                      json.dumps(bad).encode())
    bad = copy.deepcopy(fg)
    bad["total"] = "many"
    with pytest.raises(AssertionError):
        doc.check("POST", q("flamegraph/json"), 200, "application/json", json.dumps(bad).encode())
    # an undocumented status and an undocumented content type fail too
    with pytest.raises(AssertionError):
        doc.check("GET", "/public/api/v1/projects", 418, "application/json", good)
    with pytest.raises(AssertionError):
        doc.check("GET", "/public/api/v1/projects", 200, "text/html", b"<p>")
