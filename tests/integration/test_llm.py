"""The LLM mode of the recommendations and the AI assistant against the
test-only provider stand-in (tests/llm_provider/server.py), which checks
every request against its provider's documented shape:

- each provider (Anthropic, OpenAI, Gemini, OpenAI-compatible): the two
  steps with separate models, the built-in findings in the examination's
  prompt, the answer stored beside the built-in recommendation;
- a malformed answer (truncated JSON, then one against the schema) is
  asked for again once, then reported as an error, never shown raw; one
  malformed answer then a good one is fine;
- 429 with Retry-After: waited for, then retried;
- token limits: a request over the hourly limit is refused before it is
  sent (the provider sees nothing);
- the assistant's loop runs real MCP tools on a server with data (their
  results reach the model and the user), bounded by max_steps;
- the key never appears in the server's log nor in an answer."""

import json
import os
import sys
import time

import pytest

from conftest import StubHandler
from ember_batch import Batch, send_batch  # tests/lib
from harness import DEFAULT_PROJECT, Server, http

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "llm_provider"))
from provider import Provider  # noqa: E402

BASE = f"/public/api/v1/project/{DEFAULT_PROJECT}"
REGEX = ["main", "handle", "pcre2_compile_8", "compile_branch"]
KEY = "sk-test-9f8e7d6c5b4a-SECRET"
PREFIX = {"anthropic": "", "openai": "/v1", "gemini": "/v1beta", "openai-compatible": "/custom/v1"}

EXAMINE = {"diagnosis": "pcre2_compile_8 runs on every call of handle (main.c:12): the pattern is "
                        "compiled again per request.",
           "actions": [{"title": "Compile the regex once", "detail": "Hoist pcre2_compile out of handle "
                        "and keep the compiled code.", "source": "main.c:12", "savings_share": 0.8}],
           "confidence": "high", "lower_priority": ["Use the JIT (pcre2_jit_compile)."]}
SUMMARY = {"title": "Regex compiled per request in web", "description": "handle compiles its pattern on "
           "every call; compiling it once saves most of the time.", "tags": ["regex", "cpu"]}


def send_profile(server, stacks, seq=[0]):
    b = Batch()
    for frames, exe, n in stacks:
        b.add(frames, {"process.executable.name": exe, "host.name": "h1"}, n, binary=exe)
    seq[0] += 1
    send_batch(server.url, b.encode(seq[0]))


def call(server, method, path, body=None):
    st, out = http(method, server.url + path, None if body is None else json.dumps(body).encode(),
                   {"Content-Type": "application/json"} if body is not None else None, timeout=120)
    return st, json.loads(out)


def start(tmp_path, provider, *flags):
    keyfile = tmp_path / "llm-key"
    keyfile.write_text(KEY + "\n")
    return Server(tmp_path / "data", None, "--recs-step=1h", "-v", f"--llm-provider={provider.kind}",
                  f"--llm-base-url={provider.base_url}", f"--llm-api-key-file={keyfile}",
                  "--llm-model-examine=big-model", "--llm-model-summarize=small-model", *flags).start()


@pytest.fixture
def env(tmp_path, request):
    made = []

    def make(kind, *flags):
        p = Provider(kind, KEY, path_prefix=PREFIX[kind])
        s = start(tmp_path, p, *flags)
        made.append((p, s))
        return p, s
    yield make
    for p, s in made:
        s.stop()
        p.stop()
        assert KEY not in s.output(), "the API key is in the server's log"
        assert KEY[-10:] not in s.output()


def web_rec(doc):
    return next(r for r in doc["recommendations"] if r["application"] == "web")


