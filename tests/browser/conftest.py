"""Shared pieces of the browser tests: a real ember-server per module,
headless Chromium driven over the DevTools Protocol (cdp.py), screenshots
and the page's state. Every view's test file uses them."""

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from cdp import Chromium  # noqa: E402
from harness import BIN, Server, http  # noqa: E402  (tests/lib)

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SERVER = os.path.join(BIN, "ember-server")  # EMBER_BUILD picks another build directory
SHOTS = os.path.join(ROOT, "build", "test-artifacts", "screenshots")
PROJECT = "00000000-0000-0000-0000-000000000000"


def start_server(request):
    """An ember-server on a free port with a data directory of its own;
    both go away when the requesting fixture is finalized."""
    if not os.access(SERVER, os.X_OK):
        pytest.fail(f"{SERVER} is missing: run `make all` first")
    data_dir = tempfile.mkdtemp(prefix="ember-browser-test-")
    request.addfinalizer(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    srv = Server(os.path.join(data_dir, "data"))
    request.addfinalizer(srv.stop)
    srv.start()
    srv.base = srv.url
    return srv


def api_query(base, route, body=None, q=None, seconds=900):
    """POSTs to the project's query API route ("flamegraph/json",
    "top_functions", ...) what the page asks for the last `seconds`: on-CPU,
    no frame mask, the CEL query q, and body's other fields. Returns
    (status, parsed answer)."""
    end = int(time.time() * 1000)
    body = dict(body or {}, filter={"start_ts": end - seconds * 1000, "end_ts": end,
                                    "event_kind": "on_cpu", "frame_mask": {"patterns": []},
                                    "query": q})
    status, data = http("POST", f"{base}/public/api/v1/project/{PROJECT}/{route}", body,
                        {"Content-Type": "application/json"})
    return status, json.loads(data)


def populated_server(populate):
    """A module-scoped `server` fixture: a server that populate(base)
    fills once for the module's tests (server = populated_server(f))."""
    @pytest.fixture(scope="module")
    def server(request):
        srv = start_server(request)
        populate(srv.base)
        return srv
    return server


@pytest.fixture(scope="module")
def empty_server(request):
    """A server that holds nothing: every view's empty state."""
    return start_server(request)


@pytest.fixture(scope="module")
def browser(request):
    if not os.access("/usr/bin/chromium", os.X_OK) and "EMBER_CHROMIUM" not in os.environ:
        pytest.skip("no /usr/bin/chromium (Debian package chromium)")
    b = Chromium(width=1280, height=800)
    request.addfinalizer(b.close)
    return b


@pytest.fixture
def page(browser, request):
    p = browser.new_page()
    request.addfinalizer(lambda: browser.close_page(p))
    return p


def flamegraph_frames(page):
    """The frames the flamegraph drew (window.emberFlamegraph.frames)."""
    return page.evaluate("window.emberFlamegraph.frames")


def flamegraph_frame(page, name):
    """The first drawn frame called name; fails the test when none is."""
    found = [f for f in flamegraph_frames(page) if f["name"] == name]
    assert found, f"no frame {name!r} drawn"
    return found[0]


def shot(page, name, full_page=False):
    return page.screenshot(os.path.join(SHOTS, name + ".png"), full_page=full_page)


def png_pixels(path):
    """The pixels of a PNG screenshot as Chromium writes it (8-bit RGB or
    RGBA, not interlaced): (width, height, rows of (r, g, b) tuples),
    decoded with zlib and the PNG row filters (no imaging library)."""
    import struct
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = ihdr
    assert depth == 8 and color in (2, 6) and not interlace, ihdr
    bpp = 3 if color == 2 else 4
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def no_errors(page, allow=()):
    """Asserts that the page logged no console error and threw nothing,
    apart from entries matching one of allow (predicates)."""
    page.pump(0.1)
    errors = [e for e in page.errors if not any(a(e) for a in allow)]
    assert not errors, "console errors or uncaught exceptions:\n" + "\n".join(map(str, errors))


def focus(page, selector):
    """Gives the keyboard focus to the element the CSS selector names."""
    page.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")


def type_in(page, selector, text):
    """Types text into the element the CSS selector names, as a user does
    (focus, then the keys)."""
    focus(page, selector)
    page.insert_text(text)


def open_ui(page, base, path="/", state="ready"):
    page.navigate(base + path)
    return wait_state(page, state)


def wait_state(page, state, timeout=15):
    page.wait_for("document.body.dataset.state !== 'loading'", timeout=timeout)
    got = page.evaluate("document.body.dataset.state")
    assert got == state, f"page state {got!r}, expected {state!r}; message: " + str(
        page.evaluate("document.getElementById('message').innerText"))
    return got


def search_params(page):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(page.evaluate("location.href")).query)


