"""scripts/install-deps.sh: `make run` installs what building and running
need, `make test` that and what only the tests need; nothing the script
installs is left enabled (or started) as a service unless it was before."""

import os
import re
import subprocess

from harness import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "install-deps.sh")
TEST_ONLY = {"chromium", "containerd", "debuginfod", "linux-perf", "libc6-dbg", "libcmocka-dev",
             "python3-pytest", "libclang-rt-14-dev", "clickhouse-server", "postgresql"}


def package_set(name):
    r = subprocess.run([SCRIPT, "--list", name], check=True, stdout=subprocess.PIPE, text=True)
    return r.stdout.split()


def test_run_installs_a_subset_of_test():
    run, test = package_set("run"), package_set("test")
    assert len(set(run)) == len(run) and len(set(test)) == len(test)
    assert set(run) < set(test)
    assert not set(run) & TEST_ONLY, set(run) & TEST_ONLY
    assert TEST_ONLY <= set(test)
    assert {"make", "gcc", "clang", "libbpf-dev", "bpftool", "libcurl4-openssl-dev",
            "libmicrohttpd-dev", "curl"} <= set(run)
    # make run asks for the run set only (and builds no test workloads);
    # make test and make bench for the test set.
    mk = open(os.path.join(ROOT, "Makefile")).read()

    def recipe(target):
        m = re.search(rf"^{re.escape(target)}:([^\n]*)\n((?:\t[^\n]*\n)*)", mk, re.M)
        assert m, target
        return m.group(1).split(), m.group(2)
    assert recipe("run")[0] == ["deps-run"]
    assert "$(WORKLOADS)" not in recipe("run")[1]
    assert "scripts/install-deps.sh run" in recipe("deps-run")[1]
    assert recipe("test")[0] == ["deps"] and recipe("bench")[0] == ["deps"]
    assert "scripts/install-deps.sh test" in recipe("deps")[1]


def is_enabled(unit):
    return subprocess.run(["systemctl", "is-enabled", unit], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True).stdout.strip()


def test_an_installed_service_is_not_left_enabled(tmp_path):
    """containerd as a fresh install sees it: apt-get (a stand-in that does
    what containerd's postinst does on a first install: enables the unit,
    "Created symlink .../multi-user.target.wants/containerd.service")
    runs with a policy-rc.d that refuses starts; afterwards containerd is
    enabled exactly when it was before. The real script and systemctl run;
    only dpkg-query (containerd reads as missing) and apt-get are
    stand-ins."""
    assert os.geteuid() == 0, "runs install-deps.sh as root (CI runs as root)"
    fake = tmp_path / "bin"
    fake.mkdir()
    record = tmp_path / "apt.log"
    (fake / "dpkg-query").write_text(
        '#!/bin/sh\nfor a; do last=$a; done\n'
        '[ "$last" = containerd ] && exit 1\n'
        'exec /usr/bin/dpkg-query "$@"\n')
    (fake / "apt-get").write_text(
        f'#!/bin/sh\necho "apt-get $*" >> {record}\n'
        '[ "$1" = install ] || exit 0\n'
        f'/usr/sbin/policy-rc.d containerd.service start; echo "policy-rc.d $?" >> {record}\n'
        # what the postinst's deb-systemd-helper does on a first install
        'systemctl enable containerd.service\n'
        f'echo "during $(systemctl is-enabled containerd.service)" >> {record}\n')
    for f in ("dpkg-query", "apt-get"):
        (fake / f).chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    before = is_enabled("containerd.service")
    assert before in ("enabled", "disabled"), before
    try:
        # The run set does not hold containerd: nothing to install.
        r = subprocess.run([SCRIPT, "run"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        assert not record.exists(), record.read_text()
        r = subprocess.run([SCRIPT, "test"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        log = record.read_text().splitlines()
        assert "apt-get install -y -qq --no-install-recommends containerd" in log, log
        assert "policy-rc.d 101" in log, log  # no service could start meanwhile
        assert "during enabled" in log, log   # the install did enable it
        after = is_enabled("containerd.service")
        assert after == before, (before, after, r.stdout)
        if before != "enabled":
            assert "disabling containerd.service" in r.stdout, r.stdout
    finally:
        now = is_enabled("containerd.service")
        if now != before:
            subprocess.run(["systemctl", "enable" if before == "enabled" else "disable",
                            "containerd.service"], stderr=subprocess.DEVNULL)
