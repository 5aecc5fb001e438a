"""GPU profiling when things go wrong around it, with the real
libembercuda.so on the project's TEST-ONLY fake driver (tests/fake_cuda/)
and a real ember-agent and ember-server (root, real BPF, no GPU):

- the agent restarts five times under one long-running CUDA program: the
  library reconnects each time and the GPU time in the server is exact,
  none of it counted twice and none lost (what a report could not send
  while no agent listened waits in the library for the next agent);
- a hostile client on the agent's CUDA socket floods it (garbage,
  oversized datagrams, and eight connections with a valid HELLO sending
  AGG entries as fast as they can, hundreds of thousands a second, never
  reading) beside a real library: the agent keeps serving, refuses and
  counts the flood, and the real program's GPU time is exact;
- a full or read-only -cuda-profiler-dir (a 64 KiB tmpfs; the library
  takes some 270 KiB): the agent says what is wrong with which path,
  never points users at a library that is not there, leaves no partial
  file behind, and CPU profiling goes on; on the full one, the socket
  still serves a program that loads a copy of the library of its own."""

import os
import subprocess
import sys
import time

import pytest

import cudawire
from conftest import require_root
from harness import (BUILD, WORKLOADS, check_tree, fake_cuda_env, free_port, gpu_leaves, gpu_settled, http,
                     kill_if_running, wait_until)

LAUNCHER = os.path.join(WORKLOADS, "cuda_launch")
BIG_NS, SMALL_NS, COPY_NS, SET_NS, SYNC_NS = 700000, 300000, 4096, 1024, 5000
STEP_NS = BIG_NS + SMALL_NS + COPY_NS + SET_NS + SYNC_NS
QUERY = 'process.executable.name == "cuda_launch"'


def cuda_env(lib, **extra):
    return fake_cuda_env(lib, f"k_big={BIG_NS},k_small={SMALL_NS}", **extra)


def exact_leaves(steps):
    return {("k_big", "cuda_kernel"): steps * BIG_NS, ("k_small", "cuda_kernel"): steps * SMALL_NS,
            ("HtoD", "cuda_memcpy"): steps * COPY_NS, ("memset", "cuda_memset"): steps * SET_NS,
            ("cuStreamSynchronize", "cuda_sync"): steps * SYNC_NS}


def scrape(port):
    status, body = http("GET", f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k[len("ember_agent_"):]] = float(v)
    return out


def stats_at_exit(stderr):
    lines = [line for line in stderr.splitlines() if "stats at exit" in line]
    assert lines, stderr
    return dict(kv.split("=", 1) for kv in lines[-1].split(": stats at exit: ", 1)[1].split() if "=" in kv)


def test_library_reconnects_across_five_agent_restarts(server, agent_factory, tmp_path):
    require_root()
    cuda_dir = str(tmp_path / "profiler")
    lib = os.path.join(cuda_dir, "libembercuda.so")
    agent = agent_factory(server.url, f"-cuda-profiler-dir={cuda_dir}").start()
    steps, seconds, restarts = 18000, 45, 5
    errlog = tmp_path / "launcher.err"
    # Two failed connects in a row (not ten): each restart leaves no
    # agent for longer than that (1.5 s and the new agent's start), which
    # must not make a library that had an agent give up.
    p = subprocess.Popen([LAUNCHER, str(steps), "1", str(seconds)],
                         env=cuda_env(lib, EMBER_CUDA_QUIET="false", EMBER_CUDA_PRINT_STATS="true",
                                      EMBER_CUDA_PRINT_STATS_INTERVAL=1, EMBER_CUDA_INTERNAL_AGENT_RETRIES=2),
                         stdout=subprocess.PIPE, stderr=open(errlog, "w"), text=True)

    def hello(n):
        try:
            wait_until(lambda: f"CUDA: pid {p.pid} injected" in agent.output(), 20,
                       what=f"the library's HELLO to agent {n}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nthe library said:\n{errlog.read_text()}\nthe agent:\n{agent.output()}")
    try:
        hello(1)
        for i in range(restarts):
            time.sleep(1)
            assert p.poll() is None, f"the launcher ended before restart {i + 1}: {errlog.read_text()}"
            # SIGTERM: the agent sends what it holds and stops; then no
            # agent listens for 1.5 s (a report or two of the library's
            # cannot be sent), and a new one starts at the same path.
            assert agent.stop() == 0, agent.output()
            time.sleep(1.5)
            agent = agent_factory(server.url, f"-cuda-profiler-dir={cuda_dir}").start()
            hello(i + 2)
        out, _ = p.communicate(timeout=seconds + 60)
        err = errlog.read_text()
    finally:
        kill_if_running(p)
    assert p.returncode == 0 and out.strip() == f"done {steps} 1", (out, err)
    st = stats_at_exit(err)
    assert st["connections"] == str(restarts + 1), st
    assert "no ember-agent" not in err, err
    want = steps * STEP_NS
    tree = gpu_settled(server, QUERY, want)
    check_tree(tree["root"])
    # Exact: nothing of a report counted twice, nothing lost.
    assert tree["total"] == want, (tree["total"], want, tree["total"] - want)
    assert gpu_leaves(tree) == exact_leaves(steps), gpu_leaves(tree)


