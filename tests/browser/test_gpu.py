"""Browser tests of GPU time in the UI: a real ember-server holding CUDA
samples (event_kind cuda, nanoseconds, the stacks ember-agent sends: CPU
frames -> cuda_launch -> cuda_kernel / cuda_memcpy / cuda_sync, with the
gpu.* and cuda.* attributes) beside on-CPU samples. Checked against what
was sent: the flamegraph's Show: GPU time and its tooltip (GPU Time
(Total) and (Self), self zero on CPU frames), Top kernels (order and
values), the GPU share column of Top entities, the Efficiency IQ GPU tab
(kernels, devices, processes), the diff and a CEL filter on a GPU
attribute. Screenshots land in build/test-artifacts/screenshots/gpu-*.png.

Run from the repository root after building ember-server:
    python3 -m pytest -x -q tests/browser/test_gpu.py
"""

import time
import urllib.parse

import pytest

from conftest import flamegraph_frame as frame
from conftest import api_query, no_errors, png_pixels, open_ui, search_params, shot, start_server, wait_state
from ember_batch import Batch, send_batch, send_session_batch
from metrics_batch import MetricsBatch, post as post_metrics

S = 1_000_000_000  # nanoseconds
H100 = "NVIDIA H100 80GB HBM3"
A10G = "NVIDIA A10G"


def gpu(host, pid, index, stream, name):
    return {"host.name": host, "process.executable.name": "trainer" if host == "gpu1" else "infer",
            "process.pid": str(pid), "gpu.device.index": str(index), "gpu.name": name,
            "gpu.device.uuid": f"GPU-{host}-{index}", "cuda.stream.id": str(stream),
            "cuda.context.id": "1"}


LAUNCH = ("cudaLaunchKernel", "cuda_launch", "")
GPU_SAMPLES = [
    (["main", "train_step", LAUNCH, ("sgemm_kernel", "cuda_kernel", "")], gpu("gpu1", 100, 0, 7, H100), 6 * S),
    (["main", "train_step", LAUNCH, ("sgemm_kernel", "cuda_kernel", "")], gpu("gpu1", 100, 1, 8, H100), 3 * S),
    (["main", "eval_step", LAUNCH, ("softmax_kernel", "cuda_kernel", "")], gpu("gpu1", 100, 1, 9, H100), 2 * S),
    (["main", "load_batch", ("cudaMemcpyAsync", "cuda_launch", ""), ("HtoD", "cuda_memcpy", "")],
     gpu("gpu1", 100, 0, 7, H100), 1_500_000_000),
    (["main", "train_step", ("cudaStreamSynchronize", "cuda_launch", ""), ("cudaStreamSynchronize", "cuda_sync", "")],
     gpu("gpu1", 100, 0, 7, H100), 500_000_000),
    (["main", "serve", LAUNCH, ("softmax_kernel", "cuda_kernel", "")], gpu("gpu2", 200, 0, 3, A10G), 1 * S),
]
GPU_TOTAL = sum(v for _, _, v in GPU_SAMPLES)  # 14 s
CPU_SAMPLES = [
    (["main", "train_step", "prepare"], {"host.name": "gpu1", "process.executable.name": "trainer", "process.pid": "100"}, 300),
    (["main", "serve", "decode"], {"host.name": "gpu2", "process.executable.name": "infer", "process.pid": "200"}, 100),
    (["main", "compute"], {"host.name": "cpu3", "process.executable.name": "batch", "process.pid": "300"}, 600),
]


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    now = int(time.time() * 1000)
    # Two batches a minute apart: the first holds everything, the second
    # twice the sgemm time of device 0 (the diff's comparison).
    b = Batch(agent_instance="6a7b8c9d-0000-4000-8000-0000000000c1", sample_rate_hz=19, host_cpus=8)
    for frames, attrs, value in GPU_SAMPLES:
        b.add(frames, attrs, value, kind="cuda")
    for frames, attrs, value in CPU_SAMPLES:
        b.add(frames, attrs, value)
    srv.first = now - 180_000
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=srv.first, end_ms=srv.first + 5_000))["stored"]
    return srv


