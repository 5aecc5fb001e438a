"""Where every sample came from: a process in a cgroup named like a Docker
container (its name and Kubernetes pod resolved through a Docker-compatible
API socket), one named like a CRI-O container (through CRI-O's info API;
containerd's gRPC API is test_containerd.py's), a process of a SLURM job (cgroup path and SLURM_* variables)
with a job tag, the agent's -tags, and -k8s-pod-labels from a fake
kubelet for processes in cgroups named like pods', each found in the store
by attribute."""

import json
import os
import socket
import subprocess
import threading
import time
from http.server import HTTPServer

from conftest import StubHandler, require_root
from harness import DEFAULT_PROJECT, WORKLOADS, free_port, http, settled_total, wait_until

CID = "c0ffee" + "0123456789abcdef" * 3 + "0123456789"  # 64 hex digits


class UnixHTTPServer(HTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self):
        self.socket.bind(self.server_address)

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("unix", 0)


class FakeAPI(StubHandler):
    """A fake runtime or kubelet API: reply() sends one JSON answer."""


def rmdirs(*paths):
    """Removes each directory (cgroups a test made) in the order given,
    innermost first; one already gone or still busy is passed over."""
    for d in paths:
        try:
            os.rmdir(d)
        except OSError:
            pass


class FakeDocker(FakeAPI):
    """The part of the Docker Engine API the agent asks."""

    def do_GET(self):
        if self.path == f"/containers/{CID}/json":
            body = json.dumps({"Id": CID, "Name": "/checkout-web", "Config": {"Labels": {
                "io.kubernetes.pod.name": "checkout-7d9f8b6c5-x2x9k",
                "io.kubernetes.pod.namespace": "shop",
                "io.kubernetes.container.name": "web"}}}).encode()
            self.reply(200, body)
        else:
            body = b'{"message":"No such container"}'
            self.reply(404, body)


def start_in_cgroup(cgroup_dir, argv, env=None):
    """Starts argv inside cgroup_dir: a shell waits, is moved, then execs."""
    p = subprocess.Popen(["sh", "-c", 'read go; exec "$@"', "sh", *argv], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, env=env)
    with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
        f.write(str(p.pid))
    p.stdin.write(b"go\n")
    p.stdin.close()
    return p


def sample_container(server, agent_factory, sock, cg, cid, more_than):
    """Starts an agent that asks the runtime API at sock, runs cpu_split
    for 3 s in cgroup cg and waits until container cid has more_than
    samples: the CEL query of that container."""
    agent_factory(server.url, "-on-cpu-sampling-rate=97",
                  f"-container-runtime-socket={sock}").start()
    p = start_in_cgroup(cg, [os.path.join(WORKLOADS, "cpu_split"), "3"])
    assert p.wait(30) == 0
    q = f'container.id == "{cid}"'
    settled_total(server, q, more_than)
    return q


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
                   SLURM_JOB_USER="trainer", EMBER_JOB_TAG="nightly")
        procs = [start_in_cgroup(container_cg, [os.path.join(WORKLOADS, "cpu_split"), "3"]),
                 start_in_cgroup(slurm_cg, [os.path.join(WORKLOADS, "unwind_c"), "chain", "3"],
                                 env=env)]
        for p in procs:
            assert p.wait(30) == 0

        def total(q):
            return server.flamegraph(q)["total"]

        def check_group(group, exe, attrs):
            """Every sample of the workload exe carries the group (a
            container, a SLURM job) and its attrs; the group holds nothing
            else but, perhaps, a sample or two of the shell that waited in
            it and exec'd the workload (start_in_cgroup)."""
            n = settled_total(server, group, more_than=150)
            workload = total(f'process.executable.name == "{exe}"')
            assert total(group + f' && process.executable.name == "{exe}"') == workload
            assert n - workload <= 3
            assert total(group + attrs) == n
        container = f'container.id == "{CID}"'
        check_group(container, "cpu_split",
                    ' && container.name == "checkout-web"'
                    ' && k8s.pod.name == "checkout-7d9f8b6c5-x2x9k"'
                    ' && k8s.namespace.name == "shop" && k8s.container.name == "web"'
                    ' && k8s.deployment.name == "checkout"')
        slurm = 'slurm.job.id == "4242"'
        check_group(slurm, "unwind_c",
                    ' && slurm.job.name == "train-llm" && slurm.job.user == "trainer"'
                    ' && job.tag == "nightly"')
        assert total(container + ' && ' + slurm) == 0
        # -tags on every sample.
        everything = server.flamegraph()["total"]
        assert total('user.tag.team == "ml" && user.tag == "canary;team:ml"') == everything
    finally:
        api.shutdown()
        rmdirs(container_cg, f"/sys/fs/cgroup/unified/{tag}", slurm_cg,
               f"{slurm_root}/uid_0/job_4242", f"{slurm_root}/uid_0", slurm_root)


# --- CRI-O's info API ----------------------------------------------------------------

CRIO_CID = "d00d" + "fedcba9876543210" * 3 + "fedcba987654"  # 64 hex digits