@pytest.mark.parametrize("kind", ["anthropic", "openai", "gemini", "openai-compatible"])
def test_recommendation_llm_mode(env, kind):
    p, s = env(kind)
    p.script = [p.text(json.dumps(EXAMINE), 900, 300), p.text("```json\n" + json.dumps(SUMMARY) + "\n```", 300, 60)]
    send_profile(s, [(REGEX, "web", 600)])
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    assert st == 200, doc
    assert p.problems == []
    rec = web_rec(doc)
    assert doc["settings"]["analyzer"] == "built-in+llm"
    # The built-in analysis is still there, the LLM's beside it.
    assert rec["technical"]["analyzer"] == "built-in" and rec["actions"]
    llm = rec["llm"]
    assert llm["status"] == "ok", llm
    assert llm["provider"] == kind and llm["models"] == {"examine": "big-model", "summarize": "small-model"}
    assert llm["title"] == SUMMARY["title"] and llm["tags"] == ["regex", "cpu"]
    assert llm["diagnosis"] == EXAMINE["diagnosis"] and llm["confidence"] == "high"
    a = llm["actions"][0]
    assert a["rank"] == 1 and a["source"] == "main.c:12"
    assert abs(a["savings"] - 0.8 * rec["cores"]) < 1e-6 * max(1, rec["cores"]) + 1e-9
    assert llm["usage"] == {"input_tokens": 1200, "output_tokens": 360}
    # Two requests, one model each; the built-in findings are the evidence.
    assert [p.model_of(r) for r in p.requests] == ["big-model", "small-model"]
    first = p.prompt_text(p.requests[0])
    assert "regex-compile" in first and "compile_branch" in first
    assert "pcre2_compile_8 runs on every call" in p.prompt_text(p.requests[1])
    # An unchanged recommendation keeps its answer: no new request.
    st, doc = call(s, "GET", BASE + "/recommendations")
    assert web_rec(doc)["llm"]["status"] == "ok" and len(p.requests) == 2
    # The config the UI reads: no key in it.
    st, cfg = call(s, "GET", "/public/api/v1/assistant/config")
    assert st == 200 and cfg["enabled"] and cfg["llm"]["provider"] == kind
    assert cfg["llm"]["usage_last_hour"]["input_tokens"] == 1200
    assert KEY not in json.dumps(cfg) and KEY not in json.dumps(doc)


def test_malformed_answers_retried_then_reported(env):
    p, s = env("openai")
    truncated = json.dumps(EXAMINE)[:70]
    bad = dict(EXAMINE, confidence="certain")
    p.script = [p.text(truncated), p.text(json.dumps(bad))]
    send_profile(s, [(REGEX, "web", 600)])
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    assert st == 200 and p.problems == []
    llm = web_rec(doc)["llm"]
    assert llm["status"] == "error" and llm["step"] == "examine" and llm["attempts"] == 2, llm
    assert "malformed" in llm["error"] and "confidence" in llm["error"], llm
    # The second request told the model what was wrong; the raw text is never shown.
    assert "not JSON" in p.prompt_text(p.requests[1])
    assert truncated not in json.dumps(doc) and "certain" not in json.dumps(doc)
    assert web_rec(doc)["actions"], "the built-in analysis stays"

    # One malformed answer, then good ones: fine.
    p.script = [p.text("Sure! Here is the analysis you asked for."), p.text(json.dumps(EXAMINE)),
                p.text(json.dumps(SUMMARY))]
    st, doc = call(s, "POST", BASE + "/recommendations/regenerate")
    assert st == 200 and p.problems == []
    assert web_rec(doc)["llm"]["status"] == "ok", web_rec(doc)["llm"]
    assert len(p.requests) == 5


def test_rate_limit_retry_after(env):
    p, s = env("anthropic")
    p.script = [p.error(429, "rate limited", {"retry-after": "2"}), p.text(json.dumps(EXAMINE)),
                p.error(529, "overloaded", {"retry-after": "1"}), p.text(json.dumps(SUMMARY))]
    send_profile(s, [(REGEX, "web", 600)])
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    assert st == 200 and p.problems == []
    assert web_rec(doc)["llm"]["status"] == "ok"
    t = [r[0] for r in p.requests]
    assert len(t) == 4 and t[1] - t[0] >= 1.9 and t[3] - t[2] >= 0.9, t
    assert "retry 1 of 3 in 2 s" in s.output()