def tooltip_of(page, name):
    """Hovers the frame and answers the tooltip's rows {dt: dd}."""
    x, y = page.evaluate(f"""(() => {{ const f = emberFlamegraph.frames.find((f) => f.name === {name!r});
        const r = document.getElementById('flamegraph').getBoundingClientRect();
        return [r.left + f.x + f.width / 2, r.top + f.depth * 18 + 9]; }})()""")
    page.mouse_move(x, y)
    page.wait_for(f"!tooltip.hidden && tooltip.querySelector('.tt-name').textContent === {name!r}")
    return page.evaluate("""Object.fromEntries([...tooltip.querySelectorAll('dt')].map((dt) =>
        [dt.textContent, dt.nextElementSibling.textContent]))""")


def select_kind(page, kind):
    page.evaluate(f"""(() => {{ const s = document.getElementById('kind');
        s.value = {kind!r}; s.dispatchEvent(new Event('change')); }})()""")


def rows(page, selector):
    return page.evaluate(f"""[...document.querySelectorAll({selector!r})]
        .map(tr => [...tr.cells].map(td => td.textContent.trim()))""")


def test_gpu_flamegraph_and_tooltip(server, page):
    open_ui(page, server.base, "/?group=none")
    assert page.evaluate("emberFlamegraph.total") == 1000
    options = page.evaluate("[...document.querySelectorAll('#kind option')].map(o => [o.value, o.textContent])")
    assert ["cuda", "GPU time"] in options
    select_kind(page, "cuda")
    page.wait_for(f"emberFlamegraph.kind === 'cuda' && emberFlamegraph.total === {GPU_TOTAL}")
    wait_state(page, "ready")
    assert search_params(page)["kind"] == ["cuda"]
    assert page.evaluate("emberFlamegraph.unit") == "nanoseconds"
    assert frame(page, "sgemm_kernel")["total"] == 9 * S
    assert frame(page, "train_step")["total"] == 9_500_000_000
    assert not any(f["name"] == "prepare" for f in page.evaluate("emberFlamegraph.frames"))
    summary = page.evaluate("document.getElementById('summary').innerText")
    assert summary.startswith("14.0 s of GPU time") and "GPUs busy" in summary, summary
    legend = page.evaluate("[...document.querySelectorAll('#legend li')].map(li => li.textContent)")
    assert {"CUDA launch", "CUDA kernel", "CUDA memcpy", "CUDA sync"} <= set(legend), legend

    # A CPU frame: its total is the GPU time it launched, its self zero.
    tt = tooltip_of(page, "train_step")
    assert tt["GPU Time (Total)"] == "9.50 s \u00b7 67.9%", tt
    assert tt["GPU Time (Self)"] == "0 s \u00b7 0.0%", tt
    assert "total" not in tt and "self" not in tt
    # The launch API: a CPU-side frame too.
    tt = tooltip_of(page, "cudaMemcpyAsync")
    assert tt["type"] == "CUDA launch"
    assert tt["GPU Time (Total)"] == "1.50 s \u00b7 10.7%" and tt["GPU Time (Self)"] == "0 s \u00b7 0.0%", tt
    # The kernel carries the self time.
    tt = tooltip_of(page, "sgemm_kernel")
    assert tt["type"] == "CUDA kernel"
    assert tt["GPU Time (Total)"] == "9.00 s \u00b7 64.3%", tt
    assert tt["GPU Time (Self)"] == "9.00 s \u00b7 64.3%", tt
    shot(page, "gpu-flamegraph")
    page.mouse_move(5, 5)

    # A CEL filter on a GPU attribute narrows the GPU time.
    q = urllib.parse.quote("cuda.stream.id > 7")
    open_ui(page, server.base, f"/?kind=cuda&group=none&q={q}")
    assert page.evaluate("emberFlamegraph.total") == 5 * S
    q = urllib.parse.quote("gpu.device.index == 1")
    open_ui(page, server.base, f"/?kind=cuda&group=none&q={q}")
    assert page.evaluate("emberFlamegraph.total") == 5 * S
    assert {f["name"] for f in page.evaluate("emberFlamegraph.frames")} >= {"sgemm_kernel", "softmax_kernel"}
    assert not any(f["name"] == "HtoD" for f in page.evaluate("emberFlamegraph.frames"))
    no_errors(page)


