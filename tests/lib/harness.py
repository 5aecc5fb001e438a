"""Starting ember's real binaries for integration tests, and reading
their answers.

    srv = Server(tmp_path / "data"); srv.start()
    agent = Agent(srv.url, "-on-cpu-sampling-rate=97"); agent.start()
    tree = srv.flamegraph(query='process.executable.name == "cpu_split"')
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# EMBER_BUILD picks another build directory (make BUILD=...): its binaries,
# its workloads when it has them, and its test-results for the logs.
BUILD = os.path.join(ROOT, os.environ.get("EMBER_BUILD", "build"))
BIN = os.path.join(BUILD, "bin")
WORKLOADS = os.path.join(BUILD, "workloads")
if not os.path.isdir(WORKLOADS):
    WORKLOADS = os.path.join(ROOT, "build", "workloads")
ARTIFACTS = os.path.join(BUILD, "test-results")
DEFAULT_PROJECT = "00000000-0000-0000-0000-000000000000"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, interval=0.1, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run_threads(target, n, args=lambda i: ()):
    """Runs target(*args(i)) in n threads at once, i = 0 .. n-1, and waits
    for them all."""
    threads = [threading.Thread(target=target, args=args(i)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def http(method, url, body=None, headers=None, timeout=30, context=None):
    """Returns (status, body bytes); never raises for HTTP errors. context:
    an ssl.SSLContext for https URLs."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def metric(server, name):
    """The value of one unlabelled counter or gauge in the server's
    /metrics; an AssertionError when it is not there."""
    status, body = http("GET", server.url + "/metrics")
    assert status == 200, body
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError(name + " missing from /metrics")


# Server flags that write what it holds as a block file after a second and
# compact a finished hour at once: a query then reads blocks, not the head.
BLOCK_FLAGS = ("--flush-after", "1s", "--compact-delay", "0s")


def wait_compacted(server, timeout=30):
    """Waits until a server started with BLOCK_FLAGS has written every row
    to blocks and compacted at least once."""
    wait_until(lambda: metric(server, "ember_store_unflushed_rows") == 0 and
               metric(server, "ember_store_compactions_total") >= 1, timeout,
               what="the samples to be written and compacted")


API = "/public/api/v1/project/{}/{}"


def api_post(server, what, body, project=DEFAULT_PROJECT):
    """POSTs a JSON body to the project's query API route `what`
    ("top_functions", "flamegraph/json", ...): (status, parsed answer)."""
    status, data = http("POST", server.url + API.format(project, what), body,
                        {"Content-Type": "application/json"})
    return status, json.loads(data)


