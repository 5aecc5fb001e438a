"""GPU time, the agent's half, end to end as root with real BPF and no GPU:
a TEST-ONLY stand-in for libembercuda.so (tests/workloads/cuda_wire_client.c,
built as build/workloads/cuda_wire/libembercuda.so) speaks the wire of
lib/cuda_wire.h to the agent's socket and calls the exported marker from
distinct call paths of cuda_wire_launcher (main -> train_step ->
launch_gemm / launch_softmax / launch_copy / sync_stream). The agent finds
the library in the process's maps by its name, puts its uprobe on the
marker, records the launch stacks with the CPU sampler's unwinder and joins
them with the reported GPU time: the server returns event_kind cuda samples
with the exact totals under those stacks, the time of launches without a
stack under [launch not sampled], the GPU attributes, nothing of the
hostile messages, and the agent counts what it refused. Over the ember
protocol and over OTLP; and from Python (ctypes), with the Python frames
above the launch."""

import json
import os
import subprocess

from conftest import require_root
from harness import (WORKLOADS, Server, check_tree, find, free_port, gpu_flamegraph, gpu_settled, http, wait_until,
                     kill_if_running, walk)

QUERY = 'process.executable.name == "cuda_wire_launcher"'
UUID = "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f"
MS = 1000000
# What the stand-in reports (cuda_wire_client.c wire_report).
EXPECTED = {
    ("launch_gemm", "cudaLaunchKernel", "gemm_kernel", "cuda_kernel"): 700 * MS,
    ("launch_softmax", "cudaLaunchKernel", "softmax_kernel", "cuda_kernel"): 300 * MS,
    ("launch_copy", "cudaMemcpyAsync", "HtoD", "cuda_memcpy"): 50 * MS,
    ("sync_stream", "cudaStreamSynchronize", "cudaStreamSynchronize", "cuda_sync"): 20 * MS,
}
NOT_SAMPLED = {("cuLaunchKernel", "unseen_kernel"): 25 * MS,
               ("cudaLaunchKernel", "orphan_kernel"): 10 * MS}
TOTAL = sum(EXPECTED.values()) + sum(NOT_SAMPLED.values())
REJECTED = {"length": 2, "count": 1, "magic": 1, "short": 2, "string": 1, "reserved": 1,
            "kind": 1, "oversize": 1, "order": 1}


LIBRARY = os.path.join(WORKLOADS, "cuda_wire", "libembercuda.so")
PY_SCRIPT = os.path.join(os.path.dirname(__file__), "..", "workloads", "py_cuda_wire_launch.py")


def run_launcher(agent, sock, argv=None):
    """Runs the launcher (argv: another one); it launches once the agent has
    probed its copy of the library. Returns its pid."""
    argv = argv or [os.path.join(WORKLOADS, "cuda_wire_launcher"), sock]
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        pid = json.loads(p.stdout.readline())["pid"]
        wait_until(lambda: f"launch stacks from /proc/{pid}/map_files/" in agent.output(), 20,
                   what="the agent to probe the library's marker")
        p.stdin.write(b"go\n")
        p.stdin.flush()
        assert p.wait(30) == 0, "the launcher failed"
    finally:
        kill_if_running(p)
    return pid


def check_gpu_tree(tree):
    assert tree["unit"] == "nanoseconds", tree["unit"]
    check_tree(tree["root"])
    assert tree["total"] == TOTAL, (tree["total"], TOTAL)
    main = find(tree["root"], "main", binary="cuda_wire_launcher")
    assert main is not None, [p for p, _ in walk(tree["root"])][:40]
    step = next(c for c in main["children"] if c["name"] == "train_step")
    assert step["total"] == sum(EXPECTED.values()), step["total"]
    for (fn, api, leaf, leaf_type), ns in EXPECTED.items():
        caller = next((c for c in step["children"] if c["name"] == fn), None)
        assert caller is not None, (fn, [c["name"] for c in step["children"]])
        # The library's own frames (wire_launch, the marker) are gone: the
        # launch frame follows the caller at once.
        assert [c["name"] for c in caller["children"]] == [api], (fn, caller["children"])
        launch = caller["children"][0]
        assert launch["frame_type"] == "cuda_launch", launch
        assert [(c["name"], c["frame_type"]) for c in launch["children"]] == [(leaf, leaf_type)], \
            launch["children"]
        assert launch["children"][0]["total"] == ns == caller["total"], (fn, launch, ns)
    ns_node = find(tree["root"], "[launch not sampled]")
    assert ns_node is not None and ns_node["frame_type"] == "error", ns_node
    got = {(l["name"], k["name"]): k["total"] for l in ns_node["children"] for k in l["children"]}
    assert got == NOT_SAMPLED, got
    for path, n in walk(tree["root"]):
        assert n["name"] not in ("wire_launch", "ember_cuda_launch_marker"), path


