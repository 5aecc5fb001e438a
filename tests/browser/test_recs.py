"""Browser tests of the Recommendations view (web/view_recs.js): a real
ember-server with CPU samples of two applications (a deployment that
compiles a regular expression per request, an executable that compresses
at zlib level 9) and GPU time of a trainer with synchronous host-to-device
copies; the page lists them sorted by peak on the All / CPU / CUDA tabs,
the detail panel shows the reference's sections, Dismiss hides one and
Restore brings it back, and Efficiency IQ shows the recommendations card.
Screenshots in build/test-artifacts/screenshots/recs_*.png.

Run from the repository root after building ember-server:
    /usr/bin/python3 -m pytest -q tests/browser/test_recs.py
"""

import time

import pytest

from conftest import (along, backgrounds, colored, hits, no_errors, open_ui, painted, read_png, search_params, shot,
                      start_server, wait_state)
from ember_batch import Batch, send_batch

RATE = 19
SPARK = (0xC2, 0x41, 0x0C)  # the sparkline's and the usage total's colour (web/view_recs.js)
WHITE = (255, 255, 255)


@pytest.fixture(scope="module")
def server(request):
    srv = start_server(request)
    now = int(time.time() * 1000)
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000bb", sample_rate_hz=RATE, host_cpus=8)
    web = {"host.name": "web-1", "process.executable.name": "shop", "k8s.deployment.name": "shop-api",
           "k8s.namespace.name": "prod", "k8s.pod.name": "shop-api-7d9c"}
    b.add(["main", "handle_request", "validate_email", "pcre2_compile_8", "compile_branch"], web, 3000, binary="shop")
    b.add(["main", "handle_request", "render", "vsnprintf", "__printf_buffer"], web, 600, binary="shop")
    batch = {"host.name": "batch-1", "process.executable.name": "archiver"}
    b.add(["main", "save_segment", "compress2", "deflate", "deflate_slow", "longest_match"], batch, 1500, binary="archiver")
    gpu = {"host.name": "gpu-1", "process.executable.name": "trainer"}
    b.add(["main", "train_step", ("cudaMemcpy", "cuda_launch"), ("HtoD", "cuda_memcpy")], gpu,
          20_000_000_000, kind="cuda")
    b.add(["main", "train_step", ("cudaLaunchKernel", "cuda_launch"), ("sgemm_kernel", "cuda_kernel")], gpu,
          30_000_000_000, kind="cuda")
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 120_000, end_ms=now - 115_000))["stored"]
    return srv


def cards(page):
    return page.evaluate("""[...document.querySelectorAll('#view-recs .recs-card')].map(c => ({
        id: c.dataset.rec, app: c.querySelector('.recs-app').textContent,
        title: c.querySelector('.recs-title').textContent}))""")


