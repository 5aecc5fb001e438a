"""GPU profiling end to end with every product part real except the GPU:
ember-agent installs the libembercuda.so it carries into its
-cuda-profiler-dir; CUDA programs (C, and Python through ctypes) started
with CUDA_INJECTION64_PATH pointing there run on the project's TEST-ONLY
fake driver and CUPTI (tests/fake_cuda/), which load the library as the
real driver does and hand it scripted kernel times; the library samples
launches, calls its marker (the agent's uprobe records the launching
stack with the CPU sampler's unwinder) and reports the GPU time to the
agent's socket; the server answers GPU flamegraphs. Checked: the exact
GPU time of every kernel, copy, memset and sync, the 70/30 kernel split,
and the stacks from main / <module> down to the launch and the kernel."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import require_root
from harness import (BUILD, GPU_LEAF_TYPES, ROOT, WORKLOADS, Agent, Server, api_post, check_tree, fake_cuda_env,
                     find, free_port, gpu_flamegraph, gpu_leaves, gpu_settled, wait_until, walk)

LAUNCHER = os.path.join(WORKLOADS, "cuda_launch")
PY_LAUNCHER = os.path.join(ROOT, "tests", "workloads", "py_cuda_launch.py")
BIG_NS, SMALL_NS, COPY_NS, SET_NS, SYNC_NS = 700000, 300000, 4096, 1024, 5000


def cuda_env(lib):
    return fake_cuda_env(lib, f"k_big={BIG_NS},k_small={SMALL_NS},py_big={BIG_NS},py_small={SMALL_NS}")


def start_agent(agent_factory, server, tmp_path):
    cuda_dir = str(tmp_path / "profiler")
    port = free_port()
    agent = agent_factory(server.url, f"-cuda-profiler-dir={cuda_dir}", f"-pprof=127.0.0.1:{port}").start()
    agent.stats_port = port
    lib = os.path.join(cuda_dir, "libembercuda.so")
    # The agent placed the library it carries, readable by every user, and
    # told the user the line to use.
    with open(lib, "rb") as a, open(os.path.join(BUILD, "lib", "libembercuda.so"), "rb") as b:
        assert a.read() == b.read()
    assert oct(os.stat(lib).st_mode & 0o777) == "0o755"
    assert f"CUDA_INJECTION64_PATH={lib}" in agent.output()
    return agent, lib


def launch_stack_stats(agent):
    """The agent's counters of launch stacks (raw ones included)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.stats_port}/debug/stats", timeout=10) as r:
        s = json.load(r)
    return {k: v for k, v in s.items() if "launch_stacks" in k or k.startswith("cuda_entries")}


def read_interpreter(agent):
    """Runs this interpreter for a moment and waits for the agent to have
    read its executable: then a new process of it has its Python frames
    from its first launch, however late the agent reads the process."""
    warm = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 1\nwhile time.time() < end: pass"])
    with_stats = f"http://127.0.0.1:{agent.stats_port}/debug/stats"
    wait_until(lambda: json.load(urllib.request.urlopen(with_stats, timeout=10)).get("python_interpreters", 0) >= 1,
               30, what="the agent reading the interpreter")
    warm.wait(10)


def under_path(tree, names, leaf):
    """GPU time of leaf under a path that has names in this order."""
    total = 0
    for path, n in walk(tree["root"]):
        if path[-1] != leaf or n["frame_type"] not in GPU_LEAF_TYPES:
            continue
        it = iter(path)
        if all(any(p == want for p in it) for want in names):
            total += n["total"]
    return total


def partial_paths(tree, names, leaf):
    """Paths to leaf (a GPU leaf) that lack names in this order: each must
    name why its stack ended early (an error frame, "[...]")."""
    out = []
    for path, n in walk(tree["root"]):
        if path[-1] != leaf or n["frame_type"] not in GPU_LEAF_TYPES:
            continue
        it = iter(path)
        if not all(any(p == want for p in it) for want in names):
            out.append((path, n["total"]))
    return out


