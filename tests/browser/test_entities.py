"""Browser tests of the Top entities view (web/view_entities.js) and an
entity's page: a real ember-server filled with batches from three hosts
with different CPU counts, three executables and their threads, and the
page driven in headless Chromium.

Run from the repository root after building the server:
    /usr/bin/python3 -m pytest -q tests/browser/test_entities.py
"""

import json
import time
import urllib.parse

import pytest

from conftest import (PROJECT, api_query, no_errors, open_ui, search_params, shot, start_server,  # noqa: F401
                      type_in, wait_state)
from ember_batch import Batch, send_batch  # (tests/lib, on the path through conftest)

HZ = 19
# host -> (logical CPUs, [(executable, pid, thread, samples)])
HOSTS = {
    "web-1": (8, [("nginx", "101", "worker", 300), ("nginx", "101", "master", 100),
                  ("myapp", "201", "main", 200)]),
    "web-2": (4, [("nginx", "102", "worker", 400), ("myapp", "202", "main", 150),
                  ("myapp", "202", "gc", 100)]),
    "db-1": (2, [("postgres", "301", "postgres", 900), ("myapp", "203", "main", 50)]),
}
# Ranked by samples: db-1, web-2, web-1; by name: db-1, web-1, web-2; by
# CPUs: web-1, web-2, db-1.
# Every stack of myapp goes through libc.so.6 for a fifth of its samples.


def totals(index):
    """Samples per value of one field of the rows above (0 host, 1 executable, 3 thread)."""
    out = {}
    for host, (_, rows) in HOSTS.items():
        for row in rows:
            key = host if index == 0 else row[index - 1]
            out[key] = out.get(key, 0) + row[3]
    return out


HOST_TOTALS = totals(0)  # web-1 600, web-2 650, db-1 950
EXE_TOTALS = totals(1)  # nginx 800, myapp 500, postgres 900
THREAD_TOTALS = totals(3)
ALL = sum(HOST_TOTALS.values())


def stacks(exe, value):
    """An executable's stacks for `value` samples: (frames, binary, value)."""
    if exe == "myapp":
        lib = value // 5
        return [(["main", "compute"], "myapp", value - lib),
                (["main", "compute", ("memcpy", "native", "libc.so.6")], "myapp", lib)]
    return [(["main", f"{exe}_loop"], exe, value)]


def populate(base):
    now = int(time.time() * 1000)
    for seq, (host, (cpus, rows)) in enumerate(HOSTS.items(), start=1):
        b = Batch(sample_rate_hz=HZ, host_cpus=cpus)
        for exe, pid, thread, value in rows:
            attrs = {"host.name": host, "process.executable.name": exe, "process.pid": pid,
                     "thread.name": thread}
            for frames, binary, v in stacks(exe, value):
                b.add(frames, attrs, v, binary=binary)
        start = now - 240_000 + seq * 30_000
        answer = send_batch(base, b.encode(sequence=1, start_ms=start, end_ms=start + 10_000))
        assert answer["stored"], answer


def api(base, name, body):
    status, ans = api_query(base, name, body)
    assert status == 200, ans
    return ans


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    populate(srv.base)
    a = api(srv.base, "top_entities", {"entity": "host"})
    assert a["total"] == ALL, a
    srv.scope = a["scope"]
    return srv


def fmt_cores(c):
    """common.js fmtCores for the values of these tests (0.001 .. 100)."""
    return f"{float(f'{c:.3g}'):g}"


def fmt_pct(v):
    """common.js fmtPct."""
    return (f"{v:.1f}" if v >= 10 or v == 0 else f"{v:.2f}") + "%"


def table(page, selector=".ent-content table"):
    """The rows of a table on screen: a dict per row, header label -> text."""
    return page.evaluate(f"""(() => {{
        const t = document.querySelector({json.dumps(selector)});
        if (!t) return null;
        const heads = [...t.tHead.rows[0].cells].map((c, i) => c.textContent || ('#' + i));
        return [...t.tBodies[0].rows].map((r) => Object.fromEntries(
            [...r.cells].map((c, i) => [heads[i], c.innerText.trim()])));
    }})()""")


def cores(samples, scope):
    return samples / scope["sample_rate_hz"] / scope["seconds"]


