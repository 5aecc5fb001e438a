"""OTLP Profiles interop: requests built by an independent encoder (the
opentelemetry-proto package from PyPI, installed by
scripts/install-test-pydeps.sh) are accepted on POST
/v1development/profiles, as protobuf and as JSON (protobuf's own
json_format), and show up correctly in the flamegraph; hostile requests
get 4xx, never a crash."""

import gzip
import json
import os
import sys
import time

from harness import DEFAULT_PROJECT, ROOT, find, http

sys.path.insert(0, os.path.join(ROOT, "build", "pydeps"))

from google.protobuf import json_format  # noqa: E402
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc  # noqa: E402
from opentelemetry.proto.common.v1 import common_pb2  # noqa: E402
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb  # noqa: E402


class Dict:
    """Builds a ProfilesDictionary with index 0 the zero value everywhere."""

    def __init__(self):
        self.d = pb.ProfilesDictionary()
        self.strings = {}
        self.s("")
        self.d.mapping_table.add()
        self.d.location_table.add()
        self.d.function_table.add()
        self.d.link_table.add()
        self.d.attribute_table.add()
        self.d.stack_table.add()

    def s(self, text):
        if text not in self.strings:
            self.strings[text] = len(self.d.string_table)
            self.d.string_table.append(text)
        return self.strings[text]

    def attr(self, key, value):
        a = self.d.attribute_table.add(key_strindex=self.s(key))
        a.value.string_value = value
        return len(self.d.attribute_table) - 1

    def function(self, name, filename="app.py"):
        self.d.function_table.add(name_strindex=self.s(name), filename_strindex=self.s(filename))
        return len(self.d.function_table) - 1

    def location(self, *functions, frame_type="native", mapping=0, address=0):
        loc = self.d.location_table.add(mapping_index=mapping, address=address)
        for f in functions:  # inlined first, caller last
            loc.lines.add(function_index=f, line=10)
        loc.attribute_indices.append(self.attr("profile.frame.type", frame_type))
        return len(self.d.location_table) - 1

    def stack(self, *locations):  # leaf first
        self.d.stack_table.add(location_indices=list(locations))
        return len(self.d.stack_table) - 1


def build_request(exe="otlp_app", start_ns=None):
    d = Dict()
    main = d.location(d.function("main"))
    work_a = d.location(d.function("work_a"))
    # work_b with helper inlined into it: one location, two lines.
    work_b = d.location(d.function("helper_inlined"), d.function("work_b"))
    py = d.location(d.function("handler", "server.py"), frame_type="cpython")
    mapping = d.d.mapping_table.add(memory_start=0x400000, memory_limit=0x500000,
                                    file_offset=0x1000, filename_strindex=d.s("/usr/lib/libz.so.1"))
    unsym = d.location(mapping=len(d.d.mapping_table) - 1, address=0x401234)
    del mapping
    s_a = d.stack(work_a, main)
    s_b = d.stack(work_b, main)
    s_py = d.stack(py, main)
    s_un = d.stack(unsym, main)
    thread = [d.attr("thread.name", "worker-1"), d.attr("thread.name", "worker-2")]

    prof = pb.Profile()
    prof.sample_type.type_strindex = d.s("samples")
    prof.sample_type.unit_strindex = d.s("count")
    prof.period_type.type_strindex = d.s("cpu")
    prof.period_type.unit_strindex = d.s("nanoseconds")
    prof.period = 1_000_000_000 // 20
    prof.time_unix_nano = start_ns or time.time_ns() - 10_000_000_000
    prof.duration_nano = 5_000_000_000
    for stack, n, t in ((s_a, 60, 0), (s_b, 30, 1), (s_py, 7, 0), (s_un, 3, 1)):
        prof.samples.add(stack_index=stack, values=[n], attribute_indices=[thread[t]])

    req = svc.ExportProfilesServiceRequest()
    req.dictionary.CopyFrom(d.d)
    rp = req.resource_profiles.add()
    for k, v in (("host.name", "otlp-host"), ("process.executable.name", exe),
                 ("service.name", "checkout")):
        rp.resource.attributes.add(key=k, value=common_pb2.AnyValue(string_value=v))
    rp.resource.attributes.add(key="process.pid", value=common_pb2.AnyValue(int_value=4242))
    rp.scope_profiles.add().profiles.append(prof)
    return req


