"""libembercuda.so (gpu/) in CUDA programs that run on the project's fake
driver and CUPTI (tests/fake_cuda/): what it sends to a test-side stand-in
for the agent's socket (tests/lib/cudawire.py reads every message
strictly), exact GPU time per kernel, the per-thread rate limit on sampled
launches, broken and dropped records, and the ways it steps aside without
disturbing the program."""

import collections
import math
import os
import re
import subprocess
import sys
import time

import pytest

from harness import BUILD, ROOT, WORKLOADS
from cudawire import (AGG, DEVICE, HELLO, KIND_GRAPH, KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, KIND_SYNC, SPAN, STATS,
                      Listener)

LIB = os.path.join(BUILD, "lib", "libembercuda.so")
FAKE = os.path.join(BUILD, "tests", "fake_cuda")
FAKE_DRIVER = os.path.join(FAKE, "driver")
LAUNCHER = os.path.join(WORKLOADS, "cuda_launch")
PY_LAUNCHER = os.path.join(ROOT, "tests", "workloads", "py_cuda_launch.py")
BIG_NS, SMALL_NS, COPY_NS, SET_NS, SYNC_NS = 700000, 300000, 4096, 1024, 5000


def env_for(sock=None, cupti=True, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_CUDA_", "FAKE_CU"))}
    env["LD_LIBRARY_PATH"] = (FAKE + ":" if cupti else "") + FAKE_DRIVER
    env["CUDA_INJECTION64_PATH"] = LIB
    env["FAKE_CUDA_KERNEL_NS"] = f"k_big={BIG_NS},k_small={SMALL_NS},py_big={BIG_NS},py_small={SMALL_NS}"
    if sock:
        env["EMBER_CUDA_AGENT_SOCKET"] = str(sock)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, env, timeout=60):
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return r, time.monotonic() - t0


@pytest.fixture
def listener(tmp_path):
    lst = Listener(tmp_path / "agent.sock")
    yield lst
    lst.close()


def one_connection(lst):
    conns = lst.messages()
    assert len(conns) == 1, f"{len(conns)} connections"
    return conns[0]


def entries(msgs, mtype):
    return [e for t, es in msgs if t == mtype for e in es]


def totals(aggs):
    """(kind, api, name) -> [total_ns, count]"""
    out = collections.defaultdict(lambda: [0, 0])
    for a in aggs:
        t = out[(a["kind"], a["api"], a["name"])]
        t[0] += a["total_ns"]
        t[1] += a["count"]
    return dict(out)


def check_hello_device(msgs, pid):
    assert msgs[0][0] == HELLO, msgs[0]
    assert [t for t, _ in msgs].count(HELLO) == 1
    h = msgs[0][1][0]
    assert h["pid"] == pid and h["cupti_version"] == 18 and h["driver_version"] == 12040
    assert h["lib_version"] and h["flags"] == 0
    assert abs(h["realtime_ns"] / 1e9 - time.time()) < 60
    devs = entries(msgs, DEVICE)
    assert [d["index"] for d in devs] == [0]
    assert devs[0]["name"] == "Fake GPU 0"
    assert devs[0]["uuid"] == bytes(0xA0 + i for i in range(16))