def scrape(base):
    status, body = http("GET", base + "/metrics", timeout=5)
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def test_gpu_time_joined_with_launch_stacks(server, agent_factory, tmp_path):
    require_root()
    cuda_dir = str(tmp_path / "profiler")
    port = free_port()
    agent = agent_factory(server.url, f"-cuda-profiler-dir={cuda_dir}",
                          f"-pprof=127.0.0.1:{port}").start()
    sock = os.path.join(cuda_dir, "agent.sock")
    assert oct(os.stat(sock).st_mode & 0o777) == "0o666"
    assert oct(os.stat(cuda_dir).st_mode & 0o777) == "0o755"
    run_launcher(agent, sock)
    tree = gpu_settled(server, QUERY, TOTAL)
    check_gpu_tree(tree)

    # The GPU attributes, as CEL filters see them.
    for q in (f'gpu.device.uuid == "{UUID}"', 'gpu.name == "Ember Test GPU"',
              'gpu.device.index == "0"', 'cuda.stream.id == "7"', 'cuda.context.id == "1"'):
        assert gpu_flamegraph(server, f"{QUERY} && {q}")["total"] == TOTAL, q
    # On-CPU views hold none of it.
    assert server.flamegraph(QUERY + ' && cuda.stream.id == "7"')["total"] == 0

    # The agent's counters: every hostile message refused, by reason.
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: scrape(base).get("ember_agent_cuda_gpu_seconds_total", 0) >= TOTAL / 1e9 - 1e-9,
               10, what="the GPU time in /metrics")
    m = scrape(base)
    cuda = {k[len("ember_agent_"):]: v for k, v in m.items() if "cuda" in k}
    for reason, n in REJECTED.items():
        assert cuda[f'cuda_messages_rejected_total{{reason="{reason}"}}'] == n, (reason, cuda)
    want = {"cuda_processes_injected_total": 1,
            "cuda_messages_total": 5,  # HELLO, DEVICE, 2 AGG, STATS
            "cuda_entries_total": 7,
            "cuda_entries_joined_total": 5,
            "cuda_entries_not_sampled_total": 1,
            "cuda_entries_unknown_stack_total": 1,
            "cuda_entries_pending_overflow_total": 0,
            "cuda_library_launches_total": 6}
    assert {k: cuda.get(k) for k in want} == want, cuda
    # Other processes on the host may map a libembercuda.so too: at least
    # the launcher's copy was probed.
    assert cuda["cuda_probed_libraries"] >= 1, cuda
    assert cuda["cuda_launch_stacks_total"] >= 4, cuda
    assert cuda["bpf_cuda_marker_hits_total"] >= 4, cuda
    assert abs(cuda["cuda_not_sampled_seconds_total"] - 0.035) < 1e-9, cuda


def test_gpu_time_over_otlp(agent_factory, tmp_path):
    require_root()
    srv = Server(tmp_path / "otlp-data").start()
    try:
        cuda_dir = str(tmp_path / "profiler")
        agent = agent_factory(srv.url, f"-cuda-profiler-dir={cuda_dir}",
                              "-ember-protocol=false").start()
        run_launcher(agent, os.path.join(cuda_dir, "agent.sock"))
        check_gpu_tree(gpu_settled(srv, QUERY, TOTAL))
        assert gpu_flamegraph(srv, f'{QUERY} && gpu.device.uuid == "{UUID}"')["total"] == TOTAL
        agent.stop()  # before its server
    finally:
        srv.stop()


def test_python_frames_above_the_launch(server, agent_factory, tmp_path):
    """A Python program launching through ctypes: the uprobe's walk (the
    CPU sampler's) puts its Python frames above the launch, from <module>
    down to the function that launched."""
    require_root()
    cuda_dir = str(tmp_path / "profiler")
    agent = agent_factory(server.url, f"-cuda-profiler-dir={cuda_dir}").start()
    sock = os.path.join(cuda_dir, "agent.sock")
    pid = run_launcher(agent, sock, ["/usr/bin/python3", PY_SCRIPT, LIBRARY, sock])
    tree = gpu_settled(server, f'process.pid == "{pid}"', TOTAL)
    check_tree(tree["root"])
    assert tree["total"] == TOTAL, tree["total"]
    for (fn, api, leaf, leaf_type), ns in EXPECTED.items():
        paths = [(p, n) for p, n in walk(tree["root"])
                 if n["name"] == leaf and n["frame_type"] == leaf_type]
        assert len(paths) == 1, (leaf, [p for p, _ in paths])
        path, node = paths[0]
        print(" -> ".join(path))
        assert node["total"] == ns and node["frame_type"] == leaf_type, (leaf, node)
        assert path[-2] == api, path
        # <module> -> main -> train_step -> fn, as Python frames, above the
        # native frames of the ctypes call.
        py = [name for name in path[1:] if name in ("<module>", "main", "train_step", fn)]
        assert py == ["<module>", "main", "train_step", fn], path
        at = path.index(fn)
        frame = tree["root"]
        for name in path[1:at + 1]:
            frame = next(c for c in frame["children"] if c["name"] == name)
        assert frame["frame_type"] == "cpython", frame
        assert frame["file"] == os.path.realpath(PY_SCRIPT) or frame["file"].endswith("py_cuda_wire_launch.py"), frame
        for name in ("wire_launch", "ember_cuda_launch_marker"):
            assert name not in path, path