def post(server, body, ctype="application/x-protobuf", encoding=None):
    headers = {"Content-Type": ctype}
    if encoding:
        headers["Content-Encoding"] = encoding
    return http("POST", server.url + "/v1development/profiles", body, headers)


def test_independent_encoder_shows_in_flamegraph(server):
    status, body = post(server, build_request().SerializeToString())
    assert status == 200, body
    resp = svc.ExportProfilesServiceResponse.FromString(body)
    assert resp.partial_success.rejected_profiles == 0
    # The same again, gzip-compressed, for another executable.
    status, body = post(server, gzip.compress(build_request("otlp_gz").SerializeToString()),
                        encoding="gzip")
    assert status == 200, body

    fg = server.flamegraph('process.executable.name == "otlp_app"')
    assert fg["total"] == 100, json.dumps(fg)[:2000]
    main = find(fg["root"], "main")
    assert main and main["total"] == 100
    kids = {c["name"]: c for c in main["children"]}
    assert kids["work_a"]["total"] == 60 and kids["work_a"]["self"] == 60
    # The inlined helper sits under the function it was inlined into.
    assert kids["work_b"]["total"] == 30
    assert [c["name"] for c in kids["work_b"]["children"]] == ["helper_inlined"]
    assert kids["handler"]["frame_type"] == "cpython"
    # An interpreted frame keeps its source file and line.
    assert (kids["handler"]["file"], kids["handler"]["line"]) == ("server.py", 10)
    # An unsymbolized native location: its file offset in the mapping,
    # said in fields too (clients never parse the name).
    unsym = kids["libz.so.1+0x2234"]
    assert unsym["total"] == 3
    assert (unsym["symbolized"], unsym["address"], unsym["binary"]) == (False, "0x2234", "libz.so.1"), unsym
    assert "symbolized" not in kids["work_a"] and "address" not in kids["work_a"]
    # Attributes: resource, and sample (thread.name) ones.
    assert server.flamegraph('thread.name == "worker-2" && host.name == "otlp-host"')["total"] == 66
    assert server.flamegraph('service.name == "checkout" && process.pid == "4242"')["total"] == 200
    assert server.flamegraph('process.executable.name == "otlp_gz"')["total"] == 100
    # The sampling period gives the rate.
    assert fg["sample_rate_hz"] == 20


def test_unknown_sample_type_is_a_partial_success(server):
    req = build_request()
    d = req.dictionary
    d.string_table.append("wall_clock_widgets")
    req.resource_profiles[0].scope_profiles[0].profiles[0].sample_type.type_strindex = \
        len(d.string_table) - 1
    status, body = post(server, req.SerializeToString())
    assert status == 200
    resp = svc.ExportProfilesServiceResponse.FromString(body)
    assert resp.partial_success.rejected_profiles == 1
    assert "wall_clock_widgets" in resp.partial_success.error_message


def values_request(exe):
    """Samples of 60 and 30, one of 2^62 (stored as 2^48), one of -5 alone
    (dropped) and one of 7 with -3 beside it (stored as 7)."""
    req = build_request(exe)
    prof = req.resource_profiles[0].scope_profiles[0].profiles[0]
    stack = prof.samples[0].stack_index
    del prof.samples[2:]
    prof.samples.add(stack_index=stack, values=[2 ** 62])
    prof.samples.add(stack_index=stack, values=[-5])
    prof.samples.add(stack_index=stack, values=[7, -3])
    return req


