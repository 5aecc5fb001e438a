"""A small Chrome DevTools Protocol client for the browser tests.

Chromium (Debian's /usr/bin/chromium) runs headless with a temporary
profile; it picks a free debugging port itself (--remote-debugging-port=0)
and writes it to DevToolsActivePort in the profile, which avoids a race
for the port. Pages are driven over their WebSocket with the websocket
module (Debian package python3-websocket).

    with Chromium() as browser:
        page = browser.new_page()
        page.navigate("http://127.0.0.1:8080/")
        page.wait_for("document.body.dataset.state === 'ready'")
        assert not page.errors
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import websocket

CHROMIUM = os.environ.get("EMBER_CHROMIUM", "/usr/bin/chromium")

# Input.dispatchKeyEvent details of the keys the tests press.
KEYS = {
    "Enter": ("Enter", 13, "\r"),
    "Escape": ("Escape", 27, ""),
    "Tab": ("Tab", 9, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowRight": ("ArrowRight", 39, ""),
    "Backspace": ("Backspace", 8, ""),
}


class CDPError(Exception):
    pass


class JSError(CDPError):
    pass


class Chromium:
    def __init__(self, width=1280, height=800, timeout=30):
        self.width, self.height = width, height
        self.profile = tempfile.mkdtemp(prefix="ember-chromium-")
        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        args = [
            CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--remote-debugging-port=0",
            "--remote-allow-origins=*", f"--user-data-dir={self.profile}",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-default-apps", "--mute-audio",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            f"--window-size={width},{height}", "about:blank",
        ]
        # A session of its own, so that close() ends chromium's helpers too.
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self.port = self._wait_port(timeout)
        except Exception:
            self.close()
            raise
        self.pages = []

    def _wait_port(self, timeout):
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CDPError(f"chromium exited with {self.proc.returncode}: {self.log_text()}")
            try:
                with open(path) as f:
                    port = f.readline().strip()
                if port:
                    return int(port)
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        raise CDPError(f"chromium did not open its debugging port in {timeout}s: {self.log_text()}")

    def log_text(self):
        try:
            with open(os.path.join(self.profile, "chromium.log"), "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def _http(self, path, method="GET"):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"null")

    def new_page(self):
        target = self._http("/json/new?about:blank", method="PUT")
        page = Page(self, target["id"], target["webSocketDebuggerUrl"])
        self.pages.append(page)
        return page

    def close_page(self, page):
        page.close()
        try:
            self._http(f"/json/close/{page.target_id}")
        except Exception:
            pass

    def close(self):
        for page in getattr(self, "pages", []):
            page.close()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    def __init__(self, browser, target_id, ws_url, timeout=30):
        self.browser = browser
        self.target_id = target_id
        self.timeout = timeout
        self.ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.events = []  # events not yet consumed by wait_event
        self.errors = []  # console errors and uncaught exceptions
        self.console = []  # every console message, for diagnostics
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Log.enable")
        self.set_viewport(browser.width, browser.height)

    # --- the protocol ----------------------------------------------------

    def send(self, method, timeout=None, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            msg = self._recv(deadline)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error'].get('message')} {msg['error'].get('data', '')}")
                return msg.get("result", {})
            if "method" in msg:
                self._event(msg)

    def _recv(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer from chromium in time")
        self.ws.settimeout(left)
        try:
            return json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            raise TimeoutError("no answer from chromium in time") from None

    def _event(self, msg):
        method, p = msg["method"], msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            exc = d.get("exception", {})
            self.errors.append({"kind": "exception", "text": exc.get("description") or d.get("text", ""),
                                "url": d.get("url", ""), "line": d.get("lineNumber")})
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            if e.get("level") == "error":
                self.errors.append({"kind": "log", "source": e.get("source"), "text": e.get("text", ""),
                                    "url": e.get("url", "")})
        elif method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            self.console.append((p.get("type"), text))
            if p.get("type") in ("error", "assert"):
                self.errors.append({"kind": "console", "text": text, "url": ""})
        self.events.append(msg)
        if len(self.events) > 1000:
            del self.events[:500]

    def wait_event(self, method, timeout=None):
        """Waits for (and consumes) the next event named method."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method:
                    del self.events[i]
                    return e.get("params", {})
            msg = self._recv(deadline)
            if "method" in msg:
                self._event(msg)

    def pump(self, seconds=0.05):
        """Handles the events that arrive within seconds."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                msg = self._recv(deadline)
                if "method" in msg:
                    self._event(msg)
        except TimeoutError:
            pass

    # --- navigation and JavaScript -------------------------------------

    def set_viewport(self, width, height, scale=1):
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=scale, mobile=False)

    def navigate(self, url, timeout=None):
        self.events.clear()
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise CDPError(f"navigation to {url} failed: {result['errorText']}")
        self.wait_event("Page.loadEventFired", timeout)

    def reload(self, timeout=None):
        self.events.clear()
        self.send("Page.reload", ignoreCache=True)
        self.wait_event("Page.loadEventFired", timeout)

    def evaluate(self, expression, await_promise=True):
        """The value of a JavaScript expression (JSON-serializable), awaited
        when it is a promise. A thrown error raises JSError."""
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=await_promise, userGesture=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise JSError(d.get("exception", {}).get("description") or d.get("text"))
        return r.get("result", {}).get("value")

    def wait_for(self, expression, timeout=15, interval=0.05):
        """Polls expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.evaluate(expression)
            if last:
                return last
            self.pump(interval)
        raise TimeoutError(f"timed out after {timeout}s waiting for {expression!r} (last value {last!r})")

    # --- input -----------------------------------------------------------

    def mouse_move(self, x, y):
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="none")

    def click(self, x, y):
        self.mouse_move(x, y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left",
                      buttons=1 if kind == "mousePressed" else 0, clickCount=1)

    def right_click(self, x, y):
        """A right button press and release (the page gets contextmenu)."""
        self.mouse_move(x, y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="right",
                      buttons=2 if kind == "mousePressed" else 0, clickCount=1)

    def drag(self, x0, y0, x1, y1, steps=8):
        """Left button down at (x0, y0), moved in steps to (x1, y1), released."""
        self.mouse_move(x0, y0)
        self.send("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left",
                  buttons=1, clickCount=1)
        for k in range(1, steps + 1):
            x = x0 + (x1 - x0) * k / steps
            y = y0 + (y1 - y0) * k / steps
            self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y, button="left", buttons=1)
        self.send("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y1, button="left",
                  buttons=0, clickCount=1)

    # Modifier bits of Input.dispatchMouseEvent.
    ALT, CTRL, META, SHIFT = 1, 2, 4, 8

    def wheel(self, x, y, dx=0, dy=0, modifiers=0):
        """A mouse wheel turn at (x, y) by (dx, dy) CSS px."""
        self.send("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=dx, deltaY=dy,
                  modifiers=modifiers)

    def insert_text(self, text):
        self.send("Input.insertText", text=text)

    def press(self, name):
        key, code, text = KEYS[name]
        down = {"type": "keyDown" if text else "rawKeyDown", "key": key, "code": key,
                "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}
        if text:
            down["text"] = text
            down["unmodifiedText"] = text
        self.send("Input.dispatchKeyEvent", **down)
        self.send("Input.dispatchKeyEvent", type="keyUp", key=key, code=key,
                  windowsVirtualKeyCode=code, nativeVirtualKeyCode=code)

    # --- output ----------------------------------------------------------

    def screenshot(self, path, full_page=False):
        params = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", **params)["data"]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