FLOODER = r"""
import os, random, socket, struct, sys, time
path, seconds, valid, version = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
HDR = struct.Struct("<IHHII")
MAGIC = 0x55434D45
def msg(mtype, body, count):
    return HDR.pack(MAGIC, version, mtype, HDR.size + len(body), count) + body
hello = msg(1, struct.pack("<IIIIQQ32s", os.getpid(), 18, 12040, 0, 1, time.time_ns(), b"flood"), 1)
def agg(n):
    body = b""
    for i in range(n):
        api, name = b"cuLaunchKernel", b"flood_kernel_%d" % random.randrange(1 << 30)
        e = struct.pack("<QQQIHHIIIHH", random.randrange(1, 1 << 40), 1000, 1, 1, 1, len(api), 0, 0, 0,
                        len(name), 0) + api + name
        body += e + b"\0" * (-len(e) % 8)
    return msg(3, body, n)
socks = []
for _ in range(valid + 2):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.setblocking(False)
    socks.append(s)
for s in socks[:valid]:
    s.send(hello)
garbage = [os.urandom(random.randrange(1, 512)) for _ in range(64)]
oversize = b"\xee" * 100000
aggs = [agg(100) for _ in range(32)]
sent = refused = 0
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    i += 1
    for k, s in enumerate(socks):
        data = (aggs[i % 32] if k < valid else oversize if k == valid and i % 8 == 0 else garbage[i % 64])
        try:
            s.send(data)
            sent += 1
        except BlockingIOError:
            refused += 1
    if i % 64 == 0:
        time.sleep(0.001)
print(sent, refused, flush=True)
"""


def test_flooding_client_beside_a_real_library(server, agent_factory, tmp_path):
    require_root()
    cuda_dir = str(tmp_path / "profiler")
    lib = os.path.join(cuda_dir, "libembercuda.so")
    pport = free_port()
    agent = agent_factory(server.url, f"-cuda-profiler-dir={cuda_dir}", f"-pprof=127.0.0.1:{pport}").start()
    sock = os.path.join(cuda_dir, "agent.sock")
    seconds = 8
    flood = subprocess.Popen([sys.executable, "-c", FLOODER, sock, str(seconds + 12), "8",
                              str(cudawire.VERSION)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)
        steps = 4000
        r = subprocess.run([LAUNCHER, str(steps), "1", str(seconds)],
                           env=cuda_env(lib, EMBER_CUDA_QUIET="false", EMBER_CUDA_PRINT_STATS="true",
                                        EMBER_CUDA_PRINT_STATS_INTERVAL=3600),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=seconds + 60)
        assert r.returncode == 0 and r.stdout.strip() == f"done {steps} 1", (r.stdout, r.stderr)
        st = stats_at_exit(r.stderr)
        assert st["connections"] == "1" and st["messages_dropped"] == "0", st
        # While the flood goes on: the program's GPU time, exact, within
        # seconds; and the agent's CPU samples keep coming (the flooder's
        # own, taken since the program ended).
        want = steps * STEP_NS
        t0 = time.monotonic()
        tree = gpu_settled(server, QUERY, want, timeout=8)
        settle_s = time.monotonic() - t0
        since = int(time.time() * 1000) - 2000
        wait_until(lambda: server.flamegraph(f'process.pid == "{flood.pid}"', start_ms=since)["total"] > 0, 5,
                   what="CPU samples of the flooder during the flood")
        assert flood.poll() is None, "the flood ended before the checks: the agent was too slow to judge"
        fout, ferr = flood.communicate(timeout=30)
    finally:
        kill_if_running(flood)
    assert flood.returncode == 0, ferr
    sent, refused = map(int, fout.split())
    assert agent.running(), agent.output()
    check_tree(tree["root"])
    assert tree["total"] == want, (tree["total"], want)
    assert gpu_leaves(tree) == exact_leaves(steps), gpu_leaves(tree)
    # The flood was refused and counted, by reason; the rest of it (within
    # the connections' budgets) is the flooder's own time, never the
    # program's.
    m = scrape(pport)
    rejected = {k: v for k, v in m.items() if k.startswith("cuda_messages_rejected_total")}
    assert rejected.get('cuda_messages_rejected_total{reason="magic"}', 0) > 100, rejected
    assert rejected.get('cuda_messages_rejected_total{reason="oversize"}', 0) > 10, rejected
    assert rejected.get('cuda_messages_rejected_total{reason="rate"}', 0) > 10, rejected
    print(f"flood: {sent} datagrams sent, {refused} refused by a full queue; agent: {rejected}; "
          f"the program's GPU time settled {settle_s:.1f} s after it ended")


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs at tmp_path/mnt; read-only when the test asks
    (request.param). Unmounted afterwards."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = []

    def mount(*opts):
        subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=64k",) + opts), "tmpfs", str(mnt)],
                       check=True)
        mounted.append(mnt)
        return str(mnt)
    yield mount
    for m in mounted:
        if subprocess.run(["umount", str(m)]).returncode != 0:
            subprocess.run(["umount", "-l", str(m)])


