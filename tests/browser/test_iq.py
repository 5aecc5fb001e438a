"""Browser tests of the Efficiency IQ view (web/view_iq.js): a real
ember-server filled with batches from three hosts and three executables
spread over four minutes, and the overview checked against what was sent:
the utilization chart, the headline numbers, the top functions and
entities, the CPU mode, the navigation from a row, drag-to-zoom, the GPU
tab and an empty server.

Run from the repository root after building ember-server:
    /usr/bin/python3 -m pytest -q tests/browser/test_iq.py
"""

import time

import pytest

from conftest import no_errors, open_ui, search_params, shot, start_server, wait_state
from ember_batch import Batch, send_batch

RATE = 19
# host -> (logical CPUs, [(executable, frames, samples per minute)])
HOSTS = {
    "db-1": (16, [("postgres", ["main", "exec_query", "scan_heap"], 3800),
                  ("postgres", ["main", "exec_query"], 760)]),
    "web-1": (8, [("api", ["main", "handle", "compute"], 1900),
                  ("api", ["main", "handle", "parse"], 950),
                  ("worker", ["main", "work"], 380)]),
    "web-2": (4, [("api", ["main", "handle", "compute"], 950),
                  ("api", ["main", "handle", "parse"], 380),
                  ("worker", ["main", "work"], 190)]),
}
MINUTES = 4  # one batch per host and minute
PER_MINUTE = sum(v for _, stacks in HOSTS.values() for _, _, v in stacks)  # 9310
TOTAL = PER_MINUTE * MINUTES
CPUS = sum(c for c, _ in HOSTS.values())  # 28
# Rows carry the start of their batch; the data of the last one reaches 10 s
# further (server/query/scan.c): the seconds the averages are over.
SECONDS = (MINUTES - 1) * 60 + 10
# The average and peak cards read the time series' 15 s buckets: a minute's
# batch lands in one, and the average is over the buckets from the first
# with data to the last (13 of them: 3 min 15 s).
BUCKET_SPAN = ((MINUTES - 1) * 60 // 15 + 1) * 15


def host_total(host):
    return sum(v for _, _, v in HOSTS[host][1]) * MINUTES


def self_total(fn):
    return sum(v for _, stacks in HOSTS.values() for _, frames, v in stacks if frames[-1] == fn) * MINUTES


def fmt_pct(v):
    return f"{v:.1f}%" if v >= 10 else f"{v:.2f}%"


def fmt_cores(c):
    return str(float(f"{c:.3g}")).removesuffix(".0")


def populate(base, now):
    first = now - 20_000 - MINUTES * 60_000
    seq = 0
    for i, (host, (cpus, stacks)) in enumerate(HOSTS.items()):
        agent = f"7e1d2c3b-0000-4000-8000-00000000000{i}"
        for m in range(MINUTES):
            seq += 1
            b = Batch(agent_instance=agent, sample_rate_hz=RATE, host_cpus=cpus)
            for exe, frames, value in stacks:
                b.add(frames, {"host.name": host, "process.executable.name": exe,
                               "process.pid": str(100 + i)}, value, binary=exe)
            start = first + m * 60_000
            answer = send_batch(base, b.encode(sequence=m + 1, start_ms=start, end_ms=start + 5_000))
            assert answer["stored"], answer
    return first


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    srv.now = int(time.time() * 1000)
    srv.first = populate(srv.base, srv.now)
    return srv


@pytest.fixture(scope="module")
def gpu_server(request):
    """CPU samples and CUDA kernel time (nanoseconds) of one host."""
    srv = start_server(request)
    now = int(time.time() * 1000)
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000aa", sample_rate_hz=RATE, host_cpus=8)
    attrs = {"host.name": "gpu-1", "process.executable.name": "trainer"}
    b.add(["main", "train_step"], attrs, 190)
    b.add(["main", "train_step", ("launch_gemm", "cuda_launch"), ("sgemm_kernel", "cuda_kernel")],
          attrs, 30_000_000_000, kind="cuda")
    b.add(["main", "train_step", ("launch_softmax", "cuda_launch"), ("softmax_kernel", "cuda_kernel")],
          attrs, 10_000_000_000, kind="cuda")
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 55_000))["stored"]
    return srv


