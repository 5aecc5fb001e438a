"""GPU profiling end to end on a real GPU (tests/device/cuda_e2e.sh runs
this): ember-server and ember-agent from build/devbundle on this machine,
the library the agent installs, and

  1. cuda_split split: kernels k70 (~700 us) and k30 (~300 us) launched
     from main -> train_step -> launch_k70 / launch_k30; the server's GPU
     flamegraph must split them within 3 points of the program's own CUDA
     event timings, with at least 95 % of each kernel's time under that
     whole stack;
  2. a PyTorch training step: at least 90 % of its GPU time under
     <module> -> train_step;
  3. launch overhead with the agent running: 100 000 empty-kernel launches
     without and with injection (median and p99, the better of two runs
     each); at most 5 us added at the median.
With EMBER_E2E_FAKE=1 the programs are the fake-driver workloads
(build/workloads/cuda_launch, tests/workloads/py_cuda_launch.py) on the
TEST-ONLY fake driver, to check this script where there is no GPU; step 3
is left out there. Prints RESULT lines, writes $OUT/cuda_e2e.json; exit
status 1 when a check fails."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, HERE)
from harness import GPU_LEAF_TYPES, WORKLOADS, check_tree, fake_cuda_env, walk  # noqa: E402
from devrun import FAKE, check, failures, finish, injected_env, results, run, settled, start  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/ember-cuda-e2e")





def kernel_time(tree, key):
    return sum(n["total"] for _, n in walk(tree["root"])
               if n["frame_type"] == "cuda_kernel" and key in n["name"])


def under(tree, names, key):
    """GPU time of kernels named like key under a path with names in order."""
    total = 0
    for path, n in walk(tree["root"]):
        if n["frame_type"] not in GPU_LEAF_TYPES or key not in n["name"]:
            continue
        it = iter(path)
        if all(any(want in p for p in it) for want in names):
            total += n["total"]
    return total


def program_env(lib, kernels):
    return fake_cuda_env(lib, kernels) if FAKE else injected_env(lib)


server, agent, lib = start(OUT)
try:
    # 1. the C program's split and stacks
    if FAKE:
        steps = 3000
        prog, names = "cuda_launch", ("k_big", "k_small")
        r = run([os.path.join(WORKLOADS, "cuda_launch"), str(steps), "1", "6"],
                program_env(lib, "k_big=700000,k_small=300000"))
        ref = {"k70_ms": steps * 0.7, "k30_ms": steps * 0.3}
        path = {"k_big": ("train", "train_step", "launch_big"), "k_small": ("train", "train_step", "launch_small")}
    else:
        steps = 2000
        prog, names = "cuda_split", ("k70", "k30")
        r = run([os.path.join(OUT, "cuda_split"), "split", str(steps)], program_env(lib, ""))
        ref = json.loads(r.stdout) if r.returncode == 0 else {"k70_ms": 0, "k30_ms": 0}
        path = {"k70": ("main", "train_step", "launch_k70"), "k30": ("main", "train_step", "launch_k30")}
    check(r.returncode == 0, f"{prog} ran under the library")
    tree = settled(server, f'process.executable.name == "{prog}"')
    check_tree(tree["root"])
    big, small = (kernel_time(tree, k) for k in names)
    share = 100 * big / max(1, big + small)
    ev_share = 100 * ref["k70_ms"] / max(1e-9, ref["k70_ms"] + ref["k30_ms"])
    results.update(c_gpu_ns={names[0]: big, names[1]: small}, c_events_ms=ref,
                   c_share_server=share, c_share_events=ev_share)
    print(f"RESULT c_k70_share server={share:.2f} events={ev_share:.2f}")
    check(abs(share - ev_share) <= 3, "kernel split in the server within 3 points of CUDA events")
    for key, want in path.items():
        whole = under(tree, want, key)
        total = kernel_time(tree, key)
        pct = 100 * whole / max(1, total)
        results[f"c_whole_pct_{key}"] = pct
        print(f"RESULT c_whole_stack_pct {key}={pct:.1f}")
        check(pct >= 95, f"{key}: {pct:.1f} % of its GPU time under {' -> '.join(want)}")

    # 2. Python: PyTorch (the fake driver's ctypes launcher where there is no GPU)
    if FAKE:
        script = os.path.join(ROOT, "tests", "workloads", "py_cuda_launch.py")
        argv, kernels = [sys.executable, script, "1500", "6"], "py_big=700000,py_small=300000"
    else:
        script = os.path.join(OUT, "torch_step.py")
        with open(script, "w") as f:
            f.write("import torch\n\n\n"
                    "def train_step(model, opt, x):\n"
                    "    opt.zero_grad()\n"
                    "    loss = model(x).square().mean()\n"
                    "    loss.backward()\n"
                    "    opt.step()\n\n\n"
                    "model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(),\n"
                    "                            torch.nn.Linear(2048, 2048)).cuda()\n"
                    "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
                    "x = torch.randn(512, 2048, device='cuda')\n"
                    "for _ in range(600):\n"
                    "    train_step(model, opt, x)\n"
                    "torch.cuda.synchronize()\n"
                    "print('done')\n")
        argv, kernels = [sys.executable, script], ""
    p = subprocess.Popen(argv, env=program_env(lib, kernels), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=300)
    check(p.returncode == 0 and out.strip().startswith("done"), f"the Python program ran under the library ({err[-500:]})")
    tree = settled(server, f'process.pid == "{p.pid}"')
    check_tree(tree["root"])
    total = sum(n["total"] for _, n in walk(tree["root"]) if n["frame_type"] in GPU_LEAF_TYPES)
    whole = under(tree, ("<module>", "train_step"), "")
    pct = 100 * whole / max(1, total)
    nk = len({n["name"] for _, n in walk(tree["root"]) if n["frame_type"] == "cuda_kernel"})
    results.update(py_gpu_ns=total, py_whole_pct=pct, py_kernels=nk)
    print(f"RESULT py_whole_stack_pct={pct:.1f} kernels={nk} gpu_ms={total / 1e6:.1f}")
    check(total > 0 and nk > 0, f"Python GPU time reported: {nk} kernels")
    check(pct >= 90, f"{pct:.1f} % of the Python program's GPU time under <module> -> train_step")

    # 3. launch overhead with the agent running
    if not FAKE:
        over = {}
        for inject in (False, True, False, True):
            env = program_env(lib, "") if inject else {k: v for k, v in os.environ.items()
                                                        if k != "CUDA_INJECTION64_PATH"}
            r = run([os.path.join(OUT, "cuda_split"), "empty", "100000"], env)
            if r.returncode == 0:
                over.setdefault("injected" if inject else "plain", []).append(json.loads(r.stdout))
        results["launch_overhead"] = over
        if len(over.get("plain", [])) == 2 and len(over.get("injected", [])) == 2:
            best = {k: (min(x["median_ns"] for x in v), min(x["p99_ns"] for x in v)) for k, v in over.items()}
            added, added99 = best["injected"][0] - best["plain"][0], best["injected"][1] - best["plain"][1]
            print(f"RESULT launch_median_ns plain={best['plain'][0]} injected={best['injected'][0]} added={added}")
            print(f"RESULT launch_p99_ns plain={best['plain'][1]} injected={best['injected'][1]} added={added99}")
            check(added <= 5000, "added launch overhead <= 5 us median with the agent running")
        else:
            check(False, "empty-kernel runs")
    results["agent_tail"] = agent.output()[-3000:]
finally:
    finish(server, agent, os.path.join(OUT, "cuda_e2e.json"))
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