def test_gpu_flamegraph_empty_says_how(server, page):
    q = urllib.parse.quote('host.name == "cpu3"')
    open_ui(page, server.base, f"/?kind=cuda&q={q}", state="empty")
    text = page.evaluate("document.getElementById('message').innerText")
    assert "No GPU time" in text and "CUDA_INJECTION64_PATH=/var/lib/ember/profiler/libembercuda.so" in text
    no_errors(page)


KERNELS = [
    ["sgemm_kernel", "CUDA kernel", "9 s", "64.3%"],
    ["softmax_kernel", "CUDA kernel", "3 s", "21.4%"],
    ["HtoD", "CUDA memcpy", "1.5 s", "10.7%"],
    ["cudaStreamSynchronize", "CUDA sync", "500 ms", "3.57%"],
]


def test_top_kernels_and_gpu_top_functions(server, page):
    open_ui(page, server.base, "/?view=functions&kind=cuda&only=kernels")
    head = page.evaluate("[...document.querySelectorAll('.fn-content thead th')].map(th => th.textContent)")
    assert head[:5] == ["Kernel", "Kind", "GPU time", "GPU %", "GPUs busy"], head
    got = [r[:4] for r in rows(page, ".fn-content tbody tr")]
    assert got == KERNELS, got
    assert page.evaluate("document.querySelector('.fn-summary').textContent").startswith("4 kernels")
    pressed = page.evaluate("[...document.querySelectorAll('.fn-only-btn')].map(b => [b.textContent, b.getAttribute('aria-pressed')])")
    assert pressed == [["Functions", "false"], ["Top kernels", "true"]]
    shot(page, "gpu-top-kernels")

    # Functions: CPU code by the GPU time it launched, self zero.
    page.evaluate("document.querySelector('.fn-only-btn[data-only=\"functions\"]').click()")
    page.wait_for("!document.querySelector('.fn-content').classList.contains('stale') && "
                  "document.querySelector('.fn-content thead th:nth-child(3)').textContent === 'Self GPU time'")
    wait_state(page, "ready")
    assert "only" not in search_params(page)
    page.evaluate("document.querySelector('.fn-content thead th[data-key=\"total_cores\"]').click()")
    page.wait_for("document.querySelector('.fn-content tbody tr td .fn-name-text').textContent === 'main'")
    wait_state(page, "ready")
    table = {r[0]: r for r in rows(page, ".fn-content tbody tr")}
    assert table["main"][2:6] == ["0 s", "0.0%", "14 s", "100.0%"], table["main"]
    assert table["train_step"][2:6] == ["0 s", "0.0%", "9.5 s", "67.9%"], table["train_step"]
    assert table["sgemm_kernel"][2:6] == ["9 s", "64.3%", "9 s", "64.3%"], table["sgemm_kernel"]
    shot(page, "gpu-top-functions")

    # A kernel's sandwich: the CPU stacks that launched it, in GPU time.
    open_ui(page, server.base, "/?view=functions&kind=cuda&only=kernels")
    page.evaluate("""[...document.querySelectorAll('.fn-content tbody tr')]
        .find((tr) => tr.querySelector('.fn-name-text').textContent === 'sgemm_kernel').click()""")
    page.wait_for("!!document.querySelector('#view-functions .fn-callers [role=treeitem]')")
    wait_state(page, "ready")
    callers = page.evaluate("""[...document.querySelectorAll('#view-functions .fn-callers [role=treeitem]')]
        .map((r) => [Number(r.getAttribute('aria-level')) - 1, r.querySelector('.fn-node-name').innerText,
                     r.children[1].innerText, r.children[3].innerText])""")
    assert callers == [[0, "sgemm_kernel", "9 s", "64.3%"], [1, "cudaLaunchKernel", "9 s", "64.3%"],
                       [2, "train_step", "9 s", "64.3%"], [3, "main", "9 s", "64.3%"]], callers
    cols = page.evaluate("[...document.querySelectorAll('#view-functions .fn-callers .fn-tree-cols span')].map(s => s.textContent)")
    assert cols[:4] == ["Function", "GPU time", "GPUs", "GPU %"], cols
    shot(page, "gpu-kernel-sandwich")
    no_errors(page)


