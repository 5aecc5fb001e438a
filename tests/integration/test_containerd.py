"""Container names from a real containerd (agent/containerd.c): the test
starts its own containerd (Debian's package; private root, state, socket
and config, the CRI plugin off), creates container records through
containerd's gRPC API (Containers/Create, sent with the curl command over
HTTP/2, the message encoded here), runs workloads in cgroups named like
the containers', profiles them with the agent pointed at that socket and
finds the names in the server's store:
  - a Kubernetes container (namespace k8s.io, the CRI plugin's labels):
    container.name, k8s.container.name, k8s.pod.name, k8s.namespace.name
    and k8s.deployment.name;
  - a nerdctl container (namespace default, the nerdctl/name label), which
    the agent finds after k8s.io answered NOT_FOUND;
  - a container containerd does not know: its id, no name.
A second test points the agent at a containerd that never answers and
checks that the samples still come, with ids and without names."""

import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time

import pytest

from conftest import MuteListener, require_root
from harness import WORKLOADS, kill_if_running, settled_total, wait_until
from test_attribution import rmdirs, sample_container, start_in_cgroup

from ember_batch import varint  # noqa: E402  (tests/lib)

CID_K8S = "a1" * 32
CID_NERD = "b2" * 32
CID_UNKNOWN = "c3" * 32

CONFIG = """version = 2
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]
[plugins."io.containerd.internal.v1.opt"]
  path = "{dir}/opt"
"""


# --- a few protobuf fields, by hand ------------------------------------------------

def field(number, value):
    """A length-delimited field (string, bytes or message)."""
    if isinstance(value, str):
        value = value.encode()
    return varint(number << 3 | 2) + varint(len(value)) + value


def create_request(cid, labels):
    """CreateContainerRequest{container: Container{id = 1, labels = 2,
    runtime = 4 {name = 1}, spec = 5 (google.protobuf.Any)}}: what
    containerd's metadata store requires of a container record; no image,
    no snapshot."""
    c = field(1, cid)
    for k, v in labels.items():
        c += field(2, field(1, k) + field(2, v))
    c += field(4, field(1, "io.containerd.runc.v2"))
    c += field(5, field(1, "types.containerd.io/opencontainers/runtime-spec/1/Spec")
               + field(2, b"{}"))
    return field(1, c)


def grpc_call(sock, method, namespace, message):
    """One unary call with the curl command; returns (grpc-status, body)."""
    frame = b"\0" + struct.pack(">I", len(message)) + message
    r = subprocess.run(
        ["curl", "-sS", "--max-time", "10", "--http2-prior-knowledge", "--unix-socket", sock,
         "-H", "content-type: application/grpc", "-H", "te: trailers",
         "-H", f"containerd-namespace: {namespace}", "--data-binary", "@-",
         "-D", "/dev/stderr", "-o", "-", f"http://localhost{method}"],
        input=frame, capture_output=True, timeout=20)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    status = None
    for line in r.stderr.decode(errors="replace").splitlines():
        if line.lower().startswith("grpc-status:"):
            status = int(line.split(":", 1)[1])
    return status, r.stdout


