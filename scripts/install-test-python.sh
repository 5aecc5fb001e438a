#!/usr/bin/env bash
# Installs a CPython newer than the machine's into build/python3.14, for the
# Python unwinder's tests: Debian unstable's python3.14 (an optimized PGO and
# LTO build, like the ones users run), its standard library and headers, and
# the glibc it was built against (bookworm's is older), bound to it with
# patchelf. Nothing outside build/ changes.
#
# Every file is verified: the suite's InRelease by Debian's archive keyring
# (gpgv), the package index by the SHA-256 that InRelease lists, each
# package by the SHA-256 the index lists. Idempotent: nothing happens when
# the same packages are already there.
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=${EMBER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=sid
minor=3.14
target=build/python$minor
packages="python$minor-minimal libpython$minor-minimal libpython$minor-stdlib libpython$minor-dev libc6"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

die() { echo "install-test-python: $*" >&2; exit 1; }
for tool in curl gpgv xz dpkg-deb patchelf sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done
[ -f "$keyring" ] || die "$keyring is missing (apt install debian-archive-keyring)"

work=$(mktemp -d /tmp/ember-python.XXXXXX)
trap 'rm -rf "$work"' EXIT
fetch() { curl -fsS --retry 3 --max-time 300 -o "$2" "$1" || die "cannot download $1"; }

fetch "$mirror/dists/$suite/InRelease" "$work/InRelease"
gpgv --keyring "$keyring" --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log" ||
  die "the signature of $suite's InRelease does not verify: $(cat "$work/gpgv.log")"
index=main/binary-amd64/Packages.xz
want_sum=$(awk -v f="$index" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "$work/Release")
[ -n "$want_sum" ] || die "$suite's Release lists no $index"

# The index is 10 MB: fetched only when the installed packages are unknown
# or no longer the suite's.
stamp="$target/.installed"
fetch "$mirror/dists/$suite/$index" "$work/Packages.xz"
echo "$want_sum  $work/Packages.xz" | sha256sum -c --quiet - || die "$index does not match its SHA-256"
xz -dc "$work/Packages.xz" > "$work/Packages"

# name version filename sha256 of each package
awk -v want=" $packages " '
  /^Package: / {p=$2} /^Version: / {v=$2} /^Filename: / {f=$2} /^SHA256: / {h=$2}
  /^$/ { if (index(want, " " p " ") && !(p in seen)) { seen[p]=1; print p, v, f, h } p=v=f=h="" }
' "$work/Packages" | sort > "$work/chosen"
[ "$(wc -l < "$work/chosen")" -eq "$(echo $packages | wc -w)" ] ||
  die "$suite lacks some of: $packages (found: $(cut -d' ' -f1 "$work/chosen" | tr '\n' ' '))"
if [ -f "$stamp" ] && cmp -s "$stamp" "$work/chosen" && "$target/usr/bin/python3" -c pass 2>/dev/null; then
  exit 0
fi

rm -rf "$target"
mkdir -p "$target"
while read -r name version file sum; do
  fetch "$mirror/$file" "$work/$name.deb"
  echo "$sum  $work/$name.deb" | sha256sum -c --quiet - || die "$file does not match its SHA-256"
  dpkg-deb -x "$work/$name.deb" "$target"
done < "$work/chosen"

root=$(cd "$target" && pwd)
libdir="$root/usr/lib/x86_64-linux-gnu"
[ -f "$libdir/ld-linux-x86-64.so.2" ] || die "libc6 brought no dynamic loader"
patchelf --set-interpreter "$libdir/ld-linux-x86-64.so.2" --set-rpath '$ORIGIN/../lib/x86_64-linux-gnu' \
  "$target/usr/bin/python$minor"
ln -sf "python$minor" "$target/usr/bin/python3"
"$target/usr/bin/python3" -c 'import json, threading, sys; assert sys.version_info[:2] == (3, 14)' ||
  die "the installed interpreter does not run"
cp "$work/chosen" "$stamp"
echo "install-test-python: $("$target/usr/bin/python3" -VV | head -1) in $target"
