"""Browser tests of the Diff view (web/view_diff.js): a real ember-server
holding two windows of samples, 10-6 minutes ago (the baseline) and 5-1
minutes ago (the comparison), where `slow` got slower, `fast` faster,
`fresh` is new, `gone` removed and `steady` unchanged; the page opened with
URL parameters whose scopes are exactly those windows.

Run from the repository root:
    EMBER_BUILD=/tmp/build-diff /usr/bin/python3 -m pytest -q tests/browser/test_diff.py
"""

import time
import urllib.parse

import pytest

from conftest import focus, no_errors, open_ui, search_params, shot, start_server, type_in, wait_state  # noqa: F401
from ember_batch import Batch, send_batch  # (tests/lib)

HZ = 20
WINDOW_MS = 240_000  # each scope: 24 batches of 10 s
BATCH_MS = 10_000
# Samples per 10 s batch: (baseline, comparison).
PROFILE = {
    "slow": (20, 60),
    "fast": (40, 10),
    "gone": (10, 0),
    "fresh": (0, 20),
    "steady": (30, 30),
}
ATTRS = {"process.executable.name": "myapp", "host.name": "web-1"}


def cores(per_batch):
    """Cores of a function with per_batch samples in every batch of a window."""
    return per_batch * (WINDOW_MS // BATCH_MS) / HZ / (WINDOW_MS / 1000)


def populate(base):
    now = int(time.time() * 1000)
    windows = {"baseline": (now - 600_000, now - 360_000), "comparison": (now - 300_000, now - 60_000)}
    seq = 0
    for i, (name, (start, end)) in enumerate(windows.items()):
        for t in range(start, end, BATCH_MS):
            seq += 1
            b = Batch(agent_instance="5d1c7a0e-2b4f-4c8e-9f3a-6e7b8c9d0a1b", sample_rate_hz=HZ)
            for fn, values in PROFILE.items():
                if values[i]:
                    b.add(["main", "run", fn], ATTRS, values[i])
            answer = send_batch(base, b.encode(sequence=seq, start_ms=t, end_ms=t + BATCH_MS))
            assert answer["stored"], answer
    return windows


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    srv.windows = populate(srv.base)
    return srv


def diff_path(srv, **extra):
    (bs, be), (cs, ce) = srv.windows["baseline"], srv.windows["comparison"]
    p = {"view": "diff", "cmp": "custom", "bs": bs, "be": be, "cs": cs, "ce": ce, **extra}
    return "/?" + urllib.parse.urlencode(p)


def rows(page):
    """The table as the user sees it: name, status badge, change text, cells."""
    return page.evaluate("""[...document.querySelectorAll('#view-diff .diff-data tbody tr')].map((tr) => ({
        name: tr.dataset.name, status: tr.dataset.status, kind: tr.dataset.kind,
        badge: tr.querySelector('.diff-badge')?.textContent || '',
        cells: [...tr.cells].map((td) => td.innerText.trim()),
        changeClass: tr.cells[3].querySelector('span').className,
        changeColor: getComputedStyle(tr.cells[3].querySelector('span')).color}))""")


def row(page, name):
    found = [r for r in rows(page) if r["name"] == name]
    assert found, f"no row for {name!r}: {[r['name'] for r in rows(page)]}"
    return found[0]


def number(text):
    """A cell's number: '▲ +0.2' -> 0.2, '−0.15' -> -0.15, '+200%' -> 200."""
    t = text.replace("\u25B2", "").replace("\u25BC", "").replace("%", "").replace("\u2212", "-").strip()
    return float(t)


def click_row(page, name):
    page.evaluate(f"""(() => {{ const tr = [...document.querySelectorAll('#view-diff .diff-data tbody tr')]
        .find((t) => t.dataset.name === {name!r}); tr.scrollIntoView({{block: 'center'}}); }})()""")
    r = page.evaluate(f"""(() => {{ const tr = [...document.querySelectorAll('#view-diff .diff-data tbody tr')]
        .find((t) => t.dataset.name === {name!r}); const b = tr.cells[0].getBoundingClientRect();
        return {{x: b.left + 20, y: b.top + b.height / 2}}; }})()""")
    page.click(r["x"], r["y"])


def click_header(page, key):
    r = page.evaluate(f"""(() => {{ const b = document.querySelector('#view-diff .diff-data th[data-key="{key}"]')
        .getBoundingClientRect(); return {{x: b.left + b.width / 2, y: b.top + b.height / 2}}; }})()""")
    page.click(r["x"], r["y"])
    wait_state(page, "ready")


# --- the tests ----------------------------------------------------------------

def test_diff_marks_what_changed(server, page):
    open_ui(page, server.base, diff_path(server))
    # The form shows the scopes of the URL.
    form = page.evaluate("""(() => { const f = document.querySelector('#view-diff .diff-form').elements;
        return {cmp: f.cmp.value, bs: f.bs.dataset.ms, ce: f.ce.dataset.ms, bsText: f.bs.value}; })()""")
    assert form["cmp"] == "custom"
    assert int(form["bs"]) == server.windows["baseline"][0] and int(form["ce"]) == server.windows["comparison"][1]

    slow = row(page, "slow")
    assert slow["status"] == "changed" and slow["kind"] == "worse" and slow["badge"] == ""
    assert "worse" in slow["changeClass"]
    assert slow["changeColor"] == "rgb(185, 28, 28)"  # red
    # 20 -> 60 samples per 10 s batch at 20 Hz: 0.1 -> 0.3 cores, +0.2 (+200%).
    assert number(slow["cells"][1]) == pytest.approx(cores(20))
    assert number(slow["cells"][2]) == pytest.approx(cores(60))
    assert number(slow["cells"][3]) == pytest.approx(cores(60) - cores(20))
    assert number(slow["cells"][4]) == pytest.approx(200)
    assert slow["cells"][3].startswith("\u25B2 +")

    fast = row(page, "fast")
    assert fast["kind"] == "better" and "better" in fast["changeClass"]
    assert fast["changeColor"] == "rgb(21, 128, 61)"  # green
    assert number(fast["cells"][3]) == pytest.approx(cores(10) - cores(40))
    assert number(fast["cells"][4]) == pytest.approx(-75)

    fresh = row(page, "fresh")
    assert fresh["status"] == "new" and fresh["badge"] == "new" and fresh["kind"] == "worse"
    assert number(fresh["cells"][2]) == pytest.approx(cores(20)) and fresh["cells"][4] == "new"
    gone = row(page, "gone")
    assert gone["status"] == "removed" and gone["badge"] == "removed" and gone["kind"] == "better"
    assert number(gone["cells"][1]) == pytest.approx(cores(10)) and number(gone["cells"][4]) == -100

    steady = row(page, "steady")
    assert steady["kind"] == "same" and number(steady["cells"][3]) == 0
    # Self cores: main and run have none, so they are not listed.
    assert {r["name"] for r in rows(page)} == {"slow", "fast", "gone", "fresh", "steady"}
    # Sorted by the size of the change, either way.
    assert [r["name"] for r in rows(page)][:2] == ["slow", "fast"]

    summary = page.evaluate("document.querySelector('#view-diff .diff-summary').innerText")
    total = sum(v[1] for v in PROFILE.values()) - sum(v[0] for v in PROFILE.values())
    assert summary.startswith("1 function got slower, 1 faster, 1 new, 1 removed; total +"), summary
    assert f"+{cores(total):g} cores" in summary, summary
    shot(page, "diff")
    no_errors(page)


def test_total_toggle_sorting_and_search(server, page):
    open_ui(page, server.base, diff_path(server))
    page.evaluate("document.querySelector('#view-diff .diff-metric button[data-m=\"total\"]').click()")
    wait_state(page, "ready")
    assert search_params(page)["m"] == ["total"]
    names = [r["name"] for r in rows(page)]
    assert "main" in names and "run" in names
    main = row(page, "main")
    total = sum(v[1] for v in PROFILE.values()) - sum(v[0] for v in PROFILE.values())
    assert number(main["cells"][3]) == pytest.approx(cores(total))
    assert page.evaluate("document.querySelector('#view-diff .diff-data th[data-key=\"base\"]').innerText") == "Baseline total"

    # Change: largest increase first, then largest decrease first.
    click_header(page, "change")
    assert search_params(page)["sort"] == ["change"]
    changes = [number(r["cells"][3]) for r in rows(page)]
    assert changes == sorted(changes, reverse=True) and rows(page)[0]["name"] == "slow"
    click_header(page, "change")
    changes = [number(r["cells"][3]) for r in rows(page)]
    assert changes == sorted(changes) and rows(page)[0]["name"] == "fast"
    click_header(page, "name")
    assert [r["name"] for r in rows(page)] == sorted(names)

    # The search box narrows the table as one types, and lands in the URL.
    type_in(page, '#view-diff input[name="find"]', "s")
    page.wait_for("document.querySelectorAll('#view-diff .diff-data tbody tr').length === 4")
    assert {r["name"] for r in rows(page)} == {"slow", "fast", "steady", "fresh"}
    page.insert_text("l")
    page.wait_for("document.querySelectorAll('#view-diff .diff-data tbody tr').length === 1")
    assert rows(page)[0]["name"] == "slow"
    assert search_params(page)["find"] == ["sl"]
    page.insert_text("zzz")
    page.wait_for("document.querySelector('#view-diff .diff-none') !== null")
    assert "No function matches" in page.evaluate("document.querySelector('#view-diff .diff-none').innerText")
    no_errors(page)


def test_trend_panel_and_copied_link(server, page):
    open_ui(page, server.base, diff_path(server))
    click_row(page, "slow")
    wait_state(page, "ready")
    page.wait_for("document.querySelector('#view-diff .diff-trend-chart svg path[data-series]') !== null")
    params = search_params(page)
    assert params["fn"] == ["slow"] and params["bin"] == ["myapp"]
    panel = page.evaluate("document.querySelector('#view-diff .diff-trend').innerText")
    assert "slow" in panel and "Self cores over time" in panel
    numbers = page.evaluate("""[...document.querySelectorAll('#view-diff .diff-numbers tbody tr')]
        .map((tr) => [...tr.cells].map((c) => c.innerText.trim()))""")
    assert numbers[0][0] == "Self" and number(numbers[0][1]) == pytest.approx(cores(20))
    assert number(numbers[0][2]) == pytest.approx(cores(60)) and number(numbers[0][4]) == pytest.approx(200)
    # The chart: both scopes, per-bucket cores of this function only.
    series = page.evaluate("[...document.querySelectorAll('#view-diff .diff-trend-chart path[data-series]')].map((p) => p.dataset.series)")
    assert len(series) == 2 and series[0].startswith("Baseline") and series[1] == "Comparison"
    trend = page.evaluate("window.emberDiff.trend")
    assert trend["n"] == 12  # 240 s in 20 s buckets
    assert trend["baseline"]["self"] == pytest.approx([cores(20)] * 12)
    assert trend["comparison"]["self"] == pytest.approx([cores(60)] * 12)
    assert trend["comparison"]["total"] == pytest.approx([cores(60)] * 12)
    assert page.evaluate("document.querySelector('#view-diff tr.selected').dataset.name") == "slow"
    shot(page, "diff_trend")

    # Total in the table: the panel's chart follows.
    page.evaluate("document.querySelector('#view-diff .diff-metric button[data-m=\"total\"]').click()")
    wait_state(page, "ready")
    page.wait_for("document.querySelector('#view-diff .diff-trend h3')?.innerText === 'Total cores over time'")
    click_header(page, "name")

    # A copied link restores the same comparison, order and panel.
    url = page.evaluate("location.href")
    before = rows(page)
    other = page.browser.new_page()
    try:
        open_ui(other, url, "")
        other.wait_for("document.querySelector('#view-diff .diff-trend-chart svg path[data-series]') !== null")
        assert rows(other) == before
        assert other.evaluate("document.querySelector('#view-diff .diff-trend-name').innerText") == "slow"
        assert other.evaluate("document.querySelector('#view-diff .diff-metric button[aria-pressed=\"true\"]').dataset.m") == "total"
        no_errors(other)
    finally:
        page.browser.close_page(other)

    # Escape closes the panel.
    focus(page, "#view-diff tr.selected")
    page.press("Escape")
    page.wait_for("document.querySelector('#view-diff .diff-trend').hidden")
    assert "fn" not in search_params(page)
    no_errors(page)


def test_flamegraph_link(server, page):
    open_ui(page, server.base, diff_path(server, fn="fresh", bin="myapp", bq='host.name == "web-1"'))
    page.wait_for("document.querySelector('#view-diff .diff-trend-fg') !== null")
    page.evaluate("document.querySelector('#view-diff .diff-trend-fg').click()")
    wait_state(page, "ready")
    p = search_params(page)
    assert "view" not in p and p["s"] == ["fresh"]
    no_errors(page)


def test_default_scopes_are_the_halves_of_the_range(server, page):
    before = int(time.time() * 1000)
    open_ui(page, server.base, "/?view=diff")
    after = int(time.time() * 1000)
    f = page.evaluate("""(() => { const e = document.querySelector('#view-diff .diff-form').elements;
        return {cmp: e.cmp.value, bs: +e.bs.dataset.ms, be: +e.be.dataset.ms, cs: +e.cs.dataset.ms, ce: +e.ce.dataset.ms}; })()""")
    assert f["cmp"] == "halves"
    assert before - 2000 <= f["ce"] <= after + 2000
    assert f["ce"] - f["bs"] == 900_000 and f["be"] == f["cs"] and f["cs"] - f["bs"] == 450_000
    # Both halves hold data here: a table, and the change of slow is positive.
    assert row(page, "slow")["kind"] == "worse"
    # Another preset: the previous period (15 min before) has no data.
    page.evaluate("""(() => { const s = document.querySelector('#view-diff select[name="cmp"]');
        s.value = 'previous'; s.dispatchEvent(new Event('change')); })()""")
    wait_state(page, "empty")
    assert search_params(page)["cmp"] == ["previous"]
    msg = page.evaluate("document.querySelector('#view-diff .diff-status').innerText")
    assert "No samples in the baseline" in msg and "new" in msg
    no_errors(page)


def test_filters_per_scope(server, page):
    # The same range on both sides, a host that does not exist in the comparison.
    (bs, be), (cs, ce) = server.windows["baseline"], server.windows["comparison"]
    path = "/?" + urllib.parse.urlencode({"view": "diff", "cmp": "custom", "bs": cs, "be": ce, "cs": cs, "ce": ce,
                                           "cq": 'host.name == "web-2"'})
    open_ui(page, server.base, path, state="empty")
    shot(page, "diff_empty")
    msg = page.evaluate("document.querySelector('#view-diff .diff-status').innerText")
    assert "No samples in the comparison" in msg and 'host.name == "web-2"' in msg
    # Typing a filter and Enter runs the comparison.
    page.evaluate("const i = document.querySelector('#view-diff input[name=\"cq\"]'); i.focus(); i.select();")
    page.insert_text('host.name == "web-1"')
    page.press("Enter")
    wait_state(page, "ready")
    assert search_params(page)["cq"] == ['host.name == "web-1"']
    # Identical scopes: nothing changed.
    assert all(r["kind"] == "same" for r in rows(page))
    assert page.evaluate("document.querySelector('#view-diff .diff-summary').innerText").startswith(
        "0 functions got slower, 0 faster, 0 new, 0 removed")
    no_errors(page)


def test_bad_filter_names_its_scope(server, page):
    open_ui(page, server.base, diff_path(server, bq="host.name =="), state="error")
    msg = page.evaluate("document.querySelector('#view-diff .diff-status').innerText")
    assert "The baseline filter was rejected" in msg and "column 13" in msg, msg
    assert "comparison" not in msg.lower()
    assert page.evaluate("document.querySelector('#view-diff input[name=\"bq\"]').classList.contains('invalid')")
    # Fixed in the form, then broken on the other side.
    page.evaluate("""(() => { const f = document.querySelector('#view-diff .diff-form');
        f.elements.bq.value = ''; f.elements.cq.value = 'thread.name = "x"'; f.requestSubmit(); })()""")
    wait_state(page, "error")
    msg = page.evaluate("document.querySelector('#view-diff .diff-status').innerText")
    shot(page, "diff_error")
    assert "The comparison filter was rejected" in msg and "baseline" not in msg.lower(), msg
    assert search_params(page)["cq"] == ['thread.name = "x"'] and "bq" not in search_params(page)
    # The browser itself reports the 400 answers (the diff's and the checks of
    # each filter); those are expected.
    no_errors(page, allow=[lambda e: e.get("source") == "network" and "400" in e.get("text", "")
                           and ("/diff" in e.get("url", "") or "/top_functions" in e.get("url", ""))])


def test_keyboard_and_refresh(server, page):
    open_ui(page, server.base, diff_path(server))
    # Enter on a focused row opens its trend; the row keeps the focus.
    page.evaluate("""[...document.querySelectorAll('#view-diff .diff-data tbody tr')]
        .find((t) => t.dataset.name === 'fast').focus()""")
    page.press("Enter")
    wait_state(page, "ready")
    assert search_params(page)["fn"] == ["fast"]
    assert page.evaluate("document.activeElement.dataset.name") == "fast"
    assert page.evaluate("window.emberDiff.trend.comparison.self") == pytest.approx([cores(10)] * 12)
    page.press("Escape")
    page.wait_for("document.querySelector('#view-diff .diff-trend').hidden")
    # The top bar's Refresh asks the server again.
    page.evaluate("""window.diffCalls = 0; const f = window.fetch;
        window.fetch = (u, o) => { if (String(u).endsWith('/diff')) window.diffCalls++; return f(u, o); }""")
    page.evaluate("document.getElementById('refresh').click()")
    wait_state(page, "ready")
    page.wait_for("window.diffCalls === 1")
    assert row(page, "slow")["kind"] == "worse"
    no_errors(page)
