"""What the store keeps when things go wrong under it: damaged block files
(a row chunk, a dictionary section, a footer), a full disk, and SIGKILL
around flushes -- each checked against the exact totals that were
acknowledged. The store's layout (DATA/wal/<gen>.log, DATA/blocks/<gen>.blk,
one block per hour partition once compacted) is described in server/store/store.h
and server/store/block.h."""

import contextlib
import glob
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))

from ember_batch import Batch, zstd_compress  # noqa: E402
from harness import Server, http, wait_until  # noqa: E402

HOUR = 3600000
BLOCK_RESOLUTION_MS = 10000  # ember-server's default --block-resolution


# --- helpers ---------------------------------------------------------------------------

def ingest(url, raw, timeout=10, compressed=False):
    """POSTs an encoded batch (compressed: already zstd); returns (status,
    headers, JSON answer). Unlike ember_batch.send_batch it does not raise
    on an HTTP error and keeps the headers (Retry-After)."""
    req = urllib.request.Request(
        url + "/ingest/v1/batch", data=raw if compressed else zstd_compress(raw), method="POST",
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "zstd"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {"error": body.decode(errors="replace")}
        return e.code, dict(e.headers), doc


def stored(url, raw):
    status, _, ans = ingest(url, raw)
    assert status == 200 and ans["stored"] is True and ans["duplicate"] is False, (status, ans)
    return ans


def metrics(srv):
    status, body = http("GET", srv.url + "/metrics")
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def total(srv, query=None):
    return srv.flamegraph(query)["total"]


def host_total(srv, host):
    return total(srv, f'host.name == "{host}"')


def blocks(data):
    return sorted(glob.glob(os.path.join(str(data), "blocks", "*.blk")))


def wal_bytes_on_disk(data):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(str(data), "wal", "*.log")))


