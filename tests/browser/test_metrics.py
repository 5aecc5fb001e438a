"""Browser test of the Metrics view (web/view_metrics.js): a real
ember-server holding hand-built metrics batches (as ember-agent sends them
to /ingest/v1/metrics) of two hosts and four processes in the default
project, and of a GPU host in a project of its own; the page shows CPU,
consumers, memory, disk and GPU charts with their units, legends and
tooltips, keeps its state in the URL, and leads to the flame graph."""

import json
import time
import urllib.parse
import urllib.request

import pytest

from conftest import PROJECT, no_errors, search_params, shot, start_server, wait_state
from ember_batch import Batch, send_batch  # tests/lib
from metrics_batch import MetricsBatch, post

MiB = 1 << 20
STEP = 30_000
N_POINTS = 20  # ten minutes, every 30 s
HOSTS = {"h1": (1.5, 0.5), "h2": (0.5, 0.25)}  # host.cpu.user, host.cpu.system
# executable, pid, host, container, pod, utime, stime, rss, read/s, write/s
PROCS = [
    ("api", "100", "h1", "web", "web-7d9", 1.0, 0.25, 512 * MiB, 2 * MiB, 1 * MiB),
    ("worker", "200", "h1", "jobs", "jobs-1", 0.4, 0.1, 256 * MiB, 0, 4 * MiB),
    ("worker", "201", "h2", "jobs", "jobs-2", 0.2, 0.05, 256 * MiB, 0, 0),
    ("postgres", "300", "h2", None, None, 0.1, 0.1, 1024 * MiB, 8 * MiB, 0),
]
CGROUPS = [("h1", "/kubepods/web", "web", 400 * MiB), ("h1", "/kubepods/jobs", "jobs", 200 * MiB),
           ("h2", "/system.slice/postgresql.service", None, 900 * MiB)]
GPUS = [("0", 80, 50, 300, 70), ("1", 20, 10, 100, 50)]  # index, util %, mem %, W, Cel


def times(now):
    first = now - N_POINTS * STEP
    return [first + k * STEP for k in range(N_POINTS)]


def host_labels(host):
    return {"host.name": host, "host.arch": "x86_64"}


def proc_labels(exe, pid, host, container, pod):
    labels = {**host_labels(host), "process.executable.name": exe, "process.pid": pid}
    if container:
        labels["container.name"] = container
    if pod:
        labels["k8s.pod.name"] = pod
    return labels


def default_batch(now):
    b = MetricsBatch()
    ts = times(now)
    const = lambda v: [(t, v) for t in ts]  # noqa: E731
    for host, (user, system) in HOSTS.items():
        b.add("host.cpu.user", "cores", host_labels(host), const(user))
        b.add("host.cpu.system", "cores", host_labels(host), const(system))
        b.add("host.cpu.idle", "cores", host_labels(host), const(4 - user - system))
    for exe, pid, host, container, pod, ut, st, rss, rd, wr in PROCS:
        labels = proc_labels(exe, pid, host, container, pod)
        b.add("process.utime", "cores", labels, const(ut))
        b.add("process.stime", "cores", labels, const(st))
        b.add("process.rss", "bytes", labels, const(rss))
        b.add("io.read_throughput", "bytes/s", labels, const(rd))
        b.add("io.write_throughput", "bytes/s", labels, const(wr))
    for host, path, container, wss in CGROUPS:
        labels = {**host_labels(host), "cgroup.path": path}
        if container:
            labels["container.name"] = container
        b.add("process.wss", "bytes", labels, const(wss))
    return b


