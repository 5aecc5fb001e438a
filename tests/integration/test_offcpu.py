"""Off-CPU profiling, end to end as root with real BPF: the agent with
-enable-off-cpu records where the offcpu_split workload's thread waits
(30 ms in nanosleep under sleep_a, 10 ms on a condition variable under
sleep_b, in a loop) as off_cpu samples of nanoseconds; the server's off_cpu
flamegraph shows both under the thread's stack with the kernel frames of
the wait below them, totals that match the time the thread really spent
waiting, and the 3:1 split. Without the flag nothing off-CPU is stored; a
non-zero -off-cpu-sampling-rate alone turns it on, and threads already
running when the agent starts are measured; OTLP carries it too;
probabilistic profiling turns it off along with on-CPU sampling."""

import json
import math
import os
import subprocess
import time

from conftest import require_root
from harness import (DEFAULT_PROJECT, WORKLOADS, Server, check_tree, find, free_port, http, wait_until,
                     kill_if_running, walk)

QUERY = 'process.executable.name == "offcpu_split" && thread.name == "blocker"'


def flamegraph(server, kind, query=None, project=DEFAULT_PROJECT):
    body = {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000, "event_kind": kind,
                       "frame_mask": {"patterns": []}, "query": query},
            "num_samples": None, "num_stat_buckets": None, "synthetic_frames": []}
    status, data = http("POST", f"{server.url}/public/api/v1/project/{project}/flamegraph/json",
                        body, {"Content-Type": "application/json"})
    assert status == 200, f"flamegraph query failed with {status}: {data!r}"
    return json.loads(data)


def settled_tree(server, kind, query, project=DEFAULT_PROJECT):
    """The tree once every batch has arrived: a non-zero total, the same
    three seconds in a row. A loaded machine (CI runs every suite on two
    cores) can delay the agent's last batches, hence the long wait; a
    failure lists every total seen."""
    hist = []

    def settled():
        hist.append(flamegraph(server, kind, query, project)["total"])
        return len(hist) >= 3 and hist[-1] > 0 and hist[-3:] == [hist[-1]] * 3
    try:
        wait_until(settled, 60, interval=1.0, what=f"{kind} samples to settle")
    except AssertionError as e:
        raise AssertionError(f"{e}; totals seen, one a second: {hist}") from None
    return flamegraph(server, kind, query, project)


def run_offcpu_split(seconds):
    out = subprocess.run([os.path.join(WORKLOADS, "offcpu_split"), str(seconds)], check=True,
                         stdout=subprocess.PIPE, timeout=seconds + 60).stdout
    return json.loads(out)


def estimate_sd(t, period_s):
    """Standard deviation, in seconds, of the sampled estimate of one
    function's waiting time: a wait d shorter than the period is kept with
    probability d / period and then counts one period, so its variance is
    period * d - d^2; a longer one counts exactly. Taking every wait as
    shorter than the period over-estimates it (safe for a bound)."""
    return math.sqrt(max(period_s * t["seconds"] - t["sq"], 0.0))


def kernel_frames_below(node):
    """The kernel frames anywhere below node, and the share of node's total
    that ends in a kernel leaf."""
    names, kernel_leaf = set(), 0
    for _, n in walk(node):
        if n.get("frame_type") == "kernel":
            names.add(n["name"])
            if n["self"]:
                kernel_leaf += n["self"]
    return names, kernel_leaf / node["total"]


