"""The profiler inventory (GET /public/api/v1/agents, server/store/agents.h):
every agent that sent profiles, with its host, version, project,
protocol, address and counts, kept in the metadata database."""

import os
import socket
import time

from conftest import require_root
from ember_batch import Batch, send_batch
from harness import BUILD, Server, http, wait_until
import json

AGENTS = "/public/api/v1/agents"


def agents(server, query=""):
    status, body = http("GET", server.url + AGENTS + query)
    assert status == 200, (status, body[:300])
    return body if query else json.loads(body)


def test_a_real_agent_is_listed(server, agent_factory):
    """ember-agent sends its version (User-Agent) and host name
    (X-Ember-Host) with every batch: listed as reporting, with its samples;
    the CSV export has the same row; a restarted server still lists it."""
    require_root()
    agent_factory(server.url, "-on-cpu-sampling-rate=97").start()
    exe = os.path.join(BUILD, "workloads", "cpu_split")
    import subprocess
    subprocess.run([exe, "2"], check=True, stdout=subprocess.DEVNULL, timeout=60)

    def mine():
        rows = [a for a in agents(server)["agents"] if a["version"].startswith("ember-agent/")]
        return rows[0] if rows and rows[0]["samples"] > 0 else None
    wait_until(mine, 40, interval=1.0, what="the agent in the inventory")
    a = mine()
    assert a["host"] == socket.gethostname(), a
    assert a["protocol"] == "ember v2" and a["address"] == "127.0.0.1" and a["reporting"], a
    assert a["project_id"] == "00000000-0000-0000-0000-000000000000", a
    assert a["host_cpus"] == os.cpu_count() and a["first_seen_ms"] <= a["last_seen_ms"], a
    assert abs(a["last_seen_ms"] - time.time() * 1000) < 60000, a
    listing = agents(server)
    assert listing["total"] >= 1 and listing["reporting"] >= 1
    csv = agents(server, "?format=csv").decode().splitlines()
    assert csv[0].startswith("instance,host,version,project_id,"), csv[0]
    assert any(line.startswith(a["instance"] + "," + a["host"] + ",") for line in csv[1:]), csv
    server.restart()
    assert any(r["instance"] == a["instance"] for r in agents(server)["agents"])


def test_hostile_headers_are_bounded(server):
    """Any client's headers: at most 128 printable ASCII bytes each, the
    rest replaced or cut; the counts add up over batches; a duplicate
    batch adds no samples."""
    b = Batch(agent_instance="inventory-hostile", host_cpus=4)
    b.add(["main", "work"], {"host.name": "h"}, value=7)
    hdrs = {"X-Ember-Host": "x" * 1000, "User-Agent": "bad\x7fagent\u00e9"}
    for seq in (1, 2, 2):
        send_batch(server.url, b.encode(sequence=seq), headers=hdrs)
    server.restart()  # written at close: what was pending too
    row = next(r for r in agents(server)["agents"] if r["instance"] == "inventory-hostile")
    assert row["host"] == "x" * 128, row["host"]
    assert all(0x20 <= ord(ch) < 0x7f for ch in row["version"]) and row["version"].startswith("bad?agent"), row
    assert row["protocol"] == "ember v1" and row["host_cpus"] == 4, row
    assert row["batches"] == 3 and row["samples"] == 14, row


def test_every_replica_lists_every_agent(postgres_server, tmp_path):
    """Two servers on one PostgreSQL: an agent that sent to the first is
    listed by the second."""
    from conftest import pg_database
    url = pg_database(postgres_server)
    reps = [Server(tmp_path / f"r{k}", None, "--metadata", url) for k in range(2)]
    try:
        for s in reps:
            s.start()
        b = Batch(agent_instance="inventory-replicas")
        b.add(["main"], {"host.name": "h"}, value=3)
        send_batch(reps[0].url, b.encode(sequence=1), headers={"X-Ember-Host": "node-7"})

        def listed():
            return next((r for r in agents(reps[1])["agents"] if r["instance"] == "inventory-replicas"), None)
        wait_until(listed, 10, interval=0.2, what="the agent listed by the other replica")
        row = listed()
        assert row["host"] == "node-7" and row["samples"] == 3 and row["batches"] == 1, row
    finally:
        for s in reps:
            s.stop()
