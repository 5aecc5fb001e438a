#!/usr/bin/env python3
"""ui_render - how fast the web UI's flamegraph renderer is in headless
Chromium on this machine: a 100 000-node tree flattened (API answer to the
renderer's arrays) and drawn, for a wide tree (every frame visible) and a
bushy one; first paint in a 1280x600 viewport (flatten + draw) and panning
(a full redraw per step while zoomed in). Uses the page served by a real ember-server.
usage: /usr/bin/python3 bench/ui_render.py"""

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "browser"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))

from cdp import Chromium  # noqa: E402
from harness import Server  # noqa: E402
from test_ui import PERF_JS  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    server = Server(os.path.join(tmp, "data")).start()
    browser = Chromium(width=1280, height=800)
    try:
        page = browser.new_page()
        page.navigate(server.url + "/")
        page.wait_for("document.body.dataset.state !== 'loading'", timeout=15)
        for name, r in page.evaluate(PERF_JS).items():
            print(f"{name:6s} tree: {r['nodes']} nodes; flatten "
                  f"{r['flattenMs']:.1f} ms, whole graph render {r['renderMs']:.1f} ms "
                  f"(best of 5), with search {r['searchRenderMs']:.1f} ms; 1280x600 viewport: "
                  f"first paint {r['firstPaintMs']:.1f} ms (target <= 100; with the page's "
                  f"display settings {r['pageFirstPaintMs']:.1f} ms), pan "
                  f"{r['panMeanMs']:.1f} ms/frame mean, {r['panP95Ms']:.1f} p95 = "
                  f"{r['panFps']:.0f} fps (target >= 50)")
    finally:
        browser.close()
        server.stop()