def test_entities_gpu_share(server, page):
    # On-CPU hosts, with each one's share of all GPU time beside.
    open_ui(page, server.base, "/?view=entities")
    head = page.evaluate("[...document.querySelectorAll('.ent-content thead th')].map(th => th.textContent)")
    assert "GPU %" in head, head
    col = head.index("GPU %")
    table = {r[0]: r for r in rows(page, ".ent-content tbody tr")}
    assert set(table) == {"gpu1", "gpu2", "cpu3"}
    assert table["gpu1"][col] == "92.9%" and table["gpu2"][col] == "7.14%" and table["cpu3"][col] == "0.0%", table
    shot(page, "gpu-entities-share")
    # The list in GPU time itself.
    open_ui(page, server.base, "/?view=entities&kind=cuda")
    head = page.evaluate("[...document.querySelectorAll('.ent-content thead th')].map(th => th.textContent)")
    assert head[:4] == ["Host", "GPUs busy", "GPU time", "GPU %"] and "GPU %" not in head[4:], head
    got = [r[:1] + r[2:4] for r in rows(page, ".ent-content tbody tr")]
    assert got == [["gpu1", "13 s", "92.9%"], ["gpu2", "1 s", "7.14%"]], got
    # A host's page in GPU time: its numbers and its breakdowns.
    open_ui(page, server.base, "/?view=entities&kind=cuda&entity=host&name=gpu1")
    page.wait_for("document.querySelectorAll('.ent-stats dt').length > 0")
    stats = page.evaluate("""Object.fromEntries([...document.querySelectorAll('.ent-stats dt')]
        .map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))""")
    assert stats["GPU %"] == "92.9%" and stats["GPU time"] == "13 s", stats
    shot(page, "gpu-entity-page")
    no_errors(page)


def iq_rows(page, panel):
    return rows(page, f'#view-iq .iq-body[data-panel="{panel}"] tbody tr')


def test_iq_gpu_tab_devices_processes_kernels(server, page):
    open_ui(page, server.base, "/?view=iq&tab=gpu")
    title = page.evaluate("document.querySelector('#view-iq .iq-functions h2').textContent")
    assert title == "Top 5 kernels by GPU time"
    assert iq_rows(page, "functions") == [[k[0], k[2], k[3]] for k in KERNELS]
    # GPU time by device (index 0 on both hosts: 8 s + 1 s), the default tab.
    tabs = page.evaluate("[...document.querySelectorAll('#view-iq .iq-etypes button')].map(b => b.textContent)")
    assert tabs == ["Devices", "GPU models", "Processes", "Executables", "Hosts"]
    head = page.evaluate("[...document.querySelectorAll('#view-iq .iq-entities thead th')].map(th => th.textContent)")
    assert head[:4] == ["Device", "GPU time", "GPUs busy", "GPU %"], head
    assert [[r[0], r[1], r[3]] for r in iq_rows(page, "entities")] == [["GPU 0", "9 s", "64.3%"],
                                                                   ["GPU 1", "5 s", "35.7%"]]
    # No NVML metrics here: the card is the share of GPU time.
    assert page.evaluate("document.querySelector('#view-iq .iq-card[data-card=\"share\"] .iq-card-label').textContent") == \
        "Share of profiled GPU time"
    shot(page, "gpu-iq")
    page.evaluate("document.querySelector('#view-iq [data-etype=\"model\"]').click()")
    page.wait_for("emberIQ.params.etype === 'model' && document.body.dataset.state === 'ready'")
    assert [r[0:2] for r in iq_rows(page, "entities")] == [[H100, "13 s"], [A10G, "1 s"]]
    page.evaluate("document.querySelector('#view-iq [data-etype=\"process\"]').click()")
    page.wait_for("emberIQ.params.etype === 'process' && document.body.dataset.state === 'ready'")
    assert [r[0:2] for r in iq_rows(page, "entities")] == [["PID 100", "13 s"], ["PID 200", "1 s"]]
    text = page.evaluate("document.getElementById('view-iq').innerText")
    assert "next step" not in text
    no_errors(page)