def gpu_batch(now):
    b = MetricsBatch(project="gpu")
    ts = times(now)
    const = lambda v: [(t, v) for t in ts]  # noqa: E731
    b.add("host.cpu.user", "cores", host_labels("g1"), const(3.0))
    b.add("host.cpu.system", "cores", host_labels("g1"), const(1.0))
    for idx, util, mem, watts, temp in GPUS:
        labels = {**host_labels("g1"), "gpu.index": idx, "gpu.uuid": f"GPU-0000-{idx}", "gpu.name": "NVIDIA H100"}
        b.add("hw.gpu.utilization", "%", labels, const(util))
        b.add("hw.gpu.memory.utilization", "%", labels, const(mem))
        # GPU 1 draws 500 W once, at the last collection: p99 sees it.
        b.add("hw.gpu.power", "W", labels, [(t, 500 if idx == "1" and k == N_POINTS - 1 else watts)
                                            for k, t in enumerate(ts)])
        b.add("hw.gpu.temp", "Cel", labels, const(temp))
        # The health metrics of the complete NVML collection.
        b.add("hw.gpu.clock.sm", "MHz", labels, const(1980 if idx == "0" else 1755))
        for reason in ("gpu_idle", "sw_power_cap", "hw_slowdown"):
            held = reason == "sw_power_cap" and idx == "0"
            b.add("hw.gpu.clocks_throttle", "1", {**labels, "gpu.throttle_reason": reason},
                  [(t, 1.0 if held and k % 2 else 0.0) for k, t in enumerate(ts)])
        b.add("hw.gpu.pcie.tx", "bytes/s", labels, const(100 * MiB))
        b.add("hw.gpu.pcie.rx", "bytes/s", labels, const(200 * MiB))
        for link in ("0", "1"):
            nv = {**labels, "gpu.nvlink.link": link, "gpu.nvlink.peer": "1" if idx == "0" else "0"}
            b.add("hw.gpu.nvlink.tx", "bytes/s", nv, const(1024 * MiB))
            b.add("hw.gpu.nvlink.rx", "bytes/s", nv, const(512 * MiB))
        for counter in ("volatile", "aggregate"):
            b.add("hw.gpu.ecc.errors", "1", {**labels, "error.type": "corrected", "gpu.ecc.counter": counter},
                  [(t, (1 if k >= 5 and idx == "0" else 0) + (5 if counter == "aggregate" else 0))
                   for k, t in enumerate(ts)])
        b.add("hw.gpu.sm.occupancy", "%", labels, const(45 if idx == "0" else 10))
        b.add("hw.gpu.tensor_util", "%", labels, const(33 if idx == "0" else 5))
        b.add("hw.gpu.dram_bw_util", "%", labels, const(71 if idx == "0" else 8))
    # A MIG device of GPU 1, a device of its own (tensor activity only).
    mig = {**host_labels("g1"), "gpu.index": "1/mig0", "gpu.uuid": "MIG-0000-1-0",
           "gpu.name": "NVIDIA H100 MIG 3g.40gb", "gpu.parent.index": "1", "gpu.parent.uuid": "GPU-0000-1"}
    b.add("hw.gpu.tensor_util", "%", mig, const(12))
    # One XID 79 on GPU 0, in the middle of the range.
    xid = {**host_labels("g1"), "gpu.index": "0", "gpu.uuid": "GPU-0000-0", "gpu.name": "NVIDIA H100",
           "gpu.xid.code": "79", "gpu.xid.meaning": "GPU has fallen off the bus"}
    b.add("hw.gpu.xid", "1", xid, [(ts[10] + 7_000, 1.0)])
    trainer = {**proc_labels("trainer", "500", "g1", None, None), "gpu.index": "0"}
    b.add("hw.gpu.process.utilization", "%", trainer, const(75))
    b.add("process.utime", "cores", proc_labels("trainer", "500", "g1", None, None), const(2.0))
    b.add("process.stime", "cores", proc_labels("trainer", "500", "g1", None, None), const(0.5))
    return b


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    now = int(time.time() * 1000)
    assert post(srv.base, default_batch(now))["stored"]
    assert post(srv.base, gpu_batch(now), sequence=2)["stored"]
    # CPU samples of h1, so that the host is an entity (Top entities).
    b = Batch(agent_instance="5a1c7e2b-9d3f-4c8a-b6e1-0f2d4c6a8e20", sample_rate_hz=19)
    b.add(["main", "serve"], {"process.executable.name": "api", "host.name": "h1", "thread.name": "main"}, 300)
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 60_000, end_ms=now - 55_000))["stored"]
    with urllib.request.urlopen(srv.base + "/public/api/v1/projects", timeout=10) as r:
        projects = {p["name"]: p["id"] for p in json.loads(r.read())["projects"]}
    srv.gpu_project = projects["gpu"]
    srv.gpu_xid_ms = times(now)[10] + 7_000
    return srv


