"""The GPU-machine scripts (tests/device/) run here on the TEST-ONLY fake
driver (EMBER_E2E_FAKE=1), as their prepare line says, from a bundle made
of this build: so that a script that no longer works is found here, not
on a GPU machine's scarce minutes. And the scripts' guard against a
bundle older than the build (a bundle from before PC sampling made
gpu_deep.sh see 0 % of the kernels' time under cuda_sass)."""

import os
import shutil
import subprocess
import sys

from conftest import require_root
from harness import BUILD, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "device"))
import devrun  # noqa: E402


def bundle():
    r = subprocess.run([os.path.join(ROOT, "scripts", "device-bundle.sh")], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 0, r.stdout


def test_gpu_deep_on_the_fake_driver(tmp_path):
    require_root()
    bundle()
    env = dict(os.environ, EMBER_E2E_FAKE="1", OUT=str(tmp_path))
    r = subprocess.run([os.path.join(ROOT, "tests", "device", "gpu_deep.sh")], cwd=ROOT, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ALL OK"), r.stdout[-4000:]
    assert "ok   mem_bound: 100.0 % of its time under cuda_sass -> cuda_stall" in r.stdout, r.stdout[-4000:]
    assert "ok   mem_bound: every cuda_sass frame named by its mnemonic" in r.stdout, r.stdout[-4000:]
    assert "ok   the library said PC sampling is on" in r.stdout, r.stdout[-4000:]


def test_a_stale_library_is_named(tmp_path):
    built = os.path.join(BUILD, "lib", "libembercuda.so")
    same = tmp_path / "same.so"
    shutil.copyfile(built, same)
    assert devrun.stale_library(str(same)) is None
    other = tmp_path / "other.so"
    data = bytearray(open(built, "rb").read())
    data[-1] ^= 1
    other.write_bytes(bytes(data))
    assert "another libembercuda.so" in devrun.stale_library(str(other))
