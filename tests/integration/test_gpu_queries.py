"""GPU time (event_kind cuda, nanoseconds) through the query API: the
flamegraph (self GPU time only on the CUDA frames), top functions and the
kernels alone (frame_types), top entities, the diff, and CEL filters on
the gpu.* and cuda.* attributes the agent records -- each answer checked
against values computed here -- and a 400 for a wrong frame_types."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from ember_batch import Batch, send_batch  # noqa: E402
from harness import BLOCK_FLAGS, Server, check_tree, find, wait_compacted  # noqa: E402
from harness import api_post as post  # noqa: E402

HOUR = 3600000
T0 = (int(time.time() * 1000) // HOUR - 2) * HOUR
MS = 1_000_000  # nanoseconds

H100 = "NVIDIA H100 80GB HBM3"
A10G = "NVIDIA A10G"


def gpu(host, exe, index, stream, name, uuid):
    return {"host.name": host, "process.executable.name": exe, "process.pid": "100",
            "gpu.device.index": str(index), "gpu.device.uuid": uuid, "gpu.name": name,
            "cuda.stream.id": str(stream), "cuda.context.id": "1"}


LAUNCH = ("cudaLaunchKernel", "cuda_launch", "")
# (frames, attributes, GPU nanoseconds)
GPU_SAMPLES = [
    (["main", "train_step", LAUNCH, ("sgemm_kernel", "cuda_kernel", "")],
     gpu("gpu1", "trainer", 0, 7, H100, "GPU-0a"), 6 * MS),
    (["main", "train_step", LAUNCH, ("sgemm_kernel", "cuda_kernel", "")],
     gpu("gpu1", "trainer", 1, 8, H100, "GPU-1b"), 3 * MS),
    (["main", "eval_step", LAUNCH, ("softmax_kernel", "cuda_kernel", "")],
     gpu("gpu1", "trainer", 1, 9, H100, "GPU-1b"), 2 * MS),
    (["main", "load_batch", ("cudaMemcpyAsync", "cuda_launch", ""), ("HtoD", "cuda_memcpy", "")],
     gpu("gpu1", "trainer", 0, 7, H100, "GPU-0a"), 1_500_000),
    (["main", "train_step", ("cudaStreamSynchronize", "cuda_launch", ""),
      ("cudaStreamSynchronize", "cuda_sync", "")],
     gpu("gpu1", "trainer", 0, 7, H100, "GPU-0a"), 500_000),
    (["main", "serve", LAUNCH, ("softmax_kernel", "cuda_kernel", "")],
     gpu("gpu2", "infer", 0, 3, A10G, "GPU-2c"), 1 * MS),
]
GPU_TOTAL = sum(v for _, _, v in GPU_SAMPLES)
KERNEL_TYPES = ["cuda_kernel", "cuda_memcpy", "cuda_memset", "cuda_sync"]


# Over the in-memory head and over compacted block files (the new frame
# types must survive both).
@pytest.fixture(scope="module", params=["memory", "blocks"])
def srv(tmp_path_factory, request):
    flags = BLOCK_FLAGS if request.param == "blocks" else ()
    s = Server(tmp_path_factory.mktemp("gpu"), None, *flags).start()
    b = Batch(agent_instance="agent-gpu", host_cpus=16, sample_rate_hz=19)
    for frames, attrs, value in GPU_SAMPLES:
        b.add(frames, attrs, value=value, kind="cuda")
    # CPU samples of the same processes: not GPU time.
    b.add(["main", "train_step", "prepare"], {"host.name": "gpu1", "process.executable.name": "trainer"}, 95)
    assert send_batch(s.url, b.encode(sequence=1, start_ms=T0, end_ms=T0 + 10000))["stored"]
    if request.param == "blocks":
        wait_compacted(s)
    yield s
    s.stop()


def ok(srv, what, body):
    status, ans = post(srv, what, body)
    assert status == 200, ans
    return ans


def flt(query=None, kind="cuda"):
    return {"start_ts": T0, "end_ts": T0 + HOUR, "event_kind": kind, "query": query}


def fn(ans, name, frame_type=None):
    hits = [f for f in ans["functions"] if f["name"] == name and
            (frame_type is None or f["frame_type"] == frame_type)]
    assert len(hits) == 1, (name, [(f["name"], f["frame_type"]) for f in ans["functions"]])
    return hits[0]


def test_flamegraph_gpu_time_self_only_on_cuda_frames(srv):
    ans = ok(srv, "flamegraph/json", {"filter": flt()})
    check_tree(ans["root"])
    assert ans["unit"] == "nanoseconds" and ans["total"] == GPU_TOTAL == 14 * MS
    main = find(ans["root"], "main")
    assert main["self"] == 0 and main["total"] == GPU_TOTAL
    train = find(ans["root"], "train_step")
    assert train["self"] == 0 and train["total"] == 9_500_000
    launch = find(train, "cudaLaunchKernel")
    assert launch["frame_type"] == "cuda_launch" and launch["self"] == 0 and launch["total"] == 9 * MS
    sgemm = find(launch, "sgemm_kernel")
    assert sgemm["frame_type"] == "cuda_kernel" and sgemm["self"] == sgemm["total"] == 9 * MS
    copy = find(ans["root"], "HtoD")
    assert copy["frame_type"] == "cuda_memcpy" and copy["self"] == 1_500_000
    sync = find(ans["root"], "load_batch")
    assert sync["total"] == 1_500_000
    syncs = [c for c in find(train, "cudaStreamSynchronize")["children"]]
    assert [(c["name"], c["frame_type"], c["self"]) for c in syncs] == \
        [("cudaStreamSynchronize", "cuda_sync", 500_000)]
    # The CPU samples stay on-CPU.
    cpu = ok(srv, "flamegraph/json", {"filter": flt(kind="on_cpu")})
    assert cpu["unit"] == "samples" and cpu["total"] == 95


def test_top_functions_and_top_kernels(srv):
    ans = ok(srv, "top_functions", {"filter": flt(), "sort": "total"})
    assert ans["unit"] == "nanoseconds" and ans["total"] == GPU_TOTAL
    assert ans["cores_unit"] == "gpus" and ans["cpu_mode"] == "relative"
    assert fn(ans, "main")["total"] == GPU_TOTAL and fn(ans, "main")["self"] == 0
    assert fn(ans, "train_step")["self"] == 0
    launch = fn(ans, "cudaLaunchKernel", "cuda_launch")
    assert launch["total"] == 12 * MS and launch["self"] == 0
    # The kernels alone, by self GPU time: every CUDA leaf type, nothing else.
    ans = ok(srv, "top_functions", {"filter": flt(), "frame_types": KERNEL_TYPES})
    rows = [(f["name"], f["frame_type"], f["self"], f["total"]) for f in ans["functions"]]
    assert rows == [("sgemm_kernel", "cuda_kernel", 9 * MS, 9 * MS),
                    ("softmax_kernel", "cuda_kernel", 3 * MS, 3 * MS),
                    ("HtoD", "cuda_memcpy", 1_500_000, 1_500_000),
                    ("cudaStreamSynchronize", "cuda_sync", 500_000, 500_000)]
    assert ans["functions_total"] == 4 and ans["total"] == GPU_TOTAL
    assert ans["functions"][0]["self_percent"] == pytest.approx(9 / 14 * 100, rel=1e-6)
    secs = ans["scope"]["seconds"]
    assert secs > 0 and ans["functions"][0]["self_cores"] == pytest.approx(9 * MS / 1e9 / secs, rel=1e-6)
    # One type: the copy; with a filter on the device.
    ans = ok(srv, "top_functions", {"filter": flt(), "frame_types": ["cuda_memcpy"]})
    assert [f["name"] for f in ans["functions"]] == ["HtoD"]
    ans = ok(srv, "top_functions", {"filter": flt("gpu.device.index == 1"), "frame_types": KERNEL_TYPES})
    assert [(f["name"], f["self"]) for f in ans["functions"]] == \
        [("sgemm_kernel", 3 * MS), ("softmax_kernel", 2 * MS)]
    # Empty or null: every type.
    for empty in ([], None):
        ans = ok(srv, "top_functions", {"filter": flt(), "frame_types": empty})
        assert ans["functions_total"] == 12


@pytest.mark.parametrize("bad", [["root"], ["synthetic"], ["bogus"], "cuda_kernel", [12],
                                 ["cuda_kernel", None], ["x"] * 33])
def test_wrong_frame_types_get_400(srv, bad):
    status, ans = post(srv, "top_functions", {"filter": flt(), "frame_types": bad})
    assert status == 400 and "frame_types" in ans["error"], ans
    status, ans = post(srv, "diff", {"baseline": flt(), "comparison": flt(), "frame_types": bad})
    assert status == 400 and "frame_types" in ans["error"], ans


def test_cel_filters_on_gpu_attributes(srv):
    def total(q):
        return ok(srv, "flamegraph/json", {"filter": flt(q)})["total"]
    assert total("gpu.device.index == 1") == 5 * MS
    assert total('gpu.device.index == "0"') == 9 * MS
    assert total("cuda.stream.id > 7") == 5 * MS
    assert total("cuda.stream.id > 8") == 2 * MS
    assert total("cuda.stream.id >= 7 && gpu.device.index == 0") == 8 * MS
    assert total(f'gpu.name == "{A10G}"') == 1 * MS
    assert total('gpu.name.startsWith("NVIDIA H100")') == 13 * MS
    assert total('gpu.device.uuid in ["GPU-1b", "GPU-2c"]') == 6 * MS
    assert total("cuda.context.id == 1") == GPU_TOTAL
    # gpu.name is text: comparing it with a number is a type error.
    status, ans = post(srv, "flamegraph/json", {"filter": flt("gpu.name > 1")})
    assert status == 400 and "gpu.name" in ans["error"], ans


def test_top_entities_of_gpu_time(srv):
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "host"})
    assert [(e["name"], e["total"]) for e in ans["entities"]] == [("gpu1", 13 * MS), ("gpu2", 1 * MS)]
    assert ans["entities"][0]["percent"] == pytest.approx(13 / 14 * 100, rel=1e-6)
    ans = ok(srv, "top_entities", {"filter": flt(), "entity": "gpu.name"})
    assert [(e["name"], e["total"]) for e in ans["entities"]] == [(H100, 13 * MS), (A10G, 1 * MS)]
    ans = ok(srv, "top_entities", {"filter": flt('host.name == "gpu1"'), "entity": "gpu.device.index"})
    assert [(e["name"], e["total"]) for e in ans["entities"]] == [("0", 8 * MS), ("1", 5 * MS)]


def test_diff_over_gpu_time(srv):
    ans = ok(srv, "diff", {"baseline": flt('host.name == "gpu2"'),
                           "comparison": flt('host.name == "gpu1"'), "sort": "self",
                           "frame_types": KERNEL_TYPES})
    st = {f["name"]: f for f in ans["functions"]}
    assert set(st) == {"sgemm_kernel", "softmax_kernel", "HtoD", "cudaStreamSynchronize"}
    soft = st["softmax_kernel"]
    assert soft["status"] == "changed"
    assert soft["baseline_self"] == 1 * MS and soft["comparison_self"] == 2 * MS
    assert soft["self_change_percent"] == pytest.approx(100.0, rel=1e-6)
    secs = ans["comparison"]["seconds"]
    assert soft["self_cores_change"] == pytest.approx(1 * MS / 1e9 / secs, rel=1e-6)
    assert st["sgemm_kernel"]["status"] == "new"
    assert ans["functions_new"] == 3 and ans["functions_removed"] == 0


def test_frame_types_past_nvtx_are_refused(srv):
    import urllib.error
    # (another project: the data of the other tests stays as it is)
    b = Batch(project="gpu-frame-types", agent_instance="agent-gpu-bad")
    b.add(["main", ("k", "nvtx", "")], gpu("gpu1", "trainer", 0, 7, H100, "GPU-0a"), 5, kind="cuda")
    assert send_batch(srv.url, b.encode(sequence=1, start_ms=T0, end_ms=T0 + 10000))["stored"]
    b = Batch(project="gpu-frame-types", agent_instance="agent-gpu-bad2")
    b.add(["main"], {"host.name": "x"}, 5)
    b.frames[0] = (20,) + b.frames[0][1:]  # one past the last frame type (nvtx = 19)
    with pytest.raises(urllib.error.HTTPError) as e:
        send_batch(srv.url, b.encode(sequence=1, start_ms=T0, end_ms=T0 + 10000))
    assert e.value.code == 400 and b"unknown frame type 20" in e.value.read()
