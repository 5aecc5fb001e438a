"""The MCP server at /mcp (server/http/mcp.h, docs/mcp.md): PyPI's MCP SDK
client (scripts/install-test-pydeps.sh installs it into build/pydeps)
connects over Streamable HTTP, lists the tools, calls each against data
ingested here over OTLP and checks the answers against their output
schemas (the SDK validates structuredContent) and against the REST API's
numbers; the protocol's details with raw HTTP; credentials with
--auth local and service tokens."""

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request

from harness import DEFAULT_PROJECT, ROOT, Server, http

sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))
sys.path.insert(0, os.path.dirname(__file__))

import test_otlp  # noqa: E402
from test_auth import ADMIN, PASSWORD, Session, bearer  # noqa: E402

EXE = "mcp_app"
FILTER = f'process.executable.name == "{EXE}"'
TOOLS = {"list_projects", "top_entities", "top_functions", "flamegraph", "sandwich", "diff",
         "timeseries", "events", "gpu_kernels", "gpu_flamegraph", "gpu_metrics"}


def ingest(server, token=None, project=None, exe=EXE):
    h = {"Content-Type": "application/x-protobuf"}
    if token:
        h["Authorization"] = "Bearer " + token
    q = f"?project={project}" if project else ""
    st, body = http("POST", f"{server.url}/v1development/profiles{q}",
                    test_otlp.build_request(exe=exe).SerializeToString(), h)
    assert st == 200, body


def rest(server, name, body, project=DEFAULT_PROJECT, token=None):
    st, ans = bearer(server, "POST", f"/public/api/v1/project/{project}/{name}", token, body)
    assert st == 200, ans
    return ans


def post(server, body, session=None, headers=None, raw=False):
    """POST /mcp: (status, headers, parsed JSON or None)."""
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        h["Mcp-Session-Id"] = session
    h.update(headers or {})
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(server.url + "/mcp", data=data, method="POST", headers=h)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            st, hd, out = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        st, hd, out = e.code, e.headers, e.read()
    return st, hd, (json.loads(out) if out else None)


def initialize(server, version="2025-06-18", headers=None):
    st, hd, ans = post(server, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                "params": {"protocolVersion": version, "capabilities": {},
                                           "clientInfo": {"name": "t", "version": "1"}}},
                       headers=headers)
    assert st == 200, ans
    return hd["Mcp-Session-Id"], ans["result"]


def call(server, sid, name, args, headers=None, rid=2):
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                               "params": {"name": name, "arguments": args}}, sid, headers)
    assert st == 200, ans
    return ans