def read_png(path):
    """png_pixels as (width, height, pixel(x, y) -> (r, g, b))."""
    width, height, rows = png_pixels(path)
    return width, height, lambda x, y: rows[y][x]


# Checking what a viewport screenshot shows: points in device pixels,
# colours as (r, g, b).

def colored(pixel, want, tol=40):
    return all(abs(a - b) <= tol for a, b in zip(pixel, want))


def along(page, selector, fractions):
    """Viewport pixels (device pixels) along an SVG path or polyline at
    fractions of its length."""
    return page.evaluate(f"""(() => {{
        const p = document.querySelector({json.dumps(selector)});
        const m = p.getScreenCTM(), len = p.getTotalLength(), dpr = window.devicePixelRatio;
        return {json.dumps(fractions)}.map((f) => {{
            const q = p.getPointAtLength(len * f);
            return [Math.round((m.a * q.x + m.c * q.y + m.e) * dpr), Math.round((m.b * q.x + m.d * q.y + m.f) * dpr)];
        }}); }})()""")


def center(page, selector):
    return page.evaluate(f"""(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();
        const dpr = window.devicePixelRatio;
        return [Math.round((r.left + r.width / 2) * dpr), Math.round((r.top + r.height / 2) * dpr)]; }})()""")


def inked(pixel, want, bg=(255, 255, 255), cover=0.5):
    """pixel is want drawn over bg with at least cover of the pixel (an
    anti-aliased line): each channel the same blend of the two."""
    alphas = [(b - p) / (b - w) for p, w, b in zip(pixel, want, bg) if abs(b - w) > 30]
    return bool(alphas) and min(alphas) >= cover and max(alphas) - min(alphas) <= 0.15


def hits(pixel, points, want, bg=None):
    """How many points have a pixel of colour want within one pixel (or,
    with bg, of want blended over bg: a thin line)."""
    match = (lambda p: inked(p, want, bg)) if bg else (lambda p: colored(p, want))
    return sum(any(match(pixel(x + dx, y + dy)) for dx in (-1, 0, 1) for dy in (-1, 0, 1))
               for x, y in points)


def backgrounds(page, selector, inset=3):
    """For each element matching selector: a device pixel inside it (inset
    CSS pixels from its left edge, halfway down: padding, not text) and its
    computed background colour, [[x, y], [r, g, b]]; an element with a
    transparent background fails."""
    probes = page.evaluate(f"""[...document.querySelectorAll({json.dumps(selector)})].map((e) => {{
        const r = e.getBoundingClientRect(), dpr = window.devicePixelRatio;
        const c = getComputedStyle(e).backgroundColor.match(/[\\d.]+/g).map(Number);
        return [[Math.round((r.left + {inset}) * dpr), Math.round((r.top + r.height / 2) * dpr)], c]; }})""")
    assert probes, selector
    for _, c in probes:
        assert len(c) == 3 or c[3] == 1, (selector, c)
    return [(xy, tuple(c[:3])) for xy, c in probes]


def painted(pixel, probes, tol=8):
    """The probes (backgrounds) whose pixel is not their colour."""
    return [(xy, want, pixel(*xy)) for xy, want in probes if not colored(pixel(*xy), want, tol)]