def json_call(opener, method, url, body=None, csrf=None):
    """A JSON request as the web UI makes it, through a urllib opener that
    keeps cookies; csrf: the X-Ember-CSRF header's value, if any.
    Returns (status, parsed answer, None when empty); never raises for
    HTTP errors."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if csrf:
        req.add_header("X-Ember-CSRF", csrf)
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def kill_if_running(p):
    """Kills a subprocess.Popen that has not exited (a test's finally:)
    and reaps it."""
    if p.poll() is None:
        p.kill()
        p.wait()


class Process:
    """A child process whose output goes to a log file under build/test-results."""

    def __init__(self, name, argv):
        self.name = name
        self.argv = argv
        self.proc = None
        os.makedirs(ARTIFACTS, exist_ok=True)
        self.log_path = os.path.join(ARTIFACTS, f"{name}-{os.getpid()}-{time.time_ns()}.log")

    def start(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        rc = self.proc.returncode if self.proc else None
        self.proc = None
        return rc

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


class Server(Process):
    def __init__(self, data_dir, port=None, *flags, ssl_context=None):
        """ssl_context: the server serves HTTPS (flags name its certificate)
        and is asked through this context."""
        self.port = port or free_port()
        self.data_dir = str(data_dir)
        self.ssl = ssl_context
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"
        super().__init__("ember-server", [os.path.join(BIN, "ember-server"), "--listen",
                                          f"127.0.0.1:{self.port}", "--data-dir", self.data_dir,
                                          *flags])

    def start(self, wait=True):
        super().start()
        if wait:
            wait_until(self.healthy, 20, what="ember-server /healthz")
        return self

    def healthy(self):
        if not self.running():
            raise AssertionError("ember-server exited:\n" + self.output())
        try:
            status, body = http("GET", self.url + "/healthz", timeout=2, context=self.ssl)
            return status == 200 and body == b"ok\n"
        except OSError:
            return False

    def restart(self, sig=signal.SIGTERM):
        self.stop(sig)
        self.argv = list(self.argv)
        return Process.__init__(self, "ember-server", self.argv) or self.start()

    def flamegraph(self, query=None, synthetic=(), start_ms=946684800000, end_ms=4102444800000,
                   project=DEFAULT_PROJECT, **extra):
        body = {"filter": {"start_ts": start_ms, "end_ts": end_ms, "event_kind": "on_cpu",
                           "frame_mask": {"patterns": []}, "query": query},
                "num_samples": None, "num_stat_buckets": None,
                "synthetic_frames": list(synthetic)}
        body.update(extra)
        status, data = http("POST", f"{self.url}/public/api/v1/project/{project}/flamegraph/json",
                            body, {"Content-Type": "application/json"}, context=self.ssl)
        assert status == 200, f"flamegraph query failed with {status}: {data!r}"
        return json.loads(data)


class Agent(Process):
    def __init__(self, server_url, *flags):
        """Plain HTTP unless server_url is https."""
        scheme, hostport = server_url.split("://", 1)
        tls = [] if scheme == "https" else ["-disable-tls"]
        # Tests run agents side by side (and beside other agents on a shared
        # host): no host lock unless a test names one, or a config file
        # that may (test_agent_lock.py).
        lock = [] if any(f.startswith(("-lock-file", "-config")) for f in flags) \
            else ["-lock-file="]
        super().__init__("ember-agent", [os.path.join(BIN, "ember-agent"),
                                         f"-collection-agent={hostport}", *tls,
                                         "-reporter-interval=1s", *lock, *flags])

    def start(self):
        super().start()
        wait_until(lambda: "started" in self.output() or not self.running(), 30,
                   what="ember-agent to start")
        assert self.running(), "ember-agent exited:\n" + self.output()
        return self


def run_workload(name, *args, timeout=120):
    """Runs a workload from build/workloads and returns its JSON report."""
    out = subprocess.run([os.path.join(WORKLOADS, name), *map(str, args)], check=True,
                         stdout=subprocess.PIPE, timeout=timeout).stdout
    return json.loads(out)


def rss_kib(pid, field="VmRSS"):
    """Resident memory of a process, KiB: all of it (VmRSS), or only its own
    anonymous memory (RssAnon), without the pages of files it has mapped
    (the page cache's, which the kernel takes back at will)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def growth_kib(series):
    """How much a series of memory readings grew: the median of its last
    third over the median of its first. A leak or an unbounded buffer grows
    it; a transient peak (the agent building the unwind table of a 500 MB
    library another process loaded, then freeing it) does not."""
    k = max(1, len(series) // 3)
    head, tail = sorted(series[:k]), sorted(series[-k:])
    return tail[len(tail) // 2] - head[len(head) // 2]


def settled_total(server, query=None, more_than=0):
    """The flamegraph total (of a CEL query, or of everything) once ingest
    has settled: above more_than and the same three seconds in a row."""
    hist = []

    def settled():
        hist.append(server.flamegraph(query)["total"])
        return len(hist) >= 3 and hist[-1] > more_than and hist[-3:] == [hist[-1]] * 3
    wait_until(settled, 30, interval=1.0, what=f"ingest of {query or 'every sample'} to settle")
    return hist[-1]


def gpu_flamegraph(server, query):
    """The GPU-time (event kind cuda, nanoseconds) flamegraph of all time,
    filtered by a CEL query."""
    body = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": "cuda",
                       "frame_mask": {"patterns": []}, "query": query},
            "num_samples": None, "num_stat_buckets": None, "synthetic_frames": []}
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json",
                        body, {"Content-Type": "application/json"}, context=server.ssl)
    assert status == 200, f"flamegraph query failed with {status}: {data!r}"
    return json.loads(data)


def gpu_settled(server, query, want, timeout=40):
    """The GPU flamegraph once its total has reached want and stayed the
    same three seconds in a row (so more than want shows as such)."""
    hist = []

    def done():
        hist.append(gpu_flamegraph(server, query)["total"])
        return hist[-1] >= want and hist[-3:] == [hist[-1]] * 3
    try:
        wait_until(done, timeout, interval=1.0, what="the GPU time to arrive")
    except AssertionError as e:
        raise AssertionError(f"{e}; totals seen: {hist}, want {want}") from None
    return gpu_flamegraph(server, query)


GPU_LEAF_TYPES = ("cuda_kernel", "cuda_memcpy", "cuda_memset", "cuda_sync")


def gpu_leaves(tree):
    """(leaf name, leaf type) -> GPU time, over a whole GPU flamegraph."""
    out = {}
    for _, n in walk(tree["root"]):
        if n["frame_type"] in GPU_LEAF_TYPES:
            k = (n["name"], n["frame_type"])
            out[k] = out.get(k, 0) + n["total"]
    return out


FAKE_CUDA = os.path.join(BUILD, "tests", "fake_cuda")


def fake_cuda_env(lib, kernel_ns, **extra):
    """The environment of a CUDA program on the project's TEST-ONLY fake
    driver and CUPTI (tests/fake_cuda/), injected with the library at lib:
    kernel_ns names each kernel's GPU time ("k_big=700000,..."); extra:
    more variables (EMBER_CUDA_*, FAKE_CUDA_*). None of the caller's
    EMBER_CUDA_ or FAKE_CU variables leak in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_CUDA_", "FAKE_CU"))}
    env["LD_LIBRARY_PATH"] = FAKE_CUDA + ":" + os.path.join(FAKE_CUDA, "driver")
    env["CUDA_INJECTION64_PATH"] = lib
    env["FAKE_CUDA_KERNEL_NS"] = kernel_ns
    env.update({k: str(v) for k, v in extra.items()})
    return env


def walk(node, path=()):
    """Yields (path of names, node) for every node of a flamegraph tree."""
    path = path + (node["name"],)
    yield path, node
    for c in node.get("children", []):
        yield from walk(c, path)


def find(node, name, binary=None):
    """The first node (depth first, largest first) with this name."""
    for _, n in walk(node):
        if n["name"] == name and (binary is None or n.get("binary") == binary):
            return n
    return None


def subtree_total(node, name):
    """Sum of the totals of the topmost nodes called name below node."""
    total = 0
    for c in node.get("children", []):
        total += c["total"] if c["name"] == name else subtree_total(c, name)
    return total


def check_tree(node):
    """Invariants every flamegraph answer keeps: totals add up, children
    are sorted by total, largest first."""
    kids = node.get("children", [])
    assert node["total"] == node["self"] + sum(c["total"] for c in kids), node["name"]
    assert [c["total"] for c in kids] == sorted((c["total"] for c in kids), reverse=True)
    for c in kids:
        check_tree(c)


def tiny_symfile(name=b"do_work"):
    """A valid ember symbol file (EMSYM002) of one segment: [0x1000, 0x1100)
    is the function name, the rest a gap."""
    import struct
    strtab = b"\x00" + name + b"\x00"
    return (b"EMSYM002" + struct.pack("<IIIIQIIQ", 1, 2, 1, len(strtab), 0x1000, 0, 0, 0) +
            struct.pack("<QQQ", 0x1000, 0x1000, 0x1000) +
            struct.pack("<IIII", 0, 1, 0x100, 0) +
            struct.pack("<IIII", 1, 0xffffffff, 0, 0) + strtab)


def make_ca(d):
    """A CA and a server certificate for 127.0.0.1 (and localhost) signed by
    it, in the folder d (a pathlib.Path): (ca.pem, server.pem, server.key)."""
    def sh(*args):
        subprocess.run(args, check=True, cwd=d, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
       "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=ember test CA")
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
       "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
       "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "server.pem", d / "server.key"
