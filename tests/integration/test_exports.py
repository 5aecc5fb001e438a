"""Flamegraph exports (POST /public/api/v1/project/{id}/flamegraph/{format}):
a known profile ingested, then exported as pprof (read back by Go's own
`go tool pprof`, its top functions checked against ember's top_functions),
folded stacks (every stack once, values summing to the flamegraph's total,
names that hold ';' or a newline escaped) and speedscope (checked against
the structure speedscope's published file-format schema requires), each
with its Content-Type and an attachment file name; the node limit bounds
every export as it bounds the JSON."""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from ember_batch import Batch, send_batch  # noqa: E402
from harness import BIN, BUILD, DEFAULT_PROJECT, walk  # noqa: E402

QUERY = 'process.executable.name == "export_app"'
BASE = f"/public/api/v1/project/{DEFAULT_PROJECT}"

# (stack outermost first, value): main's self 7, compute's self 4.
STACKS = [
    (["main", "compute", "leaf_a"], 50),
    (["main", "compute", "leaf_b"], 30),
    (["main", "compute", ("do_syscall", "kernel")], 9),
    (["main", "compute"], 4),
    (["main", "parse;json"], 15),
    (["main", "odd\nname"], 5),
    (["main", "back\\slash"], 2),
    (["main"], 7),
]
TOTAL = sum(v for _, v in STACKS)


def ingest(server, kind="on_cpu"):
    b = Batch(sample_rate_hz=20)
    attrs = {"process.executable.name": "export_app", "host.name": "h1"}
    for frames, value in STACKS:
        b.add(frames, attrs, value=value, kind=kind)
    ans = send_batch(server.url, b.encode(sequence=1))
    assert ans["stored"] is True


def body(kind="on_cpu", **extra):
    b = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": kind,
                    "frame_mask": {"patterns": []}, "query": QUERY},
         "num_samples": None, "num_stat_buckets": None, "synthetic_frames": []}
    b.update(extra)
    return b