def cards(page):
    return page.evaluate("""Object.fromEntries([...document.querySelectorAll('#view-iq .iq-card')].map(c =>
        [c.dataset.card, {label: c.querySelector('.iq-card-label').textContent,
                          value: c.querySelector('.iq-card-value').textContent,
                          sub: c.querySelector('.iq-card-sub').textContent}]))""")


def table(page, panel):
    """The rows of a top-5 table as lists of cell texts."""
    return page.evaluate(f"""[...document.querySelectorAll('#view-iq .iq-body[data-panel="{panel}"] tbody tr')]
        .map(tr => [...tr.cells].map(td => td.textContent.trim()))""")


def series(page):
    return page.evaluate("""[...document.querySelectorAll('#view-iq .iq-util svg path[data-series]')]
        .map(p => p.dataset.series)""")


def series_average(page):
    """The average of the time series' bucket sums from the first bucket
    with data to the last (what the average card shows)."""
    d = page.evaluate("emberIQ.data.series")
    n = max(len(x["values"]) for x in d["series"])
    sums = [sum(x["values"][i] for x in d["series"] if i < len(x["values"])) for i in range(n)]
    used = [i for i, v in enumerate(sums) if v > 0]
    return sum(sums[used[0]:used[-1] + 1]) / (used[-1] - used[0] + 1)


