"""Symbolization end to end, as root with real BPF sampling: a stripped
C++ binary named after `ember upload-symbols` (inlined frames, files and
lines, for samples stored before the upload), a stripped Go binary named
from its .gopclntab, glibc internals named through a local debuginfod
server, and the agent's -dwarf upload."""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import require_root
from harness import BIN, Server, WORKLOADS, free_port, http, run_workload, wait_until

RATE = 97
EMBER = os.path.join(BIN, "ember")


def find_all(node, pred, path=()):
    path = path + (node,)
    if pred(node):
        yield path
    for c in node["children"]:
        yield from find_all(c, pred, path)


def names(tree):
    out = set()

    def walk(n):
        out.add(n["name"])
        for c in n["children"]:
            walk(c)
    walk(tree["root"])
    return out


def sample_stripped(server, agent_factory, seconds):
    """Samples the stripped symbols_cpp for seconds with an agent that is
    stopped once most samples are in (nothing new arrives after): the CEL
    query of that binary."""
    require_root()
    agent = agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    run_workload("symbols_cpp.stripped", seconds)
    q = 'process.executable.name == "symbols_cpp.stripped"'
    wait_until(lambda: server.flamegraph(q)["total"] > RATE * seconds * 0.8, 30, interval=1.0,
               what="samples of the stripped binary")
    agent.stop()
    return q


