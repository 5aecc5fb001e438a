"""Where every sample came from: a process in a cgroup named like a Docker
container (its name and Kubernetes pod resolved through a Docker-compatible
API socket), a process of a SLURM job (cgroup path and SLURM_* variables)
with a job tag, and the agent's -tags, each found in the store by
attribute."""

import json
import os
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from conftest import require_root
from harness import WORKLOADS, wait_until

CID = "c0ffee" + "0123456789abcdef" * 3 + "0123456789"  # 64 hex digits


class UnixHTTPServer(HTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self):
        self.socket.bind(self.server_address)

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("unix", 0)


class FakeDocker(BaseHTTPRequestHandler):
    """The part of the Docker Engine API the agent asks."""

    def do_GET(self):
        if self.path == f"/containers/{CID}/json":
            body = json.dumps({"Id": CID, "Name": "/checkout-web", "Config": {"Labels": {
                "io.kubernetes.pod.name": "checkout-7d9f8b6c5-x2x9k",
                "io.kubernetes.pod.namespace": "shop",
                "io.kubernetes.container.name": "web"}}}).encode()
            self.send_response(200)
        else:
            body = b'{"message":"No such container"}'
            self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def start_in_cgroup(cgroup_dir, argv, env=None):
    """Starts argv inside cgroup_dir: a shell waits, is moved, then execs."""
    p = subprocess.Popen(["sh", "-c", 'read go; exec "$@"', "sh", *argv], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, env=env)
    with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
        f.write(str(p.pid))
    p.stdin.write(b"go\n")
    p.stdin.close()
    return p


def test_container_slurm_and_tags(tmp_path, server, agent_factory):
    require_root()
    sock = str(tmp_path / "docker.sock")
    api = UnixHTTPServer(sock, FakeDocker)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    tag = f"ember-test-{os.getpid()}"
    container_cg = f"/sys/fs/cgroup/unified/{tag}/docker-{CID}.scope"
    slurm_root = f"/sys/fs/cgroup/pids/slurm_{tag}"
    slurm_cg = f"{slurm_root}/uid_0/job_4242/step_0"
    os.makedirs(container_cg)
    os.makedirs(slurm_cg)
    try:
        agent_factory(server.url, "-on-cpu-sampling-rate=97", f"-container-runtime-socket={sock}",
                      "-tags=team:ml;canary").start()
        env = dict(os.environ, SLURM_JOB_ID="4242", SLURM_JOB_NAME="train-llm",
                   SLURM_JOB_USER="ada", EMBER_JOB_TAG="nightly")
        procs = [start_in_cgroup(container_cg, [os.path.join(WORKLOADS, "cpu_split"), "3"]),
                 start_in_cgroup(slurm_cg, [os.path.join(WORKLOADS, "unwind_c"), "chain", "3"],
                                 env=env)]
        for p in procs:
            assert p.wait(30) == 0

        def total(q):
            return server.flamegraph(q)["total"]
        container = f'container.id == "{CID}"'
        wait_until(lambda: total(container) > 150, 30, what="the container's samples")
        n = total(container)
        assert total('process.executable.name == "cpu_split"') == n
        assert total(container + ' && container.name == "checkout-web"'
                     ' && k8s.pod.name == "checkout-7d9f8b6c5-x2x9k"'
                     ' && k8s.namespace.name == "shop" && k8s.container.name == "web"'
                     ' && k8s.deployment.name == "checkout"') == n
        slurm = 'slurm.job.id == "4242"'
        wait_until(lambda: total(slurm) > 150, 30, what="the SLURM job's samples")
        assert total(slurm) == total('process.executable.name == "unwind_c"')
        assert total(slurm + ' && slurm.job.name == "train-llm" && slurm.job.user == "ada"'
                     ' && job.tag == "nightly"') == total(slurm)
        assert total(container + ' && ' + slurm) == 0
        # -tags on every sample.
        everything = server.flamegraph()["total"]
        assert total('user.tag.team == "ml" && user.tag == "canary;team:ml"') == everything
    finally:
        api.shutdown()
        for d in (container_cg, f"/sys/fs/cgroup/unified/{tag}", slurm_cg,
                  f"{slurm_root}/uid_0/job_4242", f"{slurm_root}/uid_0", slurm_root):
            try:
                os.rmdir(d)
            except OSError:
                pass
