"""Browser tests of the recommendations' lifecycle buttons (web/view_recs.js:
Regenerate, Refresh traces, Suppress on a hot trace, Unsuppress from the
suppressed list; the new/worsened badge) and of the Settings page
(web/view_settings.js: the recommendations and cost settings, saved over
the flags and reset, refusals shown, the history). A real ember-server
with CPU samples of a deployment compiling a regular expression per
request. Screenshots in build/test-artifacts/screenshots/recs_life_*.png
and settings_*.png.

Run from the repository root after building ember-server:
    /usr/bin/python3 -m pytest -q tests/browser/test_recs_lifecycle.py
"""

import json
import time
import urllib.request

import pytest

from conftest import PROJECT, no_errors, open_ui, shot, start_server, wait_state
from ember_batch import Batch, send_batch

SETTINGS = "/public/api/v1/settings/recommendations"


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    now = int(time.time() * 1000)
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000cc", sample_rate_hz=19, host_cpus=8)
    web = {"host.name": "web-1", "process.executable.name": "shop", "k8s.deployment.name": "shop-api"}
    b.add(["main", "handle_request", "validate_email", "pcre2_compile_8", "compile_branch"], web, 3000, binary="shop")
    b.add(["main", "handle_request", "render", "vsnprintf", "__printf_buffer"], web, 600, binary="shop")
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 120_000, end_ms=now - 115_000))["stored"]
    return srv


