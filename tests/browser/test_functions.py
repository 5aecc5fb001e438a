"""Browser tests of the "Top functions" view and its sandwich view: a real
ember-server filled with batches sent the way the agent sends them, and the
page (web/view_functions.js) driven in headless Chromium.

    make BUILD=/tmp/b /tmp/b/bin/ember-server
    EMBER_BUILD=/tmp/b /usr/bin/python3 -m pytest -q tests/browser/test_functions.py
"""

import json
import time
import urllib.parse

import pytest

from conftest import (api_query, focus, no_errors, open_ui, populated_server, search_params, shot, start_server,
                      type_in, wait_state)
from ember_batch import Batch, send_batch  # (tests/lib, on the path through conftest)

HZ = 20
HOST_CPUS = 8
SECONDS = 10  # every batch covers the same 10 s, so cores = samples / 20 / 10

# api-server on two hosts (web-1, web-2), each this profile: compress_block
# is the hottest function by self time, called from two callers
# (write_segment and flush_cache), and calls huffman_encode.
API_SERVER = [
    (["main", "serve", "write_segment", "compress_block"], 300),
    (["main", "serve", "write_segment", "compress_block", "huffman_encode"], 100),
    (["main", "flush_cache", "compress_block"], 150),
    (["main", "flush_cache", "compress_block", "huffman_encode"], 50),
    (["main", "serve", "parse_request"], 120),
    (["main", "serve", "parse_request", ("memchr", "native", "libc.so.6")], 80),
    (["main", "serve", "write_segment", ("ksys_write", "kernel"), ("vfs_write", "kernel")], 60),
    (["main"], 20),
]
# A long C++ name (it must wrap, not widen the page) with characters that
# must be escaped.
LONG_NAME = ("std::_Hashtable<std::basic_string<char>, std::pair<std::basic_string<char> const, "
             "ember::Series<ember::Row<&'static \"sample\">>>, std::allocator<ember::Series>>"
             "::_M_find_before_node(unsigned long, std::basic_string<char> const&, unsigned long) const")
# batch-job on a third host (worker-1): its own compress_block, which the
# sandwich of api-server's must not count.
BATCH_JOB = [
    (["main", "run_job", "sort_rows"], 90),
    (["main", "run_job", "compress_block"], 30),
    (["main", "run_job", LONG_NAME], 4),
]
TOTAL = 2 * 880 + 124


def cores(samples):
    return samples / HZ / SECONDS


def populate(base):
    now = int(time.time() * 1000)
    start = now - 120_000
    runs = [("web-1", "api-server", API_SERVER), ("web-2", "api-server", API_SERVER),
            ("worker-1", "batch-job", BATCH_JOB)]
    for i, (host, exe, profile) in enumerate(runs):
        b = Batch(agent_instance=f"3f2a9c4e-8b1d-4e6f-9a7c-2d5e8f1b6c3{i}", sample_rate_hz=HZ,
                  host_cpus=HOST_CPUS)
        attrs = {"process.executable.name": exe, "host.name": host, "thread.name": "main",
                 "process.pid": str(4000 + i)}
        for frames, value in profile:
            b.add(frames, attrs, value, binary=exe)
        answer = send_batch(base, b.encode(sequence=1, start_ms=start, end_ms=start + SECONDS * 1000))
        assert answer["stored"], answer
    status, top = query(base, "top_functions", {"sort": "self", "limit": 3})
    assert status == 200 and top["total"] == TOTAL, top
    assert top["scope"]["seconds"] == SECONDS and top["scope"]["host_cpus"] == 3 * HOST_CPUS, top


def query(base, name, body, q=None, seconds=900):
    return api_query(base, name, body, q, seconds)


server = populated_server(populate)


# --- reading the page ---------------------------------------------------------

