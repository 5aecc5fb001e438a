"""Processes that live under a second, as root with real BPF: a C build of
many small files (one gcc, cc1 and as per file, each a fraction of a
second) runs beside a freshly started agent, and >= 90 % of the samples of
its compilers (cc1 and as, run as copies named sl_cc1 and sl_as so that
other compilers on the host are not counted) must be unwound whole: no
error frame at their root, the walk reached the outermost frame. Debian's
gcc, cc1 and as keep no frame pointers, so a sample taken before the agent
has read a new process's maps is lost to the kernel's frame-pointer walk
unless its raw stack is kept and unwound by CFI later
(agent/rawstack.h): without that, about one sample of ten of each cc1 and
most of as failed (84-88 % whole). The short version of
bench/short_lived.sh."""

import json
import os
import shutil
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from conftest import require_root
from harness import free_port, wait_until

RATE = 97
FILES = 60


def stats(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/stats", timeout=10) as r:
        return json.load(r)


def write_project(d):
    os.makedirs(d)
    for i in range(FILES):
        with open(os.path.join(d, f"u{i}.c"), "w") as f:
            f.write("#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n")
            for k in range(15):
                f.write(f"int f{i}_{k}(const char *s, int n) {{ char b[64]; int h = {k};\n"
                        f"  for (int j = 0; j < n && s[j]; j++) h = h * 31 + s[j] * {k + 1};\n"
                        f"  snprintf(b, sizeof b, \"%d-%s\", h, s); return (int)strlen(b) + atoi(b); }}\n")


def test_short_lived_compilers_unwound_whole(server, agent_factory, tmp_path):
    require_root()
    src = tmp_path / "src"
    write_project(str(src))
    cc1 = subprocess.run(["gcc", "-print-prog-name=cc1"], check=True, capture_output=True,
                         text=True).stdout.strip()
    asm = shutil.which(subprocess.run(["gcc", "-print-prog-name=as"], check=True,
                                      capture_output=True, text=True).stdout.strip())
    shutil.copy(cc1, tmp_path / "sl_cc1")
    shutil.copy(asm, tmp_path / "sl_as")
    wrap = tmp_path / "wrap"
    wrap.write_text("#!/bin/sh\nprog=$1; shift\ncase \"$prog\" in\n"
                    f"*/cc1) exec {tmp_path}/sl_cc1 \"$@\" ;;\n"
                    f"*/as|as) exec {tmp_path}/sl_as \"$@\" ;;\n"
                    "*) exec \"$prog\" \"$@\" ;;\nesac\n")
    wrap.chmod(0o755)

    port = free_port()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}", f"-pprof=127.0.0.1:{port}").start()
    # Start-up: the host's files are read and their tables built.
    def settled():
        s = stats(port)
        done = sum(s.get(k, 0) for k in ("unwind_tables_loaded_total", "unwind_tables_reloaded_total",
                                         "unwind_tables_failed_total", "unwind_tables_refused_total"))
        return s["unwind_tables_queued_total"] <= done + 2
    wait_until(settled, 60, interval=0.5, what="the agent's start-up tables")

    def compile_one(c):
        t0 = time.monotonic()
        subprocess.run(["gcc", "-wrapper", str(wrap), "-O2", "-c", str(c), "-o", str(c) + ".o"],
                       check=True, timeout=120)
        return time.monotonic() - t0
    with ThreadPoolExecutor(2) as pool:
        walls = sorted(pool.map(compile_one, sorted(src.glob("*.c"))))
    print(f"{len(walls)} compiles, gcc wall time median {walls[len(walls) // 2] * 1e3:.0f} ms, "
          f"max {walls[-1] * 1e3:.0f} ms, {sum(w < 1 for w in walls)} under 1 s")

    # Raw samples wait in the agent at most 5 s for a table, then a 1 s batch.
    time.sleep(7)
    tot = whole = 0
    for exe in ("sl_cc1", "sl_as"):
        q = f'process.executable.name == "{exe}"'
        wait_until(lambda: server.flamegraph(q)["total"] > 0, 30, what=f"samples of {exe}")
        t = server.flamegraph(q)
        errors = {c["name"]: c["total"] for c in t["root"]["children"] if c["name"].startswith("[")}
        err = sum(errors.values())
        print(f"{exe}: {t['total']} samples, {t['total'] - err} unwound whole; errors: {errors}")
        tot += t["total"]
        whole += t["total"] - err
    s = stats(port)
    print({k: v for k, v in s.items() if "raw_stacks" in k})
    print(f"all: {whole}/{tot} samples of the compilers unwound whole ({100 * whole / max(tot, 1):.1f}%)")
    assert tot >= 100, f"too few samples of the compilers: {tot}"
    assert whole / tot >= 0.90, f"only {whole}/{tot} samples unwound whole"
    # The first samples of new processes came with their raw stacks and
    # were unwound by the agent.
    assert s["bpf_raw_stacks_total"] > 0
    assert s["raw_stacks_unwound_total"] + s["raw_stacks_unwound_late_total"] > 0
