"""The README's first command: `make run` brings up server and agent,
serves the UI, profiles this host, and stops both cleanly on Ctrl-C."""

import os
import signal
import subprocess
import time

from conftest import require_root
from harness import ROOT, find, free_port, http, run_workload, wait_until, Server


def test_make_run_end_to_end(tmp_path):
    require_root()
    port = free_port()
    env = dict(os.environ, EMBER_RUN_LISTEN=f"127.0.0.1:{port}", EMBER_RUN_DATA=str(tmp_path / "d"),
               EMBER_RUN_AGENT_FLAGS="-reporter-interval=1s")
    log = open(tmp_path / "make-run.log", "wb")
    p = subprocess.Popen(["make", "run"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        output = lambda: (tmp_path / "make-run.log").read_text(errors="replace")  # noqa: E731
        wait_until(lambda: "ember is running" in output(), 300, interval=0.5,
                   what="make run to start ember")
        assert f"http://127.0.0.1:{port}" in output()
        st, body = http("GET", f"http://127.0.0.1:{port}/")
        assert st == 200 and b"<html" in body.lower()
        srv = Server(tmp_path / "unused", port=port)  # a handle to query the running server
        run_workload("cpu_split", 4)  # long enough for an agent still starting on a busy host
        wait_until(lambda: find(srv.flamegraph('process.executable.name == "cpu_split"')["root"],
                                "hot_a"), 30, interval=1.0, what="samples from make run's agent")
    finally:
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        try:
            rc = p.wait(30)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        log.close()
    assert "stopped." in (tmp_path / "make-run.log").read_text()
    # make itself is interrupted too (as in a terminal): it exits by SIGINT.
    assert rc in (0, -signal.SIGINT, 130), rc
    time.sleep(0.5)
    ps = subprocess.run(["pgrep", "-f", f"--listen 127.0.0.1:{port}"], stdout=subprocess.PIPE)
    assert ps.stdout.strip() == b"", "ember-server still running after Ctrl-C"
    ps = subprocess.run(["pgrep", "-f", f"collection-agent=127.0.0.1:{port}"],
                        stdout=subprocess.PIPE)
    assert ps.stdout.strip() == b"", "ember-agent still running after Ctrl-C"