def rows(page):
    """The table's rows as a user reads them."""
    return page.evaluate("""[...document.querySelectorAll('#view-functions .fn-table tbody tr')].map((tr) => {
        const c = tr.cells;
        return {name: c[0].innerText.trim(), binary: c[1].querySelector('.fn-bin-name').innerText,
                self: c[2].innerText, self_pct: c[3].innerText, total: c[4].innerText,
                total_pct: c[5].innerText};
    })""")


def names(page):
    return [r["name"] for r in rows(page)]


def row_point(page, name, binary=None):
    """The viewport point in the middle of the name cell of a row."""
    p = page.evaluate(f"""(() => {{
        const tr = [...document.querySelectorAll('#view-functions .fn-table tbody tr')].find((tr) =>
            tr.cells[0].innerText.trim() === {json.dumps(name)} &&
            ({json.dumps(binary)} === null || tr.cells[1].querySelector('.fn-bin-name').innerText === {json.dumps(binary)}));
        if (!tr) return null;
        tr.scrollIntoView({{block: 'center'}});
        const r = tr.cells[0].getBoundingClientRect();
        return [r.left + 30, r.top + r.height / 2];
    }})()""")
    assert p, f"no row {name!r}"
    return p


def center(page, selector):
    p = page.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        if (!e || !e.getClientRects().length) return null; e.scrollIntoView({{block: 'center'}});
        const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
    assert p, f"nothing visible at {selector}"
    return p


def click(page, selector):
    page.click(*center(page, selector))


def tree(page, kind):
    """The rows of a sandwich tree: (depth, name, samples, cores, percent)."""
    return [tuple(r) for r in page.evaluate(f"""[...document.querySelectorAll(
        '#view-functions .fn-{kind} [role=treeitem]')].map((r) => [Number(r.getAttribute('aria-level')) - 1,
        r.querySelector('.fn-node-name').innerText, r.children[1].innerText, r.children[2].innerText,
        r.children[3].innerText])""")]


def no_overflow(page):
    """Nothing is wider than the window, and no table cell's content spills
    out of it."""
    w = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert w[0] <= w[1], f"the page is {w[0]} px wide in a {w[1]} px window"
    spilled = page.evaluate("""[...document.querySelectorAll('#view-functions td, #view-functions .fn-tree-row > *')]
        .filter((c) => c.getClientRects().length && c.scrollWidth > c.clientWidth + 1)
        .slice(0, 5).map((c) => c.innerText.slice(0, 60))""")
    assert not spilled, f"cells whose content spills out: {spilled}"


def wait_ready(page, state="ready"):
    """Waits for the view's answer: body[data-state] leaves loading."""
    return wait_state(page, state)


def open_functions(page, base, query_string="", state="ready"):
    page.navigate(base + "/?view=functions" + query_string)
    page.wait_for("!!document.querySelector('#view-functions .fn-list')")
    return wait_ready(page, state)


def type_query(page, text):
    """Puts text in the top bar's query box, focused (the autocompletion
    opens on focusing an empty box; the tests press Enter themselves)."""
    page.evaluate(f"""(() => {{ const q = document.getElementById('query'); q.value = {json.dumps(text)};
        q.focus(); q.setSelectionRange(q.value.length, q.value.length); }})()""")


def bad_request(url_part):
    return lambda e: e.get("source") == "network" and url_part in e.get("url", "") and "400" in e.get("text", "")


# --- the tests ----------------------------------------------------------------