def test_c_program_on_the_fake_driver(server, agent_factory, tmp_path):
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    steps = 3000
    r = subprocess.run([LAUNCHER, str(steps), "1", "6"], env=cuda_env(lib), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"done {steps} 1", (r.stdout, r.stderr)
    want = steps * (BIG_NS + SMALL_NS + COPY_NS + SET_NS + SYNC_NS)
    tree = gpu_settled(server, 'process.executable.name == "cuda_launch"', want)
    check_tree(tree["root"])
    print(launch_stack_stats(agent))
    assert tree["total"] == want, (tree["total"], want)
    assert tree["unit"] == "nanoseconds"
    # Exact GPU time per kernel, copy, set and sync; the 70/30 split.
    assert gpu_leaves(tree) == {
        ("k_big", "cuda_kernel"): steps * BIG_NS,
        ("k_small", "cuda_kernel"): steps * SMALL_NS,
        ("HtoD", "cuda_memcpy"): steps * COPY_NS,
        ("memset", "cuda_memset"): steps * SET_NS,
        ("cuStreamSynchronize", "cuda_sync"): steps * SYNC_NS,
    }, gpu_leaves(tree)
    # Under the stacks that launched them, whole: the launching thread's
    # start (cuda_launch trains in a pthread) -> train -> train_step -> the
    # launching function -> the API (cuda_launch) -> the kernel. The first
    # launches come before the agent has read the process (or loaded the
    # unwind tables of the libraries it mapped since): BPF sends their raw
    # stacks, the agent unwinds them once it has the tables, and their GPU
    # time waits for them. What still ends early is under an error frame
    # that says so, never under a wrong function; at least 95 % of the
    # time of each kind is whole (100 % measured in most runs; 97.0 % once,
    # under a full make test: a library mapped after the agent last read
    # the process waits for its next read, rate-limited).
    for fn, api, leaf, ns in (("launch_big", "cuLaunchKernel", "k_big", BIG_NS),
                              ("launch_small", "cudaLaunchKernel", "k_small", SMALL_NS),
                              ("copy_inputs", "cuMemcpyHtoDAsync", "HtoD", COPY_NS),
                              ("wait_step", "cuStreamSynchronize", "cuStreamSynchronize", SYNC_NS)):
        got = under_path(tree, ("start_thread", "train", "train_step", fn, api), leaf)
        early = partial_paths(tree, ("start_thread", "train", "train_step", fn, api), leaf)
        print(f"{leaf}: {100 * got / (steps * ns):.1f} % under whole stacks; early: {early}")
        assert all(any(f.startswith("[") for f in path) for path, _ in early), early
        assert got + sum(t for _, t in early) == steps * ns and got >= 0.95 * steps * ns, (leaf, got, early)
    launch = find(tree["root"], "cuLaunchKernel")
    assert launch is not None and launch["frame_type"] == "cuda_launch", launch
    # The library's, CUPTI's and the driver's own frames are not shown.
    for path, _ in walk(tree["root"]):
        assert "ember_cuda_launch_marker" not in path, path
    # GPU attributes as the fake driver names its device.
    assert gpu_flamegraph(server, 'process.executable.name == "cuda_launch" && gpu.name == "Fake GPU 0"')["total"] \
        == want


def test_python_program_on_the_fake_driver(server, agent_factory, tmp_path):
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    read_interpreter(agent)
    steps = 1500
    p = subprocess.run([sys.executable, PY_LAUNCHER, str(steps), "6"], env=cuda_env(lib),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"done {steps}", (p.stdout, p.stderr)
    want = steps * (BIG_NS + SMALL_NS)
    query = 'process.executable.name == "python3" || process.executable.name == "python3.11"'
    tree = gpu_settled(server, f"({query}) && gpu.name == \"Fake GPU 0\"", want)
    check_tree(tree["root"])
    print(launch_stack_stats(agent))
    assert tree["total"] == want, (tree["total"], want)
    assert gpu_leaves(tree) == {("py_big", "cuda_kernel"): steps * BIG_NS,
                            ("py_small", "cuda_kernel"): steps * SMALL_NS}, gpu_leaves(tree)
    # Python frames above the launch: _start -> ... <module> -> train_step
    # -> the API. The first launches' stacks go raw (as above) with the
    # thread's Python frames as BPF read them at the launch (by the
    # interpreter executable the agent has read, before it reads the
    # process); the agent puts them in place of the interpreter loop's
    # native frames as it unwinds the copy. At least 95 % of a 6-second run
    # is whole (99.9 to 100 % measured); a raw stack without its Python
    # frames says so ("[Python frames not unwound]": 6.4 % of the time
    # once in CI, when the agent read the process late and BPF knew the
    # interpreter only by the process).
    for leaf, ns in (("py_big", BIG_NS), ("py_small", SMALL_NS)):
        got = under_path(tree, ("_start", "<module>", "train_step", "cuLaunchKernel"), leaf)
        early = partial_paths(tree, ("_start", "<module>", "train_step", "cuLaunchKernel"), leaf)
        print(f"{leaf}: {100 * got / (steps * ns):.1f} % under whole stacks; early: {[(p[:3], t) for p, t in early]}")
        assert all(any(f.startswith("[") for f in path) for path, _ in early), early
        assert got + sum(t for _, t in early) == steps * ns and got >= 0.95 * steps * ns, (leaf, got, early)
    module = find(tree["root"], "<module>")
    assert module is not None and module["frame_type"] == "cpython", module


# PC sampling (EMBER_CUDA_ENABLE_PC_SAMPLING) replayed through the fake
# CUPTI: each kernel record adds these samples (kernel:offset:reason:n).
PC_SCRIPT = ("k_big:0x1a0:long_scoreboard:3,k_big:0x1c0:math_pipe_throttle:1,k_big:0x200:selected:1,"
             "k_small:0x80:wait:1,k_small:0x90:short_scoreboard:3")
FAKE_CUBIN = "cubin:00005eed0000c0b1"
STALL = "smsp__pcsamp_warps_issue_stalled_"


def pc_leaves(tree):
    """(kernel, sass frame, stall frame) -> GPU time, and the kernels' self time."""
    out, kernel_self = {}, 0
    for path, n in walk(tree["root"]):
        if n["frame_type"] == "cuda_kernel":
            kernel_self += n["self"]
        if n["frame_type"] == "cuda_stall":
            k = (path[-3], path[-2], path[-1])
            out[k] = out.get(k, 0) + n["total"]
    return out, kernel_self


def test_pc_sampling_on_the_fake_driver(server, agent_factory, tmp_path):
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    steps = 2000
    env = cuda_env(lib)
    env.update(EMBER_CUDA_ENABLE_PC_SAMPLING="true", FAKE_CUDA_PCSAMPLES=PC_SCRIPT)
    r = subprocess.run([LAUNCHER, str(steps), "1", "4"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"done {steps} 1", (r.stdout, r.stderr)
    assert "PC sampling" not in r.stderr, r.stderr  # quiet: nothing said when it works
    want = steps * (BIG_NS + SMALL_NS + COPY_NS + SET_NS + SYNC_NS)
    tree = gpu_settled(server, 'process.executable.name == "cuda_launch"', want)
    check_tree(tree["root"])
    assert tree["total"] == want, (tree["total"], want)
    # Each kernel's time split over its samples exactly (3:1:1 and 1:3),
    # under kernel -> instruction (cubin + offset, unsymbolized) -> stall
    # reason as CUPTI names it; no time left on the kernels themselves.
    leaves, kernel_self = pc_leaves(tree)
    assert leaves == {
        ("k_big", f"{FAKE_CUBIN}+0x1a0", STALL + "long_scoreboard"): steps * BIG_NS * 3 // 5,
        ("k_big", f"{FAKE_CUBIN}+0x1c0", STALL + "math_pipe_throttle"): steps * BIG_NS // 5,
        ("k_big", f"{FAKE_CUBIN}+0x200", STALL + "selected"): steps * BIG_NS // 5,
        ("k_small", f"{FAKE_CUBIN}+0x80", STALL + "wait"): steps * SMALL_NS // 4,
        ("k_small", f"{FAKE_CUBIN}+0x90", STALL + "short_scoreboard"): steps * SMALL_NS * 3 // 4,
    }, leaves
    assert kernel_self == 0, kernel_self
    sass = find(tree["root"], f"{FAKE_CUBIN}+0x1a0")
    assert sass is not None and sass["frame_type"] == "cuda_sass", sass
    # Copies, sets and syncs are not split.
    assert gpu_leaves(tree)[("HtoD", "cuda_memcpy")] == steps * COPY_NS
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.stats_port}/debug/stats", timeout=10) as s:
        stats = json.load(s)
    assert stats["cuda_library_pc_samples_total"] == steps * 9, stats["cuda_library_pc_samples_total"]
    assert stats["cuda_pc_entries_total"] > 0 and stats["cuda_library_pc_sampling_refused"] == 0


SASS_DATA = os.path.join(ROOT, "tests", "data", "sass")
NVDISASM = os.path.join(BUILD, "cudatools", "nvidia", "cu13", "bin", "nvdisasm")


def test_pc_sampling_names_sass_instructions(tmp_path):
    """The whole SASS path on the fake driver: the program loads a real
    cubin (tests/data/sass, ptxas for sm_90) whose kernels it launches;
    the library saves the image CUPTI hands to MODULE_LOADED under its CRC
    in the agent's directory, the agent uploads it when the first PC entry
    names it, and the server names each sampled instruction with
    nvdisasm at query time: the exact mnemonics of the test data's
    nvdisasm listing under each kernel, the time split as the samples."""
    require_root()
    if not os.access(NVDISASM, os.X_OK):
        pytest.skip("no nvdisasm (scripts/install-test-cudatools.sh, run by make test)")
    server = Server(tmp_path / "data", None, f"-nvdisasm={NVDISASM}").start()
    agent = None
    try:
        agent = Agent(server.url, f"-cuda-profiler-dir={tmp_path / 'profiler'}").start()
        lib = str(tmp_path / "profiler" / "libembercuda.so")
        wait_until(lambda: f"CUDA_INJECTION64_PATH={lib}" in agent.output(), 30, what="the library installed")
        steps = 1000
        cubin = os.path.join(SASS_DATA, "pc_kernels_sm90.cubin")
        env = fake_cuda_env(lib, f"mem_bound={BIG_NS},compute_bound={SMALL_NS}",
                            EMBER_CUDA_ENABLE_PC_SAMPLING="true", FAKE_CUDA_CUBIN=cubin,
                            CUDA_LAUNCH_KERNELS="mem_bound,compute_bound",
                            FAKE_CUDA_PCSAMPLES="mem_bound:0xc0:long_scoreboard:3,mem_bound:0xe0:wait:1,"
                                                "mem_bound:0xf0:long_scoreboard:1,"
                                                "compute_bound:0x90:math_pipe_throttle:3,compute_bound:0xa0:wait:1")
        r = subprocess.run([LAUNCHER, str(steps), "1", "3"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == f"done {steps} 1", (r.stdout, r.stderr)
        # Saved once, under the CRC the fake CUPTI computes (FNV-1a: its own, as CUPTI's is).
        saved = os.listdir(tmp_path / "profiler" / "cubins")
        assert len(saved) == 1 and saved[0].endswith(".cubin"), saved
        with open(tmp_path / "profiler" / "cubins" / saved[0], "rb") as a, open(cubin, "rb") as b:
            assert a.read() == b.read()
        crc = saved[0][:-len(".cubin")]
        want = {
            ("mem_bound", "LDG.E +0xc0", STALL + "long_scoreboard"): steps * BIG_NS * 3 // 5,
            ("mem_bound", "FADD +0xe0", STALL + "wait"): steps * BIG_NS // 5,
            ("mem_bound", "STG.E +0xf0", STALL + "long_scoreboard"): steps * BIG_NS // 5,
            ("compute_bound", "FFMA +0x90", STALL + "math_pipe_throttle"): steps * SMALL_NS * 3 // 4,
            ("compute_bound", "ISETP.GE.U32.AND +0xa0", STALL + "wait"): steps * SMALL_NS // 4,
        }
        query = 'process.executable.name == "cuda_launch"'
        total = steps * (BIG_NS + SMALL_NS + COPY_NS + SET_NS + SYNC_NS)
        got = {}

        def named():
            nonlocal got
            got = pc_leaves(gpu_flamegraph(server, query))
            return got[0] == want
        wait_until(named, 60, what=f"the SASS names of cubin {crc}")
        assert got[1] == 0, got
        tree = gpu_flamegraph(server, query)
        assert tree["total"] == total, (tree["total"], total)
        sass = find(tree["root"], "LDG.E +0xc0")
        assert sass is not None and sass["frame_type"] == "cuda_sass", sass
    finally:
        if agent:
            agent.stop()
        server.stop()


def test_pc_sampling_refused(server, agent_factory, tmp_path):
    """CUPTI refuses PC sampling (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, 35):
    said once on stderr even though the library is quiet, counted by the
    agent, and the kernels are profiled as without it."""
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    steps = 1000
    env = cuda_env(lib)
    env.update(EMBER_CUDA_ENABLE_PC_SAMPLING="true", FAKE_CUDA_PCSAMPLES=PC_SCRIPT,
               FAKE_CUPTI_PCSAMPLING_ERROR="35")
    r = subprocess.run([LAUNCHER, str(steps), "1", "3"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"done {steps} 1", (r.stdout, r.stderr)
    assert r.stderr.count("PC sampling refused") == 1, r.stderr
    assert "NVreg_RestrictProfilingToAdminUsers" in r.stderr, r.stderr
    want = steps * (BIG_NS + SMALL_NS + COPY_NS + SET_NS + SYNC_NS)
    tree = gpu_settled(server, 'process.executable.name == "cuda_launch"', want)
    assert tree["total"] == want, (tree["total"], want)
    assert gpu_leaves(tree)[("k_big", "cuda_kernel")] == steps * BIG_NS
    leaves, kernel_self = pc_leaves(tree)
    assert leaves == {} and kernel_self == steps * (BIG_NS + SMALL_NS), (leaves, kernel_self)
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.stats_port}/debug/stats", timeout=10) as s:
        stats = json.load(s)
    assert stats["cuda_library_pc_sampling_refused"] == 1, stats["cuda_library_pc_sampling_refused"]
    assert stats["cuda_library_pc_samples_total"] == 0


NVTX_LAUNCHER = os.path.join(WORKLOADS, "cuda_nvtx")


def run_nvtx(lib, epochs, steps, exe=NVTX_LAUNCHER, seconds=4, **extra):
    """The NVTX workload, its epochs spread over seconds (the agent reads a
    process while it runs: one that ends in milliseconds may be gone first)."""
    env = cuda_env(lib)
    env["NVTX_INJECTION64_PATH"] = lib
    env.update(extra)
    r = subprocess.run([exe, str(epochs), str(steps), str(seconds)], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"done {epochs} {steps}", (r.stdout, r.stderr)


def nvtx_paths(tree):
    """GPU time of each leaf by the nvtx frames above it, outermost first."""
    out = {}
    for path, n in walk(tree["root"]):
        if n["frame_type"] not in GPU_LEAF_TYPES:
            continue
        ranges = tuple(p for p, t in zip(path, frame_types(tree, path)) if t == "nvtx")
        out[(ranges, path[-1])] = out.get((ranges, path[-1]), 0) + n["total"]
    return out


def frame_types(tree, path):
    node, types = tree["root"], [tree["root"]["frame_type"]]
    for name in path[1:]:
        node = next(c for c in node["children"] if c["name"] == name)
        types.append(node["frame_type"])
    return types


def nvtx_split_settled(server, exe, epochs, steps):
    """The GPU flamegraph of the NVTX workload run as exe, once all its GPU
    time is in: k_big's time split exactly between "epoch" / "train_step"
    (step_launch) and "epoch" alone (eval_launch)."""
    want = 2 * epochs * steps * BIG_NS
    tree = gpu_settled(server, f'process.executable.name == "{exe}"', want)
    check_tree(tree["root"])
    assert tree["total"] == want, (tree["total"], want)
    assert nvtx_paths(tree) == {
        (("epoch", "train_step"), "k_big"): epochs * steps * BIG_NS,
        (("epoch",), "k_big"): epochs * steps * BIG_NS,
    }, nvtx_paths(tree)
    return tree


def test_nvtx_ranges_between_the_stack_and_the_launch(server, agent_factory, tmp_path):
    """NVTX ranges the program pushes (through NVIDIA's own nvtx3 loader,
    NVTX_INJECTION64_PATH = the agent-installed library) are frames between
    the CPU stack and the launch: main -> train -> step_launch -> nvtx
    "epoch" -> nvtx "train_step" -> cuLaunchKernel -> k_big, with exact GPU
    time. The same kernel under other ranges (eval_launch, in "epoch" only)
    stays apart."""
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    assert f"NVTX_INJECTION64_PATH={lib}" in agent.output()
    epochs, steps = 30, 100
    run_nvtx(lib, epochs, steps)
    tree = nvtx_split_settled(server, "cuda_nvtx", epochs, steps)
    # In order: CPU frames, then the ranges, then the launch and the kernel.
    for path, n in walk(tree["root"]):
        if n["frame_type"] == "cuda_kernel":
            types = frame_types(tree, path)
            i = types.index("cuda_launch")
            assert types[i + 1] == "cuda_kernel", (path, types)
            k = [j for j, t in enumerate(types) if t == "nvtx"]
            assert k and k == list(range(k[0], i)), (path, types)
    whole = under_path(tree, ("train", "epoch", "train_step", "cuLaunchKernel"), "k_big")
    assert whole >= 0.98 * epochs * steps * BIG_NS, whole


def test_nvtx_ranges_of_unsampled_launches(server, agent_factory, tmp_path):
    """A launch that gets no stack keeps the NVTX ranges it was launched
    under. With one stack a hundred seconds, only the very first launch (a
    step_launch under "epoch" / "train_step") is sampled: the other step
    launches inherit its stack under the same ranges, and every
    eval_launch -- under "epoch" alone, where no launch was ever sampled --
    is under [launch not sampled] and still under "epoch", never at the
    root: the split per range is exact."""
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    epochs, steps = 10, 50
    exe = str(tmp_path / "cuda_nvtx_rare")  # its own name: the server holds the other tests' samples
    shutil.copy(NVTX_LAUNCHER, exe)
    run_nvtx(lib, epochs, steps, exe=exe, seconds=2, EMBER_CUDA_STACK_TRACE_SAMPLING_TARGET="1",
             EMBER_CUDA_STACK_TRACE_SAMPLING_WINDOW_SIZE="100")
    tree = nvtx_split_settled(server, "cuda_nvtx_rare", epochs, steps)
    assert under_path(tree, ("[launch not sampled]", "epoch", "cuLaunchKernel"), "k_big") == epochs * steps * BIG_NS
    assert under_path(tree, ("epoch", "train_step", "cuLaunchKernel"), "k_big") == epochs * steps * BIG_NS
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.stats_port}/debug/stats", timeout=10) as r:
        stats = json.load(r)
    assert stats["cuda_library_launches_sampled_total"] == 1, stats["cuda_library_launches_sampled_total"]


def test_nvtx_off(server, agent_factory, tmp_path):
    """EMBER_CUDA_ENABLE_NVTX=false: the same program, no nvtx frame, the
    same GPU time."""
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    epochs, steps = 10, 100
    # its own executable name: the server may hold the other test's samples
    exe = str(tmp_path / "cuda_nvtx_off")
    shutil.copy(NVTX_LAUNCHER, exe)
    run_nvtx(lib, epochs, steps, exe=exe, EMBER_CUDA_ENABLE_NVTX="false")
    want = 2 * epochs * steps * BIG_NS
    tree = gpu_settled(server, 'process.executable.name == "cuda_nvtx_off"', want)
    assert tree["total"] == want, (tree["total"], want)
    assert nvtx_paths(tree) == {((), "k_big"): want}, nvtx_paths(tree)


def test_pc_sampling_under_nvtx_ranges(server, agent_factory, tmp_path):
    """NVTX and PC sampling together: a kernel launched inside NVTX ranges
    has its instruction / stall leaves under those ranges -- CPU stack ->
    nvtx frames -> cuLaunchKernel -> k_big -> cuda_sass -> cuda_stall --
    its time split exactly 3:1:1 under each path, and no second k_big
    frame without the ranges (the PC entries name their launch as the
    kernel's AGG entries do: stack id, thread, NVTX path)."""
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    epochs, steps = 20, 100
    exe = str(tmp_path / "cuda_nvtx_pc")  # its own name: the server holds the other tests' samples
    shutil.copy(NVTX_LAUNCHER, exe)
    run_nvtx(lib, epochs, steps, exe=exe, EMBER_CUDA_ENABLE_PC_SAMPLING="true", FAKE_CUDA_PCSAMPLES=PC_SCRIPT)
    want = 2 * epochs * steps * BIG_NS
    tree = gpu_settled(server, 'process.executable.name == "cuda_nvtx_pc"', want)
    check_tree(tree["root"])
    assert tree["total"] == want, (tree["total"], want)
    leaves, kernels, stacked = {}, [], 0
    for path, n in walk(tree["root"]):
        types = frame_types(tree, path)
        ranges = tuple(p for p, t in zip(path, types) if t == "nvtx")
        if n["frame_type"] == "cuda_kernel":
            kernels.append((ranges, path, n["self"]))
        if n["frame_type"] == "cuda_stall":
            assert types[-4:] == ["cuda_launch", "cuda_kernel", "cuda_sass", "cuda_stall"], (path, types)
            k = (ranges, path[-3], path[-2], path[-1])
            leaves[k] = leaves.get(k, 0) + n["total"]
            if ranges == ("epoch", "train_step") and "train" in path[:path.index("epoch")]:
                stacked += n["total"]
    each = epochs * steps * BIG_NS
    assert leaves == {
        (("epoch", "train_step"), "k_big", f"{FAKE_CUBIN}+0x1a0", STALL + "long_scoreboard"): each * 3 // 5,
        (("epoch", "train_step"), "k_big", f"{FAKE_CUBIN}+0x1c0", STALL + "math_pipe_throttle"): each // 5,
        (("epoch", "train_step"), "k_big", f"{FAKE_CUBIN}+0x200", STALL + "selected"): each // 5,
        (("epoch",), "k_big", f"{FAKE_CUBIN}+0x1a0", STALL + "long_scoreboard"): each * 3 // 5,
        (("epoch",), "k_big", f"{FAKE_CUBIN}+0x1c0", STALL + "math_pipe_throttle"): each // 5,
        (("epoch",), "k_big", f"{FAKE_CUBIN}+0x200", STALL + "selected"): each // 5,
    }, leaves
    # Every kernel frame is under the ranges, with all its time on its
    # instructions: no second kernel frame outside them.
    assert kernels and all(r and s == 0 for r, _, s in kernels), kernels
    # ... and under the launching CPU stack (main -> train), above the
    # ranges (a loaded host may leave some launches without their stack).
    assert stacked > 0, stacked


# --- the timeline: single activities with their launch stacks --------------------

def timeline(server, query, limit=20000):
    status, t = api_post(server, "gpu/timeline", {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000,
                                                             "query": query}, "limit": limit})
    assert status == 200, t
    return t


def test_timeline_spans_on_the_fake_driver(server, agent_factory, tmp_path):
    """Every activity of a short run (under the library's 256 spans a
    report) comes back as a span: exactly the scripted durations, kinds,
    devices and streams, one after the other on each stream as the fake GPU
    runs them, inside the run's wall time (the fake's GPU clock is
    CLOCK_MONOTONIC: the library converted), each with the stack that
    launched it -- the same path the flamegraph shows that time under."""
    require_root()
    agent, lib = start_agent(agent_factory, server, tmp_path)
    steps = 20
    t0 = time.time_ns()
    r = subprocess.run([LAUNCHER, str(steps), "1", "2"], env=cuda_env(lib), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    t1 = time.time_ns()
    assert r.returncode == 0 and r.stdout.strip() == f"done {steps} 1", (r.stdout, r.stderr)
    query = 'process.executable.name == "cuda_launch"'
    gpu_settled(server, query, steps * (BIG_NS + SMALL_NS + COPY_NS + SET_NS + SYNC_NS))
    want = {("k_big", "kernel", BIG_NS, 1), ("k_small", "kernel", SMALL_NS, 2), ("HtoD", "memcpy", COPY_NS, 1),
            ("memset", "memset", SET_NS, 1)}
    got = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        t = timeline(server, query)
        got = {}
        for s in t["spans"]:
            got.setdefault(s["name"], []).append(s)
        if sum(len(v) for v in got.values()) >= 5 * steps:
            break
        time.sleep(1)
    assert sorted(got) == ["HtoD", "cuStreamSynchronize", "k_big", "k_small", "memset"], sorted(got)
    assert all(len(v) == steps for v in got.values()), {k: len(v) for k, v in got.items()}
    assert not t["truncated"]
    for name, kind, ns, stream in want:
        for s in got[name]:
            assert (s["kind"], s["end_ns"] - s["start_ns"], s["device"], s["stream"]) == (kind, ns, 0, stream), s
    for s in got["cuStreamSynchronize"]:
        assert s["kind"] == "sync" and s["end_ns"] - s["start_ns"] == SYNC_NS, s
    for s in t["spans"]:
        assert t0 <= s["start_ns"] < s["end_ns"] <= t1, (t0, s, t1)
    # the fake GPU runs a stream's work back to back: no overlap on a stream
    for stream in (1, 2):
        on = sorted((s["start_ns"], s["end_ns"]) for s in t["spans"] if s["stream"] == stream and s["kind"] != "sync")
        assert all(a[1] <= b[0] for a, b in zip(on, on[1:])), stream
    # the attributes of the process, for the filter and the tooltip
    assert all(t["label_sets"][s["labels"]]["process.executable.name"] == "cuda_launch" for s in t["spans"])
    assert timeline(server, query + ' && cuda.stream.id == "2"')["spans"] and \
        {s["name"] for s in timeline(server, query + ' && cuda.stream.id == "2"')["spans"]} == {"k_small"}
    # the launching stacks: the whole path, or an error frame that says why
    # it ends early (a launch before the agent had read the process), and
    # never another function; the flamegraph holds the same paths
    tree = gpu_flamegraph(server, query)
    paths = {tuple(p) for p, n in walk(tree["root"]) if n["frame_type"] in GPU_LEAF_TYPES}
    whole = 0
    for fn, api, leaf in (("launch_big", "cuLaunchKernel", "k_big"), ("launch_small", "cudaLaunchKernel", "k_small"),
                          ("copy_inputs", "cuMemcpyHtoDAsync", "HtoD")):
        for s in got[leaf]:
            stack = [f["name"] for f in t["stacks"][s["stack"]]]
            assert stack[-2:] == [api, leaf], stack
            assert t["stacks"][s["stack"]][-2]["frame_type"] == "cuda_launch"
            it = iter(stack)
            if all(any(f == w for f in it) for w in ("start_thread", "train", "train_step", fn, api)):
                whole += 1
            else:
                assert any(f.startswith("[") for f in stack), stack
            assert any(p[-len(stack):] == tuple(stack) for p in paths), stack
    assert whole >= 0.5 * 3 * steps, whole
    print(f"{whole} of {3 * steps} spans under whole stacks")
    # the agent's counters: every span sent once, most with their stack
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.stats_port}/debug/stats", timeout=10) as r:
        stats = json.load(r)
    assert stats["cuda_spans_total"] == 5 * steps, stats["cuda_spans_total"]
    assert whole <= stats["cuda_spans_joined_total"] <= 5 * steps, stats["cuda_spans_joined_total"]
