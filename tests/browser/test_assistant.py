"""Browser tests of the AI assistant (web/view_assistant.js): its page
and the flamegraph's panel, against a real ember-server whose LLM is the
test-only provider stand-in (tests/llm_provider/provider.py, OpenAI's
shape): a question is sent, the model calls a real MCP tool
(top_functions), the answer and the tool call with its result are shown;
the flamegraph's AI assistant button opens the panel with the graph's
context. Screenshots in build/test-artifacts/screenshots/assistant_*.png.

Run from the repository root after building ember-server:
    /usr/bin/python3 -m pytest -q tests/browser/test_assistant.py
"""

import os
import shutil
import sys
import tempfile
import time

import pytest

from conftest import HERE, PROJECT, backgrounds, colored, no_errors, open_ui, painted, read_png, shot, wait_state
from ember_batch import Batch, send_batch
from harness import Server

sys.path.insert(0, os.path.join(HERE, "..", "llm_provider"))
from provider import Provider  # noqa: E402

KEY = "sk-browser-test-key-0123456789"
USER_BUBBLE = (0xEE, 0xF2, 0xFF)  # .asst-user (web/view_assistant.css)


def llm_server(request, provider, *flags, **provider_args):
    """A scripted LLM provider (provider.py) and an ember-server using it
    with the API key in a file and more flags; both stop, and the data
    directory goes away, when the requesting test or fixture ends."""
    prov = Provider(provider, KEY, **provider_args)
    request.addfinalizer(prov.stop)
    data_dir = tempfile.mkdtemp(prefix="ember-browser-test-")
    request.addfinalizer(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    key = os.path.join(data_dir, "key")
    with open(key, "w") as f:
        f.write(KEY)
    srv = Server(os.path.join(data_dir, "data"), None, f"--llm-provider={provider}",
                 f"--llm-base-url={prov.base_url}", f"--llm-api-key-file={key}", *flags)
    request.addfinalizer(srv.stop)
    srv.start()
    srv.base = srv.url
    return srv, prov


@pytest.fixture(scope="module")
def env(request):
    srv, prov = llm_server(request, "openai", "--llm-model-examine=test-model", "--llm-recommendations=false",
                           path_prefix="/v1")
    now = int(time.time() * 1000)
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000dd", sample_rate_hz=19, host_cpus=8)
    web = {"host.name": "web-1", "process.executable.name": "shop"}
    b.add(["main", "handle_request", "validate_email", "pcre2_compile_8", "compile_branch"], web, 3000, binary="shop")
    b.add(["main", "handle_request", "render", "vsnprintf"], web, 600, binary="shop")
    assert send_batch(srv.base, b.encode(sequence=1, start_ms=now - 120_000, end_ms=now - 115_000))["stored"]
    return srv, prov


def open_flamegraph(page, srv):
    """The flamegraph page, once its assistant button shows."""
    open_ui(page, srv.base, "/?range=1h")
    page.wait_for("!document.getElementById('assistant-button').hidden")


def finished(page, prov, name, **shot_args):
    """The provider saw only well-formed requests; the page is shot as
    name and logged no error."""
    assert prov.problems == []
    path = shot(page, name, **shot_args)
    no_errors(page)
    return read_png(path)[2]


def test_assistant_page(env, page):
    srv, prov = env
    prov.script = [prov.tool_call("top_functions", {"project": PROJECT, "range": "1h", "limit": 5}, "c1",
                                  "Reading the top functions."),
                   prov.text("Most CPU time is in compile_branch under validate_email: compile the "
                             "regular expression once instead of on every request.")]
    open_ui(page, srv.base, "/?view=assistant")
    assert "test-model" in page.evaluate("document.querySelector('#view-assistant .asst-note').textContent")
    page.evaluate("document.querySelector('#view-assistant textarea').value = 'Where is the CPU time going?'")
    page.evaluate("document.querySelector('#view-assistant .asst-form button[type=submit]').click()")
    page.wait_for("!!document.querySelector('#view-assistant .asst-assistant')", timeout=30)
    step = page.evaluate("(() => { const d = document.querySelector('#view-assistant .asst-step'); d.open = true; "
                         "return {tool: d.dataset.tool, text: d.innerText}; })()")
    assert step["tool"] == "top_functions" and "compile_branch" in step["text"], step
    answer = page.evaluate("document.querySelector('#view-assistant .asst-assistant .asst-text').innerText")
    assert "compile the regular expression once" in answer
    assert "1 tool call" in page.evaluate("document.querySelector('#view-assistant .asst-status').textContent")
    pixel = finished(page, prov, "assistant_page")
    # The screenshot shows the question in its bubble.
    bubble = backgrounds(page, "#view-assistant .asst-user")
    assert not painted(pixel, bubble) and bubble[0][1] == USER_BUBBLE, (bubble, painted(pixel, bubble))


def test_flamegraph_panel(env, page):
    srv, prov = env
    prov.script = [prov.text("compile_branch is PCRE2 compiling a pattern; it runs per request here.")]
    open_flamegraph(page, srv)
    page.evaluate("document.getElementById('assistant-button').click()")
    page.wait_for("!!document.querySelector('#assistant-panel .asst-form')")
    ctx = page.evaluate("document.querySelector('#assistant-panel .asst-context').innerText")
    assert "Flamegraph of On-CPU" in ctx and "Heaviest functions under it" in ctx, ctx
    page.evaluate("document.querySelector('#assistant-panel .asst-chip').click()")
    page.wait_for("!!document.querySelector('#assistant-panel .asst-assistant')", timeout=30)
    assert "PCRE2" in page.evaluate("document.querySelector('#assistant-panel .asst-assistant').innerText")
    # The context went to the model in the system prompt.
    assert "Heaviest functions under it" in prov.prompt_text(prov.requests[-1])
    pixel = finished(page, prov, "assistant_flamegraph_panel")
    # The screenshot shows the panel over the page's right side, the
    # question in its bubble, and the flamegraph beside it as its canvas
    # drew it: validate_email's frame in a frame's colour, not the page's.
    probes = backgrounds(page, "#assistant-panel") + backgrounds(page, "#assistant-panel .asst-user")
    assert not painted(pixel, probes) and probes[1][1] == USER_BUBBLE, (probes, painted(pixel, probes))
    f = next(x for x in page.evaluate("window.emberFlamegraph.frames") if x["name"] == "validate_email")
    drawn = page.evaluate(f"""(() => {{ const c = document.getElementById('flamegraph'), r = c.getBoundingClientRect();
        const dpr = window.devicePixelRatio, x = {f["x"]} + 4, y = {f["depth"]} * 18 + 9;
        const d = c.getContext('2d').getImageData(Math.round(x * dpr), Math.round(y * dpr), 1, 1).data;
        return [[Math.round((r.left + x) * dpr), Math.round((r.top + y) * dpr)], [d[0], d[1], d[2]]]; }})()""")
    (x, y), rgb = drawn
    assert x < probes[0][0][0], (drawn, probes)  # left of the panel
    assert colored(pixel(x, y), rgb, 8) and not colored(rgb, (255, 255, 255), 30), (pixel(x, y), rgb)


def test_explain_this_frame(env, page):
    srv, prov = env
    prov.script = [prov.text("validate_email compiles its pattern on each call.")]
    open_flamegraph(page, srv)
    f = next(x for x in page.evaluate("window.emberFlamegraph.frames") if x["name"] == "validate_email")
    r = page.evaluate("(() => { const r = document.getElementById('flamegraph').getBoundingClientRect(); "
                      "return {x: r.left, y: r.top}; })()")
    page.right_click(r["x"] + f["x"] + f["width"] / 2, r["y"] + f["depth"] * 18 + 9)
    page.wait_for("!document.getElementById('context-menu').hidden")
    page.evaluate("[...document.querySelectorAll('#context-menu [role=menuitem]')]"
                  ".find(li => li.innerText.startsWith('Explain this')).click()")
    page.wait_for("!!document.querySelector('#assistant-panel .asst-assistant')", timeout=30)
    ctx = page.evaluate("document.querySelector('#assistant-panel .asst-context').innerText")
    assert "Selected frame: validate_email" in ctx and "main > handle_request > validate_email" in ctx, ctx
    assert "compile_branch" in ctx
    asked = page.evaluate("document.querySelector('#assistant-panel .asst-user').innerText")
    assert asked.startswith("Explain what validate_email does"), asked
    finished(page, prov, "assistant_explain_frame")


def test_recommendation_llm_analysis(request, page):
    """The recommendations' LLM mode: the model's analysis beside the built-in one."""
    import json
    import urllib.request
    srv, prov = llm_server(request, "anthropic", "--llm-model-examine=big", "--llm-model-summarize=small",
                           "--recs-step=1h")
    now = int(time.time() * 1000)
    b = Batch(agent_instance="7e1d2c3b-0000-4000-8000-0000000000ee", sample_rate_hz=19, host_cpus=8)
    b.add(["main", "handle_request", "validate_email", "pcre2_compile_8", "compile_branch"],
          {"host.name": "web-1", "process.executable.name": "shop"}, 3000, binary="shop")
    assert send_batch(srv.url, b.encode(sequence=1, start_ms=now - 120_000, end_ms=now - 115_000))["stored"]
    exam = {"diagnosis": "validate_email compiles its pattern with pcre2_compile_8 on every request.",
            "actions": [{"title": "Compile the pattern once", "detail": "Keep the compiled pcre2_code in a static.",
                         "source": "validate.c:31", "savings_share": 0.9}],
            "confidence": "high", "lower_priority": []}
    summ = {"title": "Per-request regex compilation", "description": "The e-mail check compiles its regex each call.",
            "tags": ["regex"]}
    prov.script = [prov.text(json.dumps(exam)), prov.text(json.dumps(summ))]
    req = urllib.request.Request(f"{srv.url}/public/api/v1/project/{PROJECT}/recommendations/refresh", method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert json.loads(r.read())["recommendations"][0]["llm"]["status"] == "ok"
    open_ui(page, srv.url, "/?view=recs")
    page.evaluate("document.querySelector('#view-recs .recs-card').click()")
    wait_state(page, "ready")
    page.wait_for("!!document.querySelector('#view-recs [data-section=llm]')")
    text = page.evaluate("document.querySelector('#view-recs [data-section=llm]').innerText")
    assert "Per-request regex compilation" in text and "validate.c:31" in text and "big / small" in text, text
    # The built-in analysis is still there.
    assert page.evaluate("!!document.querySelector('#view-recs [data-section=actions] .recs-actions')")
    finished(page, prov, "assistant_recs_llm", full_page=True)


def test_settings_ai_configuration(env, page):
    srv, prov = env
    open_ui(page, srv.base, "/?view=settings")
    page.wait_for("!!document.querySelector('#view-settings .settings-llm input[name=model_summarize]')")
    text = page.evaluate("document.querySelector('#view-settings .settings-llm').innerText")
    assert "openai" in text and "file " in text and KEY not in page.evaluate("document.body.innerHTML"), text
    page.evaluate("""(() => { const f = document.querySelector('#view-settings .settings-llm');
        f.elements.model_summarize.value = 'small-model'; f.elements.max_output_tokens_per_hour.value = '50000';
        f.querySelector('button[type=submit]').click(); })()""")
    page.wait_for("document.querySelector('#view-settings .settings-llm-status') && "
                  "document.querySelector('#view-settings .settings-llm-status').textContent === 'Saved.'")
    import json
    import urllib.request
    with urllib.request.urlopen(srv.base + "/public/api/v1/settings/llm", timeout=10) as r:
        s = json.loads(r.read())
    assert s["model_summarize"] == "small-model" and s["max_output_tokens_per_hour"] == 50000
    assert page.evaluate("!!document.querySelector('#view-settings [data-llm-reset=model_summarize]')")
    shot(page, "assistant_settings", full_page=True)
    page.evaluate("document.querySelector('#view-settings [data-llm-reset=model_summarize]').click()")
    page.wait_for("!document.querySelector('#view-settings [data-llm-reset=model_summarize]')")
    no_errors(page)