def test_table_shows_the_hottest_functions(server, page):
    open_functions(page, server.base)
    got = rows(page)
    # The hottest function by self time is first, with its cores and percent.
    first = got[0]
    assert first["name"] == "compress_block" and first["binary"] == "api-server"
    assert first["self"] == "4.5 c"  # 900 samples / 20 Hz / 10 s
    assert first["self_pct"] == "47.8%"  # 900 of 1,884 samples
    assert first["total"] == "6 c" and first["total_pct"] == "63.7%"  # 1,200 samples
    assert cores(900) == 4.5 and round(100 * 1200 / TOTAL, 1) == 63.7
    # Then by self time: huffman_encode 300, parse_request 240, memchr 160.
    assert names(page)[:4] == ["compress_block", "huffman_encode", "parse_request", "memchr"]
    memchr = got[3]
    assert memchr["binary"] == "libc.so.6" and memchr["self"] == "800 mc"  # 0.8 cores in millicores
    # Both compress_block: api-server's and batch-job's, told apart by binary.
    assert [(r["name"], r["binary"]) for r in got if r["name"] == "compress_block"] == [
        ("compress_block", "api-server"), ("compress_block", "batch-job")]
    # Kernel frames are functions too; synthetic groups are not.
    assert "vfs_write" in names(page) and "api-server" not in names(page)
    # The long name is shown whole, as text, not as markup.
    assert LONG_NAME in names(page)
    summary = page.evaluate("document.querySelector('#view-functions .fn-summary').innerText")
    assert "15 functions" in summary and "by self" in summary
    note = page.evaluate("document.querySelector('#view-functions .fn-list .fn-note').innerText")
    assert "Relative CPU %" in note and "1,884 samples" in note
    # Sorted by self: its header says so.
    assert page.evaluate("""document.querySelector('#view-functions th[data-key=self_cores]')
        .getAttribute('aria-sort')""") == "descending"
    assert page.evaluate("document.title").startswith("Top functions")
    no_overflow(page)
    shot(page, "functions")
    no_errors(page)


def test_sorting_by_total_and_back(server, page):
    open_functions(page, server.base)
    assert names(page)[0] == "compress_block"
    click(page, "#view-functions th[data-key=total_cores]")
    page.wait_for("document.body.dataset.state === 'ready' && "
                  "document.querySelector('#view-functions th[data-key=total_cores]').getAttribute('aria-sort') === 'descending'")
    got = rows(page)
    # main of api-server holds all of its 1,760 samples; then serve (1,120).
    assert (got[0]["name"], got[0]["binary"], got[0]["total"], got[0]["total_pct"]) == (
        "main", "api-server", "8.8 c", "93.4%")
    assert names(page)[:3] == ["main", "serve", "compress_block"]
    assert search_params(page)["sort"] == ["total"]
    totals = [float(r["total_pct"].rstrip("%")) for r in got]
    assert totals == sorted(totals, reverse=True)
    shot(page, "functions-by-total")
    # Back (the browser's) to sorting by self.
    page.evaluate("history.back()")
    page.wait_for("!new URLSearchParams(location.search).has('sort')")
    wait_ready(page)
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[0].innerText.trim() === 'compress_block'")
    # And with the keyboard: Enter on a header.
    focus(page, "#view-functions th[data-key=total_percent]")
    page.press("Enter")
    page.wait_for("new URLSearchParams(location.search).get('sort') === 'total'")
    wait_ready(page)
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[0].innerText.trim() === 'main'")
    no_errors(page)