def open_metrics(page, base, query="", state="ready"):
    page.navigate(base + "/?view=metrics" + ("&" + query if query else ""))
    page.wait_for("document.body.dataset.state !== 'loading' && window.emberMetrics !== undefined")
    got = page.evaluate("document.body.dataset.state")
    assert got == state, (got, page.evaluate("document.getElementById('view-metrics').innerText"))


def panel(page, pid):
    return page.evaluate(f"emberMetrics.panels[{json.dumps(pid)}] || null")


def series_names(page, pid):
    p = panel(page, pid)
    assert p, f"panel {pid} has no data"
    return [s["name"] for s in p["series"]]


def legend(page, pid):
    return page.evaluate(f"""[...document.querySelectorAll('#view-metrics [data-panel="{pid}"] .chart-legend li')]
        .map((li) => li.textContent)""")


def axis_labels(page, pid):
    return page.evaluate(f"""[...document.querySelectorAll('#view-metrics [data-panel="{pid}"] .chart-axis text')]
        .map((t) => t.textContent)""")


def hover(page, pid, ms):
    """Moves the mouse over a chart at a time; the readout's text."""
    x, y = page.evaluate(f"""(() => {{
        const c = emberMetrics.charts[{json.dumps(pid)}];
        const svg = document.querySelector('#view-metrics [data-panel="{pid}"] .chart-svg');
        svg.scrollIntoView({{ block: 'center' }});
        const r = svg.getBoundingClientRect();
        return [c.clientXOf({ms}), r.top + r.height / 2]; }})()""")
    page.mouse_move(x, y)
    return page.wait_for(f"""(() => {{ const r = document.querySelector('#view-metrics [data-panel="{pid}"] .chart-readout');
        return !r.hidden && r.innerText; }})()""")


