"""Browser test of the page-wide Show switch (On-CPU / Off-CPU, `kind` in the
URL) outside the flamegraph: Top functions (and the sandwich), Top entities
(and an entity's page), Diff and the Efficiency IQ note, on a real
ember-server holding on-CPU samples and off-CPU waits (nanoseconds, as
ember-agent -enable-off-cpu sends them) of different functions."""

import time

import pytest

from conftest import PROJECT, no_errors, open_ui, search_params, shot, start_server  # noqa: F401
from ember_batch import Batch, send_batch  # (tests/lib, on the path through conftest)

ATTRS = {"process.executable.name": "waiter", "host.name": "testhost", "thread.name": "main"}
AGENT = "7b2d4f60-1a3c-4e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture(scope="module")
def server(request):
    """Two batches, one in each half of the default 15-minute range.
    On-CPU: crunch (200 then 400 samples). Off-CPU: sleep_a waits 2 s then
    6 s (worse), lock_b 2 s in both halves (unchanged)."""
    srv = start_server(request)
    now = int(time.time() * 1000)
    for seq, (at, crunch, sleep_ns) in enumerate([(now - 600_000, 200, 2_000_000_000),
                                                   (now - 60_000, 400, 6_000_000_000)], 1):
        b = Batch(agent_instance=AGENT, sample_rate_hz=19)
        b.add(["main", "crunch"], ATTRS, crunch)
        b.add(["main", "sleep_a", ("hrtimer_nanosleep", "kernel")], ATTRS, sleep_ns, kind="off_cpu")
        b.add(["main", "lock_b", ("futex_do_wait", "kernel")], ATTRS, 2_000_000_000, kind="off_cpu")
        answer = send_batch(srv.base, b.encode(sequence=seq, start_ms=at, end_ms=at + 5000))
        assert answer["stored"], answer
    return srv


FN_ROWS = """[...document.querySelectorAll('#view-functions .fn-table tbody tr')].map((tr) => ({
    name: tr.cells[0].innerText.trim(), self: tr.cells[2].innerText, self_pct: tr.cells[3].innerText,
    title: tr.cells[2].firstElementChild ? tr.cells[2].firstElementChild.title : ''}))"""
FN_HEAD = "[...document.querySelectorAll('#view-functions .fn-table thead th')].map((th) => th.innerText.trim())"
ENT_HEAD = "[...document.querySelectorAll('.ent-content thead th')].map((th) => th.innerText.trim())"


def set_kind(page, kind):
    page.evaluate(f"""(() => {{ const s = document.getElementById('kind');
        s.value = '{kind}'; s.dispatchEvent(new Event('change')); }})()""")


def nav(page, view):
    page.evaluate(f"document.querySelector('nav a[data-view=\"{view}\"], a[data-view=\"{view}\"]').click()")


def test_top_functions_off_cpu(server, page):
    open_ui(page, server.base, "/?view=functions&kind=off_cpu")
    # The Show switch is in the top bar on this view, set to off-CPU.
    assert page.evaluate("document.getElementById('kind-field').hidden") is False
    assert page.evaluate("document.getElementById('kind').value") == "off_cpu"
    page.wait_for("document.querySelectorAll('#view-functions .fn-table tbody tr').length > 0")
    rows = {r["name"]: r for r in page.evaluate(FN_ROWS)}
    assert "sleep_a" in rows and "lock_b" in rows, rows
    assert "crunch" not in rows
    # Self of sleep_a: 8 s waited over the range (self is in the kernel frame
    # under it, so sleep_a's self is 0); hrtimer_nanosleep holds the 8 s.
    leaf = rows["hrtimer_nanosleep"]
    assert leaf["self"].endswith(" thr"), leaf
    assert "8 s waited" in leaf["title"] and "threads waiting" in leaf["title"], leaf
    # 8 s of the 12 s waited: two thirds.
    assert leaf["self_pct"] == "66.7%", leaf
    head = page.evaluate(FN_HEAD)
    assert "Self waiting" in head and "Total wait %" in head, head
    assert not any(h in ("Self", "Total") for h in head), head
    # Absolute CPU % has no meaning for waits: the mode toggle is hidden.
    assert page.evaluate("[...document.querySelectorAll('#view-functions .fn-mode')].every((g) => g.hidden && !g.offsetParent)")
    note = page.evaluate("document.querySelector('#view-functions .fn-note, #view-functions [class*=note]').innerText")
    assert "Off-CPU" in note and "threads" in note.lower(), note
    shot(page, "functions-off-cpu")

    # The sandwich of an off-CPU function speaks of time waited.
    page.evaluate("""[...document.querySelectorAll('#view-functions .fn-table tbody tr')]
        .find((tr) => tr.cells[0].innerText.trim() === 'sleep_a').click()""")
    page.wait_for("document.body.dataset.state === 'ready' && !!document.querySelector('.fn-sw-head .fn-stat-samples')")
    assert search_params(page)["kind"] == ["off_cpu"]
    stats = page.evaluate("document.querySelector('.fn-sw-head').innerText")
    assert "8 s waited" in stats and "thr" in stats, stats
    cols = page.evaluate("document.querySelector('.fn-tree-cols').innerText")
    assert "Waited" in cols and "Samples" not in cols, cols
    shot(page, "functions-sandwich-off-cpu")

    # Back to on-CPU: the on-CPU function, in cores.
    open_ui(page, server.base, "/?view=functions&kind=off_cpu")
    set_kind(page, "on_cpu")
    page.wait_for("document.body.dataset.state === 'ready' && [...document.querySelectorAll('#view-functions .fn-table tbody tr')].some((tr) => tr.cells[0].innerText.trim() === 'crunch')")
    assert "kind" not in search_params(page)
    rows = {r["name"]: r for r in page.evaluate(FN_ROWS)}
    assert "sleep_a" not in rows and "lock_b" not in rows
    assert rows["crunch"]["self"].endswith(("mc", " c")), rows["crunch"]
    assert "600 samples" in rows["crunch"]["title"], rows["crunch"]
    head = page.evaluate(FN_HEAD)
    assert "Self" in head and "Self waiting" not in head, head
    no_errors(page)