class FakeCrio(FakeAPI):
    """CRI-O's info API, GET /containers/{id}: the ContainerInfo JSON of a
    Kubernetes container (CRI-O's own name, the CRI labels); everything
    asked is recorded."""

    def do_GET(self):
        self.server.requests.append(self.path)
        if self.path == f"/containers/{CRIO_CID}":
            body = json.dumps({
                "name": "k8s_api_payments-5c8d7f9b4-qr7tz_billing_0f1e2d3c_0", "pid": 4242,
                "image": "registry.example/api:1", "created_time": 1700000000000000000,
                "labels": {"io.kubernetes.container.name": "api",
                           "io.kubernetes.pod.name": "payments-5c8d7f9b4-qr7tz",
                           "io.kubernetes.pod.namespace": "billing"},
                "annotations": {}, "crio_annotations": {}, "log_path": "", "root": "",
                "sandbox": "", "ip_addresses": []}).encode()
            self.reply(200, body)
        else:
            body = b"can't find the container"
            self.reply(404, body)


def test_crio_info_api(tmp_path, server, agent_factory):
    """A socket whose path names CRI-O is asked GET /containers/{id} (not
    Docker's /containers/{id}/json), once per container."""
    require_root()
    sock_dir = tmp_path / "crio"
    sock_dir.mkdir()
    sock = str(sock_dir / "crio.sock")
    api = UnixHTTPServer(sock, FakeCrio)
    api.requests = []
    threading.Thread(target=api.serve_forever, daemon=True).start()
    root = f"/sys/fs/cgroup/unified/ember-test-crio-{os.getpid()}"
    cg = f"{root}/crio-{CRIO_CID}.scope"
    os.makedirs(cg)
    try:
        q = sample_container(server, agent_factory, sock, cg, CRIO_CID, 150)

        def total(q):
            return server.flamegraph(q)["total"]
        n = total(q)
        assert total(q + ' && container.name == "k8s_api_payments-5c8d7f9b4-qr7tz_billing_0f1e2d3c_0"'
                     ' && k8s.container.name == "api" && k8s.pod.name == "payments-5c8d7f9b4-qr7tz"'
                     ' && k8s.namespace.name == "billing" && k8s.deployment.name == "payments"') == n
        # Asked once per table (the profiler's processes, the host metrics').
        assert api.requests and set(api.requests) == {f"/containers/{CRIO_CID}"}
        assert len(api.requests) <= 2, api.requests
    finally:
        api.shutdown()
        rmdirs(cg, root)


# --- -k8s-pod-labels: labels from a fake kubelet ---------------------------------------

POD_WEB = "5e6c7d8a-1b2c-4d3e-8f40-123456789abc"
POD_BATCH = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"  # listed only after the agent started
POD_GONE = "11111111-2222-4333-8444-555555555555"   # never listed


def pod(uid, name, namespace, labels):
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}}


class FakeKubelet(FakeAPI):
    """GET /pods of the kubelet's API: the pods in self.server.pods; every
    request is recorded with its Authorization header."""

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Authorization")))
        if self.path == "/pods":
            body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                               "items": list(self.server.pods)}).encode()
            self.reply(200, body)
        else:
            body = b'{"message":"not found"}'
            self.reply(404, body)


def attribute_names(server, query):
    body = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000,
                       "event_kind": "on_cpu", "query": query}}
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/labels",
                        body, {"Content-Type": "application/json"})
    assert status == 200, data
    return {n["name"] for n in json.loads(data)["names"]}


