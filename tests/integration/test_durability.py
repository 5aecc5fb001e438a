"""The server keeps what it stored across restarts (clean or killed), and
the agent keeps sampling and retrying while the server is down, with
bounded memory, delivering what it buffered once the server is back."""

import os
import signal
import time

from conftest import require_root
from harness import Server, find, growth_kib, rss_kib, run_workload, wait_until


def workload_total(server):
    m = find(server.flamegraph('process.executable.name == "cpu_split"')["root"], "main",
             binary="cpu_split")
    return m["total"] if m else 0


def test_server_restart_keeps_data(tmp_path, agent_factory):
    require_root()
    server = Server(tmp_path / "data").start()
    agent = agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    run_workload("cpu_split", 3)
    agent.stop()  # flushes its last batch
    before = server.flamegraph(synthetic=["executable"])
    assert before["total"] > 0
    assert workload_total(server) > 200

    # A clean stop and start: the same answer.
    server.restart(signal.SIGTERM)
    after = server.flamegraph(synthetic=["executable"])
    assert after["total"] == before["total"]
    assert after["root"] == before["root"]

    # Killed without warning: still the same answer.
    server.restart(signal.SIGKILL)
    assert server.flamegraph(synthetic=["executable"])["root"] == before["root"]
    server.stop()


def test_agent_buffers_while_server_is_down(tmp_path, agent_factory):
    require_root()
    server = Server(tmp_path / "data")  # not started yet
    agent = agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    t_down = int(time.time() * 1000)
    rss = [rss_kib(agent.proc.pid, "RssAnon")]
    run_workload("cpu_split", 6)
    for _ in range(4):  # the agent keeps sampling and retrying
        time.sleep(1)
        rss.append(rss_kib(agent.proc.pid, "RssAnon"))
    assert agent.running()
    out = agent.output()
    assert "cannot deliver batch" in out
    # Failures are reported when they start, not once per retry.
    assert out.count("cannot deliver batch") <= 2, out
    # Memory stays bounded while nothing can be sent.
    assert max(rss) < 100 * 1024, rss
    assert growth_kib(rss) < 20 * 1024, rss

    server.start()
    t_up = int(time.time() * 1000)
    wait_until(lambda: workload_total(server) > 400, 60, interval=1.0,
               what="buffered batches to be delivered")
    # What was sampled before the server existed is there, with its own time.
    early = server.flamegraph('process.executable.name == "cpu_split"', start_ms=t_down - 1000,
                              end_ms=t_up)
    assert early["total"] > 400
    wait_until(lambda: "delivering batches again" in agent.output(), 20,
               what="the agent to report recovery")
    server.stop()


def test_agent_rejects_bad_flags(tmp_path):
    import subprocess
    from harness import BIN
    exe = os.path.join(BIN, "ember-agent")
    r = subprocess.run([exe, "-collection-agent=127.0.0.1:1", "-on-cpu-sampling-rate=fast"],
                       stderr=subprocess.PIPE)
    assert r.returncode == 2
    assert b"-on-cpu-sampling-rate" in r.stderr and b"whole number" in r.stderr
    r = subprocess.run([exe], stderr=subprocess.PIPE)
    assert r.returncode == 2 and b"-collection-agent" in r.stderr
    r = subprocess.run([exe, "-collection-agent=127.0.0.1:1"], stderr=subprocess.PIPE,
                       env={"EMBER_REPORTER_INTERVAL": "often"})
    assert r.returncode == 2 and b"EMBER_REPORTER_INTERVAL" in r.stderr
    r = subprocess.run([exe, "-help"], stdout=subprocess.PIPE)
    assert r.returncode == 0 and b"-on-cpu-sampling-rate" in r.stdout
