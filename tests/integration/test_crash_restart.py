"""The agent tells why its previous run ended: a crash (a fatal signal)
leaves a note in -state-dir with the signal and a backtrace, which the
next start logs once; the systemd unit restarts a failed agent and writes
what systemd saw (ExecStopPost) for the next start to log too."""

import os
import re
import signal
import subprocess

from conftest import require_root
from harness import Agent, wait_until

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
UNIT = os.path.join(ROOT, "deploy", "systemd", "ember-agent.service")


def unit_lines():
    with open(UNIT) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def test_crash_note_is_logged_by_the_next_start(server, tmp_path):
    require_root()
    state = tmp_path / "state"
    first = Agent(server.url, f"-state-dir={state}").start()
    pid = first.proc.pid
    first.proc.send_signal(signal.SIGSEGV)
    assert first.proc.wait(20) == -signal.SIGSEGV  # it still dies of the signal
    first.stop()
    note = (state / "agent.crash").read_text()
    assert re.match(r"signal 11 \(SIGSEGV\) sent by pid \d+ in thread \S+ \(tid \d+\) of pid "
                    rf"{pid} at unix time \d+\n", note), note
    assert "ember-agent" in note  # a backtrace of the agent's frames

    second = Agent(server.url, f"-state-dir={state}").start()
    want = "the previous run of the agent crashed: signal 11 (SIGSEGV) sent by pid"
    wait_until(lambda: want in second.output(), 10, what="the crash to be logged")
    line = next(ln for ln in second.output().splitlines() if want in ln)
    assert f"of pid {pid}" in line and " | " in line, line  # the backtrace, one line
    second.stop()
    assert not (state / "agent.crash").exists()
    assert (state / "agent.crash.prev").read_text() == note
    # Said once: a start after a clean stop says nothing of it.
    third = Agent(server.url, f"-state-dir={state}").start()
    third.stop()
    assert "previous run" not in third.output(), third.output()


def test_unit_restarts_and_notes_how_a_run_ended(server, tmp_path):
    """The unit restarts a failed agent (with a growing wait where systemd
    knows how), and its ExecStopPost line, run as systemd runs it, leaves a
    note the next start logs; a clean stop's note is not logged."""
    require_root()
    lines = unit_lines()
    assert "Restart=on-failure" in lines or "Restart=always" in lines
    assert any(ln.startswith("RestartSec=") for ln in lines)
    assert "StartLimitIntervalSec=0" in lines  # never gives up
    post = [ln.split("=", 1)[1] for ln in lines if ln.startswith("ExecStopPost=")]
    assert len(post) == 1
    # systemd's own escapes: %% is %, $$ is $.
    cmd = post[0].replace("%%", "%").replace("$$", "$")
    assert cmd.startswith("/bin/sh -c '") and cmd.endswith("'")
    script = cmd[len("/bin/sh -c '"):-1]
    assert "/run/ember/agent.exit" in script
    state = tmp_path / "state"
    state.mkdir()
    script = script.replace("/run/ember", str(state))

    def stop_post(result, code, status):
        env = dict(os.environ, SERVICE_RESULT=result, EXIT_CODE=code, EXIT_STATUS=status)
        subprocess.run(["/bin/sh", "-c", script], env=env, check=True)

    stop_post("oom-kill", "killed", "KILL")
    a = Agent(server.url, f"-state-dir={state}").start()
    want = ("the previous run of the agent ended abnormally, as systemd saw it: "
            "SERVICE_RESULT=oom-kill EXIT_CODE=killed EXIT_STATUS=KILL")
    wait_until(lambda: want in a.output(), 10, what="the unit's note to be logged")
    a.stop()
    assert not (state / "agent.exit").exists()
    stop_post("success", "exited", "0")
    b = Agent(server.url, f"-state-dir={state}").start()
    b.stop()
    assert "previous run" not in b.output(), b.output()
    assert not (state / "agent.exit").exists()