def cpu_profiled(server, seconds=3):
    """Runs cpu_split and waits for its CPU samples in the server."""
    p = subprocess.run([os.path.join(WORKLOADS, "cpu_split"), str(seconds)], stdout=subprocess.PIPE, timeout=60)
    assert p.returncode == 0
    wait_until(lambda: server.flamegraph('process.executable.name == "cpu_split"')["total"] > 0, 20,
               what="cpu_split's CPU samples")


def test_full_profiler_dir(server, agent_factory, small_tmpfs):
    require_root()
    d = small_tmpfs()
    agent = agent_factory(server.url, f"-cuda-profiler-dir={d}").start()
    try:
        wait_until(lambda: "CUDA profiling" in agent.output(), 20, what="the agent's CUDA line")
        log = agent.output()
        lib = os.path.join(d, "libembercuda.so")
        # What is wrong, with which path, and what it means.
        assert "-cuda-profiler-dir: cannot install libembercuda.so" in log and f" in {d}: " in log, log
        assert "No space left on device" in log and "CUDA programs cannot load the profiler from there" in log, log
        # Never the line to use a library that is not there.
        assert f"CUDA_INJECTION64_PATH={lib}" not in log, log
        assert f"no {lib} to load (not installed)" in log, log
        # No partial file left behind; the socket is there, and the (empty)
        # folder programs save their cubins in.
        assert sorted(os.listdir(d)) == ["agent.sock", "cubins"], os.listdir(d)
        assert os.listdir(os.path.join(d, "cubins")) == []
        cpu_profiled(server)
        # A program that loads a copy of its own reports to the socket.
        steps = 300
        r = subprocess.run([LAUNCHER, str(steps), "1", "1.5"],
                           env=cuda_env(os.path.join(BUILD, "lib", "libembercuda.so"),
                                        EMBER_CUDA_AGENT_SOCKET=os.path.join(d, "agent.sock")),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        tree = gpu_settled(server, QUERY, steps * STEP_NS)
        assert tree["total"] == steps * STEP_NS and gpu_leaves(tree) == exact_leaves(steps), gpu_leaves(tree)
        assert agent.running()
    finally:
        agent.stop()


def test_read_only_profiler_dir(server, agent_factory, small_tmpfs):
    require_root()
    d = small_tmpfs("ro")
    agent = agent_factory(server.url, f"-cuda-profiler-dir={d}").start()
    try:
        wait_until(lambda: "CUDA profiling off" in agent.output(), 20, what="the agent's CUDA line")
        log = agent.output()
        assert "-cuda-profiler-dir: cannot install libembercuda.so" in log and f" in {d}: " in log, log
        assert f"CUDA profiling off: cannot listen on {d}/agent.sock: Read-only file system" in log, log
        assert "CUDA_INJECTION64_PATH=" not in log, log
        assert os.listdir(d) == []
        cpu_profiled(server)
        assert agent.running()
    finally:
        agent.stop()