def test_k8s_pod_labels(tmp_path, server, agent_factory):
    require_root()
    kubelet = HTTPServer(("127.0.0.1", 0), FakeKubelet)
    kubelet.requests = []
    kubelet.pods = [
        pod(POD_WEB, "checkout-7d9f8b6c5-x2x9k", "shop",
            {"app": "checkout", "tier": "web", "app.kubernetes.io/name": "checkout-svc",
             "secret-label": "do-not-copy"}),
        pod("99999999-8888-4777-8666-555555555555", "other-0", "kube-system", {"app": "other"}),
    ]
    threading.Thread(target=kubelet.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    tag = f"ember-test-pods-{os.getpid()}"
    root = f"/sys/fs/cgroup/unified/{tag}"
    cgroups = {uid: f"{root}/kubepods/besteffort/pod{uid}/{uid.replace('-', '')[:16] * 4}"
               for uid in (POD_WEB, POD_BATCH, POD_GONE)}
    for d in cgroups.values():
        os.makedirs(d)
    started = time.monotonic()
    started_ms = time.time() * 1000
    stats_url = f"http://127.0.0.1:{free_port()}"

    def agent_stats():
        status, body = http("GET", stats_url + "/debug/stats", timeout=5)
        assert status == 200, body
        return json.loads(body)
    try:
        agent_factory(server.url, "-on-cpu-sampling-rate=97", "-container-runtime-socket=none",
                      "-k8s-pod-labels=app, tier,app.kubernetes.io/name",
                      f"-kubelet-url=http://127.0.0.1:{kubelet.server_port}",
                      f"-kubelet-token-file={token}", "-collect-metrics-interval=1s",
                      f"-pprof={stats_url.split('//')[1]}").start()
        # The list is read at start, with the token.
        wait_until(lambda: agent_stats()["kubelet_fetches_total"] == 1, 10,
                   what="the agent to read the pod list")
        assert kubelet.requests == [("/pods", "Bearer tok-123")]
        assert agent_stats()["kubelet_pods"] == 2
        first_read = time.monotonic()
        cpu_split = os.path.join(WORKLOADS, "cpu_split")
        web = start_in_cgroup(cgroups[POD_WEB], [cpu_split, "3"])
        assert web.wait(30) == 0
        # A pod created after that list, and one the kubelet never lists:
        # each unknown uid asks for one new list (no sooner than 5 s after
        # the previous one).
        kubelet.pods.append(pod(POD_BATCH, "nightly-report-28d9x", "jobs", {"app": "report"}))
        time.sleep(max(0.0, 5.5 - (time.monotonic() - first_read)))
        batch = start_in_cgroup(cgroups[POD_BATCH], [cpu_split, "3"])
        gone = start_in_cgroup(cgroups[POD_GONE], [cpu_split, "2"])
        assert batch.wait(30) == 0 and gone.wait(30) == 0

        def total(q):
            return server.flamegraph(q)["total"]
        in_web = f'k8s.pod.uid == "{POD_WEB}"'
        n = settled_total(server, in_web, more_than=150)
        # Every sample of the pod carries its requested labels (the list
        # was there before the process started); the CEL map-key filter
        # selects them.
        assert total('k8s.pod.label["app"] == "checkout"') == n
        assert total(in_web + ' && k8s.pod.label["tier"] == "web"'
                     ' && k8s.pod.label["app.kubernetes.io/name"] == "checkout-svc"'
                     ' && k8s.pod.name == "checkout-7d9f8b6c5-x2x9k" && k8s.namespace.name == "shop"'
                     ' && k8s.deployment.name == "checkout"') == n
        assert total('k8s.pod.label["app"] in ["checkout", "report"] && '
                     'process.executable.name == "cpu_split"') >= n
        # Only the requested labels.
        names = attribute_names(server, in_web)
        assert {"k8s.pod.label[app]", "k8s.pod.label[tier]",
                "k8s.pod.label[app.kubernetes.io/name]"} <= names
        assert not [x for x in names if "secret" in x], names
        assert total('k8s.pod.label["secret-label"] != ""') == 0
        # The pod's process metrics carry the same pod attributes.
        web_pod = ('k8s.pod.label["app"] == "checkout" && k8s.pod.label["tier"] == "web"'
                   ' && k8s.pod.name == "checkout-7d9f8b6c5-x2x9k" && k8s.namespace.name == "shop"'
                   ' && k8s.deployment.name == "checkout" && process.executable.name == "cpu_split"')

        def web_metrics():
            status, data = http(
                "POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/metrics/names",
                {"filter": {"start_ts": int(started_ms), "end_ts": int(time.time() * 1000) + 1000,
                            "query": web_pod}}, {"Content-Type": "application/json"})
            assert status == 200, data
            return {n["name"] for n in json.loads(data)["names"]}
        wait_until(lambda: "process.rss" in web_metrics(), 15, what="the web pod's process metrics")

        # The pod listed later: labelled once the new list came (its first
        # drain or two may be without).
        in_batch = f'k8s.pod.uid == "{POD_BATCH}"'
        m = settled_total(server, in_batch, more_than=150)
        labelled = total(in_batch + ' && k8s.pod.label["app"] == "report"'
                         ' && k8s.namespace.name == "jobs" && k8s.pod.name == "nightly-report-28d9x"')
        assert m - 60 <= labelled <= m
        # The pod nobody lists: sampled, no labels.
        in_gone = f'k8s.pod.uid == "{POD_GONE}"'
        settled_total(server, in_gone, more_than=100)
        assert total(in_gone + ' && k8s.pod.label["app"] != ""') == 0
        assert total(in_gone + ' && k8s.namespace.name != ""') == 0
        # Bounded: the first list, one for the two new uids (or one each),
        # and one per 30 s of age at most.
        elapsed = time.monotonic() - started
        assert 2 <= len(kubelet.requests) <= 3 + int(elapsed // 30), kubelet.requests
        assert all(r == ("/pods", "Bearer tok-123") for r in kubelet.requests)
        # -pprof counts the same reads (one may still be on its way).
        wait_until(lambda: agent_stats()["kubelet_fetches_total"] == len(kubelet.requests), 15,
                   what="the agent's count of pod list reads")
        st = agent_stats()
        assert st["kubelet_fetch_errors_total"] == 0 and st["kubelet_pods"] == 3
    finally:
        kubelet.shutdown()
        for d in cgroups.values():
            rmdirs(d, os.path.dirname(d))
        rmdirs(f"{root}/kubepods/besteffort", f"{root}/kubepods", root)