def test_search_narrows_the_list(server, page):
    open_functions(page, server.base)
    type_in(page, "#fn-search", "HUFF")
    page.wait_for("new URLSearchParams(location.search).get('search') === 'HUFF'")
    wait_ready(page)
    page.wait_for("document.querySelectorAll('#view-functions .fn-table tbody tr').length === 1")
    assert names(page) == ["huffman_encode"]
    # Typing kept the focus in the box.
    assert page.evaluate("document.activeElement.id") == "fn-search"
    summary = page.evaluate("document.querySelector('#view-functions .fn-summary').innerText")
    assert summary.startswith("1 function match")
    # A plain text is literal: a dot is not "any character".
    page.evaluate("document.getElementById('fn-search').select()")
    page.insert_text("_.lock")
    page.press("Enter")
    page.wait_for("!!document.querySelector('#view-functions .message-empty')")
    assert page.evaluate("document.body.dataset.state") == "ready"
    assert "No function matches" in page.evaluate("document.querySelector('#view-functions .fn-content').innerText")
    # A /regex/.
    page.evaluate("document.getElementById('fn-search').select()")
    page.insert_text("/^(compress|sort)_/")
    page.press("Enter")
    page.wait_for("document.querySelectorAll('#view-functions .fn-table tbody tr').length === 3")
    assert sorted(names(page)) == ["compress_block", "compress_block", "sort_rows"]
    shot(page, "functions-search")
    # An invalid regular expression shows the server's message.
    page.evaluate("document.getElementById('fn-search').select()")
    page.insert_text("/([/")
    page.press("Enter")
    wait_ready(page, "error")
    text = page.evaluate("document.querySelector('#view-functions .fn-content').innerText")
    assert "not a valid regular expression" in text and "search:" in text
    assert page.evaluate("document.getElementById('fn-search').classList.contains('invalid')")
    # Escape clears the search: every function again.
    focus(page, "#fn-search")
    page.press("Escape")
    page.wait_for("!new URLSearchParams(location.search).has('search')")
    wait_ready(page)
    page.wait_for("document.querySelectorAll('#view-functions .fn-table tbody tr').length === 15")
    # The search in a link is restored.
    open_functions(page, server.base, "&search=parse")
    assert names(page) == ["parse_request"]
    assert page.evaluate("document.getElementById('fn-search').value") == "parse"
    no_errors(page, allow=[bad_request("top_functions")])


def test_cel_query_narrows_the_table(server, page):
    open_functions(page, server.base)
    type_query(page, 'process.executable.name == "batch-job"')
    page.press("Enter")
    page.wait_for("new URLSearchParams(location.search).get('q') === 'process.executable.name == \"batch-job\"'")
    wait_ready(page)
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[0].innerText.trim() === 'sort_rows'")
    got = rows(page)
    assert {(r["name"], r["binary"]) for r in got} == {
        ("sort_rows", "batch-job"), ("compress_block", "batch-job"), ("main", "batch-job"),
        ("run_job", "batch-job"), (LONG_NAME, "batch-job")}
    # Relative percent: of every sample of the project, query or not.
    assert got[0]["self"] == "450 mc" and got[0]["self_pct"] == "4.78%"  # 90 of 1,884
    note = page.evaluate("document.querySelector('#view-functions .fn-list .fn-note').innerText")
    assert "whether they match the query or not" in note
    # A host filter through the controls form (the Refresh button).
    page.evaluate("""(() => { document.getElementById('query').value = 'host.name == "web-1"';
        document.getElementById('refresh').click(); })()""")
    page.wait_for("new URLSearchParams(location.search).get('q') === 'host.name == \"web-1\"'")
    wait_ready(page)
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[2].innerText === '2.25 c'")
    assert rows(page)[0]["name"] == "compress_block"  # 450 samples on web-1
    no_overflow(page)
    no_errors(page)


def test_absolute_mode(server, page):
    open_functions(page, server.base)
    click(page, "#view-functions .fn-list .fn-mode-btn[data-mode=absolute]")
    page.wait_for("new URLSearchParams(location.search).get('mode') === 'absolute'")
    wait_ready(page)
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[3].innerText === '18.8%'")
    first = rows(page)[0]
    # 4.5 cores of the 24 CPUs of the three hosts.
    assert (first["name"], first["self"], first["self_pct"], first["total_pct"]) == (
        "compress_block", "4.5 c", "18.8%", "25.0%")
    note = page.evaluate("document.querySelector('#view-functions .fn-list .fn-note').innerText")
    assert "Absolute CPU %" in note and "24 logical CPUs of the 3 hosts" in note
    assert page.evaluate("""document.querySelector('#view-functions .fn-list .fn-mode-btn[data-mode=absolute]')
        .getAttribute('aria-pressed')""") == "true"
    shot(page, "functions-absolute")
    click(page, "#view-functions .fn-list .fn-mode-btn[data-mode=relative]")
    page.wait_for("!new URLSearchParams(location.search).has('mode')")
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[3].innerText === '47.8%'")
    no_errors(page)