def test_diff_over_gpu_time(server, page):
    # The same range, two filters: baseline host gpu2, comparison host gpu1
    # (softmax_kernel 1 s -> 2 s of GPU time: +100%).
    base = urllib.parse.quote('host.name == "gpu2"')
    cmp_ = urllib.parse.quote('host.name == "gpu1"')
    open_ui(page, server.base, f"/?view=diff&kind=cuda&cmp=same&bq={base}&cq={cmp_}")
    page.wait_for("document.querySelectorAll('#view-diff .diff-data tbody tr').length > 0")
    got = page.evaluate("""Object.fromEntries([...document.querySelectorAll('#view-diff .diff-data tbody tr')]
        .map((tr) => [tr.dataset.name, {status: tr.dataset.status, pct: tr.cells[4].innerText.trim()}]))""")
    assert got["softmax_kernel"] == {"status": "changed", "pct": "+100.0%"}, got
    assert got["sgemm_kernel"]["status"] == "new", got
    summary = page.evaluate("document.querySelector('#view-diff .diff-summary').innerText")
    assert "GPUs busy" in summary and "GPU time \u00f7 seconds" in summary, summary
    shot(page, "gpu-diff")
    no_errors(page)


@pytest.fixture(scope="module")
def timeline_server(request):
    """GPU spans on three streams of two hosts, sent as ember-agent sends
    them (protocol version 2, span_*), beside their GPU time."""
    srv = start_server(request)
    now = int(time.time() * 1000)
    srv.first = (now - 60_000) * 1_000_000  # ns
    b = Batch(agent_instance="6a7b8c9d-0000-4000-8000-0000000000c2", sample_rate_hz=19)
    sgemm = ["main", "train_step", LAUNCH, ("sgemm_kernel", "cuda_kernel", "")]
    copy = ["main", "load_batch", ("cudaMemcpyAsync", "cuda_launch", ""), ("HtoD", "cuda_memcpy", "")]
    evals = ["main", "eval_step", LAUNCH, ("softmax_kernel", "cuda_kernel", "")]
    serve = ["main", "serve", LAUNCH, ("softmax_kernel", "cuda_kernel", "")]
    srv.spans = []
    for i in range(3):
        t = srv.first + i * 2 * S  # a step every 2 s: a 1 s sgemm, then a 0.25 s copy on stream 7
        for frames, attrs, start, ns, kind in ((sgemm, gpu("gpu1", 100, 0, 7, H100), t, S, "kernel"),
                                               (copy, gpu("gpu1", 100, 0, 7, H100), t + S, S // 4, "memcpy"),
                                               (evals, gpu("gpu1", 100, 1, 8, H100), t + S // 2, S // 2, "kernel"),
                                               (serve, gpu("gpu2", 200, 0, 3, A10G), t, 3 * S // 2, "kernel")):
            b.add_span(frames, attrs, start, start + ns, kind, int(attrs["gpu.device.index"]),
                       int(attrs["cuda.stream.id"]))
            b.add(frames, attrs, ns, kind="cuda")
            srv.spans.append((attrs["host.name"], frames[-1][0], start, start + ns))
    assert send_session_batch(srv.base, b.encode_session(sequence=1, start_ms=now - 60_000, end_ms=now - 55_000))["stored"]
    # NVML's utilization of gpu1's two GPUs: 60% and 80% busy.
    m = MetricsBatch()
    for idx, util in (("0", 60.0), ("1", 80.0)):
        labels = {"host.name": "gpu1", "gpu.index": idx, "gpu.uuid": f"GPU-gpu1-{idx}", "gpu.name": H100}
        m.add("hw.gpu.utilization", "%", labels, [(now - 60_000 + i * 20_000, util) for i in range(3)])
    assert post_metrics(srv.base, m)["stored"]
    return srv


def test_gpu_timeline_per_device_and_stream(timeline_server, page):
    srv = timeline_server
    open_ui(page, srv.base, "/?view=iq&tab=gpu")
    page.wait_for("emberIQ.timeline && emberIQ.timeline.bars")
    tl = page.evaluate("emberIQ.timeline")
    assert tl["rows"] == ["gpu1 \u00b7 GPU 0 \u00b7 stream 7", "gpu1 \u00b7 GPU 1 \u00b7 stream 8",
                          "gpu2 \u00b7 GPU 0 \u00b7 stream 3"]
    # Each span as it ran: its own start and end (the API's to the
    # nanosecond; the page's doubles to a fraction of a microsecond).
    got = sorted((b["start_ns"], b["end_ns"], b["name"]) for b in tl["bars"] if b["row"] == tl["rows"][0])
    want = sorted((a, z, n) for h, n, a, z in srv.spans if h == "gpu1" and n in ("sgemm_kernel", "HtoD"))
    assert [n for _, _, n in got] == [n for _, _, n in want]
    assert all(abs(g[0] - w[0]) < 1000 and abs(g[1] - w[1]) < 1000 for g, w in zip(got, want)), (got, want)
    status, api = api_query(srv.base, "gpu/timeline", seconds=3600)
    assert status == 200, api
    assert sorted((s["start_ns"], s["end_ns"], s["name"]) for s in api["spans"]) == \
        sorted((a, z, n) for _, n, a, z in srv.spans)
    assert len(tl["bars"]) == 12 and not tl["truncated"]
    drawn = page.evaluate("[...document.querySelectorAll('.iq-timeline .tl-row[data-row]')].map(r => [r.dataset.row, r.querySelectorAll('.tl-bar').length])")
    assert drawn == [[tl["rows"][0], 6], [tl["rows"][1], 3], [tl["rows"][2], 3]]
    # Bars as long as the work and where it ran: the 1.5 s softmax on gpu2
    # three times the 0.5 s one on GPU 1, which starts half a second after
    # the sgemm of its step; the copy starts where the sgemm ends.
    box = page.evaluate("""[...document.querySelectorAll('.iq-timeline .tl-row[data-row]')].map(r =>
        [...r.querySelectorAll('.tl-bar')].map(b => { const x = b.getBoundingClientRect(); return [b.dataset.name, x.left, x.width]; })
        .sort((p, q) => p[1] - q[1]))""")
    sg, cp, ev, sv = box[0][0], box[0][1], box[1][0], box[2][0]
    assert (sg[0], cp[0], ev[0], sv[0]) == ("sgemm_kernel", "HtoD", "softmax_kernel", "softmax_kernel")
    assert sv[2] == pytest.approx(3 * ev[2], rel=0.05)
    assert cp[1] == pytest.approx(sg[1] + sg[2], abs=1.5)
    assert ev[1] == pytest.approx(sg[1] + sg[2] / 2, abs=1.5)
    # A click shows what ran and the stack that launched it.
    page.evaluate("""[...document.querySelectorAll('.iq-timeline .tl-row[data-row]')][0]
        .querySelectorAll('.tl-bar[data-name="HtoD"]')[1].click()""")
    page.wait_for("!document.querySelector('.iq-timeline .tl-details').hidden")
    name = page.evaluate("document.querySelector('.tl-detail-name').textContent")
    stack = page.evaluate("[...document.querySelectorAll('.tl-stack .tl-frame-name')].map(e => e.textContent)")
    facts = page.evaluate("""Object.fromEntries([...document.querySelectorAll('.tl-detail-facts dt')]
        .map((dt) => [dt.textContent, dt.nextElementSibling.textContent]))""")
    assert name == "HtoD" and stack == ["main", "load_batch", "cudaMemcpyAsync", "HtoD"]
    assert facts["Duration"] == "250 ms" and facts["Stream"] == "7" and facts["Device"] == f"GPU 0 ({H100})", facts
    assert facts["Process"] == "trainer \u00b7 PID 100"
    assert page.evaluate("document.querySelectorAll('.iq-timeline .tl-bar.selected').length") == 1
    # A filter narrows the spans like every panel.
    open_ui(page, srv.base, "/?view=iq&tab=gpu&q=" + urllib.parse.quote('host.name == "gpu2"'))
    page.wait_for("emberIQ.timeline && emberIQ.timeline.bars")
    assert page.evaluate("emberIQ.timeline.rows") == ["gpu2 \u00b7 GPU 0 \u00b7 stream 3"]
    open_ui(page, srv.base, "/?view=iq&tab=gpu")
    page.wait_for("emberIQ.timeline && emberIQ.timeline.bars")
    page.evaluate("""[...document.querySelectorAll('.iq-timeline .tl-row[data-row]')][0]
        .querySelectorAll('.tl-bar[data-name="HtoD"]')[1].click()""")
    page.wait_for("!document.querySelector('.iq-timeline .tl-details').hidden")
    page.evaluate("document.querySelector('.iq-timeline').scrollIntoView()")
    path = shot(page, "gpu-timeline")
    # The screenshot shows the bars in their kind's colour where the page
    # put them, the clicked one outlined, and the stack under them.
    _, _, px = png_pixels(path)
    bars = page.evaluate("""[...document.querySelectorAll('.iq-timeline .tl-bar')].map(b => {
        const r = b.getBoundingClientRect(), c = getComputedStyle(b).backgroundColor.match(/\\d+/g).map(Number);
        return [b.dataset.name, b.classList.contains('selected'), Math.round(r.left + r.width / 2),
                Math.round(r.top + r.height / 2), c.slice(0, 3), Math.round(r.left), Math.round(r.top)]; })""")
    assert len(bars) == 12
    for name, sel, cx, cy, rgb, left, top in bars:
        assert all(abs(p - q) <= 8 for p, q in zip(px[cy][cx], rgb)), (name, px[cy][cx], rgb)
        if sel:  # an outline darker than the bar at its top edge
            assert sum(px[top][cx]) < sum(rgb) - 150, (px[top][cx], rgb)
    kinds = {name: tuple(rgb) for name, _, _, _, rgb, _, _ in bars}
    assert kinds["HtoD"] != kinds["sgemm_kernel"] and kinds["sgemm_kernel"] == kinds["softmax_kernel"]
    head = page.evaluate("(() => { const r = document.querySelector('.tl-stack .tl-leaf').getBoundingClientRect(); return [Math.round(r.left + 4), Math.round(r.top + r.height / 2)]; })()")
    assert px[head[1]][head[0]] == kinds["HtoD"] or any(
        abs(sum(px[head[1]][x]) - sum(kinds["HtoD"])) < 24 for x in range(head[0], head[0] + 16)), "the leaf's swatch"
    # NVML: busy and idle (70% busy on average over the two GPUs).
    page.wait_for("emberIQ.nvml !== undefined && emberIQ.nvml !== null")
    card = page.evaluate("""(() => { const c = document.querySelector('#view-iq .iq-card[data-card="share"]');
        return [c.querySelector('.iq-card-label').textContent, c.querySelector('.iq-card-value').textContent,
                c.querySelector('.iq-card-sub').textContent]; })()""")
    assert card == ["GPUs busy (NVML)", "70.0%", "idle 30.0% of the time, 2 GPUs reporting"], card
    page.evaluate("window.scrollTo(0, 0)")
    shot(page, "gpu-iq-nvml")
    # The CPU tab has no timeline.
    page.evaluate("document.querySelector('#view-iq [data-tab=\"cpu\"]').click()")
    page.wait_for("emberIQ.params.tab === 'cpu'")
    assert page.evaluate("document.querySelector('.iq-timeline').hidden") is True
    no_errors(page)