def test_kind_survives_views(server, page):
    open_ui(page, server.base, "/?view=functions&kind=off_cpu")
    # Top entities: threads waiting and wait %, the off-CPU time of the host.
    nav(page, "entities")
    page.wait_for("document.body.dataset.state === 'ready' && !!document.querySelector('.ent-content tbody tr')")
    assert search_params(page)["kind"] == ["off_cpu"]
    head = page.evaluate(ENT_HEAD)
    assert "Threads waiting" in head and "Wait %" in head and "Waited" in head, head
    assert "Cores" not in head and "CPU %" not in head, head
    row = page.evaluate("[...document.querySelector('.ent-content tbody tr').cells].map((c) => c.innerText.trim())")
    assert row[0] == "testhost" and "12 s" in row, row
    assert "Off-CPU" in page.evaluate("document.querySelector('.ent-explain').innerText")
    shot(page, "entities-off-cpu")

    # The host's page: its chart is in threads waiting.
    page.evaluate("document.querySelector('.ent-content tbody tr').click()")
    page.wait_for("document.body.dataset.state === 'ready' && !!document.querySelector('.ent-stats dt')")
    assert search_params(page)["kind"] == ["off_cpu"]
    stats = page.evaluate("document.querySelector('.ent-stats').innerText")
    assert "Threads waiting" in stats and "Waited" in stats and "Samples" not in stats, stats
    assert "threads waiting" in page.evaluate("document.querySelector('.ent-chart-panel h2').innerText")

    # Diff: both scopes ask for off-CPU; sleep_a waits more, crunch is absent.
    nav(page, "diff")
    page.wait_for("document.body.dataset.state === 'ready' && window.emberDiff && emberDiff.rows.length > 0")
    assert search_params(page)["kind"] == ["off_cpu"]
    rows = {r["name"]: r for r in page.evaluate("emberDiff.rows")}
    assert "crunch" not in rows, rows
    assert rows["hrtimer_nanosleep"]["kind"] == "worse", rows
    # Threads waiting: 2 s each in the baseline; 6 s against 2 s in the
    # comparison (each scope's seconds are cut to the data it holds).
    slp, lock = rows["hrtimer_nanosleep"], rows["futex_do_wait"]
    assert slp["base"] == pytest.approx(lock["base"], rel=1e-3) and slp["base"] > 0
    assert slp["cmp"] == pytest.approx(3 * lock["cmp"], rel=1e-3)
    assert slp["cmp"] < 1, slp  # threads, not nanoseconds
    summary = page.evaluate("document.querySelector('.diff-summary').innerText")
    assert "threads waiting" in summary and "wait more" in summary, summary
    shot(page, "diff-off-cpu")

    # Back to the flamegraph: still off-CPU.
    nav(page, "flamegraph")
    page.wait_for("window.emberFlamegraph && emberFlamegraph.kind === 'off_cpu' && emberFlamegraph.total === 12000000000")

    # On-CPU diff: crunch grew, no off-CPU function.
    open_ui(page, server.base, "/?view=diff")
    page.wait_for("window.emberDiff && emberDiff.rows.length > 0")
    rows = {r["name"]: r for r in page.evaluate("emberDiff.rows")}
    assert "crunch" in rows and "sleep_a" not in rows, rows

    # Efficiency IQ stays on CPU and says so; the switch is not shown there.
    open_ui(page, server.base, "/?view=iq&kind=off_cpu")
    assert page.evaluate("document.getElementById('kind-field').hidden") is True
    assert "on-CPU" in page.evaluate("document.querySelector('.iq-kind-note').innerText")
    assert page.evaluate("!document.querySelector('.iq-kind-note').hidden")
    nav(page, "functions")
    page.wait_for("document.body.dataset.state === 'ready' && document.querySelectorAll('#view-functions .fn-table tbody tr').length > 0")
    assert search_params(page)["kind"] == ["off_cpu"]
    no_errors(page)


def test_off_cpu_empty_states_name_the_flag(server, page):
    q = "thread.name%20%3D%3D%20%22nobody%22"
    for view in ("functions", "entities", "diff"):
        open_ui(page, server.base, f"/?view={view}&kind=off_cpu&q={q}", state="empty")
        text = page.evaluate(f"document.getElementById('view-{view}').innerText")
        assert "off-CPU samples" in text and "-enable-off-cpu" in text, (view, text)
    no_errors(page)