def test_sandwich_shows_callers_and_callees(server, page):
    open_functions(page, server.base)
    page.click(*row_point(page, "compress_block", "api-server"))
    page.wait_for("new URLSearchParams(location.search).get('fn') === 'compress_block'")
    wait_ready(page)
    page.wait_for("!!document.querySelector('#view-functions .fn-callers [role=treeitem]')")
    p = search_params(page)
    assert p["fn"] == ["compress_block"] and p["bin"] == ["api-server"] and p["view"] == ["functions"]
    assert page.evaluate("document.querySelector('#view-functions .fn-list').hidden")
    head = page.evaluate("document.querySelector('#view-functions .fn-sw-head').innerText")
    assert "compress_block" in head and "api-server" in head
    assert "4.5 c" in head and "47.8%" in head and "900 samples" in head  # self
    assert "6 c" in head and "63.7%" in head and "1,200 samples" in head  # total
    assert "2 direct callers" in head and "1 direct callee" in head
    # Callers: the function on top, its two callers below it, and theirs
    # (the hottest paths open); batch-job's run_job is not among them.
    callers = tree(page, "callers")
    assert callers[0] == (0, "compress_block", "1,200", "6 c", "63.7%")
    assert (1, "write_segment", "800", "4 c", "42.5%") in callers
    assert (1, "flush_cache", "400", "2 c", "21.2%") in callers
    assert [c[1] for c in callers] == ["compress_block", "write_segment", "serve", "main", "flush_cache", "main"]
    assert "run_job" not in [c[1] for c in callers]
    # Callees: its own code (self), then huffman_encode.
    callees = tree(page, "callees")
    assert callees == [(0, "compress_block", "1,200", "6 c", "63.7%"),
                       (1, "(own code)", "900", "4.5 c", "47.8%"),
                       (1, "huffman_encode", "300", "1.5 c", "15.9%")]
    assert page.evaluate("document.title").startswith("compress_block")
    no_overflow(page)
    shot(page, "sandwich")

    # A node closes and opens with a click.
    page.click(*center(page, "#view-functions .fn-callers [data-path='0/0']"))
    page.wait_for("""document.querySelector("#view-functions .fn-callers [data-path='0/0']")
        .getAttribute('aria-expanded') === 'false'""")
    assert [c[1] for c in tree(page, "callers")] == ["compress_block", "write_segment", "flush_cache", "main"]
    # ... and with the keyboard (the focus stays on it).
    page.press("ArrowRight")
    page.wait_for("""document.activeElement.dataset.path === '0/0' &&
        document.activeElement.getAttribute('aria-expanded') === 'true'""")
    page.press("ArrowDown")
    page.wait_for("document.activeElement.dataset.path === '0/0/0'")
    page.press("ArrowLeft")  # serve is open: it closes
    page.press("ArrowLeft")  # closed: to its parent
    page.wait_for("document.activeElement.dataset.path === '0/0'")
    assert [c[1] for c in tree(page, "callers")][:4] == ["compress_block", "write_segment", "serve", "flush_cache"]

    # Back to the table, on the row of the function.
    click(page, "#view-functions .fn-back")
    page.wait_for("!new URLSearchParams(location.search).has('fn')")
    wait_ready(page)
    assert not page.evaluate("document.querySelector('#view-functions .fn-list').hidden")
    assert page.evaluate("document.activeElement.cells && document.activeElement.cells[0].innerText.trim()") == "compress_block"
    no_errors(page)


