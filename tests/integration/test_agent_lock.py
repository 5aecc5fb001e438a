"""One agent per host: a second ember-agent refuses to start while the
first holds its lock file (two would report every sample twice), unless
it is given another lock file or none."""

import os

from conftest import require_root
from harness import Agent, Process, wait_until


def start_refused(server, *flags):
    """Starts an agent that must exit at once; returns (exit status, log)."""
    b = Agent(server.url, *flags)
    Process.start(b)
    try:
        rc = b.proc.wait(30)
    finally:
        b.stop()
    return rc, b.output()


def test_second_agent_refuses_to_start(server, agent_factory, tmp_path):
    require_root()
    lock = tmp_path / "run" / "agent.lock"  # its directory is created
    first = agent_factory(server.url, f"-lock-file={lock}").start()
    assert lock.read_text().strip() == str(first.proc.pid)

    rc, out = start_refused(server, f"-lock-file={lock}")
    assert rc == 1, out
    assert (f"another ember-agent (pid {first.proc.pid}) is running on this host and holds "
            f"{lock}") in out, out
    assert "-lock-file ''" in out, out
    assert "started" not in out, out
    # The same, given in a config file.
    conf = tmp_path / "agent.conf"
    conf.write_text(f"lock-file {lock}\n")
    rc, out = start_refused(server, f"-config={conf}")
    assert rc == 1 and "another ember-agent" in out, out
    assert first.running()

    # Told otherwise: no lock, or another file, and both run.
    agent_factory(server.url, "-lock-file=").start()
    agent_factory(server.url, f"-lock-file={tmp_path / 'other.lock'}").start()

    # The lock goes with the first agent: a new one may start.
    first.stop()
    again = agent_factory(server.url, f"-lock-file={lock}").start()
    wait_until(lambda: lock.read_text().strip() == str(again.proc.pid), 5,
               what="the lock file to name the new agent")
    assert os.path.exists(lock)
