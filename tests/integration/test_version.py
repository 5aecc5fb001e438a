"""-version and --version on ember-agent, ember-server and ember: the
release, the source it was built from and the running binary's GNU build
ID, which must be the one in the file's note (readelf -n)."""

import os
import re
import subprocess

import pytest

from harness import BIN


def build_id_of(path):
    out = subprocess.run(["readelf", "-n", path], stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, out
    return m.group(1)


@pytest.mark.parametrize("program", ["ember-agent", "ember-server", "ember"])
@pytest.mark.parametrize("flag", ["-version", "--version"])
def test_version_and_build_id(program, flag):
    path = os.path.join(BIN, program)
    # No other flag is needed (the agent's -collection-agent is not set).
    r = subprocess.run([path, flag], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=10, env={"PATH": os.environ.get("PATH", "/usr/bin")})
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"(\S+) (\d+\.\d+\.\d+) \(([^)]+)\) build-id ([0-9a-f]+)\n", r.stdout)
    assert m, r.stdout
    assert m.group(1) == program
    assert m.group(4) == build_id_of(path)


def test_help_lists_version():
    for program in ("ember-agent", "ember-server"):
        r = subprocess.run([os.path.join(BIN, program), "-help"], stdout=subprocess.PIPE,
                           text=True, timeout=10)
        assert r.returncode == 0 and "-version" in r.stdout, program
