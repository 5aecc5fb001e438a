#!/bin/bash
# device-bundle.sh - packs ember-server and ember-agent with every shared
# library they load, the dynamic loader included, into build/devbundle/, so
# they run on a machine where nothing can be installed (the GPU machines of
# docs/internals/testing.md) whatever its own libraries are:
#   build/devbundle/bin/ember-server ...   (wrappers: the bundled loader
#   build/devbundle/bin/ember-agent ...     runs the bundled binary)
# Build first (make, make gpu). Usage: scripts/device-bundle.sh
set -eu
cd "$(dirname "$0")/.."
out=build/devbundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/real"
loader=
for prog in ember-server ember-agent; do
  [ -x "build/bin/$prog" ] || { echo "device-bundle: build/bin/$prog missing (run make)" >&2; exit 1; }
  cp "build/bin/$prog" "$out/real/$prog"
  # "name => /path (addr)" and the loader's own "/lib64/ld-linux... (addr)"
  while read -r lib; do
    [ -f "$lib" ] || continue
    cp -L "$lib" "$out/lib/"
    case "$(basename "$lib")" in ld-linux*) loader=$(basename "$lib") ;; esac
  done < <(ldd "build/bin/$prog" | awk '/=> \// {print $3} /^\t\// {print $1}')
  [ -n "$loader" ] || { echo "device-bundle: no loader found for $prog" >&2; exit 1; }
  cat > "$out/bin/$prog" <<WRAP
#!/bin/sh
d=\$(cd "\$(dirname "\$0")/.." && pwd)
exec "\$d/lib/$loader" --library-path "\$d/lib" "\$d/real/$prog" "\$@"
WRAP
  chmod +x "$out/bin/$prog"
done
echo "device-bundle: $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1) in $out"