def test_clamped_and_negative_values_are_a_partial_success(server):
    status, body = post(server, values_request("otlp_values").SerializeToString())
    assert status == 200, body
    ps = svc.ExportProfilesServiceResponse.FromString(body).partial_success
    assert ps.rejected_profiles == 0  # every profile was stored: a warning
    msg = ps.error_message
    assert "2 negative sample values left out (1 samples with no other value dropped)" in msg, msg
    assert "1 sample values above 2^48 (281474976710656) stored as 2^48" in msg, msg
    assert server.flamegraph('process.executable.name == "otlp_values"')["total"] == \
        60 + 30 + 2 ** 48 + 7

    text = json_format.MessageToJson(values_request("otlp_values_json"))
    status, body = post(server, text.encode(), ctype="application/json")
    assert status == 200, body
    ps = json.loads(body)["partialSuccess"]
    assert ps["rejectedProfiles"] == "0"
    assert "2 negative sample values left out" in ps["errorMessage"], ps
    assert "1 sample values above 2^48" in ps["errorMessage"], ps
    # A request with nothing changed answers no partial_success at all.
    status, body = post(server, build_request().SerializeToString())
    assert status == 200 and not svc.ExportProfilesServiceResponse.FromString(body) \
        .HasField("partial_success")


def test_hostile_requests_get_4xx(server):
    good = build_request().SerializeToString()
    cases = [
        (b"\xff\xff\xff\xff garbage", 400),
        (good[: len(good) // 2], 400),   # truncated
        (good[:-3], 400),
    ]
    for body, want in cases:
        status, resp = post(server, body)
        assert status == want, (status, resp)
    # An index beyond its table, named in the answer.
    req = build_request()
    req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].stack_index = 999
    status, resp = post(server, req.SerializeToString())
    assert status == 400 and b"samples[0]" in resp, resp
    req = build_request()
    req.dictionary.location_table[1].lines[0].function_index = -5
    status, resp = post(server, req.SerializeToString())
    assert status == 400 and b"location_table[1]" in resp, resp
    req = build_request()
    s = req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0]
    s.timestamps_unix_nano.extend([1, 2, 3])
    status, resp = post(server, req.SerializeToString())
    assert status == 400 and b"timestamps" in resp, resp
    # Wrong media type, wrong encoding, a gzip bomb.
    assert post(server, good, ctype="text/plain")[0] == 415
    assert post(server, good, ctype="application/jsonx")[0] == 415
    status, resp = post(server, good, ctype="application/json")  # protobuf sent as JSON
    assert status == 400 and b"not valid JSON" in resp, resp
    assert post(server, good, encoding="br")[0] == 415
    assert post(server, b"\x1f\x8b not gzip", encoding="gzip")[0] == 400
    bomb = gzip.compress(b"\0" * (80 << 20))
    assert post(server, bomb, encoding="gzip")[0] == 413
    # Still healthy, and nothing of the refused requests was stored.
    assert server.flamegraph()["total"] == 0


# --- OTLP/JSON ------------------------------------------------------------------

def labels(server, query, name=None):
    body = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000,
                       "event_kind": "on_cpu", "query": query}}
    if name:
        body["name"] = name
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/labels",
                        body, {"Content-Type": "application/json"})
    assert status == 200, data
    return json.loads(data)


def as_stored(server, exe):
    """What ember shows of the requests for one executable: the flamegraph
    (tree, totals, rate) and every attribute with its values and shares."""
    q = f'process.executable.name == "{exe}"'
    fg = server.flamegraph(q)
    names = labels(server, q)["names"]
    values = {n["name"]: labels(server, q, n["name"])["values"] for n in names
              if n["name"] != "process.executable.name"}
    return {"root": fg["root"], "total": fg["total"], "rate": fg["sample_rate_hz"],
            "names": names, "values": values}


def profile_of(d, snake=False):
    k = (lambda a, b: a) if snake else (lambda a, b: b)
    return d[k("resource_profiles", "resourceProfiles")][0][k("scope_profiles", "scopeProfiles")][0]["profiles"][0]


