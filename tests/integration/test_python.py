"""ember's CPython unwinder, as root with real BPF sampling, on every
interpreter present: Debian's python3, Debian unstable's 3.14 (which
scripts/install-test-python.sh puts in build/python3.14) and any pyenv
build of a supported version (3.8 to 3.14). Python frames carry their function, file and
line; they sit between the native frames that call the interpreter and
the native frames they call (numpy); script.name tells scripts run by the
same interpreter apart; short-lived processes are attributed; and ember's
fixed layout of each version matches that version's own headers."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import require_root
from harness import ROOT, free_port, wait_until

RATE = 499  # high, so that sampling noise stays far below the tolerance
SUPPORTED = {(3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13), (3, 14)}
WORKLOADS = os.path.join(ROOT, "tests", "workloads")
PYDEPS = os.path.join(ROOT, "build", "pydeps")
DEBIAN = "/usr/bin/python3"


def interpreters():
    """(id, path) of every supported interpreter on the machine."""
    out, seen = [], set()
    built = sorted(glob.glob(os.path.join(ROOT, "build", "python3.*", "usr", "bin", "python3")))
    paths = [DEBIAN] + built + sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    for path in paths:
        real = os.path.realpath(path)
        if not os.path.exists(real) or real in seen:
            continue
        seen.add(real)
        v = subprocess.run([path, "-c", "import sys; print(*sys.version_info[:3])"],
                           stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        if (int(v[0]), int(v[1])) in SUPPORTED:
            kind = "debian" if path == DEBIAN else "debian-sid" if path in built else "pyenv"
            out.append((kind + "-" + ".".join(v), path))
    return out


PYTHONS = interpreters()


def include_dir(python):
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()


def has_internal_headers(python):
    return os.path.exists(os.path.join(include_dir(python), "internal", "pycore_pystate.h"))


# Debian's python3 always (scripts/install-deps.sh installs its headers);
# another build when it has its internal headers (skipped tests count as
# failed, so the others are simply not parameters).
LAYOUT_PYTHONS = [(i, p) for i, p in PYTHONS if p == DEBIAN or has_internal_headers(p)]


def nodes(node, name, path=()):
    """(node, the Python frames above it) for every node called name. Up
    to 3.10 native frames of the interpreter's call machinery sit between
    two Python frames; the Python frames read the same in every version."""
    here = path + ((node["name"],) if node["frame_type"] == "cpython" else ())
    if node["name"] == name:
        yield node, path
    for c in node["children"]:
        yield from nodes(c, name, here)


def total(node, name):
    """Samples whose stack has a frame called name, each counted once (a
    <module> importing another is not counted twice)."""
    if node["name"] == name:
        return node["total"]
    return sum(total(c, name) for c in node["children"])


def stacks_without(node, name, path=()):
    """(samples, frames from the root) of every leaf-most stack that has no
    frame called name, largest first: what to show when a test expects
    every sample to pass through name."""
    if node["name"] == name:
        return []
    here = path + (node["name"],)
    out = [(node["self"], here)] if node.get("self") else []
    for c in node["children"]:
        out += stacks_without(c, name, here)
    return sorted(out, reverse=True) if not path else out


def source_line(path, text):
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if text in line:
                return i
    raise AssertionError(f"{text!r} not in {path}")


def settled(server, query):
    hist = []

    def same():
        hist.append(server.flamegraph(query)["total"])
        return len(hist) >= 3 and hist[-1] > 0 and hist[-3:] == [hist[-1]] * 3
    wait_until(same, 30, interval=1.0, what=f"samples of {query}")
    return server.flamegraph(query)


@pytest.mark.parametrize("python", [p for _, p in LAYOUT_PYTHONS], ids=[i for i, _ in LAYOUT_PYTHONS])
def test_layout_matches_the_interpreters_headers(python, tmp_path):
    include = include_dir(python)
    if not has_internal_headers(python):
        pytest.fail(f"no CPython headers in {include} (scripts/install-deps.sh installs python3-dev)")
    exe = str(tmp_path / "check")
    # Debian's pyconfig.h includes <x86_64-linux-gnu/python3.X/pyconfig.h>
    subprocess.run(["gcc", "-I", include, "-I", os.path.dirname(include),
                    "-I", os.path.join(ROOT, "agent"), "-I", os.path.join(ROOT, "bpf"),
                    "-include", "linux/types.h", "-o", exe,
                    os.path.join(ROOT, "tests", "tools", "pylayout_check.c")], check=True)
    r = subprocess.run([exe], stdout=subprocess.PIPE, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("python", [p for _, p in PYTHONS], ids=[i for i, _ in PYTHONS])
def test_known_split_between_three_functions(server, agent_factory, python):
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    time.sleep(1)
    script = os.path.join(WORKLOADS, "py_split.py")
    w = subprocess.Popen([python, script, "8"], stdout=subprocess.PIPE, text=True)
    report = json.loads(w.communicate(timeout=60)[0])
    tree = settled(server, f'process.pid == "{w.pid}"')
    root = tree["root"]
    got = {f: total(root, f) for f in ("alpha", "beta", "gamma")}
    n = sum(got.values())
    print(f"{python} ({report['version']}): {tree['total']} samples, truth {report['shares']}, "
          f"ember { {f: round(v / max(n, 1), 3) for f, v in got.items()} }")
    assert n > RATE * 8 * 0.5
    for f, truth in report["shares"].items():
        assert abs(got[f] / n - truth) <= 0.05, (f, got[f] / n, truth)
    # Each function's stack reaches <module> through main, with file and line.
    for f, call in (("alpha", "return spin(5 * scale)"), ("beta", "return spin(3 * scale)"), ("gamma", "return spin(2 * scale)")):
        for node, path in nodes(root, f):
            assert node["frame_type"] == "cpython"
            assert path[-2:] == ("<module>", "main"), path
            assert node["file"] == script
            assert node["line"] == source_line(script, call)
    module = total(root, "<module>")
    print(f"{module}/{tree['total']} samples reach <module>")
    assert module / tree["total"] >= 0.95, stacks_without(root, "<module>")[:8]


def starve(pid, cpu, nice):
    """Pins every thread of pid to cpu at the given nice value."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), {cpu})
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)