def api(server, method, path, body=None):
    req = urllib.request.Request(server.base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def gen_text(page):
    return page.evaluate("document.querySelector('#view-recs .recs-gen').textContent")


def test_lifecycle_buttons(server, page):
    open_ui(page, server.base, "/?view=recs")
    assert page.evaluate("document.querySelector('#view-recs .recs-status.new') !== null")
    # Regenerate and Refresh traces: a new generation each, named.
    page.evaluate("document.querySelector('#view-recs [data-act=regenerate]').click()")
    page.wait_for("document.querySelector('#view-recs .recs-gen').textContent.includes('(regenerate)')")
    wait_state(page, "ready")
    page.evaluate("document.querySelector('#view-recs [data-act=refresh]').click()")
    page.wait_for("document.querySelector('#view-recs .recs-gen').textContent.includes('(refresh)')")
    wait_state(page, "ready")
    # Unchanged since the generation before: no badge.
    assert page.evaluate("document.querySelector('#view-recs .recs-status') === null")
    shot(page, "recs_life_list")

    # Suppress the regex trace from the detail's technical details.
    rid = page.evaluate("document.querySelector('#view-recs .recs-card').dataset.rec")
    page.evaluate(f"document.querySelector('#view-recs .recs-card[data-rec=\"{rid}\"]').click()")
    wait_state(page, "ready")
    traces = page.evaluate("[...document.querySelectorAll('#view-recs .recs-trace')].map(d => ({id: d.querySelector('[data-act=suppress]').dataset.trace, text: d.querySelector('summary').textContent}))")
    assert len(traces) == 2, traces
    regex = next(t["id"] for t in traces if "regex-compile" in t["text"])
    shot(page, "recs_life_detail", full_page=True)
    page.evaluate(f"document.querySelector('#view-recs [data-act=suppress][data-trace=\"{regex}\"]').click()")
    page.wait_for(f"!!document.querySelector('#view-recs .recs-suppressed:not([hidden]) li[data-trace=\"{regex}\"]')")
    wait_state(page, "ready")
    # The application's other hot trace stays; the suppressed one is gone everywhere.
    text = page.evaluate("document.querySelector('#view-recs').innerText")
    assert "Suppressed hot traces (1)" in text
    assert all(regex not in t for t in page.evaluate("[...document.querySelectorAll('#view-recs .recs-card, #view-recs .recs-detail')].map(e => e.innerHTML)"))
    assert api(server, "GET", f"/public/api/v1/project/{PROJECT}/recommendations/suppressed")["suppressed"][0]["trace_id"] == regex
    page.evaluate("document.querySelector('#view-recs .recs-suppressed').open = true")
    shot(page, "recs_life_suppressed", full_page=True)

    # Unsuppress: back, and the list hides.
    page.evaluate(f"document.querySelector('#view-recs [data-unsuppress=\"{regex}\"]').click()")
    page.wait_for("document.querySelector('#view-recs .recs-suppressed').hidden")
    wait_state(page, "ready")
    assert "Regular expression" in page.evaluate("document.querySelector('#view-recs .recs-list').innerText")
    hist = api(server, "GET", f"/public/api/v1/project/{PROJECT}/recommendations/history")["history"]
    assert [h["action"] for h in hist[:4]] == ["unsuppress", "suppress", "refresh", "regenerate"], hist
    no_errors(page)


def test_settings_page(server, page):
    open_ui(page, server.base, "/?view=settings")
    assert page.evaluate("document.querySelector('.views-nav a[aria-current=page]').dataset.view") == "settings"
    vals = page.evaluate("Object.fromEntries([...document.querySelectorAll('#view-settings input')].map(i => [i.name, i.value]))")
    assert vals == {"window_ms": "6", "min_share": "0.5", "step_ms": "60", "cost_per_core_hour": "0.04",
                    "cost_per_gpu_hour": "2.5"}, vals
    assert page.evaluate("document.querySelectorAll('#view-settings [data-reset]').length") == 0
    shot(page, "settings_defaults", full_page=True)

    # Save a new price and window: on the server, over the flags.
    page.evaluate("""(() => { const f = document.querySelector('#view-settings form');
        f.elements.cost_per_core_hour.value = '0.5'; f.elements.window_ms.value = '2';
        f.requestSubmit(); })()""")
    page.wait_for("document.querySelector('#view-settings .settings-status').textContent === 'Saved.'")
    s = api(server, "GET", SETTINGS)
    assert s["cost_per_core_hour"] == 0.5 and s["window_ms"] == 7_200_000, s
    assert sorted(s["overridden"]) == ["cost_per_core_hour", "window_ms"]
    assert page.evaluate("document.querySelectorAll('#view-settings [data-reset]').length") == 2
    page.wait_for("!!document.querySelector('#view-settings .settings-history tr[data-action=settings]')")
    # The recommendations' costs follow.
    d = api(server, "POST", f"/public/api/v1/project/{PROJECT}/recommendations/regenerate")
    r = d["recommendations"][0]
    assert abs(r["savings"]["annual_cost"] - r["savings"]["cores"] * 8766 * 0.5) <= 0.01 + 1e-6 * r["savings"]["annual_cost"]
    shot(page, "settings_saved", full_page=True)

    # A refused value: the server's message, nothing changed.
    page.evaluate("""(() => { const f = document.querySelector('#view-settings form');
        f.elements.window_ms.value = '48'; f.requestSubmit(); })()""")
    page.wait_for("document.querySelector('#view-settings .settings-status').classList.contains('bad')")
    assert "window_ms" in page.evaluate("document.querySelector('#view-settings .settings-status').textContent")
    assert api(server, "GET", SETTINGS)["window_ms"] == 7_200_000

    # Reset goes back to the flag.
    page.evaluate("document.querySelector('#view-settings [data-reset=cost_per_core_hour]').click()")
    page.wait_for("document.querySelector('#view-settings input[name=cost_per_core_hour]').value === '0.04'")
    page.evaluate("document.querySelector('#view-settings [data-reset=window_ms]').click()")
    page.wait_for("document.querySelectorAll('#view-settings [data-reset]').length === 0")
    assert api(server, "GET", SETTINGS)["overridden"] == []
    no_errors(page, allow=(lambda e: "400" in str(e),))


def test_profiler_inventory(server, page):
    """Settings lists every agent that sent profiles (the module's own and
    one that says its host and version), reporting, with the project's
    name; the CSV download saves the same list."""
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000dd", host_cpus=64)
    b.add(["main", "train_step"], {"host.name": "gpu-node-3"}, 100, binary="trainer")
    assert send_batch(server.base, b.encode(sequence=1),
                      headers={"X-Ember-Host": "gpu-node-3", "User-Agent": "ember-agent/9.9.9"})["stored"]
    for _ in range(50):  # written to the metadata database within a second
        if api(server, "GET", "/public/api/v1/agents")["total"] == 2:
            break
        time.sleep(0.1)
    open_ui(page, server.base, "/?view=settings")
    row = "#view-settings .inventory tr[data-instance='7e1d2c3b-0000-4000-8000-0000000000dd']"
    page.wait_for(f"!!document.querySelector(\"{row}\")")
    cells = page.evaluate(f"[...document.querySelector(\"{row}\").cells].map(c => c.textContent.trim())")
    assert cells == ["reporting", "gpu-node-3", "ember-agent/9.9.9", "default", "ember v1", "127.0.0.1",
                     cells[6], "100"], cells
    assert cells[6].endswith("s ago"), cells
    assert page.evaluate("document.querySelector('#view-settings .inventory-total').textContent") == "2"
    assert page.evaluate("document.querySelector('#view-settings .inventory-reporting').textContent") == "2"
    page.evaluate("document.querySelector('#view-settings .inventory-csv').click()")
    page.wait_for("document.querySelector('#view-settings .inventory-status').textContent === 'Saved ember-agents.csv.'")
    page.evaluate("document.querySelector('#view-settings .settings-inventory').scrollIntoView()")
    shot(page, "settings_inventory")
    no_errors(page)


def test_entity_page_cost(server, page):
    """A deployment's page: the annual cost at its rate, and the savings of
    the recommendations that name it; Open goes to the recommendation."""
    open_ui(page, server.base, "/?view=entities&entity=deployment&name=shop-api")
    page.wait_for("!!document.querySelector('#view-entities .ent-recs')")
    cost = page.evaluate("document.querySelector('#view-entities .ent-cost dd').textContent")
    recs = page.evaluate("document.querySelector('#view-entities .ent-recs dd').textContent")
    assert cost.startswith("$") and cost.endswith("/yr"), cost
    assert recs.startswith("1 \u00b7 save $") and "/yr" in recs, recs
    shot(page, "recs_life_entity")
    # Another deployment's page would not list them; the host's does (an affected entity).
    page.evaluate("document.querySelector('#view-entities .ent-recs-open').click()")
    wait_state(page, "ready")
    assert page.evaluate("new URLSearchParams(location.search).get('view')") == "recs"
    assert page.evaluate("!document.querySelector('#view-recs .recs-detail').hidden")
    no_errors(page)
