"""libembercuda.so on a real GPU with the real CUPTI (tests/device/cuda_lib.sh
runs this; no agent needed: a test-side socket stands in for it).

  1. cuda_split split: a CUDA C program with two kernels of ~700 and ~300 us;
     the library's per-kernel totals vs the program's own CUDA-event timings
     (the split must agree within 3 points), stack ids non-zero, the rate
     limit held, HELLO/DEVICE sane.
  2. cuda_split empty: 100 000 empty-kernel launches, CPU time per launch
     (median, p99) without the library and with it.
  3. PyTorch: a small training step under the library: it loads PyTorch's
     own CUPTI, reports kernels, and the program is unharmed.
Prints RESULT lines and writes $OUT/cuda_lib.json; exit status 1 when a
check fails."""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from cudawire import AGG, DEVICE, HELLO, KIND_KERNEL, STATS, Listener  # noqa: E402

LIB = os.path.join(ROOT, "build", "lib", "libembercuda.so")
OUT = os.environ.get("OUT", "/tmp/ember-cuda-lib")
SPLIT = sys.argv[1]  # the built cuda_split
results, failures = {}, []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, inject, sock=None, timeout=300, **env_extra):
    env = dict(os.environ)
    env.pop("CUDA_INJECTION64_PATH", None)
    if inject:
        env["CUDA_INJECTION64_PATH"] = LIB
        env["EMBER_CUDA_QUIET"] = "false"
        env["EMBER_CUDA_PRINT_STATS"] = "true"
        env["EMBER_CUDA_AGENT_SOCKET"] = sock or os.path.join(OUT, "nobody.sock")
    env.update(env_extra)
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    print(f"$ {' '.join(cmd)[:80]} ({'injected' if inject else 'plain'}, {time.monotonic() - t0:.1f} s, exit {r.returncode})")
    if r.stderr.strip():
        print("  " + "\n  ".join(r.stderr.strip().splitlines()[-6:]))
    return r, time.monotonic() - t0


def collect(lst):
    conns = lst.messages(1.0)
    return conns[0] if len(conns) == 1 else []


def entries(msgs, t):
    return [e for ty, es in msgs if ty == t for e in es]


os.makedirs(OUT, exist_ok=True)

# 1. the split
sock = os.path.join(OUT, "agent.sock")
if os.path.exists(sock):
    os.unlink(sock)
lst = Listener(sock)
steps = 2000
r, elapsed = run([SPLIT, "split", str(steps)], True, sock)
msgs = collect(lst)
lst.close()
check(r.returncode == 0, "cuda_split split ran under the library")
ref = json.loads(r.stdout) if r.returncode == 0 else {"k70_ms": 0, "k30_ms": 0}
check(bool(msgs) and msgs[0][0] == HELLO, "HELLO first")
if msgs:
    hello = msgs[0][1][0]
    results["hello"] = {k: v for k, v in hello.items()}
    devs = entries(msgs, DEVICE)
    results["devices"] = [{"index": d["index"], "name": d["name"], "uuid": d["uuid"].hex()} for d in devs]
    check(len(devs) >= 1 and devs[0]["name"] and any(devs[0]["uuid"]), f"DEVICE {results['devices']}")
    aggs = [a for a in entries(msgs, AGG) if a["kind"] == KIND_KERNEL]
    by = {}
    for a in aggs:
        key = "k70" if "k70" in a["name"] else "k30" if "k30" in a["name"] else a["name"]
        t = by.setdefault(key, [0, 0])
        t[0] += a["total_ns"]
        t[1] += a["count"]
    results["library_kernels"] = by
    results["events_ms"] = ref
    k70, k30 = by.get("k70", [0, 0]), by.get("k30", [0, 0])
    check(k70[1] == steps and k30[1] == steps, f"every kernel counted: {k70[1]}, {k30[1]} of {steps}")
    lib_share = 100 * k70[0] / max(1, k70[0] + k30[0])
    ev_share = 100 * ref["k70_ms"] / max(1e-9, ref["k70_ms"] + ref["k30_ms"])
    results["k70_share_library"], results["k70_share_events"] = lib_share, ev_share
    print(f"RESULT k70_share_library={lib_share:.2f} k70_share_events={ev_share:.2f}")
    check(abs(lib_share - ev_share) <= 3, "kernel split within 3 points of CUDA events")
    check(all(a["stack_id"] != 0 for a in aggs), "every kernel under a sampled stack id")
    ids = {a["stack_id"] for a in aggs}
    windows = int(elapsed) + 2
    check(len(ids) <= 50 * windows, f"{len(ids)} sampled kernel launches in {elapsed:.1f} s (<= 50/s)")
    apis = sorted({a["api"] for a in aggs})
    results["apis"] = apis
    print("RESULT apis=" + ",".join(apis))
    stats = entries(msgs, STATS)
    if stats:
        results["stats"] = stats[-1]

# 2. launch overhead: the same program without and with the library
n = 100000
over = {}
for inject in (False, True, False, True):
    r, _ = run([SPLIT, "empty", str(n)], inject)
    if r.returncode == 0:
        over.setdefault("injected" if inject else "plain", []).append(json.loads(r.stdout))
results["launch_overhead"] = over
if len(over.get("plain", [])) == 2 and len(over.get("injected", [])) == 2:
    plain = min(x["median_ns"] for x in over["plain"])
    inj = min(x["median_ns"] for x in over["injected"])
    plain99 = min(x["p99_ns"] for x in over["plain"])
    inj99 = min(x["p99_ns"] for x in over["injected"])
    print(f"RESULT launch_median_ns plain={plain} injected={inj} added={inj - plain}")
    print(f"RESULT launch_p99_ns plain={plain99} injected={inj99} added={inj99 - plain99}")
    check(inj - plain <= 5000, "added launch overhead <= 5 us median")
else:
    check(False, "empty-kernel runs")

# 3. PyTorch under the library
torch_step = r"""
import torch
def train_step(model, opt, x):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 1024, device="cuda")
for _ in range(300):
    train_step(model, opt, x)
torch.cuda.synchronize()
print("done")
"""
lst = Listener(sock)
r, _ = run([sys.executable, "-c", torch_step], True, sock)
msgs = collect(lst)
lst.close()
check(r.returncode == 0 and r.stdout.strip() == "done", "PyTorch training step ran under the library")
check("loaded libembercuda" in r.stderr, "the library loaded (PyTorch's CUPTI or another)")
kern = [a for a in entries(msgs, AGG) if a["kind"] == KIND_KERNEL]
results["torch_kernels"] = len({a["name"] for a in kern})
results["torch_stderr"] = r.stderr[-2000:]
check(len(kern) > 0 and all(a["stack_id"] != 0 for a in kern), f"PyTorch kernels reported: {len(kern)} entries")

results["failures"] = failures
with open(os.path.join(OUT, "cuda_lib.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