def test_json_request_is_stored_like_protobuf(server):
    start = time.time_ns() - 10_000_000_000
    status, body = post(server, build_request("otlp_pb", start).SerializeToString())
    assert status == 200, body
    want = as_stored(server, "otlp_pb")
    assert want["total"] == 100

    # protobuf's own JSON encoder: lowerCamelCase, 64-bit integers as strings.
    text = json_format.MessageToJson(build_request("otlp_json", start))
    assert '"stackIndex"' in text and f'"timeUnixNano": "{start}"' in text
    status, body = post(server, text.encode(), ctype="application/json; charset=utf-8")
    assert status == 200, body
    assert json.loads(body) == {}  # an ExportProfilesServiceResponse, as JSON

    # The .proto names, 64-bit integers as numbers, compact, gzip-compressed.
    d = json_format.MessageToDict(build_request("otlp_snake", start),
                                  preserving_proto_field_name=True)
    prof = profile_of(d, snake=True)
    prof["time_unix_nano"] = int(prof["time_unix_nano"])
    prof["period"] = int(prof["period"])
    for s in prof["samples"]:
        s["values"] = [int(v) for v in s["values"]]
    text = json.dumps(d, separators=(",", ":"))
    assert '"stack_index"' in text and f'"time_unix_nano":{start}' in text
    status, body = post(server, gzip.compress(text.encode()), ctype="application/json",
                        encoding="gzip")
    assert status == 200, body

    for exe in ("otlp_json", "otlp_snake"):
        assert as_stored(server, exe) == want, exe
    # And the checks that the protobuf test makes, on the JSON request.
    main = find(server.flamegraph('process.executable.name == "otlp_json"')["root"], "main")
    kids = {c["name"]: c for c in main["children"]}
    assert kids["work_a"]["total"] == 60 and kids["work_b"]["total"] == 30
    assert kids["libz.so.1+0x2234"]["total"] == 3
    assert server.flamegraph('thread.name == "worker-2" && process.executable.name == "otlp_json"')["total"] == 33


def test_json_partial_success(server):
    req = build_request()
    req.dictionary.string_table.append("wall_clock_widgets")
    req.resource_profiles[0].scope_profiles[0].profiles[0].sample_type.type_strindex = \
        len(req.dictionary.string_table) - 1
    status, body = post(server, json_format.MessageToJson(req).encode(), ctype="application/json")
    assert status == 200, body
    ps = json.loads(body)["partialSuccess"]
    assert ps["rejectedProfiles"] == "1" and "wall_clock_widgets" in ps["errorMessage"]