def test_rate_limit_bounded(env):
    p, s = env("gemini", "--llm-max-retries=1")
    p.script = [p.error(429, "quota", {"retry-after": "1"})] * 2
    send_profile(s, [(REGEX, "web", 600)])
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    llm = web_rec(doc)["llm"]
    assert llm["status"] == "error" and "429" in llm["error"] and "after 1 retries" in llm["error"], llm
    assert len(p.requests) == 2 and p.problems == []


def test_token_limit_refused_before_sending(env):
    p, s = env("openai-compatible", "--llm-max-input-tokens-per-hour=200")
    send_profile(s, [(REGEX, "web", 600)])
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    llm = web_rec(doc)["llm"]
    assert llm["status"] == "refused" and "token limit" in llm["error"], llm
    assert "--llm-max-input-tokens-per-hour" in llm["error"]
    assert p.requests == []
    st, out = call(s, "POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "hi"}]})
    assert st == 429 and "token limit" in out["error"] and p.requests == []


def test_provider_error_scrubbed(env):
    p, s = env("openai")
    p.script = [p.error(401, f"Incorrect API key provided: {KEY}")]
    send_profile(s, [(REGEX, "web", 600)])
    st, out = call(s, "POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "hi"}]})
    assert st == 502 and "401" in out["error"] and "[api key]" in out["error"], out
    assert KEY not in json.dumps(out)


@pytest.mark.parametrize("kind", ["anthropic", "openai", "gemini"])
def test_assistant_tool_loop(env, kind):
    p, s = env(kind, "--llm-recommendations=false")
    send_profile(s, [(REGEX, "web", 600), (["main", "idle_loop"], "other", 50)])

    def final(prov, body):
        results = "\n".join(prov.tool_results(prov.requests[-1]))
        assert "compile_branch" in results, results
        return prov.text("Most CPU time is in compile_branch (pcre2): compile the regex once.")
    p.script = [p.tool_call("list_projects", {}, "c1", "Let me look."),
                p.tool_calls([("top_functions", {"project": DEFAULT_PROJECT, "range": "24h", "limit": 5}, "c2"),
                              ("top_entities", {"project": DEFAULT_PROJECT, "range": "24h"}, "c3")]),
                final]
    st, out = call(s, "POST", BASE + "/assistant",
                   {"messages": [{"role": "user", "content": "Where is the CPU time going?"}],
                    "context": "Frame compile_branch (native, web), 92% of samples"})
    assert st == 200, out
    assert p.problems == []
    assert out["stopped"] == "done" and "compile_branch" in out["answer"]
    # Two tool calls in one answer: both results go back in one message
    # (the provider checks the roles and that each result answers a call).
    assert [x["tool"] for x in out["steps"]] == ["list_projects", "top_functions", "top_entities"]
    assert len(p.tool_results(p.requests[-1])) == 3
    assert not any(x["is_error"] for x in out["steps"]), out["steps"]
    assert "default" in out["steps"][0]["result"]
    assert "compile_branch" in out["steps"][1]["result"]
    assert out["steps"][1]["arguments"]["limit"] == 5
    assert out["usage"]["model_calls"] == 3
    # The tools were offered, the context was given.
    first = p.prompt_text(p.requests[0])
    assert "top_functions" in first and "Frame compile_branch" in first

    # Bounded: a model that never stops calling tools stops at max_steps.
    p.script = [p.tool_call("list_projects", {}, f"x{i}") for i in range(3)]
    st, out = call(s, "POST", BASE + "/assistant",
                   {"messages": [{"role": "user", "content": "loop"}], "max_steps": 3})
    assert st == 200 and out["stopped"] == "max_steps" and len(out["steps"]) == 3, out
    assert len(p.requests) == 6 and p.problems == []


def test_assistant_tool_errors_and_refusals(env):
    p, s = env("openai", "--llm-recommendations=false")
    p.script = [p.tool_call("top_functions", {"project": "no-such-project"}, "c1"),
                p.tool_call("no_such_tool", {}, "c2"),
                p.text("done")]
    st, out = call(s, "POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "x"}]})
    assert st == 200 and out["stopped"] == "done", out
    assert [x["is_error"] for x in out["steps"]] == [True, True]
    assert "no-such-project" in out["steps"][0]["result"]
    assert p.problems == []
    for bad in ({}, {"messages": []}, {"messages": [{"role": "system", "content": "x"}]},
                {"messages": [{"role": "user", "content": 5}]},
                {"messages": [{"role": "assistant", "content": "x"}]},
                {"messages": [{"role": "user", "content": "x"}], "max_steps": 99}):
        st, out = call(s, "POST", BASE + "/assistant", bad)
        assert st == 400 and out["error"], (bad, out)
    st, out = call(s, "POST", "/public/api/v1/project/11111111-1111-1111-1111-111111111111/assistant",
                   {"messages": [{"role": "user", "content": "x"}]})
    assert st == 404


def test_no_llm(server):
    st, cfg = call(server, "GET", "/public/api/v1/assistant/config")
    assert st == 200 and cfg["enabled"] is False and cfg["llm"] == {"provider": None}
    st, out = call(server, "POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "x"}]})
    assert st == 503 and "--llm-provider" in out["error"]


def test_bad_flags(tmp_path):
    for flags, want in ((["--llm-provider=claude"], "--llm-provider"),
                        (["--llm-provider=openai", "--llm-model-examine=m", "--llm-api-key-env=EMBER_NO_SUCH"],
                         "EMBER_NO_SUCH"),
                        (["--llm-provider=openai", "--llm-api-key-env=HOME"], "--llm-model-examine")):
        s = Server(tmp_path / "d", None, *flags)
        s.start(wait=False)
        deadline = time.time() + 10
        while s.running() and time.time() < deadline:
            time.sleep(0.1)
        assert not s.running() and want in s.output(), s.output()


def test_llm_settings(env):
    p, s = env("anthropic")
    path = "/public/api/v1/settings/llm"
    st, cfg = call(s, "GET", path)
    assert st == 200 and cfg["model_examine"] == "big-model" and cfg["model_summarize"] == "small-model"
    assert cfg["overridden"] == [] and cfg["recommendations"] is True and cfg["key_source"].startswith("file ")
    for bad, word in (({"api_key": "sk-x"}, "never through the API"), ({"model_examine": ""}, "model name"),
                      ({"model_examine": "a b"}, "model name"), ({"max_input_tokens_per_hour": -1}, "integer"),
                      ({"provider": "openai"}, "--llm-provider"), ({"recommendations": 1}, "true or false"),
                      ([1], "object")):
        st, out = call(s, "PUT", path, bad)
        assert st == 400 and word in out["error"], (bad, out)
    st, out = call(s, "PUT", path, {"model_examine": "other-model", "max_input_tokens_per_hour": 200})
    assert st == 200 and out["model_examine"] == "other-model" and sorted(out["overridden"]) == [
        "max_input_tokens_per_hour", "model_examine"]
    # In effect at once: the limit refuses before sending.
    send_profile(s, [(REGEX, "web", 600)])
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    assert web_rec(doc)["llm"]["status"] == "refused" and p.requests == []
    # Kept across a restart, over the flags; null goes back to the flag.
    s.restart()
    st, cfg = call(s, "GET", path)
    assert cfg["model_examine"] == "other-model" and cfg["max_input_tokens_per_hour"] == 200
    st, out = call(s, "PUT", path, {"max_input_tokens_per_hour": None, "recommendations": False})
    assert st == 200 and out["max_input_tokens_per_hour"] == 0 and out["recommendations"] is False
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    assert "llm" not in web_rec(doc) and p.requests == []
    st, out = call(s, "PUT", path, {"recommendations": None})
    p.script = [p.text(json.dumps(EXAMINE)), p.text(json.dumps(SUMMARY))]
    st, doc = call(s, "POST", BASE + "/recommendations/refresh")
    assert web_rec(doc)["llm"]["models"]["examine"] == "other-model"
    assert p.model_of(p.requests[0]) == "other-model" and p.problems == []


def test_assistant_tools_run_as_the_caller(tmp_path):
    """With --auth local, each tool call has the caller's permissions: a
    token that reads project alpha only gets a tool error for beta, and
    list_projects lists alpha alone."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_auth import ADMIN, PASSWORD, Session, bearer
    from test_mcp import ingest
    p = Provider("openai", KEY, path_prefix="/v1")
    pw = tmp_path / "admin-password"
    pw.write_text(PASSWORD + "\n")
    s = start(tmp_path, p, "--auth", "local", "--admin-email", ADMIN, "--admin-password-file", str(pw),
              "--llm-recommendations=false")
    try:
        sess = Session(s)
        admin = sess.login(ADMIN, PASSWORD)[1]["access_token"]
        for name in ("alpha", "beta"):
            ingest(s, admin, name)
        ids = {x["name"]: x["id"] for x in bearer(s, "GET", "/public/api/v1/projects", admin)[1]["projects"]}
        st, tok = sess.call("POST", "/public/api/v1/service-tokens",
                            {"name": "asst", "scopes": ["project:read"], "project_ids": [ids["alpha"]]})
        assert st == 201, tok
        token = tok["token"]
        body = {"messages": [{"role": "user", "content": "compare alpha and beta"}]}
        assert http("POST", f"{s.url}/public/api/v1/project/{ids['alpha']}/assistant", json.dumps(body).encode(),
                    {"Content-Type": "application/json"})[0] == 401
        st, out = bearer(s, "POST", f"/public/api/v1/project/{ids['beta']}/assistant", token, body)
        assert st == 403, out
        p.script = [p.tool_calls([("top_functions", {"project": "beta"}, "c1"),
                                  ("top_functions", {"project": "alpha"}, "c2"),
                                  ("list_projects", {}, "c3")]),
                    p.text("alpha only")]
        st, out = bearer(s, "POST", f"/public/api/v1/project/{ids['alpha']}/assistant", token, body)
        assert st == 200, out
        beta, alpha, lst = out["steps"]
        assert beta["is_error"] and "project:read" in beta["result"] and "beta" in beta["result"], beta
        assert not alpha["is_error"] and "work_b" in alpha["result"], alpha
        assert "alpha" in lst["result"] and "beta" not in lst["result"], lst
        assert p.problems == []
    finally:
        s.stop()
        p.stop()
    assert KEY not in s.output()


class McpStub:
    """A test-only external MCP server (Streamable HTTP): initialize with a
    session id, tools/list with one tool, tools/call answered as an SSE
    stream; every request must carry the bearer token and, after
    initialize, the session id."""

    def __init__(self, token):
        import http.server as hs
        import threading
        self.calls, self.problems = [], []
        outer = self

        class H(StubHandler):
            def do_POST(self):
                msg = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                if self.headers.get("Authorization") != "Bearer " + token:
                    outer.problems.append("no bearer token")
                m = msg.get("method")
                if m != "initialize" and self.headers.get("Mcp-Session-Id") != "sess-1":
                    outer.problems.append(f"{m}: no session id")
                if "id" not in msg:
                    self.reply(202, content_type=None)
                    return
                sse = False
                if m == "initialize":
                    res = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "stub", "version": "1"}}
                elif m == "tools/list":
                    res = {"tools": [{"name": "lookup_ticket", "description": "A ticket by id",
                                      "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}},
                                                      "required": ["id"]}}]}
                elif m == "tools/call":
                    outer.calls.append(msg["params"])
                    res = {"content": [{"type": "text", "text": f"ticket {msg['params']['arguments'].get('id')}: "
                                        "slow deploy since the regex change"}], "isError": False}
                    sse = True
                else:
                    res = {}
                data = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": res})
                body = (f"event: message\ndata: {data}\n\n" if sse else data).encode()
                self.reply(200, body, "text/event-stream" if sse else "application/json",
                           [("Mcp-Session-Id", "sess-1")])

        self.srv = hs.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_assistant_external_mcp_server(tmp_path):
    token = "mcp-secret-token-77"
    stub = McpStub(token)
    cfg = tmp_path / "mcp.json"
    cfg.write_text(json.dumps([{"name": "tickets", "endpoint": f"http://127.0.0.1:{stub.port}/mcp", "auth-token": token},
                               {"name": "down", "endpoint": "http://127.0.0.1:1/mcp"}]))
    p = Provider("anthropic", KEY)
    s = start(tmp_path, p, f"--assistant-mcp-servers-file={cfg}", "--llm-recommendations=false")
    try:
        p.script = [p.tool_calls([("tickets__lookup_ticket", {"id": "T-1"}, "c1"),
                                  ("list_projects", {}, "c2")]),
                    p.text("T-1 says the regex change slowed deploys.")]
        st, out = call(s, "POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "any tickets?"}]})
        assert st == 200, out
        ext, own = out["steps"]
        assert ext["tool"] == "tickets__lookup_ticket" and not ext["is_error"] and "slow deploy" in ext["result"], ext
        assert not own["is_error"] and "default" in own["result"]
        assert stub.calls == [{"name": "lookup_ticket", "arguments": {"id": "T-1"}}] and stub.problems == []
        assert "down" in out["notes"], out
        offered = [t["name"] for t in p.requests[0][3]["tools"]]
        assert "tickets__lookup_ticket" in offered and "list_projects" in offered
        assert p.problems == [] and token not in json.dumps(out)
    finally:
        s.stop()
        p.stop()
        stub.stop()
    assert token not in s.output() and KEY not in s.output()
    bad = tmp_path / "bad.json"
    bad.write_text('[{"name": "a__b", "endpoint": "http://x"}]')
    s2 = Server(tmp_path / "d2", None, f"--assistant-mcp-servers-file={bad}")
    s2.start(wait=False)
    deadline = time.time() + 10
    while s2.running() and time.time() < deadline:
        time.sleep(0.1)
    assert not s2.running() and "--assistant-mcp-servers-file" in s2.output()


def test_answers_match_openapi(env):
    """The assistant's, the LLM settings' and an LLM-mode recommendation's
    answers against openapi.json (objects read as closed)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_openapi import Document
    doc = Document()
    p, s = env("gemini")
    send_profile(s, [(REGEX, "web", 600)])
    p.script = [p.text(json.dumps(EXAMINE)), p.text(json.dumps(SUMMARY))]

    def check(method, path, body=None, want=200):
        st, out = http(method, s.url + path, None if body is None else json.dumps(body).encode(),
                       {"Content-Type": "application/json"}, timeout=60)
        assert st == want, out
        doc.check(method, path, st, "application/json", out)
        return json.loads(out)
    check("POST", BASE + "/recommendations/refresh")
    assert check("GET", BASE + "/recommendations")["recommendations"][0]["llm"]["status"] == "ok"
    p.script = [p.error(400, "bad")]
    check("POST", BASE + "/recommendations/regenerate")  # an llm error answer
    p.script = [p.tool_call("top_functions", {"project": DEFAULT_PROJECT}, "c1"), p.text("done")]
    check("POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "x"}]})
    p.script = [p.error(503, "down")] * 4
    check("POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "x"}]}, 502)
    check("GET", "/public/api/v1/assistant/config")
    check("GET", "/public/api/v1/settings/llm")
    check("PUT", "/public/api/v1/settings/llm", {"model_summarize": "small-2"})
    check("PUT", "/public/api/v1/settings/llm", {"api_key": "x"}, 400)


def test_timeout(env):
    p, s = env("openai-compatible", "--llm-timeout=1s", "--llm-max-retries=0", "--llm-recommendations=false")

    def slow(prov, body):
        time.sleep(2.5)
        return prov.text("late")
    p.script = [slow]
    t0 = time.time()
    st, out = call(s, "POST", BASE + "/assistant", {"messages": [{"role": "user", "content": "x"}]})
    assert st == 502 and "could not be reached" in out["error"] and "imeout" in out["error"], out
    assert time.time() - t0 < 2.4