def mid_bucket(page, pid):
    """The middle of a bucket in the middle of the data."""
    p = panel(page, pid)
    vals = p["series"][0]["values"]
    idx = [i for i, x in enumerate(vals) if x is not None]
    i = idx[len(idx) // 2]
    return p["start_ts"] + i * p["bucket_ms"] + p["bucket_ms"] // 2


def select_by(page, value):
    page.evaluate(f"""(() => {{ const s = document.getElementById('met-by');
        s.value = {json.dumps(value)}; s.dispatchEvent(new Event('change')); }})()""")
    page.wait_for(f"document.body.dataset.state === 'ready' && emberMetrics.params.by === {json.dumps(value)}"
                  " && emberMetrics.panels.consumers !== undefined")


def test_charts_series_units_and_legends(server, page):
    open_metrics(page, server.base)
    names = page.evaluate("emberMetrics.names")
    assert "process.utime" in names and not any(n.startswith("hw.gpu.") for n in names)
    # CPU utilization: the hosts' user and system cores, stacked.
    assert series_names(page, "cpu") == ["user", "system"]
    assert legend(page, "cpu") == ["user", "system"]
    cpu = panel(page, "cpu")
    user = [x for x in cpu["series"][0]["values"] if x is not None]
    assert user and all(x == pytest.approx(2.0) for x in user), user
    stats = page.evaluate("document.querySelector('[data-panel=\"cpu\"] .met-stats').innerText")
    assert "Average 2.75 cores" in stats and "User 73%" in stats, stats
    # CPU consumers: utime + stime per executable, largest first.
    assert legend(page, "consumers") == ["api", "worker", "postgres"]
    cons = {s["name"]: [x for x in s["values"] if x is not None] for s in panel(page, "consumers")["series"]}
    assert cons["api"][0] == pytest.approx(1.25) and cons["worker"][0] == pytest.approx(0.75)
    assert cons["postgres"][0] == pytest.approx(0.2)
    # Memory and disk, in binary units on the axes.
    assert legend(page, "rss") == ["postgres", "api", "worker"]
    rss_axis = axis_labels(page, "rss")
    assert "2 GiB" in rss_axis and "1 GiB" in rss_axis, rss_axis
    assert legend(page, "wss") == ["/system.slice/postgresql.service", "/kubepods/web", "/kubepods/jobs"]
    # A consumer of nothing stays out of a chart (worker reads nothing, postgres writes nothing).
    assert legend(page, "read") == ["postgres", "api"]
    assert legend(page, "write") == ["worker", "api"]
    assert any("MiB" in t for t in axis_labels(page, "write")), axis_labels(page, "write")
    for pid in ("cpu", "consumers", "rss", "wss", "read", "write"):
        assert page.evaluate(f"document.querySelector('[data-panel=\"{pid}\"] .chart-svg') !== null"), pid
    # The requests: the names, then one per metric, each with the group-by.
    reqs = page.evaluate("emberMetrics.requests")
    assert reqs[0]["name"] == "metrics/names"
    by_metric = {r["metric"]: r for r in reqs[1:]}
    assert by_metric["process.utime"]["group_by"] == "process.executable.name"
    assert by_metric["process.wss"]["group_by"] == "cgroup.path"
    assert by_metric["host.cpu.user"]["group_by"] is None
    assert len(reqs) == 1 + 8, reqs
    # The consumers table: per executable, in the right units.
    rows = page.evaluate("""[...document.querySelectorAll('[data-panel="consumers"] .met-table tbody tr')]
        .map((tr) => [...tr.cells].map((td) => td.innerText.trim()))""")
    assert [r[0] for r in rows] == ["api", "worker", "postgres"], rows
    assert rows[0][1:6] == ["1.25 cores", "1.25 cores", "512 MiB", "2 MiB/s", "1 MiB/s"], rows[0]
    assert rows[2][3] == "1 GiB" and rows[2][4] == "8 MiB/s", rows[2]
    # The tooltip: the time and each series' value with its unit.
    text = hover(page, "consumers", mid_bucket(page, "consumers"))
    assert "api 1.25 cores" in text and "worker 0.75 cores" in text and "postgres 0.2 cores" in text, text
    assert any(ch.isdigit() for ch in text.splitlines()[0]), text  # the time
    # Before the first point there is no data, not zero.
    before = panel(page, "cpu")["start_ts"] + 60_000
    assert "no data" in hover(page, "cpu", before)
    text = hover(page, "rss", mid_bucket(page, "rss"))
    assert "postgres 1 GiB" in text and "api 512 MiB" in text, text
    text = hover(page, "read", mid_bucket(page, "read"))
    assert "postgres 8 MiB/s" in text, text
    page.mouse_move(5, 5)
    # Without hw.gpu.*: the GPU section says what it needs.
    gpu = page.evaluate("document.querySelector('.met-gpu-empty').innerText")
    assert "NVML" in gpu and "-nvml-path" in gpu and "-nvml-auto-scan" in gpu, gpu
    assert page.evaluate("document.querySelector('.met-gpu').hidden")
    nav = page.evaluate("document.querySelector('.views-nav a[aria-current=page]').textContent")
    assert nav == "Metrics"
    shot(page, "metrics", full_page=True)
    no_errors(page)


def test_group_by_changes_the_request_legend_and_url_and_survives_a_reload(server, page):
    q = 'host.name != "nowhere"'
    open_metrics(page, server.base, "range=1h&q=" + urllib.parse.quote(q))
    select_by(page, "container")
    reqs = {r["metric"]: r for r in page.evaluate("emberMetrics.requests")[1:]}
    assert reqs["process.utime"]["group_by"] == "container.name"
    assert reqs["process.wss"]["group_by"] == "container.name"
    assert legend(page, "consumers") == ["web", "jobs", "[no container]"]
    assert legend(page, "wss") == ["[no container]", "web", "jobs"]
    params = search_params(page)
    assert params["by"] == ["container"] and params["range"] == ["1h"] and params["q"] == [q]
    # A reload (or the link sent to someone) shows the same.
    page.reload()
    page.wait_for("document.body.dataset.state === 'ready' && window.emberMetrics && emberMetrics.panels.consumers !== undefined")
    assert page.evaluate("document.getElementById('met-by').value") == "container"
    assert page.evaluate("document.getElementById('range').value") == "1h"
    assert page.evaluate("document.getElementById('query').value") == q
    assert legend(page, "consumers") == ["web", "jobs", "[no container]"]
    select_by(page, "host")
    assert legend(page, "consumers") == ["h1", "h2"]
    reqs = {r["metric"]: r for r in page.evaluate("emberMetrics.requests")[1:]}
    assert reqs["process.utime"]["group_by"] == "host.name" and reqs["process.wss"]["group_by"] == "host.name"
    # Back: the container grouping again.
    page.evaluate("history.back()")
    page.wait_for("emberMetrics.params.by === 'container' && document.body.dataset.state === 'ready'"
                  " && emberMetrics.panels.consumers !== undefined")
    assert legend(page, "consumers") == ["web", "jobs", "[no container]"]
    no_errors(page)


def test_a_query_narrows_to_processes(server, page):
    q = 'process.executable.name == "api"'
    open_metrics(page, server.base, "q=" + urllib.parse.quote(q))
    # Host series lack the attribute: CPU comes from the processes.
    assert [r["metric"] for r in page.evaluate("emberMetrics.requests")[1:3]] == ["process.utime", "process.stime"]
    sub = page.evaluate("document.querySelector('[data-panel=\"cpu\"] .met-sub').textContent")
    assert "processes" in sub, sub
    cpu = {s["name"]: [x for x in s["values"] if x is not None][0] for s in panel(page, "cpu")["series"]}
    assert cpu == {"user": pytest.approx(1.0), "system": pytest.approx(0.25)}
    assert legend(page, "consumers") == ["api"]
    no_errors(page)


def test_click_and_table_lead_to_the_flamegraph(server, page):
    open_metrics(page, server.base)
    ms = mid_bucket(page, "consumers")
    x, y = page.evaluate(f"""(() => {{ const r = document.querySelector('[data-panel="consumers"] .chart-svg').getBoundingClientRect();
        return [emberMetrics.charts.consumers.clientXOf({ms}), r.top + r.height / 2]; }})()""")
    page.click(x, y)
    page.wait_for("!document.querySelector('.met-pop').hidden")
    pop = page.evaluate("document.querySelector('.met-pop').innerText")
    assert "CPU consumers at" in pop and "api" in pop and "1.25 cores" in pop, pop
    links = page.evaluate("""[...document.querySelectorAll('.met-pop a')].map((a) => [a.textContent, a.getAttribute('href')])""")
    assert len(links) == 4, links  # three consumers and the whole moment
    href = links[0][1]
    p = urllib.parse.parse_qs(urllib.parse.urlsplit(href).query)
    assert p["q"] == ['process.executable.name == "api"'] and p["range"] == ["custom"], href
    frm, to = int(p["from"][0]), int(p["to"][0])
    assert frm <= ms <= to and 60_000 <= to - frm <= 120_000, (frm, ms, to)
    assert "view" not in p  # the flame graph is the default view
    shot(page, "metrics-moment")
    # Escape closes it.
    page.press("Escape")
    page.wait_for("document.querySelector('.met-pop').hidden")
    # A row of the table: the flame graph of that executable over the page's range.
    page.evaluate("""[...document.querySelectorAll('[data-panel="consumers"] .met-table tbody tr')]
        .find((tr) => tr.cells[0].innerText === 'api').querySelector('a.met-link').click()""")
    page.wait_for("document.body.dataset.state !== 'loading' && !document.getElementById('view-flamegraph').hidden")
    params = search_params(page)
    assert params.get("q") == ['process.executable.name == "api"'] and "view" not in params, params
    assert page.evaluate("emberFlamegraph.total") == 300
    no_errors(page)


def test_gpu_section_with_nvml_metrics(server, page):
    open_metrics(page, server.base, "project=" + server.gpu_project)
    assert not page.evaluate("document.querySelector('.met-gpu').hidden")
    assert page.evaluate("document.querySelector('.met-gpu-empty').hidden")
    for pid in ("gpu_util", "gpu_mem", "gpu_power", "gpu_temp"):
        assert legend(page, pid) == ["GPU 0", "GPU 1"], pid
    assert legend(page, "gpu_proc") == ["trainer"]
    ms = mid_bucket(page, "gpu_util")
    text = hover(page, "gpu_util", ms)
    assert "GPU 0 80%" in text and "GPU 1 20%" in text, text
    assert "100%" in axis_labels(page, "gpu_util")
    assert "GPU 0 300 W" in hover(page, "gpu_power", ms)
    # p50/p95/p99 under each GPU chart, from the server, over the stored
    # points: GPU 1's one 500 W collection is its p99 only.
    pct = page.evaluate("""[...document.querySelectorAll('#view-metrics [data-panel="gpu_power"] .met-pct tbody tr')]
        .map((r) => [...r.cells].map((c) => c.textContent))""")
    assert pct == [["GPU 0", "300 W", "300 W", "300 W", "20"], ["GPU 1", "100 W", "100 W", "500 W", "20"]], pct
    assert page.evaluate("""emberMetrics.requests.filter((r) => r.metric === 'hw.gpu.power')
        .map((r) => r.percentiles)""") == [True]
    href = page.evaluate("document.querySelector('#view-metrics .met-topo-link').href")
    assert "view=topology" in href and server.gpu_project in href, href
    temp = page.evaluate("""[...document.querySelectorAll('#view-metrics [data-panel="gpu_temp"] .met-pct tbody tr')]
        .map((r) => r.cells[2].textContent)""")
    assert temp == ["70 \u00b0C", "50 \u00b0C"], temp
    assert "GPU 0 70 \u00b0C" in hover(page, "gpu_temp", ms)
    assert "trainer 75%" in hover(page, "gpu_proc", ms)
    page.mouse_move(5, 5)
    # The table gains a GPU column.
    heads = page.evaluate("""[...document.querySelectorAll('[data-panel="consumers"] .met-table th')].map((t) => t.textContent)""")
    assert "Avg GPU use" in heads, heads
    # Grouped by host: one series per host, the power summed.
    select_by(page, "host")
    page.wait_for("emberMetrics.panels.gpu_power !== undefined")
    assert legend(page, "gpu_power") == ["g1"]
    assert "g1 400 W" in hover(page, "gpu_power", ms)
    # Its percentiles pool every reading of the host's GPUs, and say so.
    cap = page.evaluate("""document.querySelector('#view-metrics [data-panel="gpu_power"] .met-pct caption').textContent""")
    assert cap == "Percentiles of every reading of the host\u2019s GPUs in the range", cap
    row = page.evaluate("""[...document.querySelector('#view-metrics [data-panel="gpu_power"] .met-pct tbody tr').cells]
        .map((c) => c.textContent)""")
    assert row == ["g1", "300 W", "300 W", "500 W", "40"], row
    page.mouse_move(5, 5)
    shot(page, "metrics-gpu", full_page=True)
    no_errors(page)


def test_gpu_health_charts_and_the_xid_marker(server, page):
    """The charts of the complete NVML collection (clocks, throttle reasons,
    PCIe, NVLink, GPM, ECC) and the XID: a red mark at its time on every GPU
    chart, with its code and meaning, and a row in the XID table."""
    open_metrics(page, server.base, "project=" + server.gpu_project)
    for pid in ("gpu_clock", "gpu_occupancy", "gpu_dram"):
        assert legend(page, pid) == ["GPU 0", "GPU 1"], pid
    # A MIG device is a device of its own.
    assert legend(page, "gpu_tensor") == ["GPU 0", "GPU 1", "GPU 1/mig0"], legend(page, "gpu_tensor")
    ms = mid_bucket(page, "gpu_occupancy")
    assert "GPU 1/mig0 12%" in hover(page, "gpu_tensor", ms)
    assert "GPU 0 45%" in hover(page, "gpu_occupancy", ms)
    assert "GPU 1 8%" in hover(page, "gpu_dram", ms)
    # Throttle reasons: only the one ever seen, as a share of the time.
    assert legend(page, "gpu_throttle") == ["sw_power_cap"], legend(page, "gpu_throttle")
    vals = [x for x in panel(page, "gpu_throttle")["series"][0]["values"] if x is not None]
    assert max(vals) <= 100 and 0 < sum(vals) / len(vals) < 100, vals
    assert legend(page, "gpu_pcie") == ["sent", "received"]
    assert "sent 200 MiB/s" in hover(page, "gpu_pcie", ms)
    assert legend(page, "gpu_nvlink") == ["sent", "received"]
    assert "sent 4 GiB/s" in hover(page, "gpu_nvlink", ms)  # two links of two GPUs, 1 GiB/s each
    ecc = {s["name"]: s["values"] for s in panel(page, "gpu_ecc")["series"]}
    assert set(ecc) == {"aggregate", "volatile"}, ecc
    vol = [x for x in ecc["volatile"] if x is not None]
    assert vol[0] == 0 and vol[-1] == 1, vol
    page.mouse_move(5, 5)
    # The XID: one event, marked on every GPU chart at its time.
    xids = page.evaluate("emberMetrics.xids")
    assert len(xids) == 1 and xids[0]["codes"] == ["79"] and xids[0]["gpus"] == ["0"], xids
    assert xids[0]["label"] == "XID 79: GPU has fallen off the bus (GPU 0)", xids
    marks = page.evaluate("""[...document.querySelectorAll('#view-metrics .met-gpu [data-panel] .chart-mark')]
        .map((m) => [m.closest('[data-panel]').dataset.panel, m.dataset.mark, m.querySelector('title').textContent])""")
    charts = {m[0] for m in marks}
    assert {"gpu_util", "gpu_mem", "gpu_power", "gpu_temp", "gpu_clock", "gpu_throttle", "gpu_pcie", "gpu_nvlink",
            "gpu_occupancy", "gpu_tensor", "gpu_dram", "gpu_ecc", "gpu_proc"} <= charts, charts
    assert all(m[1] == m[2] == "XID 79: GPU has fallen off the bus (GPU 0)" for m in marks), marks
    # The mark sits at the event's time (within its bucket) on the chart.
    x_mark, x_event, bucket_px = page.evaluate("""(() => {
        const el = document.querySelector('#view-metrics [data-panel="gpu_util"] .chart-mark line');
        const c = emberMetrics.charts.gpu_util, p = emberMetrics.panels.gpu_util;
        const left = document.querySelector('#view-metrics [data-panel="gpu_util"] .chart-svg').getBoundingClientRect().left;
        return [left + Number(el.getAttribute('x1')), c.clientXOf(emberMetrics.xids[0].ms),
                c.clientXOf(p.start_ts + p.bucket_ms) - c.clientXOf(p.start_ts)]; })()""")
    assert abs(x_mark - x_event) <= 1, (x_mark, x_event)
    event_ms = server.gpu_xid_ms
    assert abs(xids[0]["ms"] - event_ms) <= panel(page, "gpu_util")["bucket_ms"], (xids, event_ms)
    rows = page.evaluate("""[...document.querySelectorAll('#view-metrics .met-xids tbody tr')]
        .map((r) => [...r.cells].slice(1).map((c) => c.textContent))""")
    assert rows == [["79", "GPU has fallen off the bus", "0"]], rows
    page.evaluate("document.querySelector('#view-metrics .met-xids').scrollIntoView()")
    shot(page, "metrics-gpu-health", full_page=True)
    no_errors(page)


def test_entities_host_row_leads_to_its_metrics(server, page):
    page.navigate(server.base + "/?view=entities")
    wait_state(page, "ready")
    page.wait_for("[...document.querySelectorAll('#view-entities button')].some((b) => b.textContent === 'Metrics')")
    page.evaluate("[...document.querySelectorAll('#view-entities button')].find((b) => b.textContent === 'Metrics').click()")
    page.wait_for("document.body.dataset.state === 'ready' && window.emberMetrics && emberMetrics.panels.cpu !== undefined")
    params = search_params(page)
    assert params["view"] == ["metrics"] and params["q"] == ['host.name == "h1"'], params
    cpu = {s["name"]: [x for x in s["values"] if x is not None][0] for s in panel(page, "cpu")["series"]}
    assert cpu == {"user": pytest.approx(1.5), "system": pytest.approx(0.5)}
    assert legend(page, "consumers") == ["api", "worker"]
    no_errors(page)


def test_no_metrics_explains_the_agent_flags(empty_server, page):
    open_metrics(page, empty_server.base, state="empty")
    text = page.evaluate("document.getElementById('view-metrics').innerText")
    assert "No metrics were received" in text, text
    assert "-collect-metrics-interval" in text and "30s" in text and "-enable-host-metrics=false" in text, text
    assert page.evaluate("document.querySelector('.met-content').hidden")
    shot(page, "metrics-empty")
    no_errors(page)


def test_no_metrics_for_a_query(server, page):
    open_metrics(page, server.base, "q=" + urllib.parse.quote('host.name == "nowhere"'), state="empty")
    text = page.evaluate("document.getElementById('view-metrics').innerText")
    assert "No metrics match the query" in text and 'host.name == "nowhere"' in text, text
    no_errors(page)


def test_a_bad_query_shows_the_server_error(server, page):
    open_metrics(page, server.base, "q=" + urllib.parse.quote("host.name =="), state="error")
    text = page.evaluate("document.getElementById('view-metrics').innerText")
    assert "The query was rejected" in text and "query" in text, text
    no_errors(page, allow=[lambda e: e.get("source") == "network" and "metrics/names" in e.get("url", "")])
