"""End to end, as root with real BPF sampling: the agent samples the
cpu_split workload, the server stores and symbolizes it, and the
reference's example flamegraph request (sent with curl, body verbatim)
shows the workload's two hot functions under main with the right shares."""

import json
import os
import subprocess

from conftest import require_root
from harness import (DEFAULT_PROJECT, check_tree, find, http, run_workload, subtree_total,
                     wait_until)

# The reference's example request body, verbatim.
REFERENCE_BODY = """{
"filter": {
"end_ts": 4102444800000,
"event_kind": "on_cpu",
"frame_mask": {
"patterns": []
},
"query": null,
"start_ts": 946684800000
},
"num_samples": null,
"num_stat_buckets": null,
"synthetic_frames": [
"deployment"
]
}"""


def reference_request(server):
    out = subprocess.run(
        ["curl", "-sS", "--fail-with-body",
         f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/flamegraph/json",
         "--request", "POST", "--header", "Content-Type: application/json",
         "--header", "Authorization: Bearer ", "--data", REFERENCE_BODY],
        check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)


def workload_main(tree):
    return find(tree["root"], "main", binary="cpu_split")


def test_hot_functions_under_main_with_true_shares(server, agent_factory):
    require_root()
    agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    truth = run_workload("cpu_split", 12)

    # Every batch of the run has arrived once the workload's total stops growing.
    def settled():
        m = workload_main(reference_request(server))
        total = m["total"] if m else 0
        settled.history.append(total)
        return total > 0 and settled.history[-3:] == [total] * 3
    settled.history = []
    wait_until(settled, 30, interval=1.0, what="the workload's samples to arrive")

    tree = reference_request(server)
    assert tree["unit"] == "samples"
    assert tree["sample_rate_hz"] == 97
    check_tree(tree["root"])
    # synthetic_frames ["deployment"]: processes outside Kubernetes are grouped
    # under an explicit "[no deployment]" frame.
    top = [c["name"] for c in tree["root"]["children"]]
    assert "[no deployment]" in top, top
    assert tree["root"]["children"][0]["frame_type"] == "synthetic"

    main = workload_main(tree)
    assert main is not None, "main of cpu_split is not in the flamegraph"
    # 12 s of one busy thread at 97 Hz is about 1160 samples.
    assert main["total"] > 900, main["total"]
    share_a = subtree_total(main, "hot_a") / main["total"]
    share_b = subtree_total(main, "hot_b") / main["total"]
    print(f"truth {truth}; measured hot_a {share_a:.3f} hot_b {share_b:.3f} "
          f"of {main['total']} samples")
    # Within 3 points. A sampler at a fixed period aliases with a workload
    # whose slots are short and of one length (such a cpu_split was off by
    # 0.058 in CI); cpu_split's slots are now several periods long and of
    # random length, and off by under 1 point even under perf on a loaded
    # host. A wrong attribution (a frame lost or moved) is off by far more.
    n = main["total"]
    for share, want in ((share_a, truth["hot_a"]), (share_b, truth["hot_b"])):
        assert abs(share - want) <= 0.03, (share, want, n)
    # The chain main -> run_workload -> run_cycle -> run_slot -> hot_a is whole.
    chain = main
    for name in ("run_workload", "run_cycle", "run_slot", "hot_a"):
        chain = next((c for c in chain["children"] if c["name"] == name), None)
        assert chain is not None, f"{name} missing from the call chain"
        assert chain["frame_type"] == "native" and chain["binary"] == "cpu_split"


def test_filter_by_executable_and_thread(server, agent_factory):
    require_root()
    agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    run_workload("cpu_split", 3)
    q = 'process.executable.name == "cpu_split" && thread.name == "cpu_split"'
    tree = wait_until(lambda: (lambda t: t if t["total"] > 150 else None)(server.flamegraph(q)),
                      20, interval=1.0, what="filtered samples")
    # Only the workload remains, grouped by executable then thread.
    tree = server.flamegraph(q, synthetic=["executable", "thread"])
    assert [c["name"] for c in tree["root"]["children"]] == ["cpu_split"]
    assert [c["name"] for c in tree["root"]["children"][0]["children"]] == ["cpu_split"]
    other = server.flamegraph('process.executable.name == "no-such-program"')
    assert other["total"] == 0 and other["root"]["children"] == []
    either = server.flamegraph('process.executable.name == "no-such-program" || ' + q)
    assert either["total"] >= tree["total"]


def test_host_attributes_from_flags(server, agent_factory):
    # -cluster-name, -host-type and -machine-id become cluster.name,
    # host.type and host.id of every sample: filterable and groupable, with
    # the host's CPU count for absolute percentages.
    require_root()
    agent_factory(server.url, "-on-cpu-sampling-rate=97", "-cluster-name=training-east",
                  "-host-type=gpu.8x", "-machine-id=0123456789abcdef0123456789abcdef").start()
    run_workload("cpu_split", 3)
    q = 'cluster.name == "training-east" && host.type == "gpu.8x" && ' \
        'host.id == "0123456789abcdef0123456789abcdef" && process.executable.name == "cpu_split"'
    wait_until(lambda: server.flamegraph(q)["total"] > 100, 30, interval=1.0,
               what="samples with the host attributes")
    status, data = http("POST", f"{server.url}/public/api/v1/project/{DEFAULT_PROJECT}/top_entities",
                        {"filter": {"start_ts": 946684800000, "end_ts": 4102444800000},
                         "entity": "cluster", "cpu_mode": "absolute"},
                        {"Content-Type": "application/json"})
    assert status == 200
    ans = json.loads(data)
    assert [e["name"] for e in ans["entities"]] == ["training-east"]
    assert ans["scope"]["host_cpus"] == os.cpu_count()
    assert ans["entities"][0]["percent"] > 0


def test_probabilistic_profiling(server, agent_factory):
    # -probabilistic-threshold=1: each interval is profiled with a 1% chance.
    # Whatever the draw, the agent says it, and the store agrees: an "off"
    # interval holds no samples; an "on" one does.
    require_root()
    agent = agent_factory(server.url, "-on-cpu-sampling-rate=97",
                          "-probabilistic-threshold=1", "-probabilistic-interval=1h").start()
    wait_until(lambda: "probabilistic profiling:" in agent.output(), 10,
               what="the first draw")
    run_workload("cpu_split", 3)
    agent.stop()
    on = "probabilistic profiling: on" in agent.output()
    got = server.flamegraph('process.executable.name == "cpu_split"')["total"]
    if on:
        assert got > 100
    else:
        assert got == 0, agent.output()[-2000:]
    # The default threshold (100) always profiles and never draws.
    a2 = agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    run_workload("cpu_split", 2)
    a2.stop()
    assert "probabilistic" not in a2.output()
    wait_until(lambda: server.flamegraph('process.executable.name == "cpu_split"')["total"] > got + 100,
               20, what="samples with the default threshold")