def click_selector(page, selector):
    rect = page.wait_for(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
        if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
        return {{x: r.left + r.width / 2, y: r.top + r.height / 2}}; }})()""")
    page.click(rect["x"], rect["y"])


def row_button(name, label):
    """A selector-free JS expression: the button `label` of the row named `name`."""
    return f"""[...document.querySelectorAll('.ent-content tbody tr')]
        .find((r) => r.querySelector('.ent-name').textContent === {json.dumps(name)})
        .querySelector('.ent-actions button[title^={json.dumps(label)}]')"""


# --- the tests ----------------------------------------------------------------


def test_hosts_ranked_with_their_cores(server, page):
    open_ui(page, server.base, "/?view=entities")
    rows = table(page)
    names = [r["Host"] for r in rows]
    assert names == sorted(HOST_TOTALS, key=HOST_TOTALS.get, reverse=True) == ["db-1", "web-2", "web-1"]
    scope = server.scope
    for r in rows:
        samples = HOST_TOTALS[r["Host"]]
        assert r["CPUs"] == str(HOSTS[r["Host"]][0])
        assert r["Cores"] == fmt_cores(cores(samples, scope))
        assert r["CPU %"] == fmt_pct(100 * samples / ALL)
    # The tab and the line saying what the percent is.
    assert page.evaluate("document.querySelector('.ent-tab[aria-selected=true]').textContent") == "Hosts"
    explain = page.evaluate("document.querySelector('.ent-explain').textContent")
    assert "share of all CPU time profiled in the last 15 minutes" in explain
    assert page.evaluate("document.querySelector('.ent-count').textContent") == "3 hosts"
    shot(page, "entities")

    # Absolute mode: a host's cores over its own CPUs.
    click_selector(page, ".ent-mode-btn[data-mode=absolute]")
    page.wait_for("document.body.dataset.state === 'ready' && "
                  "document.querySelector('.ent-explain').textContent.includes('its own logical CPUs')")
    assert search_params(page)["mode"] == ["absolute"]
    for r in table(page):
        c = cores(HOST_TOTALS[r["Host"]], scope)
        assert r["CPU %"] == fmt_pct(100 * c / HOSTS[r["Host"]][0])

    # Sorting by CPUs: web-1 (8), web-2 (4), db-1 (2); by name.
    click_selector(page, ".ent-content th[data-key=cpus]")
    page.wait_for("document.querySelector('.ent-content th[data-key=cpus]')?.getAttribute('aria-sort') === 'descending'")
    assert [r["Host"] for r in table(page)] == ["web-1", "web-2", "db-1"]
    click_selector(page, ".ent-content th[data-key=name]")
    page.wait_for("document.querySelector('.ent-content th[data-key=name]')?.getAttribute('aria-sort') === 'descending'")
    assert [r["Host"] for r in table(page)] == ["db-1", "web-1", "web-2"]
    assert search_params(page)["sort"] == ["name"]
    no_errors(page)


def test_executables_threads_and_the_name_filter(server, page):
    open_ui(page, server.base, "/?view=entities")
    click_selector(page, ".ent-tab[data-entity=executable]")
    page.wait_for("document.body.dataset.state === 'ready' && document.querySelector('.ent-content th')?.textContent === 'Executable'")
    assert search_params(page)["entity"] == ["executable"]
    rows = table(page)
    assert [r["Executable"] for r in rows] == ["postgres", "nginx", "myapp"]  # 900, 800, 500
    assert [r["CPU %"] for r in rows] == [fmt_pct(100 * EXE_TOTALS[n] / ALL) for n in ("postgres", "nginx", "myapp")]
    assert "CPUs" not in rows[0]

    # The name filter narrows the rows as one types, and stays in the URL.
    type_in(page, "#ent-match", "GIN")
    page.wait_for("document.querySelectorAll('.ent-content tbody tr').length === 1")
    assert [r["Executable"] for r in table(page)] == ["nginx"]
    page.wait_for("location.search.includes('match=GIN')")
    assert page.evaluate("document.querySelector('.ent-count').textContent").startswith("1 of 3 executables")
    page.insert_text("zzz")
    page.wait_for("document.querySelectorAll('.ent-content tbody tr').length === 0")
    assert "No executable name contains" in page.evaluate("document.querySelector('.ent-content').innerText")
    # The input kept its focus through the re-rendering.
    assert page.evaluate("document.activeElement.id") == "ent-match"

    # Threads: main runs in myapp on three hosts.
    open_ui(page, server.base, "/?view=entities&entity=thread")
    rows = table(page)
    assert {r["Thread"]: r["CPU %"] for r in rows} == {n: fmt_pct(100 * v / ALL) for n, v in THREAD_TOTALS.items()}
    assert rows[0]["Thread"] == "postgres"
    no_errors(page)


def test_flamegraph_action_narrows_the_query(server, page):
    open_ui(page, server.base, "/?view=entities&entity=executable")
    page.evaluate(row_button("myapp", "Flame graph") + ".click()")
    page.wait_for("document.body.dataset.state === 'ready' && !location.search.includes('view=entities')")
    params = search_params(page)
    assert params["q"] == ['process.executable.name == "myapp"']
    assert "view" not in params  # the flame graph is the default view
    page.wait_for("window.emberFlamegraph && window.emberFlamegraph.total > 0")
    assert page.evaluate("window.emberFlamegraph.total") == EXE_TOTALS["myapp"]
    assert page.evaluate("document.getElementById('query').value") == 'process.executable.name == "myapp"'

    # "Filter" adds the host to the query and the list follows it.
    open_ui(page, server.base, "/?view=entities&entity=host")
    page.evaluate(row_button("web-2", "Add") + ".click()")
    page.wait_for("document.body.dataset.state === 'ready' && location.search.includes('q=')")
    assert search_params(page)["q"] == ['host.name == "web-2"']
    assert [r["Host"] for r in table(page)] == ["web-2"]
    # The percent stays a share of everything, whatever the query.
    assert table(page)[0]["CPU %"] == fmt_pct(100 * HOST_TOTALS["web-2"] / ALL)

    # A shared object cannot be a filter: its action searches the flame graph.
    open_ui(page, server.base, "/?view=entities&entity=shared_object")
    rows = {r["Shared object"]: r for r in table(page)}
    lib = sum(v // 5 for h in HOSTS.values() for e, _, _, v in h[1] if e == "myapp")
    assert rows["libc.so.6"]["Self CPU %"] == fmt_pct(100 * lib / ALL)
    assert rows["myapp"]["Total CPU %"] == fmt_pct(100 * EXE_TOTALS["myapp"] / ALL)
    assert rows["myapp"]["Self CPU %"] == fmt_pct(100 * (EXE_TOTALS["myapp"] - lib) / ALL)
    assert page.evaluate(row_button("libc.so.6", "Flame graph") + ".textContent") == "Flamegraph search"
    page.evaluate(row_button("libc.so.6", "Flame graph") + ".click()")
    page.wait_for("document.body.dataset.state === 'ready' && !location.search.includes('view=entities')")
    assert search_params(page)["s"] == ["libc.so.6"]
    no_errors(page)


def test_entity_page_of_an_executable(server, page):
    open_ui(page, server.base, "/?view=entities&entity=executable")
    # Enter on a focused row opens its page.
    page.evaluate("""[...document.querySelectorAll('.ent-content tbody tr')]
        .find((r) => r.querySelector('.ent-name').textContent === 'myapp').focus()""")
    page.press("Enter")
    page.wait_for("document.body.dataset.state === 'ready' && !!document.querySelector('.ent-title-name')")
    params = search_params(page)
    assert params["entity"] == ["executable"] and params["name"] == ["myapp"]
    check_myapp_page(page, server)
    shot(page, "entity_page")

    # A copied URL restores the page.
    url = page.evaluate("location.href")
    page.navigate("about:blank")
    page.navigate(url)
    wait_state(page, "ready")
    check_myapp_page(page, server)

    # A host row leads to that host's page, which lists its executables.
    page.evaluate("""[...document.querySelectorAll('[data-related=host] tbody tr')]
        .find((r) => r.querySelector('.ent-name').textContent === 'web-2').click()""")
    page.wait_for("document.body.dataset.state === 'ready' && "
                  "document.querySelector('.ent-title-name')?.textContent === 'web-2' && "
                  "!!document.querySelector('[data-related=executable] tbody')")
    exes = table(page, "[data-related=executable] table")
    assert [r["Executable"] for r in exes] == ["nginx", "myapp"]
    assert exes[1]["Share"] == fmt_pct(100 * 250 / HOST_TOTALS["web-2"])
    assert stats(page)["CPUs"] == "4"

    # The back button of the browser, then "Back to top entities".
    page.evaluate("history.back()")
    page.wait_for("document.querySelector('.ent-title-name')?.textContent === 'myapp'")
    wait_state(page, "ready")
    click_selector(page, ".ent-back")
    page.wait_for("document.body.dataset.state === 'ready' && !!document.querySelector('.ent-tabs')")
    assert "name" not in search_params(page)
    assert page.evaluate("document.querySelector('.ent-tab[aria-selected=true]').textContent") == "Executables"
    no_errors(page)


def stats(page):
    return page.evaluate("""Object.fromEntries([...document.querySelectorAll('.ent-stats div')]
        .map((d) => [d.querySelector('dt').textContent, d.querySelector('dd').textContent]))""")


def check_myapp_page(page, server):
    scope = server.scope
    st = stats(page)
    assert "CPUs" not in st  # an executable has none of its own
    assert st["Cores"] == fmt_cores(cores(EXE_TOTALS["myapp"], scope))
    assert st["CPU %"] == fmt_pct(100 * EXE_TOTALS["myapp"] / ALL)
    assert st["Samples"] == "500"
    # The chart: one series whose cores add up to the executable's samples.
    assert page.evaluate("document.querySelectorAll('.ent-chart svg path[data-series=myapp]').length") == 1
    # Its hosts: where it runs, largest first, with its share on each.
    hosts = table(page, "[data-related=host] table")
    myapp = {h: sum(v for e, _, _, v in HOSTS[h][1] if e == "myapp") for h in HOSTS}
    assert [r["Host"] for r in hosts] == ["web-2", "web-1", "db-1"]
    for r in hosts:
        assert r["Share"] == fmt_pct(100 * myapp[r["Host"]] / 500)
        assert r["Cores"] == fmt_cores(cores(myapp[r["Host"]], scope))
        assert r["CPUs"] == str(HOSTS[r["Host"]][0])
    # Its shared objects: libc.so.6 under myapp's own code.
    objects = {r["Shared object"]: r for r in table(page, "[data-related=shared_object] table")}
    assert set(objects) == {"myapp", "libc.so.6"}
    assert objects["myapp"]["Total"] == "100%" or objects["myapp"]["Total"] == "100.0%"
    assert objects["libc.so.6"]["Self"] == fmt_pct(100 * 100 / 500)


def test_chart_zoom_sets_the_time_range(server, page):
    open_ui(page, server.base, "/?view=entities&entity=host&name=db-1")
    t = page.evaluate("(() => { const s = document.querySelector('.ent-chart svg').getBoundingClientRect();"
                      " return {y: s.top + 60, now: Date.now()}; })()")
    x0 = page.evaluate(f"window.emberEntityChart.clientXOf({t['now'] - 600_000})")
    x1 = page.evaluate(f"window.emberEntityChart.clientXOf({t['now'] - 60_000})")
    page.mouse_move(x0, t["y"])
    page.send("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=t["y"], button="left", buttons=1, clickCount=1)
    page.mouse_move((x0 + x1) / 2, t["y"])
    page.send("Input.dispatchMouseEvent", type="mouseMoved", x=x1, y=t["y"], button="left", buttons=1)
    page.send("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=t["y"], button="left", buttons=0, clickCount=1)
    page.wait_for("location.search.includes('range=custom')")
    wait_state(page, "ready")
    params = search_params(page)
    assert params["name"] == ["db-1"] and params["entity"] == ["host"]
    span = int(params["to"][0]) - int(params["from"][0])
    assert span == pytest.approx(540_000, rel=0.05)
    assert page.evaluate("document.querySelector('.ent-title-name').textContent") == "db-1"
    no_errors(page)


def test_no_deployments_says_why(server, page):
    open_ui(page, server.base, "/?view=entities&entity=deployment", state="empty")
    text = page.evaluate("document.querySelector('.ent-content').innerText")
    assert "No deployment in the last 15 minutes" in text
    assert f"None of the {ALL:,} samples has k8s.deployment.name" in text
    assert "Kubernetes" in text
    shot(page, "entities_no_deployment")
    # Processes: their PIDs, largest first.
    open_ui(page, server.base, "/?view=entities&entity=process&mode=absolute")
    rows = table(page)
    assert [r["Process (PID)"] for r in rows][:2] == ["301", "101"]
    explain = page.evaluate("document.querySelector('.ent-explain').textContent")
    assert "of the 14 logical CPUs of the 3 hosts" in explain
    assert rows[0]["CPU %"] == fmt_pct(100 * cores(900, server.scope) / 14)
    shot(page, "entities_processes")
    no_errors(page)


def test_bad_query_shows_the_server_error(server, page):
    bad = "host.name =="
    open_ui(page, server.base, "/?view=entities&q=" + urllib.parse.quote(bad), state="error")
    text = page.evaluate("document.querySelector('.ent-content').innerText")
    assert "The query was rejected" in text and "column" in text
    shot(page, "entities_error")
    no_errors(page, allow=[lambda e: e.get("source") == "network" and "top_entities" in e.get("url", "")])


def test_empty_server(empty_server, page):
    open_ui(page, empty_server.base, "/?view=entities", state="empty")
    text = page.evaluate("document.querySelector('.ent-content').innerText")
    assert "No samples in the last 15 minutes" in text and "ember-agent" in text
    open_ui(page, empty_server.base, "/?view=entities&entity=executable&name=myapp", state="empty")
    assert "No samples" in page.evaluate("document.querySelector('.ent-page').innerText")

    # Data arrives; Refresh fetches again though nothing else changed.
    open_ui(page, empty_server.base, "/?view=entities", state="empty")
    b = Batch(sample_rate_hz=HZ, host_cpus=2)
    b.add(["main"], {"host.name": "late-host", "process.executable.name": "x"}, 38)
    now = int(time.time() * 1000)
    assert send_batch(empty_server.base, b.encode(sequence=1, start_ms=now - 20_000, end_ms=now - 10_000))["stored"]
    click_selector(page, "#refresh")
    page.wait_for("document.body.dataset.state === 'ready'")
    assert [r["Host"] for r in table(page)] == ["late-host"]
    no_errors(page)