def test_keyboard_opens_the_sandwich(server, page):
    open_functions(page, server.base)
    # Rows are in the tab order; arrows move between them; Enter opens.
    focus(page, "#view-functions .fn-table tbody tr")
    page.press("ArrowDown")
    page.press("ArrowDown")
    assert page.evaluate("document.activeElement.cells[0].innerText.trim()") == "parse_request"
    page.press("Enter")
    page.wait_for("new URLSearchParams(location.search).get('fn') === 'parse_request'")
    wait_ready(page)
    page.wait_for("!!document.querySelector('#view-functions .fn-callees [role=treeitem]')")
    # The focus moved to the function's name.
    assert page.evaluate("document.activeElement.classList.contains('fn-sw-name')")
    callees = tree(page, "callees")
    assert [c[:3] for c in callees] == [(0, "parse_request", "400"), (1, "(own code)", "240"), (1, "memchr", "160")]
    callers = tree(page, "callers")
    assert callers[:3] == [(0, "parse_request", "400", "2 c", "21.2%"),
                           (1, "serve", "400", "2 c", "21.2%"), (2, "main", "400", "2 c", "21.2%")]
    # The browser's back button returns to the table.
    page.evaluate("history.back()")
    page.wait_for("!new URLSearchParams(location.search).has('fn')")
    wait_ready(page)
    page.wait_for("!document.querySelector('#view-functions .fn-list').hidden")
    no_errors(page)


def test_a_copied_link_restores_the_sandwich(server, browser, page):
    open_functions(page, server.base, "&mode=absolute")
    page.click(*row_point(page, "compress_block", "api-server"))
    page.wait_for("!!document.querySelector('#view-functions .fn-callers [role=treeitem]')")
    wait_ready(page)
    url = page.evaluate("location.href")
    other = browser.new_page()
    try:
        other.navigate(url)
        wait_ready(other)
        other.wait_for("!!document.querySelector('#view-functions .fn-callers [role=treeitem]')")
        assert tree(other, "callers") == tree(page, "callers")
        assert tree(other, "callees") == tree(page, "callees")
        # In absolute mode: 6 cores of 24 CPUs.
        assert tree(other, "callers")[0] == (0, "compress_block", "1,200", "6 c", "25.0%")
        head = other.evaluate("document.querySelector('#view-functions .fn-sw-head').innerText")
        assert "api-server" in head and "18.8%" in head
        # A link to batch-job's compress_block shows that one.
        other.navigate(server.base + "/?view=functions&fn=compress_block&bin=batch-job")
        wait_ready(other)
        other.wait_for("!!document.querySelector('#view-functions .fn-callers [role=treeitem]')")
        assert [c[1] for c in tree(other, "callers")] == ["compress_block", "run_job", "main"]
        assert tree(other, "callers")[0][2] == "30"
        # A function that did not run says so.
        other.navigate(server.base + "/?view=functions&fn=no_such_function")
        wait_ready(other, "empty")
        text = other.evaluate("document.querySelector('#view-functions .fn-sw-body').innerText")
        assert "no_such_function" in text and "has no samples" in text
        no_errors(other)
    finally:
        browser.close_page(other)
    no_errors(page)


def test_open_in_flamegraph(server, page):
    open_functions(page, server.base, '&q=host.name+%3D%3D+"web-2"&fn=huffman_encode&bin=api-server')
    page.wait_for("!!document.querySelector('#view-functions .fn-callers [role=treeitem]')")
    href = page.evaluate("document.querySelector('#view-functions .fn-open-fg').href")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(href).query) == {
        "q": ['host.name == "web-2"'], "s": ["huffman_encode"]}
    click(page, "#view-functions .fn-open-fg")
    page.wait_for("!new URLSearchParams(location.search).has('view')")
    wait_ready(page)
    p = search_params(page)
    assert p["s"] == ["huffman_encode"] and p["q"] == ['host.name == "web-2"']
    page.wait_for("window.emberFlamegraph && emberFlamegraph.matches > 0")
    assert page.evaluate("emberFlamegraph.matchedTotal") == 150  # web-2's huffman_encode
    no_errors(page)