def test_upload_symbols_names_old_samples(server, agent_factory):
    # Nothing new arrives: what follows renames stored samples.
    q = sample_stripped(server, agent_factory, 6)
    before = server.flamegraph(q)
    seen = names(before)
    assert any(n.startswith("symbols_cpp.stripped+0x") for n in seen), seen
    assert "work::process_batch" not in seen

    r = subprocess.run([EMBER, "upload-symbols", "-e", server.url, "-p",
                        "00000000-0000-0000-0000-000000000000",
                        os.path.join(WORKLOADS, "symbols_cpp.stripped"),
                        os.path.join(WORKLOADS, "symbols_cpp")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    assert "with source lines and inlined functions" in r.stdout, r.stdout

    after = server.flamegraph(q)
    assert after["total"] == before["total"]
    batches = [p for p in find_all(after["root"], lambda n: n["name"] == "work::process_batch")]
    assert batches, names(after)
    pb = batches[0][-1]
    assert pb["frame_type"] == "native" and pb["file"].endswith("symbols_cpp.cpp") and pb["line"] > 0
    # The inlined functions are frames of their own, under process_batch.
    chk = next((c for c in pb["children"] if c["name"] == "work::checksum"), None)
    assert chk is not None, [c["name"] for c in pb["children"]]
    assert chk["file"].endswith("symbols_cpp.cpp") and chk["line"] > 0
    mix = next((c for c in chk["children"] if c["name"] == "work::mix_word"), None)
    assert mix is not None and mix["line"] > 0
    # Most of the time is in process_batch and what it inlined, under main.
    mains = [p[-1] for p in find_all(after["root"], lambda n: n["name"] == "main")]
    assert sum(m["total"] for m in mains) / after["total"] >= 0.9
    assert pb["total"] / after["total"] >= 0.8

    # An agent's automatic ELF-symbol upload does not undo the DWARF.
    r = subprocess.run([EMBER, "upload-symbols", "-e", server.url, "--no-dwarf",
                        os.path.join(WORKLOADS, "symbols_cpp.stripped"),
                        os.path.join(WORKLOADS, "symbols_cpp")],
                       stdout=subprocess.PIPE, text=True)
    assert r.returncode == 0 and "already had" in r.stdout
    assert "work::checksum" in names(server.flamegraph(q))

    # Errors are explained.
    r = subprocess.run([EMBER, "upload-symbols", "-e", server.url, "-p", "not-a-uuid", EMBER],
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "--project-id" in r.stderr
    r = subprocess.run([EMBER, "upload-symbols", "-e", server.url, "-p",
                        "123e4567-e89b-12d3-a456-426614174000", EMBER],
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and "no project" in r.stderr


def test_stripped_go_named_from_gopclntab(server, agent_factory):
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    run_workload("unwind_go_stripped", 6)
    q = 'process.executable.name == "unwind_go_stripped"'
    wait_until(lambda: "main.hashBlock" in names(server.flamegraph(q)), 30, interval=1.0,
               what="Go names in the stripped binary's profile")
    tree = server.flamegraph(q)
    total = tree["total"]
    main = sum(p[-1]["total"] for p in find_all(tree["root"], lambda n: n["name"] == "main.main"))
    assert main / total >= 0.9
    assert {"main.run", "main.hashRounds", "runtime.main"} <= names(tree)


@pytest.fixture
def debuginfod(tmp_path):
    """A debuginfod server on loopback that serves glibc's debug info (and
    nothing else ember could find on its own)."""
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    out = subprocess.run(["readelf", "-n", libc], stdout=subprocess.PIPE, text=True).stdout
    bid = next(l.split()[-1] for l in out.splitlines() if "Build ID" in l)
    debug = f"/usr/lib/debug/.build-id/{bid[:2]}/{bid[2:]}.debug"
    if not os.path.exists(debug):
        pytest.fail(f"{debug} missing: install libc6-dbg (scripts/install-deps.sh does)")
    served = tmp_path / "served"
    served.mkdir()
    shutil.copy(debug, served / "libc6.debug")
    port = free_port()
    log = open(tmp_path / "debuginfod.log", "wb")
    p = subprocess.Popen(["debuginfod", "-F", str(served), "-p", str(port), "-d",
                          str(tmp_path / "debuginfod.sqlite"), "-t", "1"],
                         stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def indexed():
        try:
            return http("GET", f"{url}/buildid/{bid}/debuginfo", timeout=5)[0] == 200
        except OSError:
            return False  # not listening yet
    try:
        wait_until(indexed, 120, interval=1.0, what="debuginfod to index the debug file")
        yield url
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


def test_global_symbolization_through_debuginfod(tmp_path, agent_factory, debuginfod):
    require_root()
    server = Server(tmp_path / "data")
    server.argv += ["--debuginfod-urls", debuginfod]
    server.start()
    try:
        agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
        run_workload("unwind_lib", 6)
        q = 'process.executable.name == "unwind_lib"'
        wait_until(lambda: server.flamegraph(q)["total"] > RATE * 6 * 0.8, 30, interval=1.0,
                   what="samples")

        # glibc's qsort sorts with msort_with_tmp, a function whose name is
        # not in the shipped library: it comes from the debug info.
        def named():
            t = server.flamegraph(q)
            hits = [p[-1] for p in find_all(t["root"], lambda n: n["name"] == "msort_with_tmp")]
            return hits if hits and hits[0].get("line") else None
        hits = wait_until(named, 90, interval=2.0, what="glibc names from debuginfod")
        assert hits[0]["binary"] == "libc.so.6"
        assert hits[0]["file"].endswith("msort.c")
        st, body = http("GET", server.url + "/metrics")
        assert b"ember_debuginfod_fetched_total 1" in body
    finally:
        server.stop()


def test_agent_dwarf_upload(server, agent_factory):
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", "-dwarf").start()
    run_workload("symbols_cpp", 5)
    q = 'process.executable.name == "symbols_cpp"'
    wait_until(lambda: "work::mix_word" in names(server.flamegraph(q)), 30, interval=1.0,
               what="inlined frames from the agent's DWARF upload")


def test_symbols_of_the_unstripped_build_serve_the_stripped_one(server, agent_factory):
    """Uploading only the unstripped build (another file, same GNU build
    ID) names the stripped binary that ran: symbols are found by build ID."""
    q = sample_stripped(server, agent_factory, 4)
    assert "work::process_batch" not in names(server.flamegraph(q))
    r = subprocess.run([EMBER, "upload-symbols", "-e", server.url,
                        os.path.join(WORKLOADS, "symbols_cpp")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    got = names(server.flamegraph(q))
    assert {"work::process_batch", "work::checksum", "work::mix_word"} <= got, got


def test_local_debug_file_names_a_stripped_binary(server, agent_factory, tmp_path):
    """A stripped binary whose debug file lies in a /usr/lib/debug-like
    root (by build ID) is named from it by the agent's own upload, DWARF
    (inlined functions) included with -dwarf; no debuginfod, no upload by
    hand."""
    require_root()
    root = tmp_path / "debug"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "wl_localdbg"
    src = os.path.join(WORKLOADS, "symbols_cpp")
    subprocess.run(["objcopy", "--strip-all", src, str(exe)], check=True)
    build_id = subprocess.run(["readelf", "-n", str(exe)], check=True, stdout=subprocess.PIPE,
                              text=True).stdout.split("Build ID: ")[1].split()[0]
    dbg = root / ".build-id" / build_id[:2] / (build_id[2:] + ".debug")
    dbg.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", src, str(dbg)], check=True)
    # glibc's own debug file (libc6-dbg) in the same root: its local
    # symbols (__libc_start_call_main, not in .dynsym) name libc's frames.
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    libc_id = subprocess.run(["readelf", "-n", libc], check=True, stdout=subprocess.PIPE,
                             text=True).stdout.split("Build ID: ")[1].split()[0]
    libc_dbg = f"/usr/lib/debug/.build-id/{libc_id[:2]}/{libc_id[2:]}.debug"
    assert os.path.exists(libc_dbg), f"{libc_dbg} missing: install libc6-dbg (make test does)"
    (root / ".build-id" / libc_id[:2]).mkdir(parents=True, exist_ok=True)
    shutil.copy(libc_dbg, root / ".build-id" / libc_id[:2] / (libc_id[2:] + ".debug"))
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", "-dwarf",
                  f"-debug-file-dir={root}").start()
    subprocess.run([str(exe), "5"], check=True, stdout=subprocess.DEVNULL)
    q = 'process.executable.name == "wl_localdbg"'
    # __libc_start_call_main, under the server's common name for glibc's
    # internals (lib/names.c)
    want = {"work::process_batch", "work::mix_word", "start_call_main"}
    wait_until(lambda: want <= names(server.flamegraph(q)), 60,
               interval=1.0, what="names from the local debug files")
    tree = server.flamegraph(q)
    assert not any(n.startswith("wl_localdbg+0x") for n in names(tree)), names(tree)
    pb = next(find_all(tree["root"], lambda n: n["name"] == "work::process_batch"))[-1]
    assert pb["file"].endswith("symbols_cpp.cpp") and pb["line"] > 0