def test_off_cpu_shares_and_totals(server, agent_factory):
    require_root()
    agent = agent_factory(server.url, "-enable-off-cpu").start()
    assert "off-CPU sampling:" in agent.output(), agent.output()[-3000:]
    truth = run_offcpu_split(10)
    a, b = truth["sleep_a"], truth["sleep_b"]
    tree = settled_tree(server, "off_cpu", QUERY)
    assert tree["unit"] == "nanoseconds"
    check_tree(tree["root"])

    blocker = find(tree["root"], "blocker", binary="offcpu_split")
    assert blocker is not None, "the blocker thread's function is not in the off-CPU flamegraph"
    run = next((c for c in blocker["children"] if c["name"] == "run_blocking"), None)
    assert run is not None, [c["name"] for c in blocker["children"]]
    got = {c["name"]: c["total"] / 1e9 for c in run["children"]}
    lines = [f"{n['name']} {n['total'] / 1e9:.3f} s" for n in run["children"]]
    print("off-CPU under run_blocking: " + ", ".join(lines))
    print(f"truth: sleep_a {a['seconds']:.3f} s in {a['waits']} waits, "
          f"sleep_b {b['seconds']:.3f} s in {b['waits']} waits")
    assert set(got) <= {"sleep_a", "sleep_b"}, got
    got_a, got_b = got.get("sleep_a", 0.0), got.get("sleep_b", 0.0)

    # Each function's waits, with the kernel frames of the wait under it.
    for name, syscall in (("sleep_a", "nanosleep"), ("sleep_b", "futex")):
        node = next(c for c in run["children"] if c["name"] == name)
        assert node["frame_type"] == "native" and node["binary"] == "offcpu_split"
        kframes, leaf_share = kernel_frames_below(node)
        assert any(syscall in k for k in kframes), (name, sorted(kframes))
        assert "entry_SYSCALL_64_after_hwframe" in kframes or "do_syscall_64" in kframes, kframes
        assert leaf_share > 0.99, (name, leaf_share)

    # Totals: the estimate is unbiased; its spread follows from the waits
    # the workload made (19 Hz: a period of 52.6 ms, longer than both).
    period = 1 / 19
    sd_a, sd_b = estimate_sd(a, period), estimate_sd(b, period)
    for name, est, t, sd in (("sleep_a", got_a, a, sd_a), ("sleep_b", got_b, b, sd_b)):
        assert abs(est - t["seconds"]) <= 4 * sd + 0.05 * t["seconds"], \
            f"{name}: measured {est:.3f} s, waited {t['seconds']:.3f} s (sd {sd:.3f} s)"
    truth_total = a["seconds"] + b["seconds"]
    total = blocker["total"] / 1e9
    assert abs(total - truth_total) <= 0.25 * truth_total, (total, truth_total)
    sd_total = math.hypot(sd_a, sd_b)
    assert abs(total - truth_total) <= 4 * sd_total + 0.05 * truth_total, (total, truth_total, sd_total)
    # The split: about 3:1; the ratio's relative spread is that of the two
    # estimates combined.
    true_ratio = a["seconds"] / b["seconds"]
    ratio = got_a / max(got_b, 1e-9)
    rel_sd = math.hypot(sd_a / a["seconds"], sd_b / b["seconds"])
    print(f"a:b measured {ratio:.2f}, true {true_ratio:.2f} (relative sd {rel_sd:.2f}); "
          f"thread total {total:.3f} s of {truth_total:.3f} s")
    assert 2.5 < true_ratio < 3.5, truth
    assert abs(ratio / true_ratio - 1) <= 4 * rel_sd + 0.05, (ratio, true_ratio, rel_sd)

    # The workload's main thread waited in pthread_join all along. Its one
    # wait ends as the process does, so it may come a batch after the
    # blocker's last: wait for it too.
    main = settled_tree(server, "off_cpu", 'process.executable.name == "offcpu_split" && '
                        'thread.name == "offcpu_split"')
    assert abs(main["total"] / 1e9 - truth["seconds"]) <= 0.25 * truth["seconds"], main["total"]
    # The on-CPU view is not polluted: no nanoseconds there.
    on = flamegraph(server, "on_cpu", QUERY)
    assert on["unit"] == "samples" and on["total"] < 50, on["total"]
    # The server's counters keep each unit apart: off-CPU nanoseconds in
    # their own counter, never added to the samples counter.
    st, body = http("GET", server.url + "/metrics", timeout=5)
    counters = dict(line.split(" ", 1) for line in body.decode().splitlines()
                    if line.startswith("ember_ingest_"))
    off_ns = int(counters["ember_ingest_off_cpu_nanoseconds_total"])
    samples = int(counters["ember_ingest_samples_total"])
    assert off_ns >= blocker["total"] + main["total"], (off_ns, blocker["total"])
    assert samples < off_ns / 1000, (samples, off_ns)


