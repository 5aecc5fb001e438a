"""Real database servers for the fleet store's tests, on loopback.

ClickHouseCluster starts two Debian clickhouse-server processes (not the
system service: each has its own config, data and log dirs under a tmp
dir and its own ports) as the two shards of a `remote_servers` cluster
named `ember_test`, which both servers know. Each also serves HTTPS
(https_url) with a certificate the cluster's own test CA (`ca`) signed. Postgres runs initdb into a
tmp dir and pg_ctl on a free port, as the `postgres` user (PostgreSQL
refuses to run as root). Both are pytest-free; tests/integration/conftest.py
wraps them in fixtures.

Each start records how long it took (`start_seconds`): the servers' own
start-up, from spawning to the first answer.
"""

import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from harness import make_ca

CLICKHOUSE_SERVER = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"
PG_BIN = "/usr/lib/postgresql/15/bin"
CLUSTER = "ember_test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start in {timeout} s ({last})")


SERVER_XML = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{dir}/log/server.log</log>
    <errorlog>{dir}/log/error.log</errorlog><size>10M</size><count>1</count></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <https_port>{https}</https_port>
  <openSSL><server><certificateFile>{cert}</certificateFile><privateKeyFile>{key}</privateKeyFile>
    <verificationMode>none</verificationMode><loadDefaultCAFile>false</loadDefaultCAFile>
    <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols></server></openSSL>
  <interserver_http_port>{inter}</interserver_http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <user_files_path>{dir}/user_files/</user_files_path>
  <format_schema_path>{dir}/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>134217728</mark_cache_size>
  <max_concurrent_queries>50</max_concurrent_queries>
  <remote_servers>
    <{cluster}>
{shards}
    </{cluster}>
  </remote_servers>
</yandex>
"""

USERS_XML = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users>
    <default><password></password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></default>
    <ember><password>{password}</password><networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile><quota>default</quota></ember>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"""

SHARD_XML = """      <shard><replica><host>127.0.0.1</host><port>{tcp}</port>
        <user>default</user></replica></shard>"""


class ClickHouseServer:
    def __init__(self, root, name, shards_xml, password, tls):
        self.dir = os.path.join(root, name)
        self.tls = tls  # (ca.pem, server.pem, server.key) of harness.make_ca
        self.http = free_port()
        self.https = free_port()
        self.tcp = free_port()
        self.inter = free_port()
        self.proc = None
        self.shards_xml = shards_xml
        self.password = password
        self.start_seconds = None

    def configure(self, shards_xml):
        for d in ("log", "data", "tmp", "user_files", "format_schemas"):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)
        with open(os.path.join(self.dir, "config.xml"), "w") as f:
            f.write(SERVER_XML.format(dir=self.dir, http=self.http, tcp=self.tcp, inter=self.inter,
                                      https=self.https, cert=self.tls[1], key=self.tls[2],
                                      cluster=CLUSTER, shards=shards_xml))
        with open(os.path.join(self.dir, "users.xml"), "w") as f:
            f.write(USERS_XML.format(password=self.password))

    @property
    def url(self):
        return f"http://127.0.0.1:{self.http}"

    @property
    def https_url(self):
        """The same server over TLS, its certificate signed by the
        cluster's test CA (ClickHouseCluster.ca)."""
        return f"https://127.0.0.1:{self.https}"

    def start(self):
        t0 = time.monotonic()
        self.out = open(os.path.join(self.dir, "stdout.log"), "ab")
        self.proc = subprocess.Popen([CLICKHOUSE_SERVER, f"--config-file={self.dir}/config.xml"],
                                     cwd=self.dir, stdout=self.out, stderr=subprocess.STDOUT)

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"clickhouse-server exited {self.proc.returncode}: "
                                   + open(os.path.join(self.dir, "stdout.log")).read()[-2000:])
            with urllib.request.urlopen(self.url + "/ping", timeout=1) as r:
                return r.read() == b"Ok.\n"
        try:
            _wait(up, 60, "clickhouse-server " + self.dir)
        except RuntimeError:
            if self.proc.poll() is not None:
                raise
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "out", None):
            self.out.close()
            self.out = None

    def query(self, sql, data=None, user="default", password="", external=None):
        """Runs sql (with data as the body after it, for INSERT ... FORMAT),
        returns the answer's text; raises RuntimeError with ClickHouse's
        message on an error. external: {name: (structure, TSV bytes)}, the
        external tables sent beside sql (multipart/form-data; no data)."""
        params = {"query": sql, "user": user}
        if password:
            params["password"] = password
        headers = {}
        if external:
            boundary = "ember-external-" + os.urandom(8).hex()
            parts = []
            for name, (structure, rows) in external.items():
                params[name + "_structure"] = structure
                params[name + "_format"] = "TSV"
                parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                             f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                             .encode() + rows + b"\r\n")
            data = b"".join(parts) + f"--{boundary}--\r\n".encode()
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
        req = urllib.request.Request(self.url + "/?" + urllib.parse.urlencode(params),
                                     data=data if data is not None else b"", method="POST",
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError(e.read().decode(errors="replace")) from None


class ClickHouseCluster:
    """Two clickhouse-server processes, shards of cluster `ember_test`."""

    def __init__(self, root=None, password="ember-test-pw"):
        self.root = root or tempfile.mkdtemp(prefix="ember-ch-")
        self.password = password
        tls_dir = pathlib.Path(self.root) / "tls"
        tls_dir.mkdir(exist_ok=True)
        tls = make_ca(tls_dir)
        self.ca = str(tls[0])
        self.servers = [ClickHouseServer(self.root, f"shard{i}", "", password, tls) for i in (1, 2)]
        shards = "\n".join(SHARD_XML.format(tcp=s.tcp) for s in self.servers)
        for s in self.servers:
            s.configure(shards)
        self.start_seconds = None

    @property
    def url(self):
        return self.servers[0].url

    def start(self):
        t0 = time.monotonic()
        for s in self.servers:
            s.start()
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self):
        for s in self.servers:
            s.stop()

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Postgres:
    """initdb into a tmp dir, pg_ctl start on a free loopback port, as the
    postgres user; the socket lives in the same dir."""

    def __init__(self):
        pw = pwd.getpwnam("postgres")
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        self.root = tempfile.mkdtemp(prefix="ember-pg-")
        os.chown(self.root, self.uid, self.gid)
        self.data = os.path.join(self.root, "data")
        self.port = free_port()
        self.start_seconds = None
        self.initdb_seconds = None

    def _as_postgres(self):
        os.setgid(self.gid)
        os.setuid(self.uid)

    def _run(self, *args):
        r = subprocess.run(list(args), preexec_fn=self._as_postgres if os.geteuid() == 0 else None,
                           cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({r.returncode}): {r.stdout[-2000:]}")
        return r.stdout

    @property
    def dsn(self):
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def start(self):
        t0 = time.monotonic()
        if not os.path.exists(os.path.join(self.data, "PG_VERSION")):
            self._run(f"{PG_BIN}/initdb", "-D", self.data, "-U", "postgres", "-A", "trust",
                      "--no-sync", "-E", "UTF8", "--locale=C")
            self.initdb_seconds = time.monotonic() - t0
        t1 = time.monotonic()
        self._run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "pg.log"),
                  "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "start")
        self.start_seconds = time.monotonic() - t1
        return self

    def psql(self, sql):
        return self._run(f"{PG_BIN}/psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                         "-At", "-v", "ON_ERROR_STOP=1", "-c", sql)

    def stop(self):
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._run(f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
