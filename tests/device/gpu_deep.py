"""PC sampling on a real GPU (tests/device/gpu_deep.sh runs this):
ember-server and ember-agent from build/devbundle on this machine, the
library the agent installs, and pc_deep (tests/device/pc_deep.cu):

  1. with EMBER_CUDA_ENABLE_PC_SAMPLING=true: the GPU flamegraph has, under
     each of the two kernels, cuda_sass -> cuda_stall leaves holding at
     least 99 % of the kernel's time; mem_bound's top stall reason is a
     memory one (long_scoreboard, lg_throttle, tex_throttle, drain, membar,
     short_scoreboard, mio_throttle), compute_bound's is not; the library
     did not say PC sampling was refused;
  2. overhead: each kernel's median CUDA-event time with sampling on
     against the same program injected with sampling off, in % (reported,
     and at most 50 % for the check; the figure goes to docs/performance.md).

With EMBER_E2E_FAKE=1 the program is the fake-driver workload
(build/workloads/cuda_launch) whose kernels k_big and k_small get scripted
samples standing for a memory-bound and a compute-bound kernel, to check
this script where there is no GPU; step 2 is left out there. Prints RESULT
lines, writes $OUT/gpu_deep.json; exit status 1 when a check fails."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, HERE)
from harness import WORKLOADS, fake_cuda_env, walk  # noqa: E402
from devrun import FAKE, check, failures, finish, injected_env, results, run, settled, start  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/ember-gpu-deep")
PREFIX = "smsp__pcsamp_warps_issue_stalled_"
MEMORY = {"long_scoreboard", "lg_throttle", "tex_throttle", "drain", "membar", "short_scoreboard", "mio_throttle"}





def reason(name):
    """The short reason of a CUPTI stall name (..._not_issued counts as its reason)."""
    r = name[len(PREFIX):] if name.startswith(PREFIX) else name
    return r[:-len("_not_issued")] if r.endswith("_not_issued") else r


def stalls(tree, kernel):
    """kernel's time: in all, and per stall reason under cuda_sass."""
    total, per = 0, {}
    for path, n in walk(tree["root"]):
        if n["frame_type"] == "cuda_kernel" and kernel in n["name"]:
            total += n["total"]
        if n["frame_type"] == "cuda_stall" and len(path) >= 3 and kernel in path[-3]:
            r = reason(n["name"])
            per[r] = per.get(r, 0) + n["total"]
    return total, per


def run_pc(cmd, env):
    """run, showing stderr also where the library spoke of PC sampling."""
    return run(cmd, env, 400, show_stderr=lambda r: r.returncode != 0 or "PC sampling" in r.stderr)


def env_for(lib, pc):
    if FAKE:
        env = fake_cuda_env(lib, "k_big=700000,k_small=300000")
        env["FAKE_CUDA_PCSAMPLES"] = ("k_big:0x90:long_scoreboard:6,k_big:0xa0:selected:1,k_big:0xb0:wait:1,"
                                      "k_small:0x40:math_pipe_throttle:3,k_small:0x50:wait:2,"
                                      "k_small:0x60:long_scoreboard:1")
    else:
        env = injected_env(lib)
    env["EMBER_CUDA_ENABLE_PC_SAMPLING"] = "true" if pc else "false"
    env["EMBER_CUDA_QUIET"] = "false"
    return env


server, agent, lib = start(OUT)
try:
    if FAKE:
        prog, kernels = "cuda_launch", ("k_big", "k_small")
        cmd = [os.path.join(WORKLOADS, "cuda_launch"), "2000", "1", "4"]
    else:
        prog, kernels = "pc_deep", ("mem_bound", "compute_bound")
        cmd = [os.path.join(OUT, "pc_deep"), "400"]

    # 1. stall reasons
    r = run_pc(cmd, env_for(lib, True))
    check(r.returncode == 0, f"{prog} ran with PC sampling on")
    check("PC sampling refused" not in r.stderr and "PC sampling unavailable" not in r.stderr,
          "CUPTI allowed PC sampling (else: run as root or NVreg_RestrictProfilingToAdminUsers=0)")
    on = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and not FAKE else {}
    tree = settled(server, f'process.executable.name == "{prog}"', timeout=120)
    for k, memory in zip(kernels, (True, False)):
        total, per = stalls(tree, k)
        top = max(per, key=per.get) if per else None
        pct = 100 * sum(per.values()) / max(1, total)
        results[f"{k}_stalls_ns"] = per
        results[f"{k}_total_ns"] = total
        print(f"RESULT {k} total_ns={total} top_stall={top} sampled_pct={pct:.1f} "
              f"reasons={sorted(per.items(), key=lambda kv: -kv[1])[:5]}")
        check(total > 0 and pct >= 99, f"{k}: {pct:.1f} % of its time under cuda_sass -> cuda_stall")
        if memory:
            check(top in MEMORY, f"{k}: top stall reason {top} is a memory one")
        else:
            check(top is not None and top not in MEMORY, f"{k}: top stall reason {top} is not a memory one")

    # 2. overhead: the same program, sampling off
    if not FAKE and on:
        r = run_pc(cmd, env_for(lib, False))
        check(r.returncode == 0, f"{prog} ran with PC sampling off")
        off = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
        for key in ("mem_ms_median", "compute_ms_median"):
            if off.get(key):
                slow = 100 * (on[key] - off[key]) / off[key]
                results[f"overhead_pct_{key}"] = slow
                print(f"RESULT pc_sampling_slowdown {key} on={on[key]:.4f} off={off[key]:.4f} ms: {slow:+.1f} %")
                check(slow <= 50, f"{key}: PC sampling slows the kernel by {slow:+.1f} % (<= 50 %)")
finally:
    finish(server, agent, os.path.join(OUT, "gpu_deep.json"))
print("FAILED: " + "; ".join(failures) if failures else "ALL OK")
sys.exit(1 if failures else 0)
