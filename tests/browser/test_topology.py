"""Browser test of the GPU topology view (web/view_topology.js): a real
ember-server holding the topology points ember-agent sends (as the fake
NVML scripts them: three GPUs on two NUMA nodes, NVLink between GPUs 0 and
1, GPU 2 with its NVLinks down, a process feeding GPU 2 from the far node)
for host g1, and a clean host g2. The page lists the findings, draws the
nodes, GPUs, processes and links, shows the interconnect matrix, and the
screenshot is checked pixel by pixel: the NVLink pair in green, the PCIe
fallback pairs in red, the far process red and the near one blue.
Screenshots land in build/test-artifacts/screenshots/topology-*.png."""

import json
import time
import urllib.parse

import pytest

from conftest import along, center, colored, hits, no_errors, read_png, shot, start_server, wait_state
from metrics_batch import MetricsBatch, post

COLORS = {"nvlink": (0x2F, 0x9E, 0x44), "fallback": (0xE0, 0x31, 0x31), "pcie": (0x86, 0x8E, 0x96),
          "near": (0x1C, 0x7E, 0xD6)}


def topology_batch(now):
    b = MetricsBatch()
    for t in (now - 60_000, now - 30_000):
        for host, gpus, links, procs in (
            ("g1", [("0", 0, "0", "2"), ("1", 1, "1", "2"), ("2", 1, "1", "0")],
             [("0", "1", "NV2", "SYS", 2), ("0", "2", "SYS", "SYS", 0), ("1", "2", "NODE", "NODE", 0)],
             [("2", "4242", "train", "0"), ("0", "77", "loader", "0-1")]),
            ("g2", [("0", 0, "0-3", "4"), ("1", 0, "0-3", "4")], [("0", "1", "NV4", "PIX", 4)],
             [("1", "88", "serve", "0-3")]),
        ):
            hl = {"host.name": host, "host.arch": "amd64"}
            for idx, numa, cpus, active in gpus:
                b.point(b.series("hw.gpu.topology.device", "1",
                                 {**hl, "gpu.index": idx, "gpu.uuid": f"GPU-{host}-{idx}", "gpu.name": "NVIDIA H100 80GB HBM3",
                                  "gpu.pci.bus_id": f"00000000:{18 + int(idx)}:00.0", "gpu.cpus": cpus,
                                  "gpu.nvlink.links": "18", "gpu.nvlink.active": active}), t, numa)
            for a, peer, path, pcie, nv in links:
                b.point(b.series("hw.gpu.topology.link", "1",
                                 {**hl, "gpu.index": a, "gpu.peer.index": peer, "gpu.topology.path": path,
                                  "gpu.topology.pcie": pcie}), t, nv)
            for gpu, pid, exe, cpus in procs:
                b.point(b.series("hw.gpu.topology.process", "1",
                                 {**hl, "gpu.index": gpu, "process.pid": pid, "process.executable.name": exe,
                                  "process.cpus_allowed": cpus}), t, 1)
    return b


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    assert post(srv.base, topology_batch(int(time.time() * 1000)))["stored"]
    return srv


def open_topology(page, base, query="", state="ready"):
    page.navigate(base + "/?view=topology" + ("&" + query if query else ""))
    page.wait_for("document.body.dataset.state !== 'loading' && window.emberTopology !== undefined")
    return wait_state(page, state)


