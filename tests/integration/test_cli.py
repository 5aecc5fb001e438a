"""The `ember` command line against a real server."""

import os
import subprocess

from ember_batch import Batch, send_batch
from harness import BIN

EMBER = os.path.join(BIN, "ember")


def fill(server):
    b = Batch(agent_instance="cli-test")
    attrs = {"process.executable.name": "myapp", "thread.name": "main"}
    b.add(["main", "compute", "hash"], attrs, value=50)
    b.add(["main", "compute"], attrs, value=10)
    b.add(["main", "parse"], attrs, value=40)
    send_batch(server.url, b.encode(sequence=1))


def run(*args):
    return subprocess.run([EMBER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=30)


def test_top_and_flamegraph(server):
    fill(server)
    r = run("top", "--endpoint", server.url, "--since", "10m")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("100 samples at 19 Hz")
    rows = [l.split() for l in lines[2:]]
    # By self time: hash 50, parse 40, compute 10; compute's total is 60.
    assert [row[3] for row in rows[:3]] == ["hash", "parse", "compute"]
    compute = next(row for row in rows if row[3] == "compute")
    assert compute[0] == "10.00%" and compute[1] == "60.00%"
    r = run("flamegraph", "-e", server.url, "--group-by", "executable",
            "--query", 'thread.name == "main"')
    assert r.returncode == 0, r.stderr
    assert "myapp" in r.stdout and "compute  [myapp]" in r.stdout
    r = run("projects", "--endpoint", server.url)
    assert "00000000-0000-0000-0000-000000000000  default" in r.stdout


def test_errors_are_explained(server):
    r = run("flamegraph", "--endpoint", server.url, "--query", "host.name ==")
    assert r.returncode == 1 and "column" in r.stderr
    r = run("top", "--endpoint", "http://127.0.0.1:1")
    assert r.returncode == 1 and "127.0.0.1:1" in r.stderr
    r = run("top", "--since", "soon")
    assert r.returncode == 2 and "--since" in r.stderr
    r = run("frobnicate")
    assert r.returncode == 2 and "usage" in r.stderr