def block_layout(path):
    """Reads a block's trailer and footer (format: server/store/block.c): the
    section table, the partition, granularity and level. Returns a dict with
    'sections' [(id, off, len)], 'footer_off', 'partition_ms',
    'granularity_ms', 'level'."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"EMBRBLK1" and data[-8:] == b"EMBREND1", path
    flen = struct.unpack_from("<Q", data, len(data) - 24)[0]
    foff = len(data) - 24 - flen
    nsec = struct.unpack_from("<I", data, foff)[0]
    pos = foff + 4
    sections = []
    for _ in range(nsec):
        sid, off, ln, _raw, _sum = struct.unpack_from("<IQQQQ", data, pos)
        sections.append((sid, off, ln))
        pos += 36
    partition, _min_ts, _max_ts, gran, level = struct.unpack_from("<qqqII", data, pos)
    return {"sections": sections, "footer_off": foff, "size": len(data),
            "partition_ms": partition, "granularity_ms": gran, "level": level}


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def wait_flushed(srv, what="the head to be written as blocks", timeout=20, **at_least):
    """Until nothing waits in memory and each metric named in at_least
    (without its ember_store_ prefix) is at least that value."""
    def done():
        m = metrics(srv)
        return (m["ember_store_unflushed_rows"] == 0 and
                all(m["ember_store_" + k] >= v for k, v in at_least.items()))
    wait_until(done, timeout, interval=0.2, what=what)


# --- 1. damaged block files --------------------------------------------------------------

HOSTS_PER_PARTITION = 4
BATCHES_PER_HOST = 5
FIRST_BATCH_MS = 7 * 60000  # into the hour; batches are 10 s apart


def partition_batches(partition_ms, p):
    """Batches of HOSTS_PER_PARTITION hosts in one hour partition: returns
    ({host: [total of each batch]}, [encoded batches])."""
    totals, raws = {}, []
    for h in range(HOSTS_PER_PARTITION):
        host = f"p{p}-h{h}"
        attrs = {"process.executable.name": "svc", "host.name": host, "thread.name": "w"}
        totals[host] = []
        for i in range(BATCHES_PER_HOST):
            b = Batch(agent_instance=f"dmg-{host}")
            tot = 0
            for k, frames in enumerate((["main", "serve", f"handler{h}"], ["main", "gc"],
                                        ["main", "serve", "parse", f"lex{i}"])):
                v = 7 * (p + 1) + 3 * h + 2 * i + k + 1
                b.add(frames, attrs, value=v)
                tot += v
            totals[host].append(tot)
            start = partition_ms + FIRST_BATCH_MS + i * 10000
            raws.append(b.encode(sequence=i + 1, start_ms=start, end_ms=start + 10000))
    return totals, raws


def test_corrupted_block_is_detected_and_skipped(tmp_path):
    data = tmp_path / "data"
    now_h = int(time.time() * 1000) // HOUR * HOUR
    partitions = [now_h - k * HOUR for k in (5, 4, 3, 2)]
    totals = {}
    srv = Server(data, None, "--flush-after", "1s", "--compact-delay", "0s").start()
    try:
        for p, pms in enumerate(partitions):
            t, raws = partition_batches(pms, p)
            totals[p] = t
            for raw in raws:
                stored(srv.url, raw)
        full = {host: sum(v) for t in totals.values() for host, v in t.items()}
        everything = sum(full.values())
        assert total(srv) == everything

        # Flushed, and compacted into one block per partition: closed hours
        # are rewritten at the block resolution, after which nothing
        # rewrites them again (so the damage below is only ever read).
        def settled():
            paths = blocks(data)
            if metrics(srv)["ember_store_unflushed_rows"] != 0 or len(paths) != len(partitions):
                return None
            try:
                lay = {p: block_layout(p) for p in paths}
            except FileNotFoundError:
                return None  # compaction replaced a block between glob and open
            if any(x["granularity_ms"] != BLOCK_RESOLUTION_MS for x in lay.values()):
                return None
            return lay
        lay = wait_until(settled, 30, interval=0.3, what="one compacted block per partition")
        assert metrics(srv)["ember_store_blocks"] == len(partitions)
        assert total(srv) == everything
    finally:
        assert srv.stop(signal.SIGTERM) == 0

    by_partition = {x["partition_ms"]: path for path, x in lay.items()}
    assert sorted(by_partition) == partitions
    chunk_blk, footer_blk, section_blk, intact_blk = (by_partition[p] for p in partitions)
    # Partition 0: a byte in the middle of the row chunks (one zstd frame
    # per series, right after the 16-byte header, before the first
    # dictionary section): one host's rows.
    x = lay[chunk_blk]
    first_section = min(off for _, off, _ in x["sections"])
    assert first_section > 16
    flip_byte(chunk_blk, (16 + first_section) // 2)
    # Partition 1: the footer, ~40 bytes before the end (the trailer is 24).
    x = lay[footer_blk]
    assert x["size"] - 40 > x["footer_off"]
    flip_byte(footer_blk, x["size"] - 40)
    # Partition 2: the middle of the dictionary sections.
    x = lay[section_blk]
    first_section = min(off for _, off, _ in x["sections"])
    flip_byte(section_blk, (first_section + x["footer_off"]) // 2)
    intact_bytes = open(intact_blk, "rb").read()

    srv = Server(data, None, "--flush-after", "1s", "--compact-delay", "0s").start()
    try:
        assert srv.healthy()
        # The footer is checked when the block is opened: moved aside at once.
        # (The section damage is found when the block is first read, which
        # the cache warm-up after a start may already have done.)
        assert not os.path.exists(footer_blk) and os.path.exists(footer_blk + ".corrupt")
        assert metrics(srv)["ember_store_corrupt_blocks_total"] in (1, 2)

        # Rows of partition 0 from its 3rd batch on: a query that must read
        # the row chunks. Every host but the one whose chunk was hit.
        p0 = partitions[0]
        cut_from, cut_to = p0 + FIRST_BATCH_MS + 20000, p0 + FIRST_BATCH_MS + 50000
        part0 = {h: sum(v[2:]) for h, v in totals[0].items()}
        fg = srv.flamegraph(start_ms=cut_from, end_ms=cut_to)
        assert fg["query_stats"]["chunks_skipped"] == 1, fg["query_stats"]
        got = {h: srv.flamegraph(f'host.name == "{h}"', start_ms=cut_from,
                                 end_ms=cut_to)["total"] for h in part0}
        lost = [h for h, v in got.items() if v == 0]
        assert len(lost) == 1 and all(got[h] == part0[h] for h in part0 if h not in lost), got
        assert fg["total"] == sum(part0.values()) - part0[lost[0]]
        assert srv.healthy()

        # Everything. The untouched partition in full, partitions 1 and 2
        # not at all, partition 0 but (at most) the host whose rows were hit.
        fg = srv.flamegraph()
        for host in totals[3]:
            assert host_total(srv, host) == full[host], host
        for p in (1, 2):
            for host in totals[p]:
                assert host_total(srv, host) == 0, host
        got0 = {h: host_total(srv, h) for h in totals[0]}
        lost_full = [h for h, v in got0.items() if v == 0]
        assert set(lost_full) <= set(lost), got0
        assert all(got0[h] == full[h] for h in totals[0] if h not in lost_full), got0
        expected = sum(full[h] for h in list(totals[3]) + list(totals[0]) if h not in lost_full)
        truth = sum(full[h] for h in list(totals[3]) + list(totals[0]))
        # Unfiltered over whole partitions, the partition's stack totals
        # (their own checksummed section, intact) answer: then nothing of
        # partition 0 is missing. Never more than what was stored.
        assert fg["total"] in (expected, truth) and fg["total"] < everything
        assert total(srv) == fg["total"]
        expected = fg["total"]

        # The section is checked when the block is first read (by a query or
        # the warm-up): moved aside then. The block with a bad chunk stays:
        # the rest of it is served.
        assert not os.path.exists(section_blk) and os.path.exists(section_blk + ".corrupt")
        assert os.path.exists(chunk_blk) and not os.path.exists(chunk_blk + ".corrupt")
        assert open(intact_blk, "rb").read() == intact_bytes
        m = metrics(srv)
        assert m["ember_store_corrupt_blocks_total"] == 2, m
        out = srv.output()
        assert os.path.basename(footer_blk) in out and "footer checksum mismatch" in out, out
        assert f"{os.path.basename(section_blk)}: section" in out and "fails its checksum" in out
        assert f"{os.path.basename(chunk_blk)}: a row chunk fails its checksum" in out, out

        # Still ingesting: now, and into the hour whose block was lost.
        fresh = {"new-now": (int(time.time() * 1000) - 20000, 41),
                 "new-p1": (partitions[1] + 20 * 60000, 43)}
        for name, (start, value) in fresh.items():
            b = Batch(agent_instance="dmg-" + name)
            b.add(["main", "fresh"], {"process.executable.name": "svc", "host.name": name},
                  value=value)
            stored(srv.url, b.encode(sequence=1, start_ms=start, end_ms=start + 10000))
        added = sum(v for _, v in fresh.values())
        assert total(srv) == expected + added
        wait_flushed(srv, flushes_total=1)
        for name, (_, value) in fresh.items():
            assert host_total(srv, name) == value
        assert total(srv) == expected + added
        assert srv.healthy()
    finally:
        srv.stop()


# --- 2. a full disk ------------------------------------------------------------------------

def bulky_batch(i, rng):
    """A batch of 300 distinct random frame names (they do not compress
    away): ~7 KiB on disk. Returns (zstd-compressed batch, total)."""
    b = Batch(agent_instance=f"disk-{i}")
    attrs = {"process.executable.name": "fill", "host.name": f"disk-host-{i % 3}"}
    tot = 0
    for _ in range(100):
        frames = ["main"] + ["fn_%032x" % rng.getrandbits(128) for _ in range(3)]
        v = rng.randint(1, 9)
        b.add(frames, attrs, value=v)
        tot += v
    start = int(time.time() * 1000) - 60000
    return zstd_compress(b.encode(sequence=1, start_ms=start, end_ms=start + 10000)), tot


@contextlib.contextmanager
def server_on_tmpfs(disk, size, *flags):
    """A server whose data directory is disk, a tmpfs of size ("2m") made
    and mounted here (the test is skipped where none can be mounted); on
    leaving, the server is killed and the tmpfs unmounted (lazily if
    still busy)."""
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                       stderr=subprocess.PIPE)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs: " + r.stderr.decode(errors="replace"))
    srv = None
    try:
        srv = Server(disk, None, *flags).start()
        yield srv
    finally:
        if srv:
            srv.stop(signal.SIGKILL)
        r = subprocess.run(["umount", str(disk)], stderr=subprocess.PIPE)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(disk)])


def flush_failures(srv):
    return [ln for ln in srv.output().splitlines() if "writing a block failed" in ln]


# 60s: nothing is flushed during the test, the logs fill the disk. 3s: the
# logs fill the disk first (well within 3 s), then writing them as a block
# fails for want of room.
@pytest.mark.parametrize("flush_after", ["60s", "3s"])
def test_full_disk_answers_503_and_keeps_acknowledged(tmp_path, flush_after):
    rng = random.Random(1234)
    # ~2.8 MiB of batches, made before the server starts so that they are
    # sent quickly.
    batches = [bulky_batch(i, rng) for i in range(400)]
    disk = tmp_path / "disk"
    with server_on_tmpfs(disk, "2m", "--flush-after", flush_after, "--compact-delay", "0s") as srv:
        acked, refused = {}, {}
        t0 = time.monotonic()
        for i, (z, tot) in enumerate(batches):
            status, headers, ans = ingest(srv.url, z, compressed=True)
            if status == 200:
                assert ans["stored"] is True, ans
                acked[i] = tot
                continue
            assert status == 503, (status, ans)
            msg = ans["error"]
            assert "could not be stored" in msg and "No space left on device" in msg, msg
            assert headers.get("Retry-After", "").isdigit(), headers
            refused[i] = (z, tot)
            if len(refused) == 3:
                break
        fill_s = time.monotonic() - t0
        assert refused, "a 2 MiB disk never filled up"
        # The agent's retry of a refused batch is refused again, not taken
        # for a duplicate of something stored.
        z, _ = next(iter(refused.values()))
        status, _, ans = ingest(srv.url, z, compressed=True)
        assert status == 503, (status, ans)
        assert len(acked) >= 100, len(acked)
        acked_total = sum(acked.values())
        assert total(srv) == acked_total
        m = metrics(srv)
        assert m["ember_ingest_failed_total"] == len(refused) + 1
        assert m["ember_ingest_batches_total"] == len(acked)
        assert srv.healthy()
        # An agent retrying on the full disk: every request is refused,
        # but the log holds a few lines of it, not one per request, and
        # the count of the others is kept.
        def refusal_lines():
            return [ln for ln in srv.output().splitlines()
                    if "ingest: " in ln and "No space left on device" in ln]
        before = len(refusal_lines())
        assert 1 <= before <= 3, refusal_lines()
        for _ in range(400):
            assert ingest(srv.url, z, compressed=True)[0] == 503
        assert len(refusal_lines()) == 3, len(refusal_lines())
        assert metrics(srv)["ember_log_suppressed_total"] >= 400 - 3 + before
        if flush_after == "3s":
            assert fill_s < 2.5, f"filling the disk took {fill_s:.1f}s: a flush may have run"
            # Writing the head as a block fails too: it stays in memory and
            # in its logs, still served, and the store keeps retrying.
            wait_until(lambda: flush_failures(srv), 10, what="a flush to fail on the full disk")
            assert "No space left on device" in flush_failures(srv)[0]
            assert metrics(srv)["ember_store_unflushed_rows"] == m["ember_store_rows_total"] > 0
            assert total(srv) == acked_total
            assert not glob.glob(str(disk / "blocks" / "*.blk"))

        # Killed without warning on the full disk, then started again on it.
        srv.restart(signal.SIGKILL)
        assert srv.healthy()
        assert total(srv) == acked_total
        assert metrics(srv)["ember_store_wal_skipped_records"] == 0

        # Room again: what was refused can be sent again (a retry is not
        # taken for a duplicate), and new batches are accepted and counted.
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        for i, (z, tot) in refused.items():
            status, _, ans = ingest(srv.url, z, compressed=True)
            assert status == 200 and ans["stored"] is True and not ans["duplicate"], ans
            acked[i] = tot
        z, tot = bulky_batch(10000, rng)
        status, _, ans = ingest(srv.url, z, compressed=True)
        assert status == 200 and ans["stored"] is True, ans
        acked[10000] = tot
        assert total(srv) == sum(acked.values())
        if flush_after == "3s":
            wait_flushed(srv, timeout=30, flushes_total=1)
            assert glob.glob(str(disk / "blocks" / "*.blk"))
        srv.restart(signal.SIGTERM)
        assert total(srv) == sum(acked.values())
        assert metrics(srv)["ember_store_wal_skipped_records"] == 0


def test_full_disk_log_is_rate_limited_and_counts_what_it_left_out(tmp_path):
    """Requests refused on a full disk write 3 lines a minute, not one
    each; on stopping, the server writes how many it left out."""
    rng = random.Random(99)
    batches = [bulky_batch(i, rng) for i in range(300)]
    with server_on_tmpfs(tmp_path / "disk", "1m", "--flush-after", "60s") as srv:
        refused = 0
        for z, _ in batches:
            status = ingest(srv.url, z, compressed=True)[0]
            assert status in (200, 503), status
            refused += status == 503
        for _ in range(500):
            assert ingest(srv.url, batches[-1][0], compressed=True)[0] == 503
            refused += 1
        assert refused > 500
        assert metrics(srv)["ember_log_suppressed_total"] == refused - 3
        srv.stop(signal.SIGTERM)
        lines = srv.output().splitlines()
        refusals = [ln for ln in lines if "ingest: " in ln and "No space left" in ln]
        assert len(refusals) == 3, refusals
        told = [ln for ln in lines if 'more like "ingest: %s" suppressed' in ln]
        assert told and told[0].split()[3] == str(refused - 3), told
        assert len(lines) < 30, lines


# --- 3. SIGKILL around flushes -------------------------------------------------------------

def recent_batch(agent, seq, value, host):
    """A batch timestamped a few minutes ago (an open partition: nothing
    compacts it during the test)."""
    b = Batch(agent_instance=agent)
    attrs = {"process.executable.name": "kill", "host.name": host}
    b.add(["main", "work"], attrs, value=value)
    b.add(["main", "work", "inner"], attrs, value=value + 1)
    start = int(time.time() * 1000) - 180000 + seq * 1000
    return b.encode(sequence=seq, start_ms=start, end_ms=start + 1000), 2 * value + 1


def test_second_server_on_the_same_data_dir_refuses(tmp_path):
    """A second ember-server on a data dir in use exits at once, naming the
    dir and the first server's pid, before it reads or deletes anything:
    the first server's blocks, logs and answers are untouched."""
    data = tmp_path / "data"
    srv = Server(data, None, "--flush-after", "1s", "--compact-delay", "0s").start()
    second = None
    try:
        want = 0
        for seq in range(1, 4):
            raw, tot = recent_batch("lock-a", seq, 10 * seq, "la")
            stored(srv.url, raw)
            want += tot
        wait_flushed(srv, flushes_total=1, blocks=1)
        for seq in range(4, 7):  # and some only in the head and its log
            raw, tot = recent_batch("lock-a", seq, 10 * seq, "la")
            stored(srv.url, raw)
            want += tot
        files = {p: os.path.getsize(p) for p in glob.glob(str(data / "**" / "*"), recursive=True)
                 if os.path.isfile(p) and not p.endswith("lock")}
        assert blocks(data) and total(srv) == want

        for flags in ((), ("--flush-after", "1s", "--compact-delay", "0s")):
            second = Server(data, None, *flags).start(wait=False)
            rc = second.proc.wait(10)
            out = second.output()
            second.stop()
            assert rc != 0, out
            assert f"--data-dir {data} is in use by another ember-server (pid {srv.proc.pid})" \
                in out, out
            assert "replay" not in out and "opened" not in out, out
        for p, size in files.items():
            assert os.path.exists(p), f"{p} was deleted by the second server"
            assert os.path.getsize(p) >= size, p
        assert srv.healthy() and total(srv) == want
        # The lock goes with the first server: a server started after it
        # opens the store and finds everything.
        srv.restart(signal.SIGKILL)
        assert total(srv) == want
    finally:
        srv.stop(signal.SIGKILL)


