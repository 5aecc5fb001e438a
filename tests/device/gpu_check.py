"""Checks, after tests/device/gpu_metrics.sh ran a known GPU load under
ember-agent, that the GPU metrics the server stored agree with what
nvidia-smi read over the same seconds, and that the load's process
carries its own GPU series and CPU profile. Prints a table, writes
check.json beside the inputs, exits 1 when a check fails.
Usage: gpu_check.py SERVER_URL OUT_DIR"""
import csv
import json
import sys
import urllib.request

PROJECT = "00000000-0000-0000-0000-000000000000"
url, out = sys.argv[1], sys.argv[2]


def post(path, body):
    req = urllib.request.Request(f"{url}/public/api/v1/project/{PROJECT}/{path}",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def metric(name, lo, hi, q=None, group_by=None, spatial="avg"):
    """{group: mean of the buckets' values} over [lo, hi) in 1 s buckets."""
    ans = post("metrics", {"filter": {"start_ts": lo, "end_ts": hi, "query": q}, "metric": name,
                           "group_by": group_by, "temporal": "avg", "spatial": spatial,
                           "num_buckets": max(1, (hi - lo) // 1000)})
    res = {}
    for s in ans["series"]:
        vals = [p[1] for p in s["points"]]
        if vals:
            res[s["group"]] = sum(vals) / len(vals)
    return res


load = json.load(open(f"{out}/load.json"))
pid = load["pid"]
busy = (load["busy_start_ms"] + 5000, load["busy_end_ms"] - 2000)
idle = (load["busy_end_ms"] + 8000, load["busy_end_ms"] + 16000)

# nvidia-smi, once a second: timestamp, util %, mem used MiB, mem total MiB,
# power W, temp C, sm MHz, mem MHz (timestamps in the machine's local time,
# written as Unix ms by the script's sampler).
smi = []
for row in csv.reader(open(f"{out}/smi.csv")):
    try:
        smi.append([float(x) for x in row])
    except ValueError:
        continue


def smi_mean(col, lo, hi):
    v = [r[col] for r in smi if lo <= r[0] < hi]
    return sum(v) / len(v) if v else float("nan")


checks, rows = [], []


def check(what, ok, detail):
    checks.append({"check": what, "ok": bool(ok), "detail": detail})
    print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")


names = {n["name"]: n for n in post("metrics/names", {"filter": {"start_ts": busy[0] - 60000,
                                                                  "end_ts": idle[1], "query": None}})["names"]}
gpu_names = sorted(n for n in names if n.startswith("hw.gpu"))
# Every key a lone Hopper GPU (H100/H200, ECC on, no MIG) should give
# (docs/internals/metrics.md); NVLink only where a link is up, retired
# pages only before Ampere, XIDs only when one happens.
REQUIRED = {
    "hw.gpu.utilization", "hw.gpu.memory.utilization", "hw.gpu.memory.usage", "hw.gpu.memory.limit",
    "hw.gpu.power", "hw.gpu.power.limit", "hw.gpu.temp", "hw.gpu.clock.sm", "hw.gpu.clock.mem",
    "hw.gpu.clocks_throttle", "hw.gpu.clocks_throttle.reasons", "hw.gpu.pcie.tx", "hw.gpu.pcie.rx",
    "hw.gpu.ecc.errors", "hw.gpu.remapped_rows", "hw.gpu.remapped_rows.pending", "hw.gpu.remapped_rows.failure",
    "hw.gpu.sm.efficiency", "hw.gpu.sm.occupancy", "hw.gpu.tensor_util", "hw.gpu.dram_bw_util",
    "hw.gpu.process.utilization", "hw.gpu.process.memory.utilization", "hw.gpu.process.memory.usage",
    "hw.gpu.topology.device", "hw.gpu.topology.process",
}
# A pair's link needs two GPUs.
OPTIONAL = {"hw.gpu.nvlink.tx", "hw.gpu.nvlink.rx", "hw.gpu.nvlink.errors", "hw.gpu.retired_pages",
            "hw.gpu.xid", "hw.gpu.xid.dropped", "hw.gpu.topology.link"}
check("GPU metric keys stored", REQUIRED <= set(gpu_names) and set(gpu_names) <= REQUIRED | OPTIONAL,
      f"missing {sorted(REQUIRED - set(gpu_names))}, unexpected {sorted(set(gpu_names) - REQUIRED - OPTIONAL)}, "
      f"optional present {sorted(set(gpu_names) & OPTIONAL)}")

mem_total = smi[0][3] if smi else float("nan")
pairs = [("hw.gpu.utilization", 1, 1.0, 5.0), ("hw.gpu.memory.utilization", 2, 100.0 / mem_total, 0.5),
         ("hw.gpu.power", 4, 1.0, None), ("hw.gpu.temp", 5, 1.0, 5.0), ("hw.gpu.clock.sm", 6, 1.0, None),
         ("hw.gpu.clock.mem", 7, 1.0, None)]
for name, col, scale, tol in pairs:
    for phase, (lo, hi) in (("busy", busy), ("idle", idle)):
        got = metric(name, lo, hi).get("all", float("nan"))
        want = smi_mean(col, lo, hi) * scale
        rows.append({"metric": name, "phase": phase, "ember": got, "nvidia-smi": want})
        t = tol if tol is not None else 0.15 * abs(want) + 1e-9
        check(f"{name} ({phase})", abs(got - want) <= t,
              f"ember {got:.2f}, nvidia-smi {want:.2f} (tolerance {t:.2f})")
# The newer keys: plausible values during the load (bf16 matrix products).
lim = metric("hw.gpu.memory.limit", *busy).get("all", float("nan"))
check("hw.gpu.memory.limit is nvidia-smi's total", abs(lim / (1 << 20) - mem_total) <= 1,
      f"ember {lim / (1 << 20):.0f} MiB, nvidia-smi {mem_total:.0f} MiB")
pl = metric("hw.gpu.power.limit", *busy).get("all", float("nan"))
pw = metric("hw.gpu.power", *busy).get("all", float("nan"))
check("hw.gpu.power.limit above the draw", 100 <= pl <= 1500 and pw <= pl * 1.05, f"limit {pl} W, draw {pw} W")
for name in ("hw.gpu.sm.efficiency", "hw.gpu.sm.occupancy", "hw.gpu.tensor_util", "hw.gpu.dram_bw_util"):
    b_, i_ = metric(name, *busy).get("all", float("nan")), metric(name, *idle).get("all", float("nan"))
    check(f"{name} (GPM) follows the load", 0 < b_ <= 100 and i_ < b_, f"busy {b_}, idle {i_}")
ecc = metric("hw.gpu.ecc.errors", *busy, q='error.type == "uncorrected" && gpu.ecc.counter == "volatile"')
check("no uncorrected ECC errors", ecc.get("all", float("nan")) == 0, ecc)
u_busy = metric("hw.gpu.utilization", *busy).get("all", 0)
u_idle = metric("hw.gpu.utilization", *idle).get("all", 100)
check("utilization follows the load", u_busy >= 90 and u_idle <= 10, f"busy {u_busy:.1f} %, idle {u_idle:.1f} %")

# The load's own series: SM share and memory, labelled with its pid.
pu = metric("hw.gpu.process.utilization", *busy, group_by="process.pid")
check("per-process SM utilization of the load", pu.get(str(pid), 0) >= 80,
      f"pid {pid}: {pu.get(str(pid))}; all: {pu}")
pm = metric("hw.gpu.process.memory.utilization", *busy, group_by="process.pid")
apps = {}
for row in csv.reader(open(f"{out}/apps.csv")):
    try:
        apps[int(row[0])] = float(row[1].split()[0])
    except (ValueError, IndexError):
        continue
want = 100.0 * apps.get(pid, float("nan")) / mem_total
check("per-process memory of the load", abs(pm.get(str(pid), float("nan")) - want) <= 0.5,
      f"ember {pm.get(str(pid))} %, nvidia-smi {want:.2f} % ({apps.get(pid)} MiB of {mem_total:.0f})")
exe = metric("hw.gpu.process.utilization", *busy, q=f'process.pid == "{pid}"',
             group_by="process.executable.name")
check("the process series carry the process's attributes", any(k.startswith("python") for k in exe), exe)
gn = metric("hw.gpu.utilization", *busy, group_by="gpu.name")
check("gpu.name label", any("H200" in k or "H100" in k for k in gn), list(gn))

# The topology of the load's host: the GPU with its NUMA node and near CPUs
# (NVML's affinity), the load among the processes feeding it with the CPUs
# it may run on; not pinned, so no NUMA finding about it.
topo = post("gpu/topology", {"filter": {"start_ts": busy[0], "end_ts": busy[1]}})
tg = topo.get("gpus") or []
fed = {p["pid"]: p for g in tg for p in g.get("processes", [])}
check("topology: the GPU with its NUMA node and near CPUs", len(tg) >= 1 and all(g.get("cpus") for g in tg),
      [(g["index"], g["name"], g.get("numa_node"), g.get("cpus"), g["nvlink_active"], g["nvlink_links"]) for g in tg])
check("topology: the load feeds the GPU", pid in fed and fed[pid]["cpus_allowed"], fed.get(pid))
check("topology: no NUMA finding for the unpinned load",
      not [f for f in topo.get("findings", []) if f["kind"] == "numa_placement" and f.get("pid") == pid],
      topo.get("findings"))

# Its CPU profile, from the same agent.
fg = post("flamegraph/json", {"filter": {"start_ts": busy[0], "end_ts": busy[1], "event_kind": "on_cpu",
                                         "frame_mask": {"patterns": []},
                                         "query": f'process.pid == "{pid}"'},
                              "num_samples": None, "num_stat_buckets": None, "synthetic_frames": []})
check("on-CPU samples of the load's process", fg["total"] > 0, f"{fg['total']} samples")
selfs, kinds = {}, {}


def walk(n):
    for c in n.get("children", []):
        if c.get("self"):
            selfs[c["name"]] = selfs.get(c["name"], 0) + c["self"]
        kinds[c.get("frame_type")] = kinds.get(c.get("frame_type"), 0) + c["total"]
        walk(c)


walk(fg["root"])
top = sorted(selfs.items(), key=lambda kv: -kv[1])[:8]
print("load's process, top self frames: " + ", ".join(f"{k} {v}" for k, v in top))
print("frame types (total samples through them): " + json.dumps(kinds))
check("Python frames in the load's profile", kinds.get("cpython", 0) > 0, kinds)

json.dump({"checks": checks, "rows": rows, "load": load}, open(f"{out}/check.json", "w"), indent=1)
sys.exit(0 if all(c["ok"] for c in checks) else 1)
