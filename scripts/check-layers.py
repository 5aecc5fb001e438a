#!/usr/bin/env python3
"""The layer check (make test): ember-server's folders depend one way,
   http, auth -> metrics -> query, ingest -> symbols -> store -> lib,
   notify (outgoing notifications) -> metrics, query -> ... -> lib,
   http -> llm (LLM clients, the LLM mode of recommendations) -> query -> ... -> lib,
and a file may include only headers of its own folder or of a folder its
layer lists below. The wire's generated protobuf headers (*.pb-c.h) belong
to the layers that speak the wire: never to the store or the symbols.
The store's own headers (PRIVATE) are for server/store/ alone: every other
folder reads through store.h, whichever backend is behind it.
Prints each offending #include and exits 1; prints one line and exits 0
when the tree keeps its layers. Usage: scripts/check-layers.py [ROOT]"""
import os
import re
import sys

# folder -> the folders (and "wire") its files may include besides their own
ALLOWED = {
    "lib": set(),
    "store": {"lib"},
    "symbols": {"store", "lib"},
    "ingest": {"store", "symbols", "lib", "wire"},
    "query": {"store", "symbols", "lib", "wire"},
    "metrics": {"query", "ingest", "store", "lib", "wire"},
    "auth": {"http", "metrics", "query", "ingest", "symbols", "store", "lib"},
    "notify": {"metrics", "query", "symbols", "store", "lib"},
    "llm": {"query", "metrics", "symbols", "store", "lib"},
    "http": {"llm", "auth", "metrics", "query", "ingest", "symbols", "store", "lib", "wire"},
    "main": {"llm", "notify", "http", "auth", "metrics", "query", "ingest", "symbols", "store", "lib", "wire"},
}
# Includes against the layers that are being taken out; each one listed here
# is a debt, and the list only shrinks. (The store's includes of ingest went
# when ingest registered codecs with the store: store.h, "codecs".)
KNOWN = set()
# Headers of the embedded store that only its own folder may include: the
# rest of the server reads through the interface in store.h.
PRIVATE = {"part.h", "block.h", "block_int.h", "store_int.h", "wal.h", "merge.h"}
# Includes of private headers not yet taken out: the list only shrinks.
KNOWN_PRIVATE = set()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    parts = path.split("/")
    if parts[0] == "lib":
        return "lib"
    if parts[0] == "server":
        return "main" if len(parts) == 2 else parts[1]
    return None


def target_layer(src, inc, root):
    if inc.endswith(".pb-c.h"):
        return "wire"
    if inc.endswith("_gen.h"):  # generated at build time for this folder
        return layer_of(src)
    if inc.startswith("server/"):
        return layer_of(inc)
    if "/" not in inc:
        if os.path.exists(os.path.join(root, os.path.dirname(src), inc)):
            return layer_of(src)
        if os.path.exists(os.path.join(root, "lib", inc)):
            return "lib"
    return "unknown"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = []
    checked = 0
    seen = set()
    for top in ("lib", "server"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".c", ".h")):
                    continue
                src = os.path.relpath(os.path.join(dirpath, name), root)
                own = layer_of(src)
                if own not in ALLOWED:
                    bad.append(f"{src}: folder {own!r} has no layer (add it to scripts/check-layers.py)")
                    continue
                with open(os.path.join(root, src), encoding="utf-8") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    checked += 1
                    seen.add((src, inc))
                    t = target_layer(src, inc, root)
                    if t != own and t not in ALLOWED[own] and (src, inc) not in KNOWN:
                        bad.append(f'{src}: #include "{inc}" ({own} must not depend on {t})')
                    elif (t == "store" and own != "store" and os.path.basename(inc) in PRIVATE
                          and (src, inc) not in KNOWN_PRIVATE):
                        bad.append(f'{src}: #include "{inc}" (private to server/store/: '
                                   f'read through store.h)')
    for src, inc in sorted((KNOWN | KNOWN_PRIVATE) - seen):
        bad.append(f'{src}: #include "{inc}" is gone: take it off KNOWN in scripts/check-layers.py')
    for line in bad:
        print(line)
    if bad:
        print(f"layer check: {len(bad)} include(s) against the layers (scripts/check-layers.py)")
        return 1
    print(f"layer check: {checked} includes keep the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
