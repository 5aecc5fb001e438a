"""The API explorer at /public/api/v1/docs (web/api_docs.js): every route
of the OpenAPI document is listed, and "Send" makes the real request — the
flamegraph's example body (the last hour) answers the profile this test
stored, a token typed into the page goes as a bearer token, and the page
shows the server's refusals as they are."""

import json
import time

import pytest

from conftest import no_errors, shot, start_server  # noqa: F401
from ember_batch import Batch, send_batch  # (tests/lib)
from harness import http  # (tests/lib)

PROFILE = [(["main", "serve", "encode"], 40), (["main", "serve"], 10)]


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    b = Batch(sample_rate_hz=19)
    for frames, value in PROFILE:
        b.add(frames, {"process.executable.name": "apiapp", "host.name": "h"}, value)
    now = int(time.time() * 1000)
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 55_000))["stored"]
    return srv


def op(page, method, path):
    """The index of the operation's <details> element, opened."""
    return page.evaluate(f"""(() => {{
        const el = [...document.querySelectorAll('.api-op')].find(d =>
            d.querySelector('.api-method').textContent === {json.dumps(method)} &&
            d.querySelector('.api-path').textContent === {json.dumps(path)});
        if (!el) return -1;
        el.open = true;
        return Number(el.dataset.op);
    }})()""")


def send(page, i):
    page.evaluate(f"document.querySelector('.api-op[data-op=\"{i}\"] .api-send').click()")
    page.wait_for(f"!document.querySelector('.api-op[data-op=\"{i}\"] .api-answer').hidden", timeout=15)
    return (page.evaluate(f"document.querySelector('.api-op[data-op=\"{i}\"] .api-status').textContent"),
            page.evaluate(f"document.querySelector('.api-op[data-op=\"{i}\"] .api-answer').textContent"))


def test_every_route_listed_and_a_real_request(server, page):
    page.navigate(server.base + "/public/api/v1/docs")
    page.wait_for("document.body.dataset.state === 'ready'", timeout=15)
    st, body = http("GET", server.base + "/public/api/v1/openapi.json")
    doc = json.loads(body)
    want = sorted((m.upper(), p) for p, item in doc["paths"].items() for m in item
                  if m in ("get", "post", "put", "delete"))
    shown = sorted(tuple(x) for x in page.evaluate("""[...document.querySelectorAll('.api-op')].map(d =>
        [d.querySelector('.api-method').textContent, d.querySelector('.api-path').textContent])"""))
    assert shown == want
    # The flamegraph with its example body: the stored profile, 50 samples.
    i = op(page, "POST", "/public/api/v1/project/{project_id}/flamegraph/json")
    assert i >= 0
    status, answer = send(page, i)
    assert status.startswith("200"), (status, answer[:300])
    assert json.loads(answer)["total"] == 50
    shot(page, "api-docs-flamegraph")
    # A token typed in goes as a bearer token: a wrong one is refused.
    page.evaluate("document.getElementById('api-token').value = 'emb_not-a-token'")
    status, answer = send(page, i)
    assert status.startswith("401") and "Invalid token" in json.loads(answer)["error"], (status, answer)
    # The filter narrows the list.
    page.evaluate("""(() => { const f = document.getElementById('api-filter');
        f.value = 'service-tokens'; f.dispatchEvent(new Event('input')); })()""")
    visible = page.evaluate("[...document.querySelectorAll('.api-op')].filter(d => !d.hidden).length")
    assert 1 <= visible <= 3
    no_errors(page, allow=[lambda e: "401" in str(e)])