def test_off_by_default_and_enabled_by_rate(server, agent_factory, tmp_path):
    require_root()
    # Without the flag: sampling on-CPU, nothing off-CPU at all.
    plain = agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    run_offcpu_split(3)
    subprocess.run([os.path.join(WORKLOADS, "cpu_split"), "2"], check=True,
                   stdout=subprocess.DEVNULL)
    wait_until(lambda: flamegraph(server, "on_cpu")["total"] > 50, 20, interval=1.0,
               what="on-CPU samples")
    plain.stop()
    assert "off-CPU sampling:" not in plain.output()
    assert "off_cpu_samples=0 " in plain.output(), plain.output()[-2000:]
    assert flamegraph(server, "off_cpu")["total"] == 0

    # A non-zero -off-cpu-sampling-rate alone turns it on; threads that
    # were there before the agent started are measured from then on.
    seconds = 8
    work = subprocess.Popen([os.path.join(WORKLOADS, "offcpu_split"), str(seconds)],
                            stdout=subprocess.PIPE)
    try:
        time.sleep(0.5)
        rated = agent_factory(server.url, "-off-cpu-sampling-rate=50").start()
        attached = time.monotonic()  # the programs were attached before this
        assert "50 samples per second of waiting" in rated.output(), rated.output()[-3000:]
        out, _ = work.communicate(timeout=seconds + 30)
        ended = time.monotonic()
    finally:
        kill_if_running(work)
    truth = json.loads(out)
    tree = settled_tree(server, "off_cpu", QUERY)
    rated.stop()
    blocker = find(tree["root"], "blocker", binary="offcpu_split")
    assert blocker is not None
    assert find(blocker, "sleep_a", binary="offcpu_split") is not None
    assert find(blocker, "sleep_b", binary="offcpu_split") is not None
    waited = truth["sleep_a"]["seconds"] + truth["sleep_b"]["seconds"]
    at_least = 0.8 * waited * min(1.0, (ended - attached) / seconds)
    got = blocker["total"] / 1e9
    print(f"threads there before the agent: {got:.3f} s measured, at least {at_least:.3f} s "
          f"expected of the {waited:.3f} s waited")
    assert at_least <= got <= 1.1 * waited, (got, at_least, waited)

    # OTLP Profiles (-ember-protocol=false) carries it as off_cpu/nanoseconds.
    otlp = Server(tmp_path / "otlp-data").start()
    try:
        via_otlp = agent_factory(otlp.url, "-enable-off-cpu", "-off-cpu-sampling-rate=50",
                                 "-ember-protocol=false").start()
        truth = run_offcpu_split(3)
        tree = settled_tree(otlp, "off_cpu", QUERY)
        via_otlp.stop()
        assert tree["unit"] == "nanoseconds"
        blocker = find(tree["root"], "blocker", binary="offcpu_split")
        assert blocker is not None and find(blocker, "sleep_a") is not None
        waited = truth["sleep_a"]["seconds"] + truth["sleep_b"]["seconds"]
        assert abs(blocker["total"] / 1e9 - waited) <= 0.25 * waited, (blocker["total"], waited)
    finally:
        otlp.stop()


def test_probabilistic_profiling_gates_off_cpu(server, agent_factory):
    # -probabilistic-threshold=1: each interval is profiled with a 1% chance.
    # While "off", the off-CPU programs are detached too: nothing stored.
    require_root()
    agent = agent_factory(server.url, "-enable-off-cpu", "-probabilistic-threshold=1",
                          "-probabilistic-interval=1h").start()
    wait_until(lambda: "probabilistic profiling:" in agent.output(), 10, what="the first draw")
    truth = run_offcpu_split(2)
    agent.stop()
    got = flamegraph(server, "off_cpu", QUERY)["total"] / 1e9
    if "probabilistic profiling: on" in agent.output():
        waited = truth["sleep_a"]["seconds"] + truth["sleep_b"]["seconds"]
        assert got > 0.5 * waited, (got, waited)
    else:
        assert got == 0, agent.output()[-2000:]


def agent_metrics(base):
    """The agent's -pprof /metrics as {name: value} (labelled series left out)."""
    status, body = http("GET", base + "/metrics", timeout=5)
    assert status == 200, body
    out = {}
    for line in body.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0].removeprefix("ember_agent_")] = float(parts[1])
    return out


def test_ring_buffer_flood_wakes_the_agent(server, agent_factory):
    # The agent reads the ring buffer once a second. 128 threads that sleep
    # 500 us in a loop, sampled off-CPU at 1000 Hz, write tens of thousands
    # of records a second: more than the ring holds in a second. A record
    # that finds the ring a quarter full wakes the agent at once, so none
    # is lost (without that wakeup about a fifth were), and the agent takes
    # every record BPF sent.
    require_root()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    agent_factory(server.url, "-enable-off-cpu", "-off-cpu-sampling-rate=1000",
                  f"-pprof=127.0.0.1:{port}").start()
    wait_until(lambda: agent_metrics(base).get("sampling") == 1, 20, what="the agent to sample")
    out = subprocess.run([os.path.join(WORKLOADS, "offcpu_burst"), "4", "128", "500"], check=True,
                         stdout=subprocess.PIPE, timeout=60).stdout
    waits = json.loads(out)["waits"]

    def drained():
        m = agent_metrics(base)
        return m["off_cpu_samples_total"] >= m["bpf_off_cpu_samples_total"] > 0
    wait_until(drained, 20, what="the agent to take every off-CPU record")
    m = agent_metrics(base)
    assert m["bpf_off_cpu_samples_total"] > 0.2 * waits, (m, waits)
    assert m["bpf_ring_fill_wakeups_total"] > 0, m
    assert m["off_cpu_samples_lost_total"] == 0, m
    assert m["samples_lost_total"] == 0, m
    assert m["off_cpu_samples_total"] == m["bpf_off_cpu_samples_total"], m
