"""ember's DWARF-CFI unwinder on workloads built without frame pointers,
as root with real BPF sampling: C, C++ with inlining and exceptions, Rust
release, Go, a hot path inside Debian's libc calling back into the program,
a 200-deep recursion and stacks through a signal handler."""

import pytest

from conftest import require_root
from harness import wait_until, run_workload

RATE = 97


def total_named(node, name):
    """Samples whose stack contains a frame called name (each counted once)."""
    if node["name"] == name:
        return node["total"]
    return sum(total_named(c, name) for c in node["children"])


def deepest(node, name, depth=0):
    """{count of `name` frames on a path: samples ending there}."""
    d = depth + (node["name"] == name)
    out = {}
    if node["self"]:
        out[d] = out.get(d, 0) + node["self"]
    for c in node["children"]:
        for k, v in deepest(c, name, d).items():
            out[k] = out.get(k, 0) + v
    return out


def profile(server, agent_factory, exe, *args, thread=None, seconds=8):
    require_root()
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    run_workload(exe, *args)
    q = f'process.executable.name == "{exe}"'
    if thread:
        q += f' && thread.name == "{thread}"'
    expected = RATE * seconds * 0.8

    def enough():
        t = server.flamegraph(q)
        return t if t["total"] >= expected else None
    wait_until(enough, 30, interval=1.0, what=f"samples of {exe}")
    # and the last batch
    wait_until(lambda: server.flamegraph(q)["total"] == server.flamegraph(q)["total"], 5)
    return server.flamegraph(q)


CASES = [
    ("unwind_c", ("chain", 8), "main"),
    ("unwind_cpp", (8,), "main"),
    ("unwind_rust", (8,), "main"),
    ("unwind_go", (8,), "runtime.main"),
    ("unwind_lib", (8,), "main"),
]


@pytest.mark.parametrize("exe,args,entry", CASES, ids=[c[0] for c in CASES])
def test_busy_thread_reaches_main(server, agent_factory, exe, args, entry):
    # The busy thread: the main thread for C, C++, Rust and the library
    # case (thread name = executable name); Go runs main.main on any of its
    # threads, which all carry the executable's name too.
    tree = profile(server, agent_factory, exe, *args, thread=exe)
    total = tree["total"]
    reached = total_named(tree["root"], entry)
    print(f"{exe}: {reached}/{total} samples reach {entry} ({100 * reached / total:.1f}%)")
    assert total > RATE * 8 * 0.8
    assert reached / total >= 0.95, f"only {reached}/{total} samples reach {entry}"


def test_recursion_200_deep_unwinds_whole(server, agent_factory):
    tree = profile(server, agent_factory, "unwind_c", "recurse", 200, 8)
    depths = deepest(tree["root"], "descend")
    total = sum(depths.values())
    whole = sum(v for d, v in depths.items() if d >= 200)
    print(f"recursion: {whole}/{total} samples with all 200 frames; depths {sorted(depths.items())[-5:]}")
    assert whole / total >= 0.95
    assert total_named(tree["root"], "main") / total >= 0.95


def test_signal_handler_stacks_reach_main(server, agent_factory):
    tree = profile(server, agent_factory, "unwind_c", "signal", 8)
    in_handler = total_named(tree["root"], "in_handler")
    # in_handler under wait_for_signals under main: through the trampoline.
    main = next((c for c in walk_named(tree["root"], "main")), None)
    assert main is not None
    via_main = total_named(main, "in_handler")
    print(f"signal: {in_handler} samples in the handler, {via_main} of them under main")
    assert in_handler > 50
    assert via_main / in_handler >= 0.9
    assert total_named(main, "wait_for_signals") >= via_main


def walk_named(node, name):
    if node["name"] == name:
        yield node
    for c in node["children"]:
        yield from walk_named(c, name)


def test_process_in_its_own_mount_and_pid_namespace(server, agent_factory):
    """Like a container: the program's file exists only inside a private
    mount namespace (a tmpfs), and it runs in its own pid namespace. The
    agent reads the file through /proc/PID/map_files to build its unwind
    table and upload its symbols."""
    require_root()
    import os
    import subprocess
    from harness import WORKLOADS
    agent_factory(server.url, f"-on-cpu-sampling-rate={RATE}").start()
    script = (f"mount -t tmpfs ember-test /mnt && cp {WORKLOADS}/unwind_c /mnt/ctr_unwind && "
              "exec /mnt/ctr_unwind chain 8")
    subprocess.run(["unshare", "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
                   check=True, stdout=subprocess.DEVNULL, timeout=60)
    assert not os.path.exists("/mnt/ctr_unwind")
    q = 'process.executable.name == "ctr_unwind"'
    wait_until(lambda: server.flamegraph(q)["total"] > RATE * 8 * 0.8, 30, interval=1.0,
               what="samples of the namespaced process")
    tree = server.flamegraph(q)
    total = tree["total"]
    reached = total_named(tree["root"], "main")
    named = total_named(tree["root"], "stage_two")
    print(f"namespaced: {reached}/{total} reach main, {named} in stage_two (symbolized)")
    assert reached / total >= 0.95
    assert named / total >= 0.8
