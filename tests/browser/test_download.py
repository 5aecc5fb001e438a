"""The flamegraph view's Download menu (web/download.js): each format is
fetched with the very request body the view used for its flamegraph (same
filter, grouping, search, node budget), with the page's credentials and,
when the ember_csrf cookie is set, its X-Ember-CSRF header; the file is
saved under the server's name and holds that export."""

import json
import time

import pytest

from conftest import PROJECT, no_errors, open_ui, start_server  # noqa: F401
from ember_batch import Batch, send_batch  # (tests/lib)

PROFILE = [(["main", "compute", "hash_block"], 60), (["main", "parse"], 30), (["main"], 10)]

# Records every fetch (URL, method, body, credentials, headers) and every
# file the page saves through an <a download> click (name, text).
SPY = """(() => {
  window.fetches = [];
  const orig = window.fetch;
  window.fetch = (url, opts = {}) => {
    window.fetches.push({url: String(url), method: opts.method || 'GET', body: opts.body || null,
                         credentials: opts.credentials || null, headers: opts.headers || {}});
    return orig(url, opts);
  };
  window.saved = [];
  HTMLAnchorElement.prototype.click = function () {
    const name = this.download, href = this.href;
    window.fetchedBlob = orig(href).then(r => r.arrayBuffer()).then(b => {
      const bytes = new Uint8Array(b);
      window.saved.push({name, size: bytes.length, head: Array.from(bytes.slice(0, 2)),
                         text: new TextDecoder().decode(bytes)});
    });
  };
  return true;
})()"""


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    b = Batch(sample_rate_hz=19)
    attrs = {"process.executable.name": "dlapp", "host.name": "testhost", "thread.name": "main"}
    for frames, value in PROFILE:
        b.add(frames, attrs, value)
    now = int(time.time() * 1000)
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 55_000))["stored"]
    return srv


def choose(page, fmt):
    page.evaluate(f"""(() => {{ const s = document.getElementById('download');
        s.value = {json.dumps(fmt)}; s.dispatchEvent(new Event('change')); return true; }})()""")


def test_download_menu_sends_the_view_request(server, page):
    open_ui(page, server.base)
    page.evaluate("document.cookie = 'ember_csrf=tok123; path=/'")
    page.evaluate(SPY)
    options = page.evaluate("Array.from(document.getElementById('download').options).map(o => o.value)")
    assert options == ["", "json", "pprof", "folded", "speedscope"]
    # The view's own request, then one more of its refreshes to compare with.
    page.evaluate("document.getElementById('refresh').click()")
    page.wait_for("window.fetches.some(f => f.url.endsWith('/flamegraph/json'))")
    page.wait_for("document.body.dataset.state === 'ready'")
    view = [f for f in page.evaluate("window.fetches") if f["url"].endswith("/flamegraph/json")][-1]
    for fmt, name_end in (("folded", ".folded.txt"), ("speedscope", ".speedscope.json"),
                          ("pprof", ".pb.gz"), ("json", ".json")):
        n = page.evaluate("window.saved.length")
        choose(page, fmt)
        page.wait_for(f"window.saved.length > {n}", timeout=15)
        sent = [f for f in page.evaluate("window.fetches")
                if f["url"].endswith(f"/flamegraph/{fmt}")][-1]
        assert sent["url"].endswith(f"/public/api/v1/project/{PROJECT}/flamegraph/{fmt}")
        assert sent["method"] == "POST" and sent["credentials"] == "same-origin"
        assert sent["headers"].get("X-Ember-CSRF") == "tok123"
        assert json.loads(sent["body"]) == json.loads(view["body"])
        saved = page.evaluate("window.saved")[-1]
        assert saved["name"].endswith(name_end), saved["name"]
        if fmt == "folded":
            lines = dict(l.rsplit(" ", 1) for l in saved["text"].splitlines())
            assert sum(map(int, lines.values())) == 100
            assert lines["dlapp;main;compute;hash_block"] == "60", lines
        elif fmt == "speedscope":
            doc = json.loads(saved["text"])
            assert sum(doc["profiles"][0]["weights"]) == 100
        elif fmt == "pprof":
            assert saved["head"] == [0x1F, 0x8B] and saved["size"] > 50
        else:
            assert json.loads(saved["text"])["total"] == 100
    assert page.evaluate("document.getElementById('download').value") == ""
    assert page.evaluate("document.getElementById('summary').textContent").startswith("Saved ember-")
    no_errors(page)