def test_sigkill_after_flush_keeps_everything(tmp_path):
    data = tmp_path / "data"
    srv = Server(data, None, "--flush-after", "1s", "--compact-delay", "0s").start()
    sent = []  # (raw, total) of every acknowledged batch
    try:
        for seq in range(1, 7):
            raw, tot = recent_batch("kill-a", seq, 10 * seq, "ka")
            stored(srv.url, raw)
            sent.append((raw, tot))
        wait_flushed(srv, flushes_total=1, blocks=1)
        # The log outlives its heads; once nothing came for a head's age
        # (1 s here) it is closed, and deleting it commits the block.
        wait_until(lambda: wal_bytes_on_disk(data) == 0, 15, interval=0.2,
                   what="the flushed log closed and deleted")
        flushed_blocks = blocks(data)
        assert flushed_blocks

        # More, only in the head and its log: killed well before the
        # head is a second old.
        for agent, seqs, host in (("kill-a", range(7, 9), "ka"), ("kill-b", range(1, 4), "kb")):
            for seq in seqs:
                raw, tot = recent_batch(agent, seq, 100 + seq, host)
                stored(srv.url, raw)
                sent.append((raw, tot))
        srv.stop(signal.SIGKILL)
        assert wal_bytes_on_disk(data) > 0, "the second round was flushed before the kill"
        assert blocks(data) == flushed_blocks
        expected = sum(t for _, t in sent)
        # For later: the logs as they are now, before the restart flushes them.
        saved = tmp_path / "wal-copy"
        shutil.copytree(data / "wal", saved)

        srv.restart()
        assert total(srv) == expected
        assert host_total(srv, "kb") == sum(t for _, t in sent[8:])
        # Retries of batches stored before (in blocks and in the log) are
        # recognised, not counted twice.
        for raw, _ in (sent[0], sent[5], sent[6], sent[-1]):
            status, _, ans = ingest(srv.url, raw)
            assert status == 200 and ans["duplicate"] is True, ans
        assert total(srv) == expected

        # The replayed log is flushed in its turn.
        wait_flushed(srv, flushes_total=1)
        assert total(srv) == expected
        srv.stop(signal.SIGKILL)
        new_blocks = [b for b in blocks(data) if b not in flushed_blocks]
        assert new_blocks, "the replayed log was not flushed"
        srv.restart()  # a plain restart after the flush: nothing doubled
        assert total(srv) == expected
        # A crash between writing a flush's block and deleting its logs:
        # the logs saved above come back.
        srv.stop(signal.SIGKILL)
        for p in saved.iterdir():
            if not (data / "wal" / p.name).exists():
                shutil.copy2(p, data / "wal" / p.name)
        srv.restart()
        assert total(srv) == expected
        assert "an unfinished flush; its log is replayed" in srv.output()
        for b in new_blocks:
            assert not os.path.exists(b)
        wait_flushed(srv, flushes_total=1)
        srv.restart(signal.SIGKILL)
        assert total(srv) == expected
        assert host_total(srv, "ka") == sum(t for _, t in sent[:8])

        # And it still takes new data.
        raw, tot = recent_batch("kill-c", 1, 500, "kc")
        stored(srv.url, raw)
        assert total(srv) == expected + tot
    finally:
        srv.stop()
