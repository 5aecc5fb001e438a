"""Browser test of PC sampling in the GPU flamegraph: a real ember-server
holding CUDA samples shaped as ember-agent sends them with
EMBER_CUDA_ENABLE_PC_SAMPLING (CPU frames -> cuda_launch -> cuda_kernel ->
cuda_sass, an instruction as its cubin and offset -> cuda_stall, the
reason as CUPTI names it). Checked: the instruction frames named
"cubin:<crc>+0x<offset>", the stall frames under them, GPU time only at the
leaves (the kernel's self zero), the legend's CUDA SASS and CUDA stall
entries with their own colours, and the tooltip. Screenshot:
build/test-artifacts/screenshots/gpu-pc-sampling.png.

Run from the repository root after building ember-server:
    python3 -m pytest -x -q tests/browser/test_gpu_pcsampling.py
"""

import time

import pytest

from conftest import no_errors, open_ui, shot, start_server, wait_state
from ember_batch import Batch, send_batch

MS = 1_000_000  # nanoseconds
CUBIN = "cubin:00005eed0000c0b1"
STALL = "smsp__pcsamp_warps_issue_stalled_"
ATTRS = {"host.name": "gpu1", "process.executable.name": "trainer", "process.pid": "100",
         "gpu.device.index": "0", "gpu.name": "NVIDIA H100 80GB HBM3", "cuda.stream.id": "7"}
LAUNCH = ("cudaLaunchKernel", "cuda_launch", "")
# (kernel, offset, reason, GPU ns): gemm 600 ms split 3:1:1, softmax 400 ms 1:3
LEAVES = [
    ("gemm", 0x1a0, "long_scoreboard", 360 * MS),
    ("gemm", 0x1c0, "math_pipe_throttle", 120 * MS),
    ("gemm", 0x200, "selected", 120 * MS),
    ("softmax", 0x80, "wait", 100 * MS),
    ("softmax", 0x90, "short_scoreboard", 300 * MS),
]


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    b = Batch(agent_instance="6a7b8c9d-0000-4000-8000-0000000000d1", sample_rate_hz=19, host_cpus=8)
    for kernel, offset, reason, ns in LEAVES:
        frames = [b.frame("main"), b.frame("train_step"), b.frame(*LAUNCH), b.frame(kernel, "cuda_kernel", ""),
                  b.sass_frame(CUBIN, offset), b.frame(STALL + reason, "cuda_stall", "")]
        b.add(frames, ATTRS, ns, kind="cuda")
    now = int(time.time() * 1000) - 120_000
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now, end_ms=now + 5_000))["stored"]
    return srv


def frames(page):
    return page.evaluate("window.emberFlamegraph.frames")


def test_pc_sampling_flamegraph(server, page):
    open_ui(page, server.base, "/?kind=cuda&group=none")
    page.wait_for("emberFlamegraph.kind === 'cuda' && emberFlamegraph.total === 1000000000")
    wait_state(page, "ready")
    by_name = {}
    for f in frames(page):
        by_name.setdefault(f["name"], []).append(f)
    for kernel, offset, reason, ns in LEAVES:
        sass = by_name[f"{CUBIN}+0x{offset:x}"]
        assert len(sass) == 1 and sass[0]["total"] == ns and sass[0]["self"] == 0, (offset, sass)
        assert sass[0]["frame_type"] == "cuda_sass", sass
        stall = [f for f in by_name[STALL + reason] if f["depth"] == sass[0]["depth"] + 1]
        assert any(s["total"] == ns and s["self"] == ns and s["frame_type"] == "cuda_stall" for s in stall), stall
    for kernel, ns in (("gemm", 600 * MS), ("softmax", 400 * MS)):
        k = by_name[kernel][0]
        assert k["total"] == ns and k["self"] == 0 and k["frame_type"] == "cuda_kernel", k
    legend = page.evaluate("[...document.querySelectorAll('#legend li')].map(li => li.textContent)")
    assert {"CUDA kernel", "CUDA SASS", "CUDA stall"} <= set(legend), legend
    colours = page.evaluate("""Object.fromEntries([...document.querySelectorAll('#legend li')].map(li =>
        [li.textContent, getComputedStyle(li.querySelector('.swatch')).backgroundColor]))""")
    assert len({colours[t] for t in ("CUDA SASS", "CUDA stall", "CUDA kernel", "native")}) == 4, colours

    # The stall leaf holds the time; the kernel and the instruction none of their own.
    name = STALL + "long_scoreboard"
    x, y = page.evaluate(f"""(() => {{ const f = emberFlamegraph.frames.find((f) => f.name === {name!r});
        const r = document.getElementById('flamegraph').getBoundingClientRect();
        return [r.left + f.x + f.width / 2, r.top + f.depth * 18 + 9]; }})()""")
    page.mouse_move(x, y)
    page.wait_for(f"!tooltip.hidden && tooltip.querySelector('.tt-name').textContent === {name!r}")
    tt = page.evaluate("""Object.fromEntries([...tooltip.querySelectorAll('dt')].map((dt) =>
        [dt.textContent, dt.nextElementSibling.textContent]))""")
    assert tt["type"] == "CUDA stall", tt
    assert tt["GPU Time (Self)"] == "360 ms \u00b7 36.0%", tt
    shot(page, "gpu-pc-sampling")
    page.mouse_move(5, 5)
    no_errors(page)