def test_list_tabs_detail_dismiss(server, page):
    open_ui(page, server.base, "/?view=recs")
    all_cards = cards(page)
    apps = [c["app"] for c in all_cards]
    # Sorted by peak: the regex deployment (3600 samples) before the
    # archiver (1500); the trainer's GPUs (50 s of GPU time in 10 s) too.
    assert set(apps) == {"shop-api", "archiver", "trainer"}, apps
    assert apps.index("shop-api") < apps.index("archiver")
    assert "Regular expression" in all_cards[apps.index("shop-api")]["title"]
    _, _, pixel = read_png(shot(page, "recs_list"))
    # The screenshot, checked: each card's badge in its kind's colour (CPU
    # and CUDA apart), each card's sparkline drawn in the line's colour.
    badges = backgrounds(page, "#view-recs .recs-badge")
    assert not painted(pixel, badges), painted(pixel, badges)
    assert len({c for _, c in badges}) == 2, badges
    fr = [0.1, 0.3, 0.5, 0.7, 0.9, 0.97]
    for i in range(len(all_cards)):
        pts = along(page, f"#view-recs .recs-card:nth-child({i + 1}) .recs-spark polyline", fr)
        assert hits(pixel, pts, SPARK, WHITE) == len(pts), (i, [pixel(x, y) for x, y in pts])

    # The CUDA tab: only the trainer, its synchronous copies first.
    page.evaluate("document.querySelector('#view-recs .recs-tabs [data-tab=cuda]').click()")
    wait_state(page, "ready")
    assert search_params(page)["tab"] == ["cuda"]
    cuda = cards(page)
    assert [c["app"] for c in cuda] == ["trainer"]
    assert "host-to-device" in cuda[0]["title"]
    page.evaluate("document.querySelector('#view-recs .recs-tabs [data-tab=cpu]').click()")
    wait_state(page, "ready")
    assert {c["app"] for c in cards(page)} == {"shop-api", "archiver"}

    # The detail panel: every section of the reference.
    shop = next(c for c in cards(page) if c["app"] == "shop-api")
    page.evaluate(f"document.querySelector('#view-recs .recs-card[data-rec=\"{shop['id']}\"]').click()")
    wait_state(page, "ready")
    assert search_params(page)["rec"] == [shop["id"]]
    sections = page.evaluate("[...document.querySelectorAll('#view-recs .recs-detail section')].map(s => s.dataset.section)")
    assert sections == ["issue", "usage", "actions", "analysis", "entities", "technical"], sections
    text = page.evaluate("document.querySelector('#view-recs .recs-detail').innerText")
    assert "Compile the pattern once" in text
    assert "pcre2_compile_8" in text  # the evidence
    assert "shop-api-7d9c" in text    # an affected entity (the pod)
    assert "saves" in text and "cores" in text and "/yr" in text
    actions = page.evaluate("[...document.querySelectorAll('#view-recs .recs-actions > li b')].map(b => b.textContent)")
    assert actions[0].startswith("Regular expression compiled"), actions
    assert page.evaluate("document.querySelectorAll('#view-recs .recs-usage polyline').length") >= 2
    shot(page, "recs_detail", full_page=True)
    # The usage chart, shot where it is: the total's line where the chart
    # puts it (its rise to the peak, where no trace's line lies over it)
    # and the legend's swatches in the lines' colours.
    page.evaluate("document.querySelector('#view-recs .recs-usage').scrollIntoView({block: 'center'})")
    page.pump(0.2)
    _, _, pixel = read_png(shot(page, "recs_usage"))
    pts = along(page, "#view-recs .recs-usage polyline", [0.93, 0.95, 0.97, 0.99])
    assert hits(pixel, pts, SPARK, WHITE) == len(pts), [pixel(x, y) for x, y in pts]
    swatches = backgrounds(page, "#view-recs .recs-legend i", inset=5)
    assert not painted(pixel, swatches), painted(pixel, swatches)
    assert swatches[0][1] == SPARK and len({c for _, c in swatches}) == len(swatches), swatches

    # Dismiss: gone from the list (kept on the server); Show dismissed and
    # Restore bring it back.
    page.evaluate("document.querySelector('#view-recs .recs-detail [data-act=state]').click()")
    page.wait_for(f"!document.querySelector('#view-recs .recs-card[data-rec=\"{shop['id']}\"]')")
    page.navigate(server.base + "/?view=recs&tab=cpu")
    wait_state(page, "ready")
    assert "shop-api" not in [c["app"] for c in cards(page)]
    page.evaluate("document.querySelector('#view-recs [data-dismissed]').click()")
    wait_state(page, "ready")
    assert "shop-api" in [c["app"] for c in cards(page)]
    page.evaluate(f"document.querySelector('#view-recs .recs-card[data-rec=\"{shop['id']}\"]').click()")
    wait_state(page, "ready")
    assert page.evaluate("document.querySelector('#view-recs .recs-detail [data-act=state]').textContent") == "Restore"
    page.evaluate("document.querySelector('#view-recs .recs-detail [data-act=state]').click()")
    page.wait_for("document.querySelector('#view-recs .recs-detail [data-act=state]').textContent === 'Dismiss'")
    page.navigate(server.base + "/?view=recs&tab=cpu")
    wait_state(page, "ready")
    assert "shop-api" in [c["app"] for c in cards(page)]
    no_errors(page)


def test_iq_card(server, page):
    open_ui(page, server.base, "/?view=iq")
    page.wait_for("!!document.querySelector('#view-iq .recs-iq-card ol li')")
    text = page.evaluate("document.querySelector('#view-iq .recs-iq-card').innerText")
    assert "active" in text and "/yr" in text
    assert "Regular expression" in text
    shot(page, "recs_iq_card")
    page.evaluate("document.querySelector('#view-iq .recs-iq-card [data-recs-all]').click()")
    wait_state(page, "ready")
    assert search_params(page)["view"] == ["recs"]
    no_errors(page)


def test_empty(empty_server, page):
    open_ui(page, empty_server.base, "/?view=recs", state="empty")
    assert "No recommendations" in page.evaluate("document.querySelector('#view-recs').innerText")
    no_errors(page)