def use_pydeps_attrs():
    """The SDK's jsonschema needs attrs newer than Debian's, which the
    system pytest has already imported: forget that copy so build/pydeps'
    is the one the SDK gets (pytest keeps the classes it holds)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("attr", "attrs")]:
        if "/dist-packages/" in (getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]


async def sdk_session(url, fn, token=None):
    use_pydeps_attrs()
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": "Bearer " + token} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as client:
        async with streamable_http_client(url + "/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                init = await s.initialize()
                return init, await fn(s)


def test_sdk_client_calls_every_tool(server):
    ingest(server)
    ingest(server, exe="mcp_other")
    window = {"range": "1h", "filter": FILTER}

    async def run(s):
        out = {}
        tools = (await s.list_tools()).tools
        out["tools"] = {t.name: t for t in tools}
        args = {
            "list_projects": {},
            "top_entities": {"entity": "executables", "range": "1h"},
            "top_functions": {**window, "limit": 5},
            "flamegraph": {**window, "min_percent": 2},
            "sandwich": {**window, "function": "main"},
            "diff": {**window, "range": "30m"},
            "timeseries": {**window, "num_buckets": 12},
            "events": {**window, "limit": 3},
            "gpu_kernels": window,
            "gpu_flamegraph": window,
            "gpu_metrics": window,
        }
        for name, a in args.items():
            # call_tool validates structuredContent against the tool's
            # outputSchema and raises when it does not conform.
            out[name] = await s.call_tool(name, a)
        out["resources"] = (await s.list_resources()).resources
        out["templates"] = (await s.list_resource_templates()).resource_templates
        out["read"] = await s.read_resource("ember://projects/default/executables")
        out["bad"] = await s.call_tool("top_functions", {"filter": "process.pid >"})
        return out

    init, out = asyncio.run(sdk_session(server.url, run))
    assert init.protocol_version in ("2025-11-25", "2025-06-18", "2025-03-26")
    assert init.server_info.name == "ember"
    assert set(out["tools"]) == TOOLS
    for name, t in out["tools"].items():
        assert t.input_schema["type"] == "object" and t.output_schema, name
        assert t.description, name
    for name in TOOLS:
        r = out[name]
        assert not r.is_error, (name, r.content[0].text)
        assert r.content[0].type == "text" and len(r.content[0].text) <= 8000, name
        assert r.structured_content is not None, name

    # The numbers are the REST API's.
    f = {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "on_cpu",
         "query": FILTER}
    projects = {p["name"] for p in out["list_projects"].structured_content["projects"]}
    assert "default" in projects
    ents = {e["name"]: e for e in out["top_entities"].structured_content["entities"]}
    rest_ents = {e["name"]: e for e in rest(server, "top_entities",
                                            {"filter": {**f, "query": None},
                                             "entity": "executable"})["entities"]}
    assert ents[EXE]["total"] == rest_ents[EXE]["total"] == 100
    assert ents["mcp_other"]["total"] == 100
    assert EXE in out["top_entities"].content[0].text

    top = out["top_functions"].structured_content["functions"]
    rest_top = rest(server, "top_functions", {"filter": f, "limit": 5})["functions"]
    assert [(x["name"], x["self"]) for x in top] == [(x["name"], x["self"]) for x in rest_top]
    assert top[0]["name"] == "work_a" and top[0]["self"] == 60
    assert "work_a" in out["top_functions"].content[0].text

    fg = out["flamegraph"].structured_content
    assert fg["total"] == server.flamegraph(FILTER)["total"] == 100
    nodes = {n["name"]: n for n in fg["nodes"]}
    assert nodes["main"]["total_percent"] == 100 and nodes["work_a"]["self_percent"] == 60
    assert nodes["work_b"]["depth"] == nodes["main"]["depth"] + 1
    text = out["flamegraph"].content[0].text
    lines = text.splitlines()
    # A chain of calls that passes all the time on is one line.
    assert "100.0% (self 0.0%) root > main [app.py]" in lines, text
    assert " 60.0% (self 60.0%) work_a [app.py]" in lines, text
    assert " 30.0% (self 30.0%) work_b > helper_inlined [app.py]" in lines, text

    sw = out["sandwich"].structured_content
    assert sw["function"]["total"] == 100
    assert {n["name"] for n in sw["callees"]} >= {"main", "work_a", "work_b"}

    diff = out["diff"].structured_content
    assert diff["baseline_end_ts"] == diff["start_ts"]
    assert {x["status"] for x in diff["functions"]} == {"new"}

    ts = out["timeseries"].structured_content
    assert sum(s["total"] for s in ts["series"]) == 100 and len(ts["series"][0]["values"]) == 12

    ev = out["events"].structured_content["events"]
    assert 0 < len(ev) <= 3 and all(e["labels"]["process.executable.name"] == EXE for e in ev)

    assert out["gpu_kernels"].structured_content["functions"] == []
    assert "No GPU work" in out["gpu_kernels"].content[0].text
    assert out["gpu_flamegraph"].structured_content["total"] == 0
    assert out["gpu_metrics"].structured_content["metrics"] == []

    uris = {r.uri for r in out["resources"]}
    assert "ember://projects/default/hosts" in {str(u) for u in uris}
    assert out["templates"][0].uri_template == "ember://projects/{project}/{entity}"
    read = json.loads(out["read"].contents[0].text)
    assert {e["name"] for e in read["entities"]} >= {EXE, "mcp_other"}

    # A CEL error is a tool error naming the argument.
    assert out["bad"].is_error and out["bad"].content[0].text.startswith("filter:")


def test_flamegraph_output_is_bounded(server):
    for i in range(6):
        ingest(server, exe=f"{EXE}_{i}")
    sid, _ = initialize(server)
    args = {"filter": f'process.executable.name.startsWith("{EXE}_")', "min_percent": 0,
            "group_by": ["executable", "thread"]}
    small = call(server, sid, "flamegraph", {**args, "max_chars": 500})["result"]
    text = small["content"][0]["text"]
    assert len(text) <= 500 + 200, text  # the "left out" line may follow
    assert "more nodes left out" in text.splitlines()[-1]
    big = call(server, sid, "flamegraph", args)["result"]
    assert len(big["content"][0]["text"]) > 1000
    assert big["structuredContent"]["truncated"] is False
    assert len(big["structuredContent"]["nodes"]) > len(small["structuredContent"]["nodes"])
    assert small["structuredContent"]["truncated"] is True
    # max_depth counts lines of the text tree.
    shallow = call(server, sid, "flamegraph", {**args, "max_depth": 1})["result"]
    assert {n["name"] for n in shallow["structuredContent"]["nodes"]} == \
        {"root"} | {f"{EXE}_{i}" for i in range(6)}
    # min_percent culls: at 50% only root and main remain (one line: root > main).
    half = call(server, sid, "flamegraph", {"filter": f'process.executable.name == "{EXE}_0"',
                                            "min_percent": 50})["result"]
    assert [n["name"] for n in half["structuredContent"]["nodes"]] == ["root", "main", "work_a"]


def test_protocol_conformance(server):
    # initialize: the client's version when supported, else the latest.
    sid, res = initialize(server, "2025-03-26")
    assert res["protocolVersion"] == "2025-03-26" and len(sid) == 32
    assert res["capabilities"]["tools"] == {"listChanged": False}
    _, res2 = initialize(server, "1999-01-01")
    assert res2["protocolVersion"] == "2025-11-25"
    # A notification: 202, no body.
    st, _, body = post(server, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    assert st == 202 and body is None
    # ping
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": "p", "method": "ping"}, sid)
    assert st == 200 and ans == {"jsonrpc": "2.0", "id": "p", "result": {}}
    # Session ids: required after initialize (400), unknown (404).
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert st == 400 and "Mcp-Session-Id" in ans["error"]["message"]
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, "0" * 32)
    assert st == 404, ans
    # Bad JSON, invalid request, unknown method.
    st, _, ans = post(server, b"{not json", sid, raw=True)
    assert st == 400 and ans["error"]["code"] == -32700 and ans["id"] is None
    st, _, ans = post(server, {"jsonrpc": "1.0", "id": 4, "method": "ping"}, sid)
    assert st == 400 and ans["error"]["code"] == -32600
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 5}, sid)
    assert st == 400 and ans["error"]["code"] == -32600
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 6, "method": "no/such"}, sid)
    assert st == 200 and ans["error"]["code"] == -32601 and ans["id"] == 6
    # A batch: answers for its requests only.
    st, _, ans = post(server, [{"jsonrpc": "2.0", "id": 7, "method": "ping"},
                               {"jsonrpc": "2.0", "method": "notifications/cancelled"},
                               {"jsonrpc": "2.0", "id": 8, "method": "nope"}], sid)
    assert st == 200 and [a["id"] for a in ans] == [7, 8]
    # An unknown tool, unknown and oversized arguments.
    ans = call(server, sid, "no_such_tool", {})
    assert ans["error"]["code"] == -32602 and "Unknown tool" in ans["error"]["message"]
    ans = call(server, sid, "top_functions", {"limit": 5, "colour": "red"})["result"]
    assert ans["isError"] and ans["content"][0]["text"].startswith("colour: not an argument")
    ans = call(server, sid, "top_functions", {"limit": 0})["result"]
    assert ans["isError"] and ans["content"][0]["text"].startswith("limit:")
    ans = call(server, sid, "top_functions", {"project": "nope"})["result"]
    assert ans["isError"] and "list_projects" in ans["content"][0]["text"]
    ans = call(server, sid, "top_functions", {"filter": "x" * 20000})
    assert ans["error"]["code"] == -32602 and "arguments" in ans["error"]["message"]
    st, _, _ = post(server, b"[" + b" " * (300 * 1024) + b"]", sid, raw=True)
    assert st == 413
    # Protocol version header: an unsupported one is a 400.
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, sid,
                      {"MCP-Protocol-Version": "1999-01-01"})
    assert st == 400
    # Host and Origin allowlist (DNS rebinding).
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, sid,
                      {"Host": "evil.example:80"})
    assert st == 403 and "mcp-allowed-hosts" in ans["error"]
    st, _, ans = post(server, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, sid,
                      {"Origin": "http://evil.example"})
    assert st == 403
    st, _, _ = post(server, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, sid,
                    {"Host": "localhost:1", "Origin": "http://127.0.0.1:5"})
    assert st == 200
    # GET: no server stream (405); DELETE ends the session.
    st, _ = http("GET", server.url + "/mcp", None, {"Mcp-Session-Id": sid})
    assert st == 405
    st, _ = http("DELETE", server.url + "/mcp", None, {"Mcp-Session-Id": sid})
    assert st == 204
    st, _, _ = post(server, {"jsonrpc": "2.0", "id": 10, "method": "ping"}, sid)
    assert st == 404


def test_allowed_hosts_flag(tmp_path):
    srv = Server(tmp_path / "data", None, "--mcp-allowed-hosts", "ember.internal, other").start()
    try:
        for host, want in (("ember.internal:8080", 200), ("OTHER", 200), ("evil", 403)):
            st, _, _ = post(srv, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                  "params": {"protocolVersion": "2025-06-18"}},
                            headers={"Host": host})
            assert st == want, host
    finally:
        srv.stop()


def test_service_tokens(local):
    s = Session(local)
    admin = s.login(ADMIN, PASSWORD)[1]["access_token"]
    for name in ("alpha", "beta"):
        ingest(local, admin, name)
    st, body = bearer(local, "GET", "/public/api/v1/projects", admin)
    ids = {p["name"]: p["id"] for p in body["projects"]}
    st, tok = s.call("POST", "/public/api/v1/service-tokens",
                     {"name": "mcp", "scopes": ["project:read"], "project_ids": [ids["alpha"]]})
    assert st == 201, tok
    token = tok["token"]
    # No credential: 401, before anything else.
    st, _, ans = post(local, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                              "params": {"protocolVersion": "2025-06-18"}})
    assert st == 401, ans
    auth = {"Authorization": "Bearer " + token}
    sid, _ = initialize(local, headers=auth)
    # Its own project: the numbers; another: a tool error naming it.
    ans = call(local, sid, "top_entities", {"project": "alpha", "entity": "executable"}, auth)
    assert ans["result"]["structuredContent"]["entities"][0]["total"] == 100
    ans = call(local, sid, "top_functions", {"project": "beta"}, auth)["result"]
    assert ans["isError"] and "project:read" in ans["content"][0]["text"]
    assert "beta" in ans["content"][0]["text"]
    ans = call(local, sid, "list_projects", {}, auth)["result"]
    assert [p["name"] for p in ans["structuredContent"]["projects"]] == ["alpha"]
    # A session answers only the credential that opened it.
    st, _, _ = post(local, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, sid,
                    {"Authorization": "Bearer " + admin})
    assert st == 404

    # The SDK client with the token.
    async def run(sess):
        return await sess.call_tool("flamegraph", {"project": ids["alpha"], "filter": FILTER})

    _, fg = asyncio.run(sdk_session(local.url, run, token))
    assert not fg.is_error and fg.structured_content["total"] == 100


def test_gpu_tools_against_rest(server):
    """gpu_kernels, gpu_flamegraph and gpu_metrics over GPU data (the
    samples of test_gpu_queries), with an absolute time range."""
    import metrics_batch
    import test_gpu_queries as g
    from ember_batch import Batch, send_batch

    b = Batch(agent_instance="agent-gpu", host_cpus=16, sample_rate_hz=19)
    for frames, attrs, value in g.GPU_SAMPLES:
        b.add(frames, attrs, value=value, kind="cuda")
    assert send_batch(server.url, b.encode(sequence=1, start_ms=g.T0, end_ms=g.T0 + 10000))["stored"]
    m = metrics_batch.MetricsBatch()
    for idx, vals in ((0, [90.0, 70.0]), (1, [10.0, 30.0])):
        s = m.series("hw.gpu.utilization", "%", {"host.name": "gpu1", "gpu.index": str(idx)})
        m.point(s, g.T0 + 1000, vals[0])
        m.point(s, g.T0 + 61000, vals[1])
    metrics_batch.post(server.url, m)

    sid, _ = initialize(server)
    window = {"start": g.T0, "end": "1970-01-01T00:00:00Z"}
    ans = call(server, sid, "gpu_kernels", window)["result"]
    assert ans["isError"] and ans["content"][0]["text"] == "start: must be before end"
    import datetime
    end = datetime.datetime.fromtimestamp((g.T0 + g.HOUR) / 1000, datetime.timezone.utc)
    window = {"start": g.T0, "end": end.strftime("%Y-%m-%dT%H:%M:%SZ")}
    ans = call(server, sid, "gpu_kernels", {**window, "filter": 'process.executable.name == "trainer"'})
    sc = ans["result"]["structuredContent"]
    rest_k = rest(server, "top_functions", {"filter": g.flt('process.executable.name == "trainer"'),
                                            "frame_types": g.KERNEL_TYPES, "limit": 20})
    assert [(f["name"], f["self"]) for f in sc["functions"]] == \
        [(f["name"], f["self"]) for f in rest_k["functions"]]
    assert sc["functions"][0]["name"] == "sgemm_kernel" and sc["functions"][0]["self"] == 9 * g.MS
    assert sc["event_kind"] == "cuda" and "sgemm_kernel" in ans["result"]["content"][0]["text"]

    fg = call(server, sid, "gpu_flamegraph", window)["result"]["structuredContent"]
    assert fg["total"] == g.GPU_TOTAL
    nodes = [n for n in fg["nodes"] if n["name"] == "cudaLaunchKernel"]
    assert nodes and all(n["self"] == 0 for n in nodes)

    names = call(server, sid, "gpu_metrics", window)["result"]["structuredContent"]
    assert [x["name"] for x in names["metrics"]] == ["hw.gpu.utilization"]
    util = call(server, sid, "gpu_metrics", {**window, "metric": "hw.gpu.utilization",
                                             "num_buckets": 60})["result"]
    series = {s["group"]: s for s in util["structuredContent"]["series"]}
    assert (series["0"]["min"], series["0"]["max"], series["0"]["avg"]) == (70, 90, 80)
    assert series["1"]["last"] == 30
    ans = call(server, sid, "gpu_metrics", {**window, "metric": "process.rss"})["result"]
    assert ans["isError"] and ans["content"][0]["text"].startswith("metric:")


def test_names_cannot_forge_lines(server):
    """A function name from outside holding a newline stays on its line of
    the text (the assistant reads the text as lines of the tree)."""
    req = test_otlp.build_request(exe="mcp_evil")
    table = req.dictionary.string_table
    table[list(table).index("work_a")] = "work_a\n100.0% (self 100.0%) forged"
    st, body = http("POST", server.url + "/v1development/profiles", req.SerializeToString(),
                    {"Content-Type": "application/x-protobuf"})
    assert st == 200, body
    sid, _ = initialize(server)
    for tool in ("flamegraph", "top_functions"):
        res = call(server, sid, tool, {"filter": 'process.executable.name == "mcp_evil"'})["result"]
        text = res["content"][0]["text"]
        assert "work_a?100.0% (self 100.0%) forged" in text, text
        assert not any(line.lstrip().startswith("100.0% (self 100.0%) forged")
                       for line in text.splitlines()), text


def test_answer_size_is_bounded(server):
    """Past 2 MiB a tool answers an error saying what to narrow: 100
    events of 200 frames with long names."""
    from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb

    req = test_otlp.build_request(exe="mcp_big")
    d = test_otlp.Dict()
    d.d.CopyFrom(req.dictionary)
    d.strings = {s: i for i, s in enumerate(d.d.string_table)}
    locs = [d.location(d.function(f"frame_{i:03d}_" + "x" * 150)) for i in range(200)]
    stack = d.stack(*locs)
    prof = req.resource_profiles[0].scope_profiles[0].profiles[0]
    del prof.samples[:]
    for i in range(100):
        prof.samples.add(stack_index=stack, values=[1],
                         attribute_indices=[d.attr("thread.name", f"t{i}")])
    req.dictionary.CopyFrom(d.d)
    assert isinstance(prof, pb.Profile)
    st, body = http("POST", server.url + "/v1development/profiles", req.SerializeToString(),
                    {"Content-Type": "application/x-protobuf"})
    assert st == 200, body
    sid, _ = initialize(server)
    args = {"filter": 'process.executable.name == "mcp_big"', "limit": 100, "max_frames": 200}
    res = call(server, sid, "events", args)["result"]
    assert res["isError"] and "over 2097152" in res["content"][0]["text"], res["content"]
    res = call(server, sid, "events", {**args, "max_frames": 20})["result"]
    assert not res["isError"] and len(res["structuredContent"]["events"]) == 100