def test_row_actions(server, page):
    open_functions(page, server.base)
    # Copy name: the clipboard gets the name, and the page says so.
    page.evaluate("""window.copied = []; navigator.clipboard.writeText = async (t) => { copied.push(t); };""")
    click(page, "#view-functions .fn-table tbody tr:nth-child(2) button[data-action=copy]")
    page.wait_for("window.copied.length === 1")
    assert page.evaluate("window.copied") == ["huffman_encode"]
    toast = page.wait_for("!document.querySelector('#view-functions .fn-toast').hidden && "
                          "document.querySelector('#view-functions .fn-toast').innerText")
    assert "huffman_encode" in toast and "Copied" in toast
    # The button did not open the sandwich.
    assert "fn" not in search_params(page)
    # Without a clipboard API, the old way still copies.
    page.evaluate("""Object.defineProperty(navigator, 'clipboard', {value: undefined, configurable: true});
        window.execCopied = []; document.execCommand = (c) => { execCopied.push(
            c + ':' + document.activeElement.value); return true; };""")
    click(page, "#view-functions .fn-table tbody tr:nth-child(3) button[data-action=copy]")
    page.wait_for("window.execCopied.length === 1")
    assert page.evaluate("window.execCopied") == ["copy:parse_request"]
    shot(page, "functions-copied")
    # Filter flamegraph to this function.
    click(page, "#view-functions .fn-table tbody tr:nth-child(1) button[data-action=flamegraph]")
    page.wait_for("new URLSearchParams(location.search).get('s') === 'compress_block'")
    wait_ready(page)
    assert "view" not in search_params(page)
    page.wait_for("window.emberFlamegraph && emberFlamegraph.matches > 0")
    assert page.evaluate("emberFlamegraph.matchedTotal") == 1230  # both binaries' compress_block
    no_errors(page)


def test_bad_query_shows_the_server_error(server, page):
    bad = "process.executable.name =="
    status, answer = query(server.base, "top_functions", {}, q=bad)
    assert status == 400 and "column 27" in answer["error"]
    open_functions(page, server.base, "&q=" + urllib.parse.quote(bad), state="error")
    text = page.evaluate("document.querySelector('#view-functions .fn-content').innerText")
    assert "The query was rejected" in text and answer["error"] in text
    shot(page, "functions-error")
    # Fixing it brings the table back.
    type_query(page, 'host.name == "worker-1"')
    page.press("Enter")
    wait_ready(page)
    page.wait_for("!!document.querySelector('#view-functions .fn-table')")
    assert names(page)[0] == "sort_rows"
    no_errors(page, allow=[bad_request("top_functions")])


def test_empty_server_shows_the_empty_state(empty_server, page):
    open_functions(page, empty_server.base, state="empty")
    text = page.evaluate("document.querySelector('#view-functions .fn-content').innerText")
    assert "No samples in the last 15 minutes" in text and "ember-agent" in text
    assert not page.evaluate("document.querySelector('#view-functions .fn-table')")
    shot(page, "functions-empty")
    no_errors(page)