def test_findings_drawing_matrix_and_screenshot(server, page):
    open_topology(page, server.base)
    t = page.evaluate("window.emberTopology")
    assert t["hosts"] == ["g1", "g2"] and t["host"] == "g1", t
    # The findings: the far-node feeder first, then the PCIe fallbacks.
    items = page.evaluate("""[...document.querySelectorAll('#view-topology .topo-finding')]
        .map((li) => [li.dataset.kind, li.querySelector('strong').textContent, li.querySelector('.topo-fix').textContent])""")
    assert [i[0] for i in items] == ["numa_placement", "pcie_fallback", "pcie_fallback"], items
    assert items[0][1] == "train (pid 4242) feeds GPU 2 from the far NUMA node", items
    assert "numactl --cpunodebind=1 --membind=1" in items[0][2], items
    assert items[1][1] == "GPU 0 and GPU 2 talk over PCIe (SYS) although both have NVLink", items
    # The drawing: GPUs in their nodes, the links by kind, the processes.
    nodes = page.evaluate("""[...document.querySelectorAll('#view-topology .topo-node')].map((g) =>
        [g.dataset.node, g.querySelector('.topo-node-cpus').textContent])""")
    assert nodes == [["0", "CPUs 0"], ["1", "CPUs 1"]], nodes
    kinds = page.evaluate("""Object.fromEntries([...document.querySelectorAll('#view-topology .topo-link')]
        .map((g) => [g.dataset.link, g.dataset.kind]))""")
    assert kinds == {"0-1": "nvlink", "0-2": "fallback", "1-2": "fallback"}, kinds
    procs = page.evaluate("""[...document.querySelectorAll('#view-topology .topo-proc')].map((g) =>
        [g.closest('.topo-gpu').dataset.gpu, g.dataset.pid, g.classList.contains('topo-far')])""")
    assert sorted(procs) == [["0", "77", False], ["2", "4242", True]], procs
    # The matrix in nvidia-smi topo -m notation.
    rows = page.evaluate("""[...document.querySelectorAll('#view-topology .topo-matrix tbody tr')]
        .map((r) => [...r.cells].map((c) => c.textContent))""")
    assert rows == [["GPU 0", "X", "NV2", "SYS", "0", "0"], ["GPU 1", "NV2", "X", "NODE", "1", "1"],
                    ["GPU 2", "SYS", "NODE", "X", "1", "1"]], rows

    # The screenshot, checked: the colours are where the links and the
    # processes are drawn.
    page.evaluate("document.querySelector('#view-topology .topo-drawing').scrollIntoView({block: 'center'})")
    page.pump(0.2)
    path = shot(page, "topology-g1")
    w, h, pixel = read_png(path)
    fr = [0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7]
    nv = along(page, "#view-topology [data-link='0-1'] path", fr)
    assert all(0 <= x < w and 0 <= y < h for x, y in nv), (nv, w, h)
    assert hits(pixel, nv, COLORS["nvlink"]) == len(nv), [pixel(x, y) for x, y in nv]
    fb = along(page, "#view-topology [data-link='0-2'] path", fr)
    assert hits(pixel, fb, COLORS["fallback"]) >= len(fb) // 2, [pixel(x, y) for x, y in fb]  # dashed
    assert hits(pixel, fb, COLORS["nvlink"]) == 0
    x, y = center(page, "#view-topology [data-pid='4242'] rect")
    assert colored(pixel(x, y), COLORS["fallback"]), pixel(x, y)
    x, y = center(page, "#view-topology [data-pid='77'] rect")
    assert colored(pixel(x, y), COLORS["near"]), pixel(x, y)
    shot(page, "topology-g1-full", full_page=True)
    # The host's GPU metrics are a link away.
    href = page.evaluate("document.querySelector('#view-topology .topo-metrics').href")
    assert "view=metrics" in href and "host.name" in urllib.parse.unquote(href) and "g1" in href, href
    no_errors(page)


def test_host_picker_and_a_clean_host(server, page):
    open_topology(page, server.base)
    page.evaluate("""(() => { const s = document.getElementById('topo-host');
        s.value = 'g2'; s.dispatchEvent(new Event('change')); })()""")
    page.wait_for("document.body.dataset.state === 'ready' && window.emberTopology && window.emberTopology.host === 'g2'")
    assert "host=g2" in page.evaluate("location.search")
    text = page.evaluate("document.querySelector('#view-topology .topo-findings-panel').innerText")
    assert "No topology problem found" in text, text
    kinds = page.evaluate("[...document.querySelectorAll('#view-topology .topo-link')].map((g) => g.dataset.kind)")
    assert kinds == ["nvlink"], kinds
    # Reloaded, the page keeps its host.
    open_topology(page, server.base, "host=g2")
    assert page.evaluate("window.emberTopology.host") == "g2"
    shot(page, "topology-g2", full_page=True)
    no_errors(page)


def test_no_topology_says_how(server, page):
    """A range without topology: the page says where it comes from."""
    open_topology(page, server.base, "range=custom&from=1000000000000&to=1000000600000", state="empty")
    assert page.evaluate("window.emberTopology.hosts") == []
    text = page.evaluate("document.querySelector('#view-topology .topo-body').innerText")
    assert "No GPU topology was received" in text and "-collect-metrics-interval" in text, text
    no_errors(page)
