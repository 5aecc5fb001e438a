"""The agent's own stats (-pprof): /metrics in Prometheus text and
/debug/stats in JSON from a real agent sampling a workload, checked
against what the server stored; 404 and 405 answers; a port in use and a
bad address stop the agent with a message naming -pprof."""

import json
import os
import re
import socket
import subprocess
import time

from conftest import require_root
from harness import WORKLOADS, Agent, Process, free_port, http, wait_until

LINE = re.compile(r'^(ember_agent_[a-z_]+)(\{reason="([a-z_]+)"\})? ([0-9]+(\.[0-9]+)?)$')


def scrape(base):
    """/metrics as {name or name{reason}: value}, checking the format: every
    family has one HELP and one TYPE line before its samples."""
    status, body = http("GET", base + "/metrics", timeout=5)
    assert status == 200, body
    values, types, helps = {}, {}, set()
    for line in body.decode().splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert name not in helps, f"two HELP lines for {name}"
            helps.add(name)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name in helps and name not in types and kind in ("counter", "gauge"), line
            types[name] = kind
            continue
        m = LINE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        assert m.group(1) in types, f"{m.group(1)} has no TYPE line before it"
        key = m.group(1) + (f"[{m.group(3)}]" if m.group(3) else "")
        assert key not in values, f"{key} twice"
        values[key] = float(m.group(4))
    return values, types


def stats_json(base):
    status, body = http("GET", base + "/debug/stats", timeout=5)
    assert status == 200, body
    doc = json.loads(body)
    flat = {}
    for k, v in doc.items():
        if k == "time_unix_ms":
            continue
        if isinstance(v, dict):
            for label, x in v.items():
                flat[f"ember_agent_{k}[{label}]"] = x
        else:
            flat[f"ember_agent_{k}"] = v
    return doc, flat


def test_pprof_metrics_and_debug_stats(server, agent_factory):
    require_root()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    agent_factory(server.url, "-on-cpu-sampling-rate=97", f"-pprof=127.0.0.1:{port}").start()
    work = subprocess.Popen([os.path.join(WORKLOADS, "cpu_split"), "6"], stdout=subprocess.DEVNULL)
    try:
        samples = "ember_agent_samples_total"
        wait_until(lambda: scrape(base)[0][samples] > 50, 20, what="samples in /metrics")
        m1, types = scrape(base)
        assert types[samples] == "counter"
        assert types["ember_agent_processes"] == "gauge"
        assert m1["ember_agent_sampling"] == 1
        assert m1["ember_agent_start_time_seconds"] > 1.6e9
        for name in ("samples_lost_total", "bpf_unwind_stopped_total[no_fp]",
                     "unwind_table_entries_capacity", "batches_sent_total", "bytes_sent_total",
                     "symbol_files_uploaded_total", "python_processes", "kubelet_pods",
                     "encode_seconds_total"):
            assert "ember_agent_" + name in m1, name
        # The counter grows while the workload runs...
        wait_until(lambda: scrape(base)[0][samples] >= m1[samples] + 97, 20,
                   what="the sample counter to grow")
        m2, _ = scrape(base)
        # ... and matches what the server stored: everything counted by
        # m2 is stored within a reporter interval or two, and the server
        # never holds more than the agent counted.
        wait_until(lambda: server.flamegraph()["total"] >= m2[samples], 20,
                   what="the server to store what /metrics counted")
        stored = server.flamegraph()["total"]
        # The values are a snapshot the agent publishes once a second: the
        # send that delivered those samples may reach it up to a second
        # after the server stored them.
        wait_until(lambda: scrape(base)[0]["ember_agent_bytes_sent_total"] >
                   m1["ember_agent_bytes_sent_total"], 10, what="the sent bytes in /metrics")
        m3, _ = scrape(base)
        assert m2[samples] <= stored <= m3[samples]
        assert m3["ember_agent_batches_sent_total"] >= 1
        assert m3["ember_agent_bytes_sent_total"] > m1["ember_agent_bytes_sent_total"]
        assert m3["ember_agent_batches_dropped_total"] == 0
        assert m3["ember_agent_bpf_samples_total"] >= m3[samples]
        # /debug/stats: the same metrics, the same numbers (between two
        # scrapes taken around it).
        before, _ = scrape(base)
        doc, js = stats_json(base)
        after, _ = scrape(base)
        assert set(js) == set(before), set(js) ^ set(before)
        assert doc["time_unix_ms"] > 1.6e12
        for name, kind in ((n, types[n.split("[")[0]]) for n in js):
            if kind == "counter":
                assert before[name] <= js[name] <= after[name], name
            else:
                assert isinstance(js[name], (int, float)), name
        assert js[samples] > 0
    finally:
        work.kill()
        work.wait()

    # Anything else: 404, other methods: 405, each with a JSON error.
    status, body = http("GET", base + "/debug/pprof/", timeout=5)
    assert status == 404 and "no such endpoint" in json.loads(body)["error"]
    for method in ("POST", "PUT", "DELETE"):
        status, body = http(method, base + "/metrics", b"x", timeout=5)
        assert status == 405 and "not allowed" in json.loads(body)["error"], method
    status, body = http("HEAD", base + "/debug/stats", timeout=5)
    assert status == 200 and body == b""


