"""The web UI on a real profile: ember-agent samples the cpu_split workload
(60 % of its CPU in hot_a, 30 % in hot_b, 10 % in cold_c, under main ->
run_workload -> run_cycle -> run_slot) with BPF, as root, into a real
ember-server; the page shows what a user would look for."""

import json
import os
import urllib.parse

import pytest

from conftest import no_errors, open_ui, search_params, shot, start_server, type_in, wait_state
from harness import Agent, WORKLOADS, wait_until, walk

QUERY = 'process.executable.name == "cpu_split"'


@pytest.fixture(scope="module")
def profiled(request):
    if os.geteuid() != 0:
        pytest.fail("the agent loads BPF programs: run the browser tests as root (CI does)")
    srv = start_server(request)
    agent = Agent(srv.url, "-on-cpu-sampling-rate=199").start()
    request.addfinalizer(lambda: agent.stop(timeout=20))
    import subprocess
    report = json.loads(subprocess.run([os.path.join(WORKLOADS, "cpu_split"), "4"], check=True,
                                       stdout=subprocess.PIPE, timeout=60).stdout)
    hist = []

    def settled():
        fg = srv.flamegraph(QUERY)
        hist.append(fg["total"])
        return len(hist) >= 3 and hist[-1] > 0 and hist[-3:] == [hist[-1]] * 3 and fg
    fg = wait_until(settled, 40, interval=1.0, what="the workload's samples")
    srv.report = report
    srv.hot_a = sum(n["total"] for path, n in walk(fg["root"]) if n["name"] == "hot_a")
    srv.total = fg["total"]
    assert srv.hot_a > 0.4 * srv.total, (srv.hot_a, srv.total)
    return srv


def url(path="/", **params):
    return path + "?" + urllib.parse.urlencode(params)


def test_the_hot_function_is_visible_named_searched_and_focused(profiled, page):
    open_ui(page, profiled.base, url(q=QUERY))
    assert page.evaluate("emberFlamegraph.total") == profiled.total
    frames = page.evaluate("emberFlamegraph.frames")
    hot = [f for f in frames if f["name"] == "hot_a"]
    assert hot, [f["name"] for f in frames]
    width = page.evaluate("emberFlamegraph.width")
    # Drawn at its share of the samples: about 60 % of the width.
    share = sum(f["width"] for f in hot) / width
    assert abs(share - profiled.report["hot_a"]) < 0.08, (share, profiled.report)
    for name in ("run_slot", "run_cycle", "run_workload", "main", "hot_b", "cold_c"):
        assert any(f["name"] == name for f in frames), name
    shot(page, "real_flamegraph")
    # Search highlights it.
    type_in(page, "#search", "hot_a")
    page.wait_for("emberFlamegraph.matches > 0")
    assert abs(page.evaluate("emberFlamegraph.matchedShare") - profiled.hot_a / profiled.total) < 0.01
    assert all(f["matched"] for f in page.evaluate("emberFlamegraph.frames") if f["name"] == "hot_a")
    shot(page, "real_search")
    # A click focuses it: it spans the width, and the link keeps the focus.
    f = [f for f in page.evaluate("emberFlamegraph.frames") if f["name"] == "hot_a"][0]
    r = page.evaluate("""(() => { const r = document.getElementById('flamegraph').getBoundingClientRect();
        return {x: r.left, y: r.top}; })()""")
    page.click(r["x"] + f["x"] + f["width"] / 2, r["y"] + f["depth"] * 18 + 9)
    page.wait_for("emberFlamegraph.focus.length && emberFlamegraph.focus[emberFlamegraph.focus.length - 1] === 'hot_a'")
    assert search_params(page)["f"][-1] == "hot_a"
    again = page.evaluate("location.href")
    page.navigate(again)
    wait_state(page, "ready")
    assert page.evaluate("emberFlamegraph.focus")[-1] == "hot_a"
    no_errors(page)


def test_top_functions_and_sandwich_of_the_real_profile(profiled, page):
    open_ui(page, profiled.base, url(view="functions", q=QUERY))
    first = page.evaluate("document.querySelector('#view-functions tbody tr').innerText")
    assert "hot_a" in first, first
    shot(page, "real_functions")
    # Its sandwich: called by run_slot.
    open_ui(page, profiled.base, url(view="functions", q=QUERY, fn="hot_a"))
    text = page.evaluate("document.getElementById('view-functions').innerText")
    assert "run_slot" in text, text
    shot(page, "real_sandwich")
    no_errors(page)
