"""The `ember` command line against a real server."""

import os
import ssl
import subprocess

from ember_batch import Batch, send_batch
from harness import BIN, WORKLOADS, Server
from harness import make_ca

EMBER = os.path.join(BIN, "ember")


def fill(server):
    b = Batch(agent_instance="cli-test")
    attrs = {"process.executable.name": "myapp", "thread.name": "main"}
    b.add(["main", "compute", "hash"], attrs, value=50)
    b.add(["main", "compute"], attrs, value=10)
    b.add(["main", "parse"], attrs, value=40)
    send_batch(server.url, b.encode(sequence=1))


def run(*args, env=None):
    return subprocess.run([EMBER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=30, env=env)


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


def test_https_with_a_private_ca_and_a_token(tmp_path):
    """Over https: --ca-file or $SSL_CERT_FILE trusts a private CA, --insecure
    skips the check, nothing trusts it by default; --token (or
    $EMBER_SERVICE_TOKEN, or @FILE) is sent as the bearer token."""
    ca, cert, key = make_ca(tmp_path)
    ctx = ssl.create_default_context(cafile=str(ca))
    server = Server(tmp_path / "data", None, "--tls-cert", str(cert), "--tls-key", str(key),
                    "--ingest-tokens", "s3cret", ssl_context=ctx).start()
    try:
        env = {k: v for k, v in os.environ.items()
               if k not in ("SSL_CERT_FILE", "EMBER_SERVICE_TOKEN", "EMBER_ENDPOINT")}
        ok = "00000000-0000-0000-0000-000000000000  default"
        r = run("projects", "-e", server.url, env=env)
        assert r.returncode == 1 and "certificate" in r.stderr.lower(), r.stderr
        r = run("projects", "-e", server.url, "--ca-file", str(ca), env=env)
        assert r.returncode == 0 and ok in r.stdout, r.stderr
        r = run("top", "-e", server.url, "--ca-file", str(ca), env=env)
        assert r.returncode == 0 and r.stdout.startswith("0 samples"), r.stderr
        r = run("projects", "-e", server.url, env={**env, "SSL_CERT_FILE": str(ca)})
        assert r.returncode == 0 and ok in r.stdout, r.stderr
        r = run("projects", "-e", server.url, "--insecure", env=env)
        assert r.returncode == 0 and ok in r.stdout, r.stderr
        r = run("projects", "-e", server.url, "--ca-file", str(tmp_path / "missing.pem"), env=env)
        assert r.returncode == 2 and "--ca-file" in r.stderr, r.stderr

        # The symbol upload is an ingest route: it needs one of the tokens.
        exe = os.path.join(WORKLOADS, "cpu_split")
        up = ("upload-symbols", "-e", server.url, "--ca-file", str(ca), "--no-dwarf", exe)
        r = run(*up, env=env)
        assert r.returncode != 0 and "401" in r.stderr, (r.stdout, r.stderr)
        r = run(*up, "--token", "wrong", env=env)
        assert r.returncode != 0 and "401" in r.stderr, (r.stdout, r.stderr)
        r = run(*up, "--token", "s3cret", env=env)
        assert r.returncode == 0, r.stderr
        r = run(*up, env={**env, "EMBER_SERVICE_TOKEN": "s3cret"})
        assert r.returncode == 0, r.stderr
        (tmp_path / "token").write_text("s3cret\n")
        r = run(*up, "--token", "@" + str(tmp_path / "token"), env=env)
        assert r.returncode == 0, r.stderr
        # --token wins over the environment.
        r = run(*up, "--token", "wrong", env={**env, "EMBER_SERVICE_TOKEN": "s3cret"})
        assert r.returncode != 0 and "401" in r.stderr, r.stderr
    finally:
        server.stop()


def test_help_names_the_flags_and_the_environment():
    r = run("--help")
    assert r.returncode == 0
    for word in ("--token", "--ca-file", "--insecure", "EMBER_SERVICE_TOKEN", "SSL_CERT_FILE",
                 "EMBER_ENDPOINT"):
        assert word in r.stdout, word


def test_top_group_by(server):
    """ember top --group-by LEVEL: the groups, largest first, each with its
    own top functions (not the same list as without the flag)."""
    b = Batch(agent_instance="cli-group")
    b.add(["main", "crunch"], {"process.executable.name": "alpha", "thread.name": "a"}, value=70)
    b.add(["main", "crunch"], {"process.executable.name": "beta", "thread.name": "b"}, value=20)
    b.add(["main", "idle"], {"process.executable.name": "beta", "thread.name": "b"}, value=10)
    send_batch(server.url, b.encode(sequence=1))
    plain = run("top", "-e", server.url, "--since", "10m")
    grouped = run("top", "-e", server.url, "--since", "10m", "--group-by", "executable")
    assert plain.returncode == 0 and grouped.returncode == 0, grouped.stderr
    assert plain.stdout != grouped.stdout
    # Without the flag: crunch 90 across both programs.
    rows = [l.split() for l in plain.stdout.splitlines()[2:]]
    assert rows[0][2:4] == ["90", "crunch"], rows
    lines = grouped.stdout.splitlines()
    heads = [l for l in lines if l.startswith("executable ")]
    assert heads == ["executable alpha: 70.00% 70", "executable beta: 30.00% 30"], lines
    beta = lines[lines.index(heads[1]) + 2:]
    assert [l.split()[2:4] for l in beta[:2]] == [["20", "crunch"], ["10", "idle"]], lines
    alpha = lines[lines.index(heads[0]) + 2:lines.index(heads[1])]
    assert alpha[0].split()[2:4] == ["70", "crunch"], lines
    assert "idle" not in "".join(alpha), lines
