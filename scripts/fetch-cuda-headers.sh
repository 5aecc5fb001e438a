#!/usr/bin/env bash
# Fetches the NVIDIA headers ember compiles against into
# build/cuda-headers/include: Debian bookworm's non-free libcupti-dev (the
# CUPTI headers of libembercuda.so, gpu/) and libnvidia-ml-dev (nvml.h, for
# the agent's GPU metrics, agent/gpumetrics.c), downloaded and unpacked
# with dpkg-deb -x, never installed. Only headers are kept; nothing links
# against NVIDIA's libraries (libcupti and libnvidia-ml are dlopen'ed at
# run time). gpu/cuda_min/ stands in for cuda.h, which only NVIDIA's 774 MB
# toolkit package carries.
#
# Every file is verified: the suite's InRelease by Debian's archive keyring
# (gpgv), the non-free package index by the SHA-256 InRelease lists, the
# package by the SHA-256 the index lists. Idempotent: nothing is downloaded
# when the headers of that version are already there.
#   EMBER_DEBIAN_MIRROR   the mirror (default http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
mirror=${EMBER_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
packages="libcupti-dev libnvidia-ml-dev"
target=build/cuda-headers
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

die() { echo "fetch-cuda-headers: $*" >&2; exit 1; }
for tool in curl gpgv xz dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done
[ -f "$keyring" ] || die "$keyring is missing (apt install debian-archive-keyring)"

stamp="$target/.installed"
# A stamp naming the package and version: nothing to do. (Checked before
# any download so that builds without network work once fetched.)
if [ -f "$stamp" ] && [ -f "$target/include/cupti_activity.h" ] && [ -f "$target/include/nvml.h" ] &&
   [ "${1:-}" != "--refresh" ]; then
  exit 0
fi

work=$(mktemp -d /tmp/ember-cuda-headers.XXXXXX)
trap 'rm -rf "$work"' EXIT
fetch() { curl -fsS --retry 3 --max-time 300 -o "$2" "$1" || die "cannot download $1"; }

fetch "$mirror/dists/$suite/InRelease" "$work/InRelease"
gpgv --keyring "$keyring" --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log" ||
  die "the signature of $suite's InRelease does not verify: $(cat "$work/gpgv.log")"
index=non-free/binary-amd64/Packages.xz
want_sum=$(awk -v f="$index" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "$work/Release")
[ -n "$want_sum" ] || die "$suite's Release lists no $index"
fetch "$mirror/dists/$suite/$index" "$work/Packages.xz"
echo "$want_sum  $work/Packages.xz" | sha256sum -c --quiet - || die "$index does not match its SHA-256"
xz -dc "$work/Packages.xz" > "$work/Packages"

rm -rf "$work/stage"
mkdir -p "$work/stage/include"
: > "$work/stamp"
for package in $packages; do
  read -r version file sum < <(awk -v want="$package" '
    /^Package: / {p=$2} /^Version: / {v=$2} /^Filename: / {f=$2} /^SHA256: / {h=$2}
    /^$/ { if (p == want) { print v, f, h; exit } p=v=f=h="" }
  ' "$work/Packages") || true
  [ -n "${file:-}" ] || die "$suite non-free has no $package"

  fetch "$mirror/$file" "$work/$package.deb"
  echo "$sum  $work/$package.deb" | sha256sum -c --quiet - || die "$file does not match its SHA-256"
  dpkg-deb -x "$work/$package.deb" "$work/root-$package"
  cp -r "$work/root-$package/usr/include/." "$work/stage/include/"
  [ -d "$work/root-$package/usr/share/doc/$package" ] &&
    mkdir -p "$work/stage/doc" && cp -r "$work/root-$package/usr/share/doc/$package" "$work/stage/doc/"
  echo "$package $version" >> "$work/stamp"
  file=""
done
[ -f "$work/stage/include/cupti_activity.h" ] || die "libcupti-dev has no cupti_activity.h"
[ -f "$work/stage/include/nvml.h" ] || die "libnvidia-ml-dev has no nvml.h"

rm -rf "$target"
mkdir -p "$target"
cp -r "$work/stage/." "$target/"
cp "$work/stamp" "$stamp"
echo "fetch-cuda-headers: $(paste -sd, "$stamp") headers in $target/include"