def test_hostile_json_gets_4xx_naming_the_field(server):
    good = json_format.MessageToJson(build_request())

    def changed(edit):
        d = json.loads(good)
        edit(d)
        return json.dumps(d).encode()

    def sample(d, i=0):
        return profile_of(d)["samples"][i]

    where = "resourceProfiles[0].scopeProfiles[0].profiles[0].samples[3]"
    cases = [
        (b"", 400, b"not valid JSON"),
        (b"{not json", 400, b"not valid JSON"),
        (good.encode()[: len(good) // 2], 400, b"not valid JSON"),   # truncated
        (good.encode()[:-1], 400, b"not valid JSON"),
        (good.encode() + b"}", 400, b"not valid JSON"),
        (b"[]", 400, b"expected an object"),
        (b'{"resourceProfiles": {}}', 400, b"resourceProfiles: expected an array"),
        (changed(lambda d: sample(d, 3).update(stackIndex="abc")), 400,
         where.encode() + b".stackIndex: expected an integer"),
        (changed(lambda d: sample(d, 3).update(stackIndex=1.5)), 400,
         where.encode() + b".stackIndex: expected an integer"),
        (changed(lambda d: sample(d, 3).update(stackIndex=2**31)), 400,
         where.encode() + b".stackIndex: out of range for int32"),
        (changed(lambda d: sample(d, 3).update(values=["-"])), 400,
         where.encode() + b".values[0]: expected an integer"),
        (changed(lambda d: sample(d, 3).update(attributeIndices=[None])), 400,
         where.encode() + b".attributeIndices[0]: null in a repeated field"),
        (changed(lambda d: d["dictionary"]["stringTable"].append(7)), 400,
         b"dictionary.stringTable[" ),
        (changed(lambda d: profile_of(d).update(profileId="not base64!")), 400,
         b"profiles[0].profileId: expected base64"),
        (changed(lambda d: profile_of(d).update(sampleType=[])), 400,
         b"profiles[0].sampleType: expected an object"),
        (changed(lambda d: profile_of(d).update(sample_type={})), 400,
         b"given twice"),
        # Through to the same checks as protobuf: an index beyond its table.
        (changed(lambda d: sample(d, 0).update(stackIndex=999)), 400, b"samples[0]"),
        (b'{"a":' * 100 + b"1" + b"}" * 100, 400, b"nested deeper than 64"),
        (b'{"x":[' + b"{}," * (4 << 20) + b'{}]}', 413, b"more than 4194304 objects and arrays"),
        (b'{"x":[' + b"0," * (16 << 20) + b'0]}', 413, b"more than 16777216 values"),
    ]
    for body, want, msg in cases:
        status, resp = post(server, body, ctype="application/json")
        assert status == want and msg in resp, (body[:200], status, resp)
        assert json.loads(resp)["error"]
    assert post(server, b"\x1f\x8b not gzip", ctype="application/json", encoding="gzip")[0] == 400
    status, resp = post(server, gzip.compress(good.encode()[:100]), ctype="application/json",
                        encoding="gzip")
    assert status == 400, resp
    # Still healthy, and nothing of the refused requests was stored.
    assert server.healthy()
    assert server.flamegraph()["total"] == 0


# --- bounded user patterns --------------------------------------------------------

def query(server, route, body):
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/{route}",
                        body, {"Content-Type": "application/json"})
    return status, json.loads(data)


def test_catastrophic_patterns_answer_422_quickly(server):
    """Frames named aaaa…a!N and the pattern ^(a+)+$ backtrack without end;
    the query stops at the match limit and answers 422 naming the pattern
    and the limit, in well under 2 s, and the server stays responsive."""
    d = Dict()
    root = d.location(d.function("main"))
    stacks = [d.stack(d.location(d.function("a" * 40 + f"!{i}")), root) for i in range(200)]
    req = build_request("redos_app")
    prof = req.resource_profiles[0].scope_profiles[0].profiles[0]
    prof.sample_type.type_strindex = d.s("samples")
    prof.sample_type.unit_strindex = d.s("count")
    prof.period_type.type_strindex = d.s("cpu")
    prof.period_type.unit_strindex = d.s("nanoseconds")
    del prof.samples[:]
    for s in stacks:
        prof.samples.add(stack_index=s, values=[1])
    req.dictionary.CopyFrom(d.d)
    status, body = post(server, req.SerializeToString())
    assert status == 200, body
    assert server.flamegraph('process.executable.name == "redos_app"')["total"] == 200

    window = {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "on_cpu"}
    cases = [
        ("flamegraph/json", {"filter": window, "search": "^(a+)+$"}, "search"),
        ("flamegraph/json", {"filter": dict(window, frame_mask={"patterns": ["^(a|aa)+$"]})},
         "filter.frame_mask.patterns[0]"),
        ("top_functions", {"filter": window, "search": "^(a+)+$"}, "search"),
    ]
    for route, body, what in cases:
        t0 = time.monotonic()
        status, answer = query(server, route, body)
        took = time.monotonic() - t0
        assert status == 422, (route, body, answer)
        assert took < 2.0, (route, took)
        assert what in answer["error"] and "match limit" in answer["error"], answer
        assert "(a" in answer["error"], answer
    # Eight at once do not stall health checks or ingest.
    import threading
    threads = [threading.Thread(target=query, args=(server, "flamegraph/json",
                                                    {"filter": window, "search": "^(a+)+$"}))
               for _ in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    assert http("GET", server.url + "/healthz", timeout=5)[0] == 200
    for t in threads:
        t.join()
    assert time.monotonic() - t0 < 5.0
    # An honest search over the same frames still answers.
    fg = server.flamegraph('process.executable.name == "redos_app"', search="^a+!7$")
    assert fg["total"] == 1