def agent_metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return {line.split()[0][len("ember_agent_"):]: float(line.split()[1])
                for line in r.read().decode().splitlines()
                if line.startswith("ember_agent_") and "{" not in line}


def version_of(ip):
    return tuple(int(x) for x in ip[0].rsplit("-", 1)[1].split("."))


# The newest interpreter up to 3.11 (its invocations told apart by the
# interpreter loop's code) and the newest of 3.12+ (marked on the native
# stack), other than Debian's python3, which runs this test: its tables
# are loaded before the test begins.
STARVED_PYTHONS = [max(group, key=version_of) for group in (
    [ip for ip in PYTHONS if ip[1] != DEBIAN and version_of(ip) < (3, 12)],
    [ip for ip in PYTHONS if ip[1] != DEBIAN and version_of(ip) >= (3, 12)]) if group]


@pytest.mark.parametrize("python", [p for _, p in STARVED_PYTHONS], ids=[i for i, _ in STARVED_PYTHONS])
def test_python_frames_of_samples_unwound_late(server, agent_factory, python):
    """An agent starved of CPU (pinned beside a spinning program, nice 5:
    a quarter of one CPU)
    has a new interpreter's tables seconds late: the samples taken
    meanwhile travel raw with the thread's Python frames, which BPF read
    when it took them, and get them back once the agent unwinds them.
    Without them those samples (some hundreds) lose their Python frames."""
    require_root()
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs two CPUs (one for the starved agent, one for the workload)")
    cpus = sorted(os.sched_getaffinity(0))
    port = free_port()
    agent = agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", f"-pprof=127.0.0.1:{port}").start()
    wait_until(lambda: agent_metrics(port).get("samples_total", 0) > 0, 30, what="the agent's stats")
    time.sleep(1)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(spin.pid, {cpus[0]})
        starve(agent.proc.pid, cpus[0], 5)
        script = os.path.join(WORKLOADS, "py_split.py")
        w = subprocess.Popen([python, script, "4"], stdout=subprocess.PIPE, text=True,
                             preexec_fn=lambda: os.sched_setaffinity(0, {cpus[1]}))
        w.communicate(timeout=60)
    finally:
        spin.kill()
        spin.wait()
    starve(agent.proc.pid, cpus[0], 0)
    os.sched_setaffinity(agent.proc.pid, set(cpus))
    tree = settled(server, f'process.pid == "{w.pid}"')
    m = agent_metrics(port)
    module = total(tree["root"], "<module>")
    lost = total(tree["root"], "[Python frames not unwound]")
    print(f"{module}/{tree['total']} samples reach <module>, {lost} without Python frames; "
          f"raw stacks unwound late {m.get('raw_stacks_unwound_late_total')}, "
          f"expired {m.get('raw_stacks_expired_total')}")
    assert m["raw_stacks_unwound_late_total"] >= 20, "the agent was not starved: nothing waited for a table"
    # Only the first samples, taken before the starved agent read the
    # process, may lack their Python frames (and say so): these
    # interpreters are launchers linked to libpython, which BPF cannot find
    # by their executable (py_exes). 3 of 2 010 measured.
    assert lost <= 0.01 * tree["total"], stacks_without(tree["root"], "<module>")[:8]
    # 99 % here on a quiet host; a loaded one delays the tables past the
    # 2 s a young process's broken walks travel raw (RAW_YOUNG_NS), which
    # no wait can mend. The agent before (128 samples waiting, no Python
    # frames in the copy) lost about a third.
    assert module / tree["total"] >= 0.90, stacks_without(tree["root"], "<module>")[:8]


