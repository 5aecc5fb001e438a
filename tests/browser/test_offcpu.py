"""Browser test of the flamegraph's Off-CPU switch: a real ember-server
holding on-CPU samples and off-CPU waits (nanoseconds, as ember-agent
-enable-off-cpu sends them) for the same process; the page shows one or
the other, in samples and cores or in time waited and threads waiting."""

import time

import pytest

from conftest import PROJECT, no_errors, open_ui, search_params, shot, start_server  # noqa: F401
from conftest import flamegraph_frame as frame
from ember_batch import Batch, send_batch  # (tests/lib, on the path through conftest)

ATTRS = {"process.executable.name": "waiter", "host.name": "testhost", "thread.name": "main"}
# On-CPU: 400 samples in crunch. Off-CPU: 6 s in sleep_a under nanosleep,
# 2 s in lock_b under a futex wait (3 : 1).
ON_CPU = [(["main", "crunch"], 400)]
OFF_CPU = [
    (["main", "sleep_a", ("hrtimer_nanosleep", "kernel")], 6_000_000_000),
    (["main", "lock_b", ("futex_do_wait", "kernel")], 2_000_000_000),
]


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    now = int(time.time() * 1000)
    b = Batch(agent_instance="5a1c7e2b-9d3f-4c8a-b6e1-0f2d4c6a8e19", sample_rate_hz=19)
    for frames, value in ON_CPU:
        b.add(frames, ATTRS, value)
    for frames, value in OFF_CPU:
        b.add(frames, ATTRS, value, kind="off_cpu")
    answer = send_batch(srv.base, b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 55_000))
    assert answer["stored"], answer
    return srv


def test_off_cpu_switch_shows_time_waited(server, page):
    open_ui(page, server.base)
    assert page.evaluate("emberFlamegraph.total") == 400
    assert page.evaluate("document.getElementById('kind').value") == "on_cpu"
    names = {f["name"] for f in page.evaluate("emberFlamegraph.frames")}
    assert "crunch" in names and "sleep_a" not in names

    page.evaluate("""(() => { const s = document.getElementById('kind');
        s.value = 'off_cpu'; s.dispatchEvent(new Event('change')); })()""")
    page.wait_for("emberFlamegraph.kind === 'off_cpu' && emberFlamegraph.total === 8000000000")
    assert search_params(page)["kind"] == ["off_cpu"]
    assert page.evaluate("emberFlamegraph.unit") == "nanoseconds"
    a, b = frame(page, "sleep_a"), frame(page, "lock_b")
    assert a["total"] == 6_000_000_000 and b["total"] == 2_000_000_000
    assert a["width"] / b["width"] == pytest.approx(3.0, rel=0.03)
    assert not any(f["name"] == "crunch" for f in page.evaluate("emberFlamegraph.frames"))
    # 8 s waited over the 15-minute range: 8 / 900 = 0.0089 threads waiting.
    summary = page.evaluate("document.getElementById('summary').innerText")
    assert "8.00 s waited" in summary and "threads waiting" in summary and "Hz" not in summary
    shot(page, "flamegraph-off-cpu")

    # The tooltip speaks of time waited, not samples.
    x, y = page.evaluate("""(() => { const f = emberFlamegraph.frames.find((f) => f.name === 'sleep_a');
        const r = document.getElementById('flamegraph').getBoundingClientRect();
        return [r.left + f.x + f.width / 2, r.top + f.depth * 18 + 9]; })()""")
    page.mouse_move(x, y)
    text = page.wait_for("!tooltip.hidden && tooltip.innerText")
    assert "6.00 s waited" in text and "75.0%" in text and "threads waiting" in text
    page.mouse_move(5, 5)

    # The link keeps the choice; back to on-CPU.
    open_ui(page, server.base, "/?kind=off_cpu")
    assert page.evaluate("document.getElementById('kind').value") == "off_cpu"
    assert page.evaluate("emberFlamegraph.total") == 8_000_000_000
    page.evaluate("""(() => { const s = document.getElementById('kind');
        s.value = 'on_cpu'; s.dispatchEvent(new Event('change')); })()""")
    page.wait_for("emberFlamegraph.kind === 'on_cpu' && emberFlamegraph.total === 400")
    assert "kind" not in search_params(page)
    no_errors(page)


def test_off_cpu_empty_explains_the_flag(server, page):
    open_ui(page, server.base, "/?kind=off_cpu&q=" + "thread.name%20%3D%3D%20%22nobody%22", state="empty")
    text = page.evaluate("document.body.innerText")
    assert "off-CPU samples" in text
    open_ui(page, server.base, "/?kind=off_cpu&range=5m&q=", state="ready")
    no_errors(page)