def test_many_functions(request, page):
    """10,000 functions: the first 100 are shown, more on request, fast."""
    srv = start_server(request)
    now = int(time.time() * 1000)
    b = Batch(sample_rate_hz=HZ, host_cpus=4)
    attrs = {"process.executable.name": "big", "host.name": "big-1"}
    for i in range(10_000):
        b.add(["main", f"fn_{i:05d}"], attrs, 1 + (i % 50) + (1000 if i == 4321 else 0), binary="big")
    send_batch(srv.base, b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 50_000))
    open_functions(page, srv.base)
    assert page.evaluate("document.querySelectorAll('#view-functions .fn-table tbody tr').length") == 100
    assert names(page)[0] == "fn_04321"
    more = page.evaluate("document.querySelector('#view-functions .fn-more').innerText")
    assert "top 100 of 10,001" in more and "Show 400 more" in more
    click(page, "#view-functions .fn-show-more")
    page.wait_for("document.querySelectorAll('#view-functions .fn-table tbody tr').length === 500")
    assert search_params(page)["limit"] == ["500"]
    # The focus is on the first new row.
    assert page.evaluate("document.activeElement.dataset.index") == "100"
    # 10,000 through the selector: fetched at once, drawn 500 rows at a time.
    t0 = time.monotonic()
    page.evaluate("""(() => { const s = document.getElementById('fn-limit'); s.value = '10000';
        s.dispatchEvent(new Event('change')); })()""")
    page.wait_for("new URLSearchParams(location.search).get('limit') === '10000'")
    wait_ready(page)
    took = time.monotonic() - t0
    assert page.evaluate("document.querySelectorAll('#view-functions .fn-table tbody tr').length") == 500
    assert took < 3, f"the first 500 of 10,000 rows took {took:.1f} s"
    summary = page.evaluate("document.querySelector('#view-functions .fn-summary').innerText")
    assert "10,001 functions" in summary and "top 10,000 by self" in summary
    more = page.evaluate("document.querySelector('#view-functions .fn-more').innerText")
    assert "top 500 of 10,001" in more and "Show 500 more" in more
    page.evaluate("document.querySelector('#view-functions .fn-more').scrollIntoView({block: 'end'})")
    shot(page, "functions-more")
    # Show more draws the next 500 of those fetched, without fetching again.
    page.evaluate("window.fetched = performance.getEntriesByType('resource').length")
    click(page, "#view-functions .fn-show-more")
    page.wait_for("document.querySelectorAll('#view-functions .fn-table tbody tr').length === 1000")
    assert page.evaluate("document.activeElement.dataset.index") == "500"
    assert page.evaluate("performance.getEntriesByType('resource').length === window.fetched")
    assert search_params(page)["limit"] == ["10000"]
    # Rows are in the order of the answer.
    assert names(page)[:2] == ["fn_04321", "fn_00049"]
    no_overflow(page)
    no_errors(page)


def test_refresh_fetches_again(request, page):
    """The top bar's Refresh runs the query again though nothing changed."""
    srv = start_server(request)
    now = int(time.time() * 1000)

    def send(seq, frames, value):
        b = Batch(agent_instance="5b1e0c7d-2a4f-4c8e-9d3b-7f6a1e2c4b50", sample_rate_hz=HZ)
        b.add(frames, {"process.executable.name": "app", "host.name": "h"}, value, binary="app")
        start = now - 60_000  # both cover the same 10 s
        assert send_batch(srv.base, b.encode(sequence=seq, start_ms=start, end_ms=start + SECONDS * 1000))["stored"]

    send(1, ["main", "old_hot"], 50)
    open_functions(page, srv.base)
    assert names(page)[0] == "old_hot"
    send(2, ["main", "new_hot"], 500)
    click(page, "#refresh")
    page.wait_for("document.querySelector('#view-functions .fn-table tbody tr')?.cells[0].innerText.trim() === 'new_hot'")
    wait_ready(page)
    # This agent did not say how many CPUs its host has: absolute percentages
    # are unknown, and the page says why.
    click(page, "#view-functions .fn-list .fn-mode-btn[data-mode=absolute]")
    page.wait_for("document.querySelector('#view-functions .fn-list .fn-note').innerText.includes('did not report')")
    wait_ready(page)
    first = rows(page)[0]
    assert first["self_pct"] == "\u2013" and first["self"] == "2.5 c"  # 500 samples / 20 Hz / 10 s
    # "/" goes to the search box.
    page.evaluate("document.activeElement.blur()")
    page.send("Input.dispatchKeyEvent", type="keyDown", key="/", code="Slash", text="/",
              windowsVirtualKeyCode=191)
    page.send("Input.dispatchKeyEvent", type="keyUp", key="/", code="Slash", windowsVirtualKeyCode=191)
    page.wait_for("document.activeElement.id === 'fn-search'")
    assert page.evaluate("document.getElementById('fn-search').value") == ""
    no_errors(page)