def test_python_frames_before_the_agent_reads_the_process(server, agent_factory):
    """Once the agent has read an interpreter executable, a new process of
    it has its Python frames from its first samples, taken while the agent
    could not read the process (stopped): BPF finds the interpreter by the
    process's executable (py_exes) and reads the frames into the raw
    records. Without that, those samples (the ones the ring buffer keeps
    raw) lose their Python frames."""
    require_root()
    port = free_port()
    agent = agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", f"-pprof=127.0.0.1:{port}").start()
    warm = subprocess.Popen([DEBIAN, "-c", "import time\nend = time.time() + 1\nwhile time.time() < end: pass"])
    wait_until(lambda: agent_metrics(port).get("python_interpreters", 0) >= 1, 30,
               what="the agent reading the interpreter")
    warm.wait(10)
    before = agent_metrics(port)["bpf_python_stacks_by_executable_total"]
    script = os.path.join(WORKLOADS, "py_split.py")
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        w = subprocess.Popen([DEBIAN, script, "2"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    w.communicate(timeout=60)
    tree = settled(server, f'process.pid == "{w.pid}"')
    by_exe = agent_metrics(port)["bpf_python_stacks_by_executable_total"] - before
    module = total(tree["root"], "<module>")
    lost = total(tree["root"], "[Python frames not unwound]")
    print(f"{module}/{tree['total']} samples reach <module>, {lost} without Python frames; "
          f"{by_exe} raw stacks with Python frames read by the executable")
    assert by_exe >= 10, "no raw stack of the new process had its frames read through its executable"
    assert lost == 0, stacks_without(tree["root"], "<module>")[:8]


def test_numpy_frames_under_the_python_frame_that_called_them(server, agent_factory):
    require_root()
    if not os.path.isdir(os.path.join(PYDEPS, "numpy")):
        pytest.fail("numpy is missing from build/pydeps (scripts/install-test-pydeps.sh installs it)")
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    time.sleep(1)
    env = dict(os.environ, PYTHONPATH=PYDEPS)
    w = subprocess.Popen([DEBIAN, os.path.join(WORKLOADS, "py_numpy.py"), "6"], env=env,
                         stdout=subprocess.DEVNULL)
    w.wait(60)
    tree = settled(server, f'process.pid == "{w.pid}"')
    crunch = [(n, p) for n, p in nodes(tree["root"], "crunch")]
    assert crunch, "no crunch frame"
    inside = sum(n["total"] for n, _ in crunch)

    def numpy_native(node):
        """Samples under node whose stack goes through numpy's C code."""
        if node["frame_type"] == "native" and "_multiarray_umath" in (node.get("binary") or node["name"]):
            return node["total"]
        return sum(numpy_native(c) for c in node["children"])
    in_numpy = sum(numpy_native(n) for n, _ in crunch)
    print(f"numpy: {inside} samples in crunch, {in_numpy} of them in numpy's C code")
    for _, path in crunch:
        assert path[-2:] == ("<module>", "main"), path
    assert inside > RATE * 6 * 0.5
    assert in_numpy / inside >= 0.5


def test_script_name_tells_two_scripts_apart(server, agent_factory, tmp_path):
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    time.sleep(1)
    procs = []
    for name in ("train_a.py", "train_b.py"):
        shutil.copy(os.path.join(WORKLOADS, "py_split.py"), tmp_path / name)
        procs.append(subprocess.Popen([DEBIAN, str(tmp_path / name), "4"], stdout=subprocess.DEVNULL))
    for p in procs:
        p.wait(60)
    for name, p in zip(("train_a.py", "train_b.py"), procs):
        tree = settled(server, f'script.name == "{name}"')
        same_pid = server.flamegraph(f'script.name == "{name}" && process.pid == "{p.pid}"')["total"]
        print(f"{name}: {tree['total']} samples, {same_pid} of its own process")
        assert tree["total"] > RATE * 4 * 0.5
        assert same_pid == tree["total"]
        assert total(tree["root"], "alpha") > 0
    both = server.flamegraph('script.name == "train_a.py" || script.name == "train_b.py"')
    exe = server.flamegraph(f'process.executable.name == "{os.path.basename(os.path.realpath(DEBIAN))}"'
                            ' && (script.name == "train_a.py" || script.name == "train_b.py")')
    assert exe["total"] == both["total"]


def test_short_lived_processes_are_attributed(server, agent_factory):
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    time.sleep(1)
    runs, busy = 20, 0.15
    for _ in range(runs):
        subprocess.run([DEBIAN, os.path.join(WORKLOADS, "py_short.py"), str(busy)], check=True)
    tree = settled(server, 'script.name == "py_short.py"')
    burst = total(tree["root"], "burst")
    expected = runs * busy * RATE
    print(f"short-lived: {tree['total']} samples, {burst} of them in burst "
          f"(its CPU time is {expected:.0f} samples' worth; the rest is interpreter start-up)")
    # Every process is attributed (script.name), and the Python frame of
    # its busy function is named in at least 80 % of the samples it should
    # have: frames of a process that exited before the agent read its code
    # objects are still named from the agent's cache or right after the
    # sample (a new process's first sample wakes the agent).
    assert burst >= 0.8 * expected
    for n, path in nodes(tree["root"], "burst"):
        assert path[-1] == "<module>", path


def test_python_frames_over_otlp(server, agent_factory):
    """The agent's OTLP Profiles export carries Python frames with their
    file and line, and script.name, into the same store."""
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", "-ember-protocol=false").start()
    time.sleep(1)
    script = os.path.join(WORKLOADS, "py_split.py")
    w = subprocess.Popen([DEBIAN, script, "3"], stdout=subprocess.DEVNULL)
    w.wait(60)
    tree = settled(server, f'process.pid == "{w.pid}" && script.name == "py_split.py"')
    found = list(nodes(tree["root"], "alpha"))
    assert found, "no alpha frame"
    for node, path in found:
        assert node["frame_type"] == "cpython"
        assert (node["file"], node["line"]) == (script, source_line(script, "return spin(5 * scale)"))
        assert path[-2:] == ("<module>", "main"), path


def test_every_thread_has_its_python_frames(server, agent_factory):
    """Two threads besides the main one: each thread's state is found (by
    its thread pointer) and its stack shows its own function."""
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    time.sleep(1)
    w = subprocess.Popen([DEBIAN, os.path.join(WORKLOADS, "py_threads.py"), "6"],
                         stdout=subprocess.PIPE, text=True)
    used = json.loads(w.communicate(timeout=60)[0])
    tree = settled(server, f'process.pid == "{w.pid}"')
    got = {f: total(tree["root"], f) for f in ("worker_a", "worker_b")}
    n = sum(got.values())
    truth = {f: used[f] / sum(used.values()) for f in got}
    print(f"threads: {tree['total']} samples, worker_a {got['worker_a']}, worker_b {got['worker_b']}; "
          f"CPU time split {truth}")
    assert n >= 0.9 * tree["total"]
    for f in got:
        assert abs(got[f] / n - truth[f]) <= 0.05, (f, got[f] / n, truth[f])
        # Called by threading's Thread.run, through a second invocation of
        # the interpreter loop (all but the thread's first milliseconds,
        # before the agent has its libraries' tables).
        under_run = sum(node["total"] for node, path in nodes(tree["root"], f)
                        if path[-3:] == ("Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run"))
        assert under_run >= 0.95 * got[f], (f, under_run, got[f])