def click_selector(page, selector):
    x, y = page.evaluate(f"""(() => {{ const e = document.querySelector({selector!r});
        e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
        return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
    page.click(x, y)


def wait_ready(page, state="ready"):
    page.pump(0.05)
    page.wait_for("document.body.dataset.state !== 'loading'")
    got = page.evaluate("document.body.dataset.state")
    assert got == state, (got, page.evaluate("""({href: location.href,
        message: document.querySelector('#view-iq .iq-message')?.innerText,
        totals: window.emberIQ && Object.fromEntries(Object.entries(emberIQ.data)
            .map(([k, d]) => [k, d && (d.total ?? d.series?.length)]))})"""))
    return got


# --- the tests ------------------------------------------------------------

def test_overview_matches_the_data(server, page):
    open_ui(page, server.base, "/?view=iq")
    assert page.evaluate("document.title").startswith("Efficiency IQ")
    # One stacked series per host, the largest first.
    assert series(page) == ["db-1", "web-1", "web-2"]
    # Drawn across the whole panel at once (not at a hidden container's width).
    svg_w, body_w = page.evaluate("""(() => { const b = document.querySelector('#view-iq .iq-body[data-panel=series]');
        return [Number(b.querySelector('svg').getAttribute('width')), b.clientWidth]; })()""")
    assert svg_w == body_w and body_w > 1000
    legend = page.evaluate("[...document.querySelectorAll('#view-iq .chart-legend li')].map(l => l.textContent)")
    assert legend == ["db-1", "web-1", "web-2"]
    c = cards(page)
    assert c["avg"]["value"] == fmt_cores(TOTAL / RATE / BUCKET_SPAN)  # 10.1
    assert c["avg"]["sub"] == "over the 3 min 15 s with data, 15 s buckets"
    # A minute's batches land in one 15 s bucket.
    assert c["peak"]["value"] == fmt_cores(PER_MINUTE / RATE / 15)  # 32.7
    assert c["peak"]["sub"].endswith(", 15 s buckets")
    assert c["hosts"]["value"] == "3" and c["hosts"]["sub"] == f"{CPUS} logical CPUs"
    assert c["share"]["label"] == "Share of profiled CPU" and c["share"]["value"] == "100.0%"

    funcs = table(page, "functions")
    names = [r[0] for r in funcs]
    assert names == ["scan_heap", "compute", "parse", "exec_query", "work"]
    for row in funcs:
        s = self_total(row[0])
        assert row[1] == fmt_cores(s / RATE / SECONDS), row
        assert row[2] == fmt_pct(100 * s / TOTAL), row
    ents = table(page, "entities")
    assert [r[0] for r in ents] == ["db-1", "web-1", "web-2"]
    for row in ents:
        assert row[1] == fmt_cores(host_total(row[0]) / RATE / SECONDS), row
        assert row[2] == fmt_pct(100 * host_total(row[0]) / TOTAL), row
    # Bars in proportion to the percentages.
    widths = page.evaluate("""[...document.querySelectorAll('#view-iq .iq-body[data-panel="entities"] .bar')]
        .map(b => b.getBoundingClientRect().width)""")
    assert widths[0] == pytest.approx(60, abs=1)
    assert widths[1] / widths[0] == pytest.approx(host_total("web-1") / host_total("db-1"), abs=0.03)
    # Nothing wider than the window.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    shot(page, "iq")
    no_errors(page)


def test_mode_toggle_changes_percentages_and_url(server, page):
    open_ui(page, server.base, "/?view=iq")
    assert "shares of all CPU time" in page.evaluate("document.querySelector('#view-iq .iq-note').textContent")
    click_selector(page, '#view-iq [data-mode="absolute"]')
    wait_ready(page)
    page.wait_for("document.querySelector('#view-iq [data-mode=absolute]').getAttribute('aria-pressed') === 'true'")
    assert search_params(page)["mode"] == ["absolute"]
    assert "logical CPUs" in page.evaluate("document.querySelector('#view-iq .iq-note').textContent")
    funcs = table(page, "functions")
    assert funcs[0][0] == "scan_heap"
    # Of the 28 CPUs of the hosts that sent samples.
    assert funcs[0][2] == fmt_pct(100 * self_total("scan_heap") / RATE / SECONDS / CPUS)  # 15.0%
    ents = table(page, "entities")
    # A host: of its own CPUs.
    assert ents[0][0] == "db-1" and ents[0][2] == fmt_pct(100 * host_total("db-1") / RATE / SECONDS / 16)
    c = cards(page)
    assert c["share"]["label"] == "Fleet CPU utilization"
    assert c["share"]["value"] == fmt_pct(100 * TOTAL / RATE / SECONDS / CPUS)  # 36.8%
    assert c["share"]["sub"] == f"{fmt_cores(TOTAL / RATE / SECONDS)} of {CPUS} CPUs busy on average"

    shot(page, "iq_absolute")

    click_selector(page, '#view-iq [data-mode="relative"]')
    wait_ready(page)
    assert search_params(page)["mode"] == ["relative"]
    assert table(page, "functions")[0][2] == fmt_pct(100 * self_total("scan_heap") / TOTAL)
    # The mode survives a reload.
    page.reload()
    wait_state(page, "ready")
    assert page.evaluate("document.querySelector('#view-iq [data-mode=relative]').getAttribute('aria-pressed')") == "true"
    no_errors(page)


def test_stack_by_total(server, page):
    open_ui(page, server.base, "/?view=iq")
    click_selector(page, '#view-iq [data-by="total"]')
    wait_ready(page)
    page.wait_for("document.querySelectorAll('#view-iq .iq-util svg path[data-series]').length === 1")
    assert series(page) == ["All hosts"]
    assert search_params(page)["by"] == ["total"]
    assert cards(page)["peak"]["value"] == fmt_cores(PER_MINUTE / RATE / 15)
    no_errors(page)


def test_function_row_opens_the_flamegraph(server, page):
    open_ui(page, server.base, "/?view=iq")
    click_selector(page, '#view-iq .iq-body[data-panel="functions"] tbody tr')
    wait_ready(page)
    p = search_params(page)
    assert "view" not in p and p["s"] == ["scan_heap"], page.evaluate("location.href")
    assert page.evaluate("document.getElementById('view-flamegraph').hidden") is False
    fg = page.evaluate("({search: emberFlamegraph.search, matched: emberFlamegraph.matchedTotal, total: emberFlamegraph.total})")
    assert fg["search"] == "scan_heap" and fg["total"] == TOTAL
    assert fg["matched"] == self_total("scan_heap")
    # Back to the overview, and Enter on a focused row does the same.
    page.evaluate("history.back()")
    wait_ready(page)
    assert page.evaluate("document.getElementById('view-iq').hidden") is False
    page.evaluate("""document.querySelectorAll('#view-iq .iq-body[data-panel="functions"] tbody tr')[1].focus()""")
    page.press("Enter")
    wait_ready(page)
    assert search_params(page)["s"] == ["compute"]
    no_errors(page)


def test_entity_rows_filter_and_open_the_flamegraph(server, page):
    open_ui(page, server.base, "/?view=iq")
    click_selector(page, '#view-iq .iq-body[data-panel="entities"] tbody tr')  # db-1
    wait_ready(page)
    assert search_params(page)["q"] == ['host.name == "db-1"']
    assert page.evaluate("document.getElementById('query').value") == 'host.name == "db-1"'
    page.wait_for("document.querySelectorAll('#view-iq .iq-body[data-panel=functions] tbody tr').length === 2")
    assert [r[0] for r in table(page, "functions")] == ["scan_heap", "exec_query"]
    assert [r[0] for r in table(page, "entities")] == ["db-1"]
    c = cards(page)
    assert c["hosts"]["value"] == "1" and c["hosts"]["sub"] == "16 logical CPUs"
    assert series(page) == ["db-1"]
    # The share of the project's CPU time this host is.
    assert c["share"]["value"] == fmt_pct(100 * host_total("db-1") / TOTAL)

    # Executables: ranked, a row's Flamegraph button opens it filtered.
    page.navigate(server.base + "/?view=iq")
    wait_state(page, "ready")
    click_selector(page, '#view-iq [data-etype="executable"]')
    wait_ready(page)
    page.wait_for("document.querySelector('#view-iq .iq-entities tbody td')?.textContent === 'postgres'")
    assert search_params(page)["etype"] == ["executable"]
    assert [r[0] for r in table(page, "entities")] == ["postgres", "api", "worker"]
    assert page.evaluate("document.querySelector('#view-iq .iq-entities th').textContent") == "Executable"
    click_selector(page, '#view-iq .iq-entities tbody tr:nth-child(2) .iq-flame')  # api
    wait_ready(page)
    p = search_params(page)
    assert "view" not in p and p["q"] == ['process.executable.name == "api"']
    assert page.evaluate("emberFlamegraph.total") == host_total("web-1") + host_total("web-2") - 570 * MINUTES
    no_errors(page)


def test_drag_on_the_chart_zooms_the_time_range(server, page):
    open_ui(page, server.base, "/?view=iq")
    a, b = server.now - 5 * 60_000, server.now - 30_000
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    xa, xb = page.evaluate(f"[emberIQ.chart.clientXOf({a}), emberIQ.chart.clientXOf({b})]")
    y = page.evaluate("(() => { const r = document.querySelector('#view-iq .chart-svg').getBoundingClientRect(); return r.top + r.height / 2; })()")
    page.mouse_move(xa, y)
    page.send("Input.dispatchMouseEvent", type="mousePressed", x=xa, y=y, button="left", buttons=1, clickCount=1)
    for k in range(1, 6):
        page.send("Input.dispatchMouseEvent", type="mouseMoved", x=xa + (xb - xa) * k / 5, y=y, button="left", buttons=1)
    page.send("Input.dispatchMouseEvent", type="mouseReleased", x=xb, y=y, button="left", buttons=0, clickCount=1)
    wait_ready(page)
    p = search_params(page)
    assert p["view"] == ["iq"] and p["range"] == ["custom"], p
    f, t = int(p["from"][0]), int(p["to"][0])
    # Within the dragged span, to a pixel (15 minutes over about 1200 pixels).
    assert a - 1500 <= f < a + 1500 and b - 1500 < t <= b + 1500, (f - a, t - b)
    assert page.evaluate("document.getElementById('range').value") == "custom"
    # The view shows the new range: all of the data is inside it.
    page.wait_for(f"emberIQ.data.series && emberIQ.data.series.start_ts === {f}")
    assert series(page) == ["db-1", "web-1", "web-2"]
    c = cards(page)
    assert c["avg"]["value"] == fmt_cores(series_average(page))
    assert float(c["avg"]["value"]) <= float(c["peak"]["value"])
    no_errors(page)


def test_gpu_tab_explains_what_it_needs(server, page):
    open_ui(page, server.base, "/?view=iq")
    click_selector(page, '#view-iq [data-tab="gpu"]')
    wait_state(page, "empty")
    assert search_params(page)["tab"] == ["gpu"]
    text = page.evaluate("document.querySelector('#view-iq .iq-message').innerText")
    assert "No GPU time in the last 15 minutes" in text
    # The agent records CUDA work now: the page says how, not that it cannot.
    assert "-enable-cuda-profiler" in text
    assert "CUDA_INJECTION64_PATH=/var/lib/ember/profiler/libembercuda.so" in text
    assert "next step" not in text and "no ember-agent flag" not in text
    assert "/v1development/profiles" in text
    assert page.evaluate("document.querySelector('#view-iq .iq-mode').hidden") is True
    assert page.evaluate("document.querySelector('#view-iq .iq-content').hidden") is True
    shot(page, "iq_gpu")
    # Back to CPU.
    click_selector(page, '#view-iq [data-tab="cpu"]')
    wait_ready(page)
    assert "tab" not in search_params(page)
    assert series(page) == ["db-1", "web-1", "web-2"]
    no_errors(page)


def test_gpu_tab_with_gpu_data(gpu_server, page):
    open_ui(page, gpu_server.base, "/?view=iq&tab=gpu")
    funcs = table(page, "functions")
    # The GPU tab ranks kernels by GPU time.
    assert funcs == [["sgemm_kernel", "30 s", "75.0%"], ["softmax_kernel", "10 s", "25.0%"]]
    c = cards(page)
    assert c["avg"]["label"] == "Average GPUs busy"
    # 40 GPU-seconds in one 15 s bucket: the average and the peak on the
    # same time base (not 4 over the 10 s the row spans beside a peak of
    # 2.67 in 15 s buckets).
    assert c["avg"]["value"] == "2.67" and c["peak"]["value"] == "2.67", c
    assert c["avg"]["sub"] == "over the 15 s with data, 15 s buckets", c
    assert c["peak"]["sub"].endswith(", 15 s buckets"), c
    assert series(page) == ["gpu-1"]
    assert page.evaluate("document.querySelector('#view-iq .iq-functions th:nth-child(3)').textContent") == "GPU %"
    shot(page, "iq_gpu_data")
    no_errors(page)


def test_empty_server_shows_the_empty_state(empty_server, page):
    open_ui(page, empty_server.base, "/?view=iq", state="empty")
    text = page.evaluate("document.querySelector('#view-iq .iq-message').innerText")
    assert "No samples in the last 15 minutes" in text and "ember-agent" in text
    assert page.evaluate("document.querySelector('#view-iq .iq-content').hidden") is True
    no_errors(page)


def test_bad_query_is_an_error(server, page):
    open_ui(page, server.base, "/?view=iq&q=" + "host.name%20%3D%3D", state="error")
    text = page.evaluate("document.querySelector('#view-iq .iq-message').innerText")
    assert "The query was rejected" in text and "column" in text
    no_errors(page, allow=[lambda e: "400" in e.get("text", "")])


def test_refresh_fetches_again(empty_server, page):
    open_ui(page, empty_server.base, "/?view=iq", state="empty")
    now = int(time.time() * 1000)
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000bb", sample_rate_hz=RATE, host_cpus=2)
    b.add(["main", "spin"], {"host.name": "late-1", "process.executable.name": "spin"}, RATE * 10 * 3)
    assert send_batch(empty_server.base, b.encode(sequence=1, start_ms=now - 30_000, end_ms=now - 25_000))["stored"]
    click_selector(page, "#refresh")
    wait_ready(page)
    c = cards(page)
    # 30 CPU-seconds in one 15 s bucket.
    assert c["avg"]["value"] == "2" and c["peak"]["value"] == "2" and c["hosts"]["value"] == "1" and c["hosts"]["sub"] == "2 logical CPUs"
    assert [r[0] for r in table(page, "functions")] == ["spin"]
    no_errors(page)
