"""PC sampling on a real GPU (tests/device/gpu_deep.sh runs this):
ember-server and ember-agent from build/devbundle on this machine, the
library the agent installs, and pc_deep (tests/device/pc_deep.cu):

  1. with EMBER_CUDA_ENABLE_PC_SAMPLING=true: the GPU flamegraph has, under
     each of the two kernels, cuda_sass -> cuda_stall leaves holding at
     least 99 % of the kernel's time; mem_bound's top stall reason is a
     memory one (long_scoreboard, lg_throttle, tex_throttle, drain, membar,
     short_scoreboard, mio_throttle), compute_bound's is not; the library
     did not say PC sampling was refused;
  2. SASS names (where EMBER_NVDISASM names an nvdisasm for the server):
     every cuda_sass frame under the two kernels is named by its mnemonic
     ("LDG.E +0xc0"): the library saved the cubin the program loaded, the
     agent uploaded it, the server disassembled it;
  3. overhead: each kernel's median CUDA-event time with sampling on
     against the same program injected with sampling off, in % (reported,
     and at most 50 % for the check; the figure goes to docs/performance.md).

With EMBER_E2E_FAKE=1 the program is the fake-driver workload
(build/workloads/cuda_launch) launching the kernels mem_bound and
compute_bound of the checked-in tests/data/sass/pc_kernels_sm90.cubin
(which the fake driver loads), with scripted samples at its memory and
arithmetic instructions, to check this script where there is no GPU; step
3 is left out there. Prints RESULT
lines, writes $OUT/gpu_deep.json; exit status 1 when a check fails."""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, HERE)
from harness import WORKLOADS, fake_cuda_env, gpu_flamegraph, wait_until, walk  # noqa: E402
from devrun import FAKE, check, failures, finish, injected_env, results, run, settled, start  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/ember-gpu-deep")
PREFIX = "smsp__pcsamp_warps_issue_stalled_"
MNEMONIC = re.compile(r"^[A-Z][A-Z0-9_.]* \+0x[0-9a-f]+$")
FAKE_CUBIN = os.path.join(ROOT, "tests", "data", "sass", "pc_kernels_sm90.cubin")
# nvdisasm for the server: gpu_deep.sh names the CUDA toolkit's (the
# test-only one in build/cudatools in fake mode); none: no names checked.
NVDISASM = os.environ.get("EMBER_NVDISASM", "")
MEMORY = {"long_scoreboard", "lg_throttle", "tex_throttle", "drain", "membar", "short_scoreboard", "mio_throttle"}





def reason(name):
    """The short reason of a CUPTI stall name (..._not_issued counts as its reason)."""
    r = name[len(PREFIX):] if name.startswith(PREFIX) else name
    return r[:-len("_not_issued")] if r.endswith("_not_issued") else r


def named_sass(tree, kernel):
    """kernel's time under cuda_sass frames: in all, and under those named
    by a mnemonic ("LDG.E +0xc0", not "cubin:<crc>+0xc0")."""
    total = named = 0
    for path, n in walk(tree["root"]):
        if n["frame_type"] == "cuda_sass" and len(path) >= 2 and kernel in path[-2]:
            total += n["total"]
            named += n["total"] if MNEMONIC.match(n["name"]) else 0
    return total, named


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
        # The checked-in cubin's kernels, sampled at its real instructions
        # (tests/data/sass/pc_kernels_sm90.mnemonics.tsv).
        env = fake_cuda_env(lib, "mem_bound=700000,compute_bound=300000",
                            CUDA_LAUNCH_KERNELS="mem_bound,compute_bound", FAKE_CUDA_CUBIN=FAKE_CUBIN)
        env["FAKE_CUDA_PCSAMPLES"] = ("mem_bound:0xc0:long_scoreboard:6,mem_bound:0xe0:selected:1,"
                                      "mem_bound:0xf0:wait:1,compute_bound:0x90:math_pipe_throttle:3,"
                                      "compute_bound:0xb0:wait:2,compute_bound:0xa0:long_scoreboard:1")
    else:
        env = injected_env(lib)
    env["EMBER_CUDA_ENABLE_PC_SAMPLING"] = "true" if pc else "false"
    env["EMBER_CUDA_QUIET"] = "false"
    return env


server, agent, lib = start(OUT, f"-nvdisasm={NVDISASM or 'none'}")
try:
    kernels = ("mem_bound", "compute_bound")
    if FAKE:
        prog, cmd = "cuda_launch", [os.path.join(WORKLOADS, "cuda_launch"), "2000", "1", "4"]
    else:
        prog, cmd = "pc_deep", [os.path.join(OUT, "pc_deep"), "400"]

    # 1. stall reasons
    r = run_pc(cmd, env_for(lib, True))
    check(r.returncode == 0, f"{prog} ran with PC sampling on")
    check("PC sampling refused" not in r.stderr and "PC sampling unavailable" not in r.stderr,
          "CUPTI allowed PC sampling (else: run as root or NVreg_RestrictProfilingToAdminUsers=0)")
    check("PC sampling on (" in r.stderr, "the library said PC sampling is on")
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

    # 2. SASS names: the program's cubins saved by the library, uploaded
    # by the agent, disassembled by the server's nvdisasm
    if NVDISASM:
        def all_named():
            t = gpu_flamegraph(server, f'process.executable.name == "{prog}"')
            return all(named_sass(t, k)[0] > 0 and named_sass(t, k)[1] == named_sass(t, k)[0] for k in kernels)
        try:
            wait_until(all_named, 60, what="mnemonics on every cuda_sass frame")
        except AssertionError:
            pass
        tree = gpu_flamegraph(server, f'process.executable.name == "{prog}"')
        for k in kernels:
            total, named = named_sass(tree, k)
            top = sorted(((n["total"], n["name"]) for path, n in walk(tree["root"])
                          if n["frame_type"] == "cuda_sass" and len(path) >= 2 and k in path[-2]), reverse=True)[:3]
            results[f"{k}_sass_named_ns"] = named
            print(f"RESULT {k} sass_named_pct={100 * named / max(1, total):.1f} top_instructions={top}")
            check(total > 0 and named == total, f"{k}: every cuda_sass frame named by its mnemonic")
    else:
        print("RESULT no nvdisasm (EMBER_NVDISASM): SASS names not checked")

    # 3. overhead: the same program, sampling off
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
