"""Protocol version 2 end to end: the agent's session survives the server
being killed and restarted (409, a new session, no batch lost or counted
twice) and a long outage (bounded memory, then everything delivered)."""

import re
import signal

import pytest
import subprocess
import threading
import time
import os

from conftest import require_root
from harness import (WORKLOADS, Server, growth_kib, http, rss_kib, run_workload, settled_total,
                     wait_until)


def agent_samples(agent):
    """The sample count of the agent's last stats line (written at stop)."""
    found = re.findall(r"stats: samples=(\d+)", agent.output())
    assert found, agent.output()
    return int(found[-1])


def metric(server, name):
    status, body = http("GET", server.url + "/metrics")
    assert status == 200
    m = re.search(rf"^{name} (\d+)$", body.decode(), re.M)
    return int(m.group(1)) if m else 0


# "sealing": the store seals its head (a new log file) every second, so
# one agent session spans many log files and the one the kill leaves must
# replay alone, from the definitions its records carry.
@pytest.mark.parametrize("store", ["one-log", "sealing"])
def test_server_killed_mid_run_agent_resyncs_without_loss(tmp_path, agent_factory, store):
    require_root()
    flags = ["--flush-after", "1s", "--compact-delay", "0s"] if store == "sealing" else []
    server = Server(tmp_path / "data", None, *flags).start()
    agent = agent_factory(server.url, "-on-cpu-sampling-rate=97", "-reporter-interval=1s").start()
    run_workload("cpu_split", 3)
    wait_until(lambda: server.flamegraph()["total"] > 100, 20, what="first batches")
    if store == "sealing":
        wait_until(lambda: metric(server, "ember_store_flushes_total") >= 2, 20,
                   what="the head to be sealed and written twice")
        run_workload("cpu_split", 1)
    # Killed without warning while the agent keeps sending; batches it had
    # not acknowledged are retried, and the agent's session is gone.
    server.restart(signal.SIGKILL)
    run_workload("cpu_split", 3)
    wait_until(lambda: "starting a new session" in agent.output(), 30,
               what="the agent to resync")
    assert metric(server, "ember_ingest_resyncs_total") >= 1
    agent.stop(timeout=30)
    sampled = agent_samples(agent)
    stored = settled_total(server)
    # Every sample the agent took is stored exactly once.
    assert stored == sampled, (stored, sampled, agent.output()[-2000:])
    assert "dropped" not in agent.output().split("stats:")[-1].replace("dropped=0", "")
    server.stop()


OUTAGE_S = int(os.environ.get("EMBER_TEST_OUTAGE_SECONDS", "120"))


def test_server_down_two_minutes(tmp_path, agent_factory):
    require_root()
    server = Server(tmp_path / "data").start()
    agent = agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    run_workload("cpu_split", 2)
    wait_until(lambda: server.flamegraph()["total"] > 50, 20, what="first batches")
    server.stop()
    t_down = time.time()
    # A workload keeps every CPU busy through the outage.
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            subprocess.run([os.path.join(WORKLOADS, "cpu_split"), "2"],
                           stdout=subprocess.DEVNULL, timeout=60)
    worker = threading.Thread(target=busy)
    worker.start()
    rss = []
    try:
        while time.time() - t_down < OUTAGE_S:
            rss.append(rss_kib(agent.proc.pid, "RssAnon"))
            time.sleep(5)
    finally:
        stop.set()
        worker.join()
    assert agent.running()
    # The agent's own memory stays bounded: the first and the last minute
    # look alike (a peak in between, such as an unwind table being built
    # for a large library some process on the host loaded, comes and goes).
    assert max(rss) < 100 * 1024, rss
    assert growth_kib(rss) < 24 * 1024, rss
    out = agent.output()
    assert out.count("cannot deliver batch") <= 1 + OUTAGE_S // 60, out
    server.start()
    wait_until(lambda: "delivering batches again" in agent.output(), 60,
               what="the agent to report recovery")
    agent.stop(timeout=60)
    sampled = agent_samples(agent)
    stored = settled_total(server)
    assert stored == sampled, (stored, sampled)
    server.stop()
