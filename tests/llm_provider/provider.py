"""A TEST-ONLY stand-in for the LLM providers ember-server talks to
(server/llm/llm.h): Anthropic's Messages API, OpenAI's Chat Completions
(and an OpenAI-compatible endpoint at a path of its own) and Gemini's
generateContent. Never shipped nor loaded by the product.

Every request is checked against its provider's documented shape
(headers: x-api-key + anthropic-version, Authorization: Bearer,
x-goog-api-key or ?key=; body fields; the tool-calling format, tool
results answering earlier tool calls) and recorded; a request that breaks
it is answered 400 and its problem kept in `problems`, which the tests
assert empty. Answers come from a script: a list of entries taken in
order, each a dict {"status", "headers", "body"} (body: an object sent as
JSON, or bytes/str sent as is: truncated or malformed answers) or a
callable (the provider, the parsed request) returning one. The helpers
text(), tool_call() and error() build each provider's answer shape.
"""

import http.server as httpserver
import json
import re
import threading
import time
import urllib.parse

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_SCHEMA_KEYS = {"type", "description", "enum", "format", "minimum", "maximum", "nullable",
                      "required", "minItems", "maxItems", "properties", "items"}


class Provider:
    def __init__(self, kind, key, port=0, path_prefix=""):
        """kind: anthropic, openai, gemini or openai-compatible; path_prefix:
        where the API lives under the root (the base URL's path)."""
        self.kind, self.key, self.prefix = kind, key, path_prefix
        self.script = []
        self.requests = []   # (time, path, headers dict, body object)
        self.problems = []
        self.lock = threading.Lock()
        outer = self

        class H(httpserver.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                status, headers, body = outer.handle(self.path, dict(self.headers.items()), raw)
                data = body if isinstance(body, bytes) else (
                    body.encode() if isinstance(body, str) else json.dumps(body).encode())
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.srv = httpserver.ThreadingHTTPServer(("127.0.0.1", port), H)
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()

    # --- checking ---------------------------------------------------------------

    def handle(self, path, headers, raw):
        h = {k.lower(): v for k, v in headers.items()}
        problems = []
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
            problems.append("the body is not JSON")
        if body is not None and not isinstance(body, dict):
            problems.append("the body is not an object")
        if not h.get("content-type", "").startswith("application/json"):
            problems.append("Content-Type is not application/json")
        if isinstance(body, dict):
            getattr(self, "check_" + self.kind.replace("-", "_"))(path, h, body, problems)
        with self.lock:
            self.requests.append((time.time(), path, h, body))
            if problems:
                self.problems.extend(problems)
                return 400, {}, {"error": {"message": "; ".join(problems)}}
            entry = self.script.pop(0) if self.script else None
        if entry is None:
            self.problems.append("a request beyond the script")
            return 500, {}, {"error": {"message": "the test script has no more answers"}}
        if callable(entry):
            entry = entry(self, body)
        return entry.get("status", 200), entry.get("headers", {}), entry["body"]

    def check_anthropic(self, path, h, b, p):
        if path != self.prefix + "/v1/messages":
            p.append(f"path {path}, expected {self.prefix}/v1/messages")
        if h.get("x-api-key") != self.key:
            p.append("x-api-key is not the key")
        if not h.get("anthropic-version"):
            p.append("anthropic-version header missing")
        if "authorization" in h:
            p.append("Authorization sent to Anthropic")
        allowed = {"model", "max_tokens", "messages", "system", "tools", "tool_choice", "temperature",
                   "stop_sequences", "metadata", "stream", "top_p", "top_k"}
        p.extend(f"unknown field {k}" for k in b if k not in allowed)
        if not isinstance(b.get("model"), str) or not b["model"]:
            p.append("model missing")
        if not isinstance(b.get("max_tokens"), int) or b["max_tokens"] < 1:
            p.append("max_tokens missing")
        if "system" in b and not isinstance(b["system"], (str, list)):
            p.append("system is not a string")
        msgs = b.get("messages")
        if not isinstance(msgs, list) or not msgs:
            p.append("messages missing")
            return
        if msgs[0].get("role") != "user":
            p.append("the first message is not the user's")
        tool_ids = set()
        for i, m in enumerate(msgs):
            if m.get("role") not in ("user", "assistant"):
                p.append(f"messages[{i}].role {m.get('role')!r}")
            if i and m.get("role") == msgs[i - 1].get("role"):
                p.append(f"messages[{i}]: roles do not alternate")
            c = m.get("content")
            if isinstance(c, str):
                continue
            if not isinstance(c, list) or not c:
                p.append(f"messages[{i}].content empty")
                continue
            for blk in c:
                t = blk.get("type")
                if t == "text":
                    if not isinstance(blk.get("text"), str) or not blk["text"]:
                        p.append(f"messages[{i}]: empty text block")
                elif t == "tool_use":
                    if m["role"] != "assistant" or not blk.get("id") or not NAME.match(blk.get("name", "")) \
                            or not isinstance(blk.get("input"), dict):
                        p.append(f"messages[{i}]: bad tool_use block")
                    tool_ids.add(blk.get("id"))
                elif t == "tool_result":
                    if m["role"] != "user" or blk.get("tool_use_id") not in tool_ids:
                        p.append(f"messages[{i}]: tool_result answers no tool_use")
                else:
                    p.append(f"messages[{i}]: block type {t!r}")
        for t in b.get("tools", []):
            if not NAME.match(t.get("name", "")) or not isinstance(t.get("input_schema"), dict) \
                    or t["input_schema"].get("type") != "object" or set(t) - {"name", "description", "input_schema"}:
                p.append(f"bad tool {t.get('name')!r}")

    def check_openai(self, path, h, b, p, compatible=False):
        want = self.prefix + "/chat/completions"
        if path != want:
            p.append(f"path {path}, expected {want}")
        if h.get("authorization") != "Bearer " + self.key:
            p.append("Authorization is not Bearer <key>")
        allowed = {"model", "messages", "tools", "tool_choice", "response_format", "temperature", "stream",
                   "max_tokens" if compatible else "max_completion_tokens", "top_p", "n", "stop", "seed"}
        p.extend(f"unknown field {k}" for k in b if k not in allowed)
        if not isinstance(b.get("model"), str) or not b["model"]:
            p.append("model missing")
        msgs = b.get("messages")
        if not isinstance(msgs, list) or not msgs:
            p.append("messages missing")
            return
        ids = set()
        for i, m in enumerate(msgs):
            r = m.get("role")
            if r not in ("system", "developer", "user", "assistant", "tool"):
                p.append(f"messages[{i}].role {r!r}")
            if r == "tool":
                if m.get("tool_call_id") not in ids or not isinstance(m.get("content"), str):
                    p.append(f"messages[{i}]: tool message answers no tool call")
            elif r == "assistant" and m.get("tool_calls"):
                for c in m["tool_calls"]:
                    f = c.get("function", {})
                    if c.get("type") != "function" or not c.get("id") or not NAME.match(f.get("name", "")):
                        p.append(f"messages[{i}]: bad tool call")
                    try:
                        if not isinstance(json.loads(f.get("arguments", "")), dict):
                            raise ValueError
                    except ValueError:
                        p.append(f"messages[{i}]: arguments is not a JSON object string")
                    ids.add(c.get("id"))
            elif not isinstance(m.get("content"), str):
                p.append(f"messages[{i}].content is not a string")
        rf = b.get("response_format")
        if rf is not None:
            if rf != {"type": "json_object"}:
                p.append("response_format")
            elif "json" not in json.dumps(msgs).lower():
                p.append("json_object mode without the word JSON in the messages")
        for t in b.get("tools", []):
            f = t.get("function", {})
            if t.get("type") != "function" or not NAME.match(f.get("name", "")) \
                    or not isinstance(f.get("parameters"), dict):
                p.append(f"bad tool {f.get('name')!r}")

    def check_openai_compatible(self, path, h, b, p):
        self.check_openai(path, h, b, p, compatible=True)

    def check_gemini(self, path, h, b, p):
        u = urllib.parse.urlsplit(path)
        m = re.fullmatch(re.escape(self.prefix) + r"/models/([^/:]+):generateContent", u.path)
        if not m:
            p.append(f"path {u.path} is not /models/MODEL:generateContent")
        self.gemini_model = m.group(1) if m else None
        q = urllib.parse.parse_qs(u.query)
        if h.get("x-goog-api-key") != self.key and q.get("key") != [self.key]:
            p.append("neither x-goog-api-key nor ?key= is the key")
        allowed = {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings"}
        p.extend(f"unknown field {k}" for k in b if k not in allowed)
        contents = b.get("contents")
        if not isinstance(contents, list) or not contents:
            p.append("contents missing")
            return
        called = []
        for i, c in enumerate(contents):
            if c.get("role") not in ("user", "model"):
                p.append(f"contents[{i}].role {c.get('role')!r}")
            parts = c.get("parts")
            if not isinstance(parts, list) or not parts:
                p.append(f"contents[{i}].parts empty")
                continue
            for part in parts:
                if "text" in part:
                    if not isinstance(part["text"], str):
                        p.append(f"contents[{i}]: text")
                elif "functionCall" in part:
                    fc = part["functionCall"]
                    if c["role"] != "model" or not NAME.match(fc.get("name", "")) or not isinstance(fc.get("args"), dict):
                        p.append(f"contents[{i}]: bad functionCall")
                    called.append(fc.get("name"))
                elif "functionResponse" in part:
                    fr = part["functionResponse"]
                    if c["role"] != "user" or fr.get("name") not in called or not isinstance(fr.get("response"), dict):
                        p.append(f"contents[{i}]: functionResponse answers no functionCall")
                else:
                    p.append(f"contents[{i}]: unknown part {list(part)}")
        si = b.get("systemInstruction")
        if si is not None and not (isinstance(si.get("parts"), list) and all("text" in x for x in si["parts"])):
            p.append("systemInstruction")
        gc = b.get("generationConfig", {})
        if set(gc) - {"maxOutputTokens", "responseMimeType", "temperature", "topP", "topK", "responseSchema"}:
            p.append("generationConfig")

        def schema_ok(s, where):
            bad = set(s) - GEMINI_SCHEMA_KEYS
            if bad:
                p.append(f"{where}: schema keys Gemini rejects: {sorted(bad)}")
            for k, v in s.get("properties", {}).items():
                schema_ok(v, where + "." + k)
            if isinstance(s.get("items"), dict):
                schema_ok(s["items"], where + "[]")
        for t in b.get("tools", []):
            for d in t.get("functionDeclarations", []):
                if not NAME.match(d.get("name", "")):
                    p.append("bad function name")
                schema_ok(d.get("parameters", {}), d.get("name", "?"))

    # --- answers ------------------------------------------------------------------

    def text(self, text, in_tokens=100, out_tokens=50):
        if self.kind == "anthropic":
            body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": in_tokens, "output_tokens": out_tokens}}
        elif self.kind == "gemini":
            body = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                                    "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": in_tokens, "candidatesTokenCount": out_tokens}}
        else:
            body = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": in_tokens, "completion_tokens": out_tokens}}
        return {"status": 200, "body": body}

    def tool_call(self, name, args, call_id="call_1", text=""):
        return self.tool_calls([(name, args, call_id)], text)

    def tool_calls(self, calls, text=""):
        """An answer asking for several tools at once: [(name, args, id)]."""
        if self.kind == "anthropic":
            content = ([{"type": "text", "text": text}] if text else []) + \
                [{"type": "tool_use", "id": i, "name": n, "input": a} for n, a, i in calls]
            body = {"id": "msg_2", "type": "message", "role": "assistant", "content": content,
                    "stop_reason": "tool_use", "usage": {"input_tokens": 200, "output_tokens": 20}}
        elif self.kind == "gemini":
            parts = ([{"text": text}] if text else []) + [{"functionCall": {"name": n, "args": a}} for n, a, _ in calls]
            body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                    "usageMetadata": {"promptTokenCount": 200, "candidatesTokenCount": 20}}
        else:
            body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": text or None,
                "tool_calls": [{"id": i, "type": "function",
                                "function": {"name": n, "arguments": json.dumps(a)}} for n, a, i in calls]}}],
                "usage": {"prompt_tokens": 200, "completion_tokens": 20}}
        return {"status": 200, "body": body}

    def error(self, status, message, headers=None):
        if self.kind == "gemini":
            body = {"error": {"code": status, "message": message, "status": "RESOURCE_EXHAUSTED"}}
        elif self.kind == "anthropic":
            body = {"type": "error", "error": {"type": "rate_limit_error", "message": message}}
        else:
            body = {"error": {"message": message, "type": "requests", "code": str(status)}}
        return {"status": status, "headers": headers or {}, "body": body}

    # --- what was asked -----------------------------------------------------------

    def model_of(self, req):
        """The model a recorded request named."""
        _, path, _, body = req
        if self.kind == "gemini":
            return urllib.parse.unquote(re.search(r"/models/([^/:]+):", path).group(1))
        return body.get("model")

    def prompt_text(self, req):
        return json.dumps(req[3])

    def tool_results(self, req):
        """The tool results a recorded request carries (their text)."""
        b = req[3]
        out = []
        if self.kind == "anthropic":
            for m in b["messages"]:
                if isinstance(m["content"], list):
                    out += [x["content"] for x in m["content"] if x["type"] == "tool_result"]
        elif self.kind == "gemini":
            for c in b["contents"]:
                out += [x["functionResponse"]["response"]["content"] for x in c["parts"] if "functionResponse" in x]
        else:
            out += [m["content"] for m in b["messages"] if m["role"] == "tool"]
        return out