def post(server, path, b):
    """(status, headers, body bytes)."""
    req = urllib.request.Request(server.url + path, data=json.dumps(b).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def export(server, fmt, **extra):
    st, headers, data = post(server, f"{BASE}/flamegraph/{fmt}", body(**extra))
    assert st == 200, data[:500]
    return headers, data


def flamegraph(server, **extra):
    st, _, data = post(server, f"{BASE}/flamegraph/json", body(**extra))
    assert st == 200, data[:500]
    return json.loads(data)


def stacks_of(fg):
    """{(names outermost first, below the root): self} of a JSON flamegraph."""
    out = {}
    for names, node in walk(fg["root"]):
        if node["self"]:
            key = names[1:]
            out[key] = out.get(key, 0) + node["self"]
    return out


def folded_escape(name):
    out = []
    for ch in name:
        if ch == "\\":
            out.append("\\\\")
        elif ch == ";":
            out.append("\\;")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def go_binary():
    for g in (shutil.which("go"), "/usr/local/go/bin/go"):
        if g and os.access(g, os.X_OK):
            return g
    pytest.fail("Go is needed for `go tool pprof` (the build hosts have it: /usr/local/go)")


def pprof(tmp_path, path, *args):
    # Go builds its pprof tool once, into the build cache the Go workloads
    # use (the Makefile's GOCACHE), then runs it from there.
    env = dict(os.environ, GOTOOLCHAIN="local", PPROF_TMPDIR=str(tmp_path),
               GOCACHE=os.environ.get("GOCACHE") or os.path.join(BUILD, "go-cache"))
    r = subprocess.run([go_binary(), "tool", "pprof", *args, str(path)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def parse_top(text):
    """`pprof -top` rows: {name: (flat, cum)} (values without their unit)."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)[a-z]*\s+[\d.]+%\s+[\d.]+%\s+(\d+)[a-z]*\s+[\d.]+%\s+(.+)$", line)
        if m:
            rows[m.group(3)] = (int(m.group(1)), int(m.group(2)))
    return rows


def test_pprof_read_by_go_tool_pprof(server, tmp_path):
    ingest(server)
    headers, data = export(server, "pprof")
    assert headers["Content-Type"] == "application/vnd.google.protobuf+gzip"
    assert re.fullmatch(r'attachment; filename="ember-on_cpu-[0-9a-f-]{36}\.pb\.gz"',
                        headers["Content-Disposition"]), headers["Content-Disposition"]
    assert data[:2] == b"\x1f\x8b"  # gzip
    gzip.decompress(data)
    f = tmp_path / "profile.pb.gz"
    f.write_bytes(data)

    raw = pprof(tmp_path, f, "-raw")
    assert "PeriodType: cpu nanoseconds" in raw, raw[:1000]
    assert re.search(r"Samples:\s*\n\s*samples/count cpu/nanoseconds", raw), raw[:1000]

    # go tool pprof's top functions by self are ember's top functions.
    top = parse_top(pprof(tmp_path, f, "-top", "-nodecount=10", "-sample_index=samples"))
    st, _, ans = post(server, f"{BASE}/top_functions", body(sort="self", limit=10))
    assert st == 200, ans
    fns = json.loads(ans)["functions"]
    assert len(fns) == 8 and len(top) == 8, (fns, top)
    for fn in fns:
        # pprof prints a name with a newline as it is: its first line ends the row.
        name = fn["name"].split("\n")[0]
        assert name in top, (name, top)
        assert top[name] == (fn["self"], fn["total"]), (name, top[name], fn)
    # The values in nanoseconds: count x 1e9 / 20 Hz (50 ms a sample).
    top_ns = pprof(tmp_path, f, "-top", "-nodecount=3", "-sample_index=cpu", "-unit=ms")
    assert f"of {TOTAL * 50}ms total" in top_ns, top_ns

    # Each stack is a sample, leaf first in the file, outermost first here.
    traces = pprof(tmp_path, f, "-traces", "-sample_index=samples")
    assert "leaf_a" in traces and "do_syscall" in traces


def test_pprof_off_cpu_is_nanoseconds(server, tmp_path):
    ingest(server, kind="off_cpu")
    _, data = export(server, "pprof", kind="off_cpu")
    f = tmp_path / "off.pb.gz"
    f.write_bytes(data)
    raw = pprof(tmp_path, f, "-raw")
    assert re.search(r"Samples:\s*\n\s*off_cpu/nanoseconds\s*\n", raw), raw[:1000]
    top = parse_top(pprof(tmp_path, f, "-top", "-unit=ns"))
    assert top["leaf_a"][0] == 50, top


def test_folded_every_stack_once_and_escaped(server):
    ingest(server)
    headers, data = export(server, "folded")
    assert headers["Content-Type"] == "text/plain; charset=utf-8"
    assert headers["Content-Disposition"].endswith('.folded.txt"')
    text = data.decode()
    assert text.endswith("\n")
    lines = text[:-1].split("\n")
    got = {}
    for line in lines:
        stack, value = line.rsplit(" ", 1)
        assert stack not in got, f"stack twice: {stack}"
        got[stack] = int(value)
    assert sum(got.values()) == TOTAL
    fg = flamegraph(server)
    assert fg["total"] == TOTAL
    want = {";".join(folded_escape(n) for n in names): v for names, v in stacks_of(fg).items()}
    assert got == want
    # The names that could break a line or a frame are escaped.
    assert got["main;parse\\;json"] == 15
    assert got["main;odd\\nname"] == 5
    assert got["main;back\\\\slash"] == 2
    assert got["main"] == 7
    assert len(lines) == len(STACKS)


def check_speedscope(doc):
    """The structure https://www.speedscope.app/file-format-schema.json
    requires of a file with sampled profiles (its required properties,
    their types and enums, indexes within the frames)."""
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert isinstance(doc["version"], str)
    allowed = {"$schema", "version", "shared", "profiles", "name", "activeProfileIndex", "exporter"}
    assert set(doc) <= allowed, set(doc) - allowed
    frames = doc["shared"]["frames"]
    assert set(doc["shared"]) == {"frames"}
    for fr in frames:
        assert isinstance(fr["name"], str)
        assert set(fr) <= {"name", "file", "line", "col"}
        assert isinstance(fr.get("file", ""), str)
        for k in ("line", "col"):
            assert isinstance(fr.get(k, 0), (int, float))
    assert isinstance(doc.get("name", ""), str)
    assert isinstance(doc.get("activeProfileIndex", 0), int)
    assert 0 <= doc.get("activeProfileIndex", 0) < len(doc["profiles"])
    for p in doc["profiles"]:
        assert p["type"] == "sampled"
        assert set(p) == {"type", "name", "unit", "startValue", "endValue", "samples", "weights"}
        assert isinstance(p["name"], str)
        assert p["unit"] in ("none", "nanoseconds", "microseconds", "milliseconds", "seconds",
                             "bytes")
        assert isinstance(p["startValue"], (int, float)) and isinstance(p["endValue"], (int, float))
        assert p["endValue"] >= p["startValue"]
        assert isinstance(p["samples"], list) and isinstance(p["weights"], list)
        assert len(p["samples"]) == len(p["weights"])
        for s in p["samples"]:
            assert isinstance(s, list)
            assert all(isinstance(i, int) and 0 <= i < len(frames) for i in s)
        assert all(isinstance(w, (int, float)) for w in p["weights"])


# speedscope's own published schema, from its npm package
# (scripts/install-test-npm.sh puts it under build/npm).
SPEEDSCOPE_SCHEMA = os.path.join(BUILD, "npm", "node_modules", "speedscope", "dist", "release",
                                 "file-format-schema.json")


def test_speedscope_against_the_published_schema(server):
    """The export validates against the JSON Schema speedscope publishes
    (draft-07, checked with jsonschema from build/pydeps), for every event
    kind and for a tree cut to a few nodes."""
    if not os.path.exists(SPEEDSCOPE_SCHEMA):
        pytest.skip("speedscope's npm package is not installed (scripts/install-test-npm.sh)")
    for name in [m for m in sys.modules if m.split(".")[0] in ("attr", "attrs")]:
        if "/dist-packages/" in (getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]  # jsonschema needs build/pydeps' attrs, not Debian's
    sys.path.insert(0, os.path.join(BUILD, "pydeps"))
    import jsonschema
    with open(SPEEDSCOPE_SCHEMA) as f:
        schema = json.load(f)
    for kw in ({}, {"kind": "off_cpu"}, {"max_nodes": 4}):
        doc = json.loads(export(server, "speedscope", **kw)[1])
        jsonschema.validate(doc, schema)
    # and a file the schema refuses is refused (the validator is not idle)
    bad = json.loads(export(server, "speedscope")[1])
    bad["profiles"][0]["type"] = "sampledd"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_speedscope_valid_and_weights_sum_to_total(server):
    ingest(server)
    headers, data = export(server, "speedscope")
    assert headers["Content-Type"] == "application/json"
    assert headers["Content-Disposition"].endswith('.speedscope.json"')
    doc = json.loads(data)
    check_speedscope(doc)
    p = doc["profiles"][0]
    assert p["unit"] == "none"
    assert sum(p["weights"]) == TOTAL == p["endValue"]
    frames = doc["shared"]["frames"]
    names = [f["name"] for f in frames]
    assert len(names) == len(set(names)), "frames are shared, each once"
    got = {}
    for s, w in zip(p["samples"], p["weights"]):
        got[tuple(names[i] for i in s)] = got.get(tuple(names[i] for i in s), 0) + w
    assert got == stacks_of(flamegraph(server))
    # off-CPU time is nanoseconds.
    ingest(server, kind="off_cpu")
    doc = json.loads(export(server, "speedscope", kind="off_cpu")[1])
    check_speedscope(doc)
    assert doc["profiles"][0]["unit"] == "nanoseconds"


def test_node_limit_bounds_every_export(server, tmp_path):
    ingest(server)
    fg = flamegraph(server, max_nodes=4)
    assert fg["nodes_written"] <= 4 and fg["total"] == TOTAL
    want = stacks_of(fg)
    assert ("main", "[other]") in want
    _, data = export(server, "folded", max_nodes=4)
    lines = data.decode().splitlines()
    assert len(lines) == len(want) and sum(int(x.rsplit(" ", 1)[1]) for x in lines) == TOTAL
    doc = json.loads(export(server, "speedscope", max_nodes=4)[1])
    assert len(doc["shared"]["frames"]) <= 3 and sum(doc["profiles"][0]["weights"]) == TOTAL
    f = tmp_path / "small.pb.gz"
    f.write_bytes(export(server, "pprof", max_nodes=4)[1])
    out = pprof(tmp_path, f, "-top", "-sample_index=samples")
    assert f"of {TOTAL} total" in out and "[other]" in out, out


def test_json_unchanged_and_bad_format(server):
    ingest(server)
    st, headers, data = post(server, f"{BASE}/flamegraph/json", body())
    assert st == 200 and headers["Content-Type"] == "application/json"
    assert "Content-Disposition" not in headers
    assert json.loads(data)["total"] == TOTAL
    st, headers, data = post(server, f"{BASE}/flamegraph/svg", body())
    assert st == 404 and "expected json, pprof, folded or speedscope" in json.loads(data)["error"]
    # A bad body is a 400 whatever the format.
    for fmt in ("pprof", "folded", "speedscope"):
        st, _, data = post(server, f"{BASE}/flamegraph/{fmt}", {"filter": {"event_kind": "nope"}})
        assert st == 400 and "error" in json.loads(data), (fmt, data)
    # An empty answer is still a valid file of each format.
    empty = body()
    empty["filter"]["query"] = 'process.executable.name == "nothing_here"'
    st, _, data = post(server, f"{BASE}/flamegraph/folded", empty)
    assert st == 200 and data == b""
    st, _, data = post(server, f"{BASE}/flamegraph/speedscope", empty)
    check_speedscope(json.loads(data))
    st, _, data = post(server, f"{BASE}/flamegraph/pprof", empty)
    assert st == 200 and gzip.decompress(data) is not None


def test_cli_exports_each_format(server, tmp_path):
    ingest(server)
    ember = os.path.join(BIN, "ember")
    for fmt in ("pprof", "folded", "speedscope", "json"):
        out = tmp_path / f"fg.{fmt}"
        r = subprocess.run([ember, "flamegraph", "-e", server.url, "--query", QUERY, "--format", fmt,
                            "-o", str(out)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        data = out.read_bytes()
        if fmt == "pprof":
            top = parse_top(pprof(tmp_path, out, "-top", "-sample_index=samples"))
            assert top["leaf_a"] == (50, 50), top
        elif fmt == "folded":
            assert sum(int(x.rsplit(" ", 1)[1]) for x in data.decode().splitlines()) == TOTAL
        elif fmt == "speedscope":
            doc = json.loads(data)
            check_speedscope(doc)
            assert sum(doc["profiles"][0]["weights"]) == TOTAL
        else:
            assert json.loads(data)["total"] == TOTAL
    # Folded to stdout; a format the server does not know is refused before asking.
    r = subprocess.run([ember, "flamegraph", "-e", server.url, "--query", QUERY, "--format",
                        "folded"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "main;compute;leaf_a 50\n" in r.stdout, r.stderr
    r = subprocess.run([ember, "flamegraph", "-e", server.url, "--format", "svg", "-o",
                        str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "expected json, pprof, folded or speedscope" in r.stderr
    assert not (tmp_path / "x").exists()
    r = subprocess.run([ember, "flamegraph", "-e", server.url, "--format", "folded", "-o",
                        str(tmp_path / "no" / "such" / "dir")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "no/such/dir" in r.stderr


def test_exports_need_project_read(local):
    """With --auth local an export is checked like the flamegraph: 401
    without a credential, 403 for a project the token cannot read; a
    signed-in browser session sends the CSRF header as the UI does."""
    from test_auth import admin_with_projects

    srv = local
    s, _, ids = admin_with_projects(srv, "alpha", "beta")
    st, tok = s.call("POST", "/public/api/v1/service-tokens",
                     {"name": "reader", "scopes": ["project:read"], "project_ids": [ids["alpha"]]})
    assert st == 201, tok

    def export_as(token, project, fmt="pprof", cookies=None):
        h = {"Content-Type": "application/json"}
        if token:
            h["Authorization"] = "Bearer " + token
        b = body()
        b["filter"]["query"] = 'process.executable.name == "app"'
        req = urllib.request.Request(f"{srv.url}/public/api/v1/project/{project}/flamegraph/{fmt}",
                                     data=json.dumps(b).encode(), method="POST", headers=h)
        handlers = [urllib.request.HTTPCookieProcessor(cookies)] if cookies else []
        opener = urllib.request.build_opener(*handlers)
        if cookies and s.cookie("ember_csrf"):
            req.add_header("X-Ember-CSRF", s.cookie("ember_csrf"))
        try:
            with opener.open(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    st, data = export_as(tok["token"], ids["alpha"])
    assert st == 200 and gzip.decompress(data), data[:200]
    st, data = export_as(tok["token"], ids["beta"], "folded")
    assert st == 403 and json.loads(data)["error"] == \
        f"Insufficient permissions: project:read in project {ids['beta']}"
    st, data = export_as(None, ids["alpha"], "speedscope")
    assert st == 401 and "error" in json.loads(data)
    # The browser's way: session cookies and the CSRF header.
    st, data = export_as(None, ids["beta"], "folded", cookies=s.jar)
    assert st == 200 and data.decode().endswith("\n") and sum(
        int(x.rsplit(" ", 1)[1]) for x in data.decode().splitlines()) == 100, data