def test_pprof_port_in_use_and_bad_address(server):
    require_root()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        a = Agent(server.url, f"-pprof=127.0.0.1:{port}")
        Process.start(a)
        assert a.proc.wait(30) == 1
        a.stop()
        assert f"-pprof: cannot listen on 127.0.0.1:{port}: Address already in use" in a.output()
        assert "started" not in a.output()
    b = Agent(server.url, "-pprof=localhost")
    Process.start(b)
    assert b.proc.wait(30) == 2
    b.stop()
    assert "-pprof: expected host:port" in b.output()


def test_table_build_seconds_are_cpu_time(server, agent_factory, tmp_path):
    """unwind_table_build_seconds_total counts the unwind thread's CPU
    time, not wall time: with that thread starved (nice 19, sharing a CPU
    with two busy loops) while it builds the table of a large new file, the
    counter never exceeds the CPU time the thread used in all."""
    require_root()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    agent = agent_factory(server.url, "-on-cpu-sampling-rate=97", f"-pprof=127.0.0.1:{port}").start()
    pid = agent.proc.pid
    tids = os.listdir(f"/proc/{pid}/task")
    unwinder = [t for t in tids if open(f"/proc/{pid}/task/{t}/comm").read().strip() == "ember-unwinder"]
    assert len(unwinder) == 1, tids
    tid = int(unwinder[0])
    cpus = sorted(os.sched_getaffinity(0))
    cpu, other = cpus[0], cpus[-1]
    os.sched_setaffinity(tid, {cpu})
    os.setpriority(os.PRIO_PROCESS, tid, 19)

    def thread_cpu_s():
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9

    # A large file no agent has seen: a copy of the interpreter with bytes
    # of its own appended (so its identity, and its table, are new).
    py = tmp_path / "py_cpu_build"
    py.write_bytes(open("/usr/bin/python3.11", "rb").read() + os.urandom(16))
    py.chmod(0o755)
    wait_until(lambda: "ember_agent_unwind_tables_loaded_total" in scrape(base)[0], 10,
               what="/metrics")
    loaded0 = scrape(base)[0]["ember_agent_unwind_tables_loaded_total"]
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
    work = None
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, {cpu})
        work = subprocess.Popen([str(py), "-c", "import time\nend = time.time() + 6\nwhile time.time() < end: pass"])
        if other != cpu:
            os.sched_setaffinity(work.pid, {other})
        wait_until(lambda: scrape(base)[0]["ember_agent_unwind_tables_loaded_total"] > loaded0, 60,
                   what="the new file's table")
        work.wait(30)
    finally:
        for p in hogs + ([work] if work else []):
            p.kill()
            p.wait()
    time.sleep(1.5)  # /metrics is published once a second
    m, _ = scrape(base)
    built = m["ember_agent_unwind_table_build_seconds_total"]
    used = thread_cpu_s()
    assert 0 < built <= used + 0.002, (built, used)