class Containerd:
    """containerd of this test's own: everything under a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ember-ctrd-")
        self.sock = os.path.join(self.dir, "containerd.sock")
        self.log = os.path.join(self.dir, "containerd.log")
        self.proc = None

    def start(self):
        binary = shutil.which("containerd")
        if not binary:
            pytest.fail("containerd is missing: scripts/install-deps.sh installs it (apt)")
        config = os.path.join(self.dir, "config.toml")
        with open(config, "w") as f:
            f.write(CONFIG.format(dir=self.dir))
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [binary, "--config", config, "--root", os.path.join(self.dir, "root"),
                 "--state", os.path.join(self.dir, "state"), "--address", self.sock],
                stdout=log, stderr=subprocess.STDOUT)

        def answers():
            assert self.proc.poll() is None, self.output()
            if not os.path.exists(self.sock):
                return False
            status, _ = grpc_call(self.sock, "/containerd.services.containers.v1.Containers/Get",
                                  "default", field(1, "probe"))
            return status == 5  # NOT_FOUND: serving
        wait_until(answers, 30, interval=0.2, what="containerd to serve")
        return self

    def create(self, namespace, cid, labels):
        status, _ = grpc_call(self.sock, "/containerd.services.containers.v1.Containers/Create",
                              namespace, create_request(cid, labels))
        assert status == 0, (status, self.output())

    def output(self):
        try:
            with open(self.log) as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def test_containerd_names(server, agent_factory):
    require_root()
    ctrd = Containerd()
    tag = f"ember-test-ctrd-{os.getpid()}"
    root = f"/sys/fs/cgroup/unified/{tag}"
    cg_k8s = f"{root}/cri-containerd-{CID_K8S}.scope"
    cg_nerd = f"{root}/nerdctl-{CID_NERD}.scope"
    cg_unknown = f"{root}/cri-containerd-{CID_UNKNOWN}.scope"
    try:
        ctrd.start()
        ctrd.create("k8s.io", CID_K8S, {
            "io.cri-containerd.kind": "container",
            "io.kubernetes.container.name": "web",
            "io.kubernetes.pod.name": "checkout-7d9f8b6c5-x2x9k",
            "io.kubernetes.pod.namespace": "shop",
            "io.kubernetes.pod.uid": "5e6c7d8a-1b2c-4d3e-8f40-123456789abc"})
        ctrd.create("default", CID_NERD, {"nerdctl/name": "redis-1"})
        # The same id in another namespace than the one the agent asks
        # first does not confuse it: k8s.io's record wins.
        ctrd.create("moby", CID_K8S, {"nerdctl/name": "not-this-one"})
        for d in (cg_k8s, cg_nerd, cg_unknown):
            os.makedirs(d)
        agent = agent_factory(server.url, "-on-cpu-sampling-rate=97", "-v",
                              f"-container-runtime-socket={ctrd.sock}").start()
        cpu_split = os.path.join(WORKLOADS, "cpu_split")
        procs = [start_in_cgroup(cg, [cpu_split, "3"]) for cg in (cg_k8s, cg_nerd, cg_unknown)]
        for p in procs:
            assert p.wait(30) == 0

        def total(q):
            return server.flamegraph(q)["total"]
        k8s = f'container.id == "{CID_K8S}"'
        nerd = f'container.id == "{CID_NERD}"'
        unknown = f'container.id == "{CID_UNKNOWN}"'
        for q in (k8s, nerd, unknown):
            settled_total(server, q, more_than=100)
        # Every sample of each container carries what containerd said (the
        # name is asked before the first sample is attributed).
        n = total(k8s)
        assert total(k8s + ' && container.name == "web" && k8s.container.name == "web"'
                     ' && k8s.pod.name == "checkout-7d9f8b6c5-x2x9k"'
                     ' && k8s.namespace.name == "shop"'
                     ' && k8s.deployment.name == "checkout"') == n, agent.output()
        m = total(nerd)
        assert total(nerd + ' && container.name == "redis-1"') == m, agent.output()
        assert total(nerd + ' && k8s.pod.name != ""') == 0
        assert total(unknown) > 0
        assert total(unknown + ' && container.name != ""') == 0
        assert total('container.name == "not-this-one"') == 0
        assert ctrd.proc.poll() is None, ctrd.output()
    finally:
        for p in locals().get("procs", []):
            kill_if_running(p)
        ctrd.stop()
        rmdirs(cg_k8s, cg_nerd, cg_unknown, root)


def test_containerd_hung(server, agent_factory):
    """A socket named like containerd's that accepts and never answers: each
    container costs the agent one timeout (300 ms), no more, and its samples
    still come, with the id and without a name."""
    require_root()
    d = tempfile.mkdtemp(prefix="ember-ctrd-")
    sock = os.path.join(d, "containerd.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock)
    listener.listen(64)
    mute = MuteListener(listener)
    tag = f"ember-test-ctrd-hung-{os.getpid()}"
    root = f"/sys/fs/cgroup/unified/{tag}"
    cg = f"{root}/cri-containerd-{CID_K8S}.scope"
    os.makedirs(cg)
    try:
        q = sample_container(server, agent_factory, sock, cg, CID_K8S, 100)
        assert server.flamegraph(q + ' && container.name != ""')["total"] == 0
        # Asked once per table (one connection each: a lookup stops at the
        # first timeout and the failure is cached; the profiler's process
        # table and the host metrics' keep a table each).
        assert 1 <= len(mute.accepted) <= 2, len(mute.accepted)
    finally:
        mute.close()
        shutil.rmtree(d, ignore_errors=True)
        rmdirs(cg, root)