def test_c_launcher_exact_totals_stacks_and_rate_limit(listener):
    steps, seconds = 3000, 2.5
    p = subprocess.Popen([LAUNCHER, str(steps), "1", str(seconds)], env=env_for(listener.path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    out, err = p.communicate(timeout=60)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0 and out.strip() == f"done {steps} 1", (out, err)
    assert err == "", err  # EMBER_CUDA_QUIET is the default
    msgs = one_connection(listener)
    check_hello_device(msgs, p.pid)

    aggs = entries(msgs, AGG)
    t = totals(aggs)
    assert t == {
        (KIND_KERNEL, "cuLaunchKernel", "k_big"): [steps * BIG_NS, steps],
        (KIND_KERNEL, "cudaLaunchKernel", "k_small"): [steps * SMALL_NS, steps],
        (KIND_MEMCPY, "cuMemcpyHtoDAsync", "HtoD"): [steps * COPY_NS, steps],
        (KIND_MEMSET, "cuMemsetD8Async", "memset"): [steps * SET_NS, steps],
        (KIND_SYNC, "cuStreamSynchronize", "cuStreamSynchronize"): [steps * SYNC_NS, steps],
    }, t
    big = t[(KIND_KERNEL, "cuLaunchKernel", "k_big")][0]
    small = t[(KIND_KERNEL, "cudaLaunchKernel", "k_small")][0]
    assert round(100 * big / (big + small)) == 70

    # One launching thread (not main's: cuda_launch trains in a pthread);
    # streams and context as the fake reports them.
    tids = {a["tid"] for a in aggs}
    assert len(tids) == 1 and tids != {p.pid}, tids
    assert {(a["name"], a["stream"]) for a in aggs if a["kind"] == KIND_KERNEL} == {("k_big", 1), ("k_small", 2)}
    assert {a["device"] for a in aggs} == {0} and {a["context"] for a in aggs} == {1}

    # Stacks: the fake hands out correlation ids 1, 2, 3, ... and each step
    # makes five calls in order, so a launch of k_big has an id = 1 (mod 5),
    # k_small 2, the copy 3, the set 4, the sync 0. Every kernel's time is
    # under the id of one of its own sampled launches -- never 0: the first
    # launch of each name is sampled.
    residue = {"k_big": 1, "k_small": 2, "HtoD": 3, "memset": 4, "cuStreamSynchronize": 0}
    for a in aggs:
        assert a["stack_id"] != 0, a
        assert a["stack_id"] <= steps * 5 and a["stack_id"] % 5 == residue[a["name"]], a

    # Rate limit: at most 50 kernels (20 copies+sets, 20 syncs) per thread
    # per 1 s window, and the limit is reached in every window.
    windows = math.ceil(elapsed) + 1
    kernel_ids = {a["stack_id"] for a in aggs if a["kind"] == KIND_KERNEL}
    memory_ids = {a["stack_id"] for a in aggs if a["kind"] in (KIND_MEMCPY, KIND_MEMSET)}
    sync_ids = {a["stack_id"] for a in aggs if a["kind"] == KIND_SYNC}
    assert 50 * 2 <= len(kernel_ids) <= 50 * windows, (len(kernel_ids), elapsed)
    assert 20 * 2 <= len(memory_ids) <= 20 * windows
    assert 20 * 2 <= len(sync_ids) <= 20 * windows
    stats = entries(msgs, STATS)[-1]
    assert stats["launches"] == steps * 5 and stats["activities"] == steps * 5
    assert stats["launches_sampled"] == len(kernel_ids) + len(memory_ids) + len(sync_ids)
    assert stats["records_dropped"] == 0 and stats["messages_dropped"] == 0

    # Spans: CLOCK_REALTIME (the fake's GPU clock is CLOCK_MONOTONIC), at
    # most 256 a report, each within the run.
    spans = entries(msgs, SPAN)
    assert spans
    now = time.time_ns()
    for s in spans:
        assert now - 120e9 < s["start_ns"] <= s["end_ns"] <= now + 5e9, s
    assert max(len(es) for ty, es in msgs if ty == SPAN) <= 256
    # each names its launch as the AGG entries do (stack, API, kernel), so
    # the agent resolves the same stack for the bar and for the time
    launches = {(a["stack_id"], a["tid"], a["api"], a["name"]) for a in entries(msgs, AGG)}
    for s in spans:
        assert (s["stack_id"], s["tid"], s["api"], s["name"]) in launches, s


def test_python_launcher_from_module_and_train_step(listener):
    steps = 500
    r, _ = run([sys.executable, PY_LAUNCHER, str(steps), "1.2"], env_for(listener.path))
    assert r.returncode == 0 and r.stdout.strip() == f"done {steps}", (r.stdout, r.stderr)
    msgs = one_connection(listener)
    assert msgs[0][0] == HELLO
    t = totals(entries(msgs, AGG))
    assert t == {
        (KIND_KERNEL, "cuLaunchKernel", "py_big"): [steps * BIG_NS, steps],
        (KIND_KERNEL, "cuLaunchKernel", "py_small"): [steps * SMALL_NS, steps],
    }, t
    assert all(a["stack_id"] != 0 for a in entries(msgs, AGG))


def test_fork_child_leaves_the_parent_alone(listener):
    """A child forked after cuInit (a DataLoader worker) records and sends
    nothing, exits cleanly, and the parent's connection and totals go on."""
    steps = 400
    r, _ = run([sys.executable, PY_LAUNCHER, str(steps), "1.5"],
               env_for(listener.path, PY_CUDA_FORK=1, EMBER_CUDA_QUIET="false", EMBER_CUDA_PRINT_STATS="true"))
    assert r.returncode == 0 and r.stdout.strip() == f"done {steps}", r.stderr
    assert len([line for line in r.stderr.splitlines() if "stats at exit" in line]) == 1, r.stderr
    msgs = one_connection(listener)
    assert [t for t, _ in msgs].count(HELLO) == 1
    t = totals(entries(msgs, AGG))
    assert t[(KIND_KERNEL, "cuLaunchKernel", "py_big")] == [steps * BIG_NS, steps]


def expected_with_faults(steps, bad_every, drop_every):
    """What the fake delivers for a one-thread cuda_launch run: record n
    (1-based, five a step) is dropped when n % drop_every == 0; kernel k
    (1-based, big then small) has a broken time when k % bad_every == 0."""
    names = ["k_big", "k_small", "HtoD", "memset", "cuStreamSynchronize"]
    ns = {"k_big": BIG_NS, "k_small": SMALL_NS, "HtoD": COPY_NS, "memset": SET_NS, "cuStreamSynchronize": SYNC_NS}
    out = collections.defaultdict(lambda: [0, 0])
    dropped = bad = 0
    n = k = 0
    for _ in range(steps):
        for name in names:
            n += 1
            is_kernel = name.startswith("k_")
            if is_kernel:
                k += 1
            if n % drop_every == 0:
                dropped += 1
                continue
            if is_kernel and k % bad_every == 0:
                bad += 1
                continue
            out[name][0] += ns[name]
            out[name][1] += 1
    return dict(out), dropped, bad


def test_broken_late_and_dropped_records(listener):
    steps, bad_every, drop_every = 1000, 7, 11
    r, _ = run([LAUNCHER, str(steps), "1", "1.2"],
               env_for(listener.path, FAKE_CUDA_BAD_EVERY=bad_every, FAKE_CUDA_DROP_EVERY=drop_every,
                       FAKE_CUDA_LATE_EVERY=5, FAKE_CUDA_RECORDS_PER_BUFFER=64,
                       EMBER_CUDA_QUIET="false", EMBER_CUDA_PRINT_STATS="true"))
    assert r.returncode == 0, r.stderr
    want, dropped, bad = expected_with_faults(steps, bad_every, drop_every)
    msgs = one_connection(listener)
    got = {name: v for (_, _, name), v in totals(entries(msgs, AGG)).items()}
    assert got == want, (got, want)
    stats = entries(msgs, STATS)[-1]
    assert stats["records_dropped"] == dropped
    assert stats["activities"] == steps * 5 - dropped - bad
    # The broken ones are counted where a user sees them.
    last = [line for line in r.stderr.splitlines() if "stats at exit" in line][-1]
    assert f" bad_timestamps={bad} " in last and f" records_dropped={dropped} " in last, last
    assert " unmatched=0 " in last


def test_eight_threads_at_ten_thousand_launches_a_second(listener):
    # 8 threads x 625 steps/s x 2 kernels = 10 000 kernel launches a second
    # (25 000 calls a second with the copies, sets and syncs), for 2 s.
    threads, steps, seconds = 8, 1250, 2.0
    p = subprocess.Popen([LAUNCHER, str(steps), str(threads), str(seconds)], env=env_for(listener.path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    out, err = p.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, err
    msgs = one_connection(listener)
    aggs = entries(msgs, AGG)
    n = threads * steps
    t = {name: v for (_, _, name), v in totals(aggs).items()}
    assert t["k_big"] == [n * BIG_NS, n] and t["k_small"] == [n * SMALL_NS, n]
    assert t["HtoD"] == [n * COPY_NS, n] and t["memset"] == [n * SET_NS, n]
    tids = {a["tid"] for a in aggs}
    assert len(tids) == threads
    windows = math.ceil(elapsed) + 1
    for tid in tids:
        ids = {a["stack_id"] for a in aggs if a["tid"] == tid and a["kind"] == KIND_KERNEL}
        assert 0 not in ids and 50 <= len(ids) <= 50 * windows, (tid, len(ids))
    stats = entries(msgs, STATS)[-1]
    assert stats["launches"] == n * 5 and stats["records_dropped"] == 0
    assert elapsed < seconds + 10


def test_no_agent_program_runs_and_library_goes_quiet(tmp_path):
    sock = tmp_path / "nobody.sock"
    r, _ = run([LAUNCHER, "400", "1", "4"],
               env_for(sock, EMBER_CUDA_QUIET="false", EMBER_CUDA_PRINT_STATS="true",
                       EMBER_CUDA_INTERNAL_AGENT_RETRIES=2))
    assert r.returncode == 0 and r.stdout.strip() == "done 400 1", r.stderr
    assert f"no ember-agent at {sock} after 2 tries; not profiling" in r.stderr
    last = [line for line in r.stderr.splitlines() if "stats at exit" in line][-1]
    assert "agent=gave up" in last and "connections=0" in last
    # Quiet: after giving up (about 2 s into a 4 s run) the launches are no
    # longer recorded.
    launches = int(last.split(" launches=")[1].split()[0])
    assert 0 < launches < 400 * 5, last
    # And by default it says nothing at all.
    r, _ = run([LAUNCHER, "50"], env_for(sock, EMBER_CUDA_INTERNAL_AGENT_RETRIES=1))
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_noop_does_nothing(listener):
    r, _ = run([LAUNCHER, "300", "1", "1.5"],
               env_for(listener.path, EMBER_CUDA_NOOP="true", EMBER_CUDA_QUIET="false",
                       EMBER_CUDA_PRINT_STATS="true"))
    assert r.returncode == 0 and r.stdout.strip() == "done 300 1"
    assert r.stderr == "", r.stderr
    assert listener.messages() == []


@pytest.mark.parametrize("case,extra,cupti,message", [
    ("another profiler", {"FAKE_CUPTI_SUBSCRIBE_ERROR": 39}, True,
     "CUPTI is already used by another profiler"),
    ("old CUPTI", {"FAKE_CUPTI_VERSION": 12}, True, "CUPTI API version 12 is older than 13"),
    ("no CUPTI", {}, False, "libcupti not found"),
])
def test_steps_aside_and_says_so_once(listener, case, extra, cupti, message):
    r, _ = run([LAUNCHER, "300", "1", "1.5"],
               env_for(listener.path, cupti=cupti, EMBER_CUDA_QUIET="false", **extra))
    assert r.returncode == 0 and r.stdout.strip() == "done 300 1", (case, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].endswith("not profiling"), (case, lines)
    assert listener.messages() == []
    # quiet by default
    r, _ = run([LAUNCHER, "10"], env_for(listener.path, cupti=cupti, **extra))
    assert r.returncode == 0 and r.stderr == ""


def test_exports_only_the_entry_points():
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    names = sorted(line.split()[-1] for line in out.splitlines() if line.strip())
    assert names == ["InitializeInjection", "InitializeInjectionNvtx2", "ember_cuda_launch_marker",
                     "ember_cuda_version"], names  # the CUDA and the NVTX injection entries
    needed = subprocess.run(["readelf", "-d", LIB], check=True, stdout=subprocess.PIPE, text=True).stdout
    assert "libcupti" not in needed and "libcuda" not in needed and "libxxhash" not in needed
    # Loadable by programs built for glibc 2.17 (gpu/glibc_floor.h).
    syms = subprocess.run(["objdump", "-T", LIB], check=True, stdout=subprocess.PIPE, text=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([0-9.]+)", syms)}
    assert versions and max(versions) <= (2, 17), sorted(versions)
    for lib in ("libdl.so.2", "libpthread.so.0"):  # where dlopen & co. live before glibc 2.34
        assert f"[{lib}]" in needed


def test_marker_is_called_with_the_ids_the_aggregates_name(listener):
    """A uprobe on ember_cuda_launch_marker (what ember-agent attaches)
    sees exactly the sampled launches: every id the aggregates carry was
    passed to the marker on the thread the aggregate names, with the
    launch's kind, and no other id was."""
    from uprobe_marker import MarkerProbe
    steps = 1500
    with MarkerProbe(LIB, "ember_cuda_launch_marker") as probe:
        p = subprocess.Popen([LAUNCHER, str(steps), "2", "1.5"], env=env_for(listener.path),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    calls = [(tid, sid, kind) for pid, tid, sid, kind in probe.calls if pid == p.pid]
    msgs = one_connection(listener)
    aggs = entries(msgs, AGG)
    stats = entries(msgs, STATS)[-1]
    assert len(calls) == stats["launches_sampled"] > 0
    assert len({sid for _, sid, _ in calls}) == len(calls)  # each id once
    marked = {sid: (tid, kind) for tid, sid, kind in calls}
    for a in aggs:
        assert a["stack_id"] in marked, a
        tid, kind = marked[a["stack_id"]]
        assert tid == a["tid"], a
        # copies and sets share a budget but keep their own kinds
        assert kind == a["kind"], (kind, a)
    # every marked id carries time (its own launch's, at least)
    assert set(marked) == {a["stack_id"] for a in aggs}


def test_runtime_launch_whose_driver_call_has_its_own_id(listener):
    """If the driver call inside cudaLaunchKernel has a correlation id of
    its own and the kernel's record carries that one, the kernel's time
    still goes to the runtime launch's stack and thread."""
    steps = 400
    r, _ = run([LAUNCHER, str(steps), "1", "1"],
               env_for(listener.path, FAKE_CUDA_NESTED_OWN_ID=1, EMBER_CUDA_QUIET="false",
                       EMBER_CUDA_PRINT_STATS="true"))
    assert r.returncode == 0, r.stderr
    msgs = one_connection(listener)
    aggs = entries(msgs, AGG)
    small = [a for a in aggs if a["name"] == "k_small"]
    assert sum(a["total_ns"] for a in small) == steps * SMALL_NS
    assert all(a["stack_id"] != 0 and a["api"] == "cudaLaunchKernel" for a in small), small
    assert len({a["tid"] for a in aggs}) == 1
    assert " unmatched=0 " in [line for line in r.stderr.splitlines() if "stats at exit" in line][-1]


def test_agent_restart_reconnects_with_a_new_hello(tmp_path):
    """The agent goes away and comes back at the same path: the library
    reconnects and starts the new connection with HELLO and DEVICE again."""
    path = tmp_path / "agent.sock"
    first = Listener(path)
    p = subprocess.Popen([LAUNCHER, "1200", "1", "4"], env=env_for(path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.6)
        first.close()  # closes the listening socket and removes the path
        before = first.connections
        second = Listener(path)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        after = second.messages()
        second.close()
    finally:
        if p.poll() is None:
            p.kill()
    assert len(before) == 1 and before[0][0][0] == HELLO
    assert len(after) == 1, len(after)
    msgs = after[0]
    assert msgs[0][0] == HELLO and msgs[1][0] == DEVICE
    check_hello_device(msgs, p.pid)
    # the second connection carries the rest of the run's time
    got = totals(entries(msgs, AGG)).get((KIND_KERNEL, "cuLaunchKernel", "k_big"), [0, 0])
    assert 0 < got[1] < 1200


def test_graph_launches(listener):
    """A graph launch runs several kernels under one correlation id: their
    time is of kind GRAPH, each under the stack of its launch, and graph
    launches have their own budget of 20 a second."""
    steps, a_ns, b_ns = 1500, 2000, 3000
    env = env_for(listener.path, CUDA_LAUNCH_GRAPH=1)
    env["FAKE_CUDA_KERNEL_NS"] += f",g_a={a_ns},g_b={b_ns}"
    t0 = time.monotonic()
    r, elapsed = run([LAUNCHER, str(steps), "1", "1.5"], env)
    assert r.returncode == 0, r.stderr
    msgs = one_connection(listener)
    aggs = entries(msgs, AGG)
    t = totals(aggs)
    assert t[(KIND_GRAPH, "cuGraphLaunch", "g_a")] == [steps * a_ns, steps]
    assert t[(KIND_GRAPH, "cuGraphLaunch", "g_b")] == [steps * b_ns, steps]
    assert t[(KIND_KERNEL, "cuLaunchKernel", "k_big")] == [steps * BIG_NS, steps]
    graph = [a for a in aggs if a["kind"] == KIND_GRAPH]
    # one id per launch, six calls a step: the graph launch is the sixth
    assert all(a["stack_id"] % 6 == 0 and a["stack_id"] != 0 and a["stream"] == 3 for a in graph), graph
    ids_a = {a["stack_id"] for a in graph if a["name"] == "g_a"}
    ids_b = {a["stack_id"] for a in graph if a["name"] == "g_b"}
    assert ids_a == ids_b  # both kernels of a launch under the same stack
    windows = math.ceil(elapsed) + 1
    assert 20 <= len(ids_a) <= 20 * windows, len(ids_a)
    kernel_ids = {a["stack_id"] for a in aggs if a["kind"] == KIND_KERNEL}
    assert 50 <= len(kernel_ids) <= 50 * windows  # the graphs took none of the kernels' budget
