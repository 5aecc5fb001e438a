#!/usr/bin/env bash
# Installs the Debian packages ember needs, in two sets:
#   scripts/install-deps.sh run    building and running ember (`make`, `make run`)
#   scripts/install-deps.sh test   that, and what only the tests and benchmarks
#                                  need (`make test`, `make bench`; the default)
#   scripts/install-deps.sh --list run|test   prints a set, one package a line
# Idempotent: packages already present are not touched, and apt is not
# called at all when nothing is missing. Needs root (or sudo) only when
# something must be installed.
#
# Nothing installed here starts or stays enabled as a service: while apt
# runs, a policy-rc.d refuses every start (unless the host has its own);
# afterwards every unit that the installation enabled (a symlink that
# appeared under /etc/systemd/system) is disabled again, and stopped where
# systemd runs. Units enabled before are left as they were.
set -euo pipefail

run_packages=(
  # toolchain
  make gcc clang llvm pkg-config
  # BPF: libbpf + skeleton generator; kernel headers for uapi types
  libbpf-dev bpftool linux-libc-dev
  # libraries the binaries link
  libelf-dev libdw-dev zlib1g-dev libzstd-dev libssl-dev libxxhash-dev libsodium-dev
  libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev libsqlite3-dev
  # metadata on PostgreSQL (--metadata postgres://...)
  libpq-dev
  # OTLP over gRPC: HTTP/2 (nghttp2) and TLS (GnuTLS, as libmicrohttpd's HTTPS)
  libnghttp2-dev libgnutls28-dev
  libprotobuf-c-dev protobuf-c-compiler libpcre2-dev libiberty-dev libdebuginfod-dev
  # what `make run` uses (scripts/run.sh: curl for the health check)
  curl procps util-linux
  # what scripts/fetch-cuda-headers.sh needs to fetch and verify the CUPTI
  # headers libembercuda.so compiles against (make)
  gpgv xz-utils debian-archive-keyring
)
test_only_packages=(
  # tests: unit framework, sanitizers and fuzzing runtimes, integration harness
  libcmocka-dev libclang-rt-14-dev python3 python3-pytest python3-websocket python3-pip
  # test certificate authorities (tests/lib/harness.py make_ca)
  openssl
  # npm: speedscope's published file-format schema (scripts/install-test-npm.sh)
  nodejs
  # the CPython headers the Python unwinder's layout check compiles against;
  # what scripts/install-test-python.sh needs to fetch and verify a newer one
  python3-dev patchelf
  # browser tests
  chromium
  # the container-name test runs a containerd of its own (private root,
  # state and socket; tests/integration/test_containerd.py); the system
  # service the package brings is neither started nor left enabled (below)
  containerd
  # perf to compare against, a debuginfod server and glibc's detached
  # debug info to symbolize from
  linux-perf debuginfod libc6-dbg
  # the fleet store's tests start their own servers on loopback (two
  # ClickHouse shards and a PostgreSQL, tests/lib/clickhouse.py); the
  # system services the packages bring are neither started nor left enabled
  clickhouse-server clickhouse-client postgresql
)

list_only=0
if [ "${1:-}" = "--list" ]; then
  list_only=1
  shift
fi
set_name=${1:-test}
case "$set_name" in
  run) packages=("${run_packages[@]}") ;;
  test) packages=("${run_packages[@]}" "${test_only_packages[@]}") ;;
  *) echo "usage: scripts/install-deps.sh [--list] [run|test]" >&2; exit 2 ;;
esac
if [ "$list_only" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps ($set_name): installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
units=/etc/systemd/system
enabled_units() { # every unit symlink: what `systemctl enable` creates
  [ -d "$units" ] && find "$units" -type l 2>/dev/null | sort || true
}
before=$(enabled_units)
policy=""
cleanup() {
  [ -n "$policy" ] && $SUDO rm -f "$policy"
  return 0
}
trap cleanup EXIT
if [ ! -e /usr/sbin/policy-rc.d ]; then
  policy=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\n# ember scripts/install-deps.sh: no service starts while it installs\nexit 101\n' |
    $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# Units the installation enabled: disabled again (and stopped where systemd
# runs); a leftover link (no systemctl) is removed.
after=$(enabled_units)
new_links=$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | grep -v '^$' || true)
declare -A seen=()
for link in $new_links; do
  unit=$(basename "$link")
  case "$unit" in *.service|*.socket|*.timer|*.path) ;; *) continue ;; esac
  target=$(basename "$(readlink "$link")")
  for u in "$unit" "$target"; do
    [ -n "${seen[$u]:-}" ] && continue
    seen[$u]=1
    if command -v systemctl >/dev/null 2>&1; then
      echo "install-deps: disabling $u, which the installation enabled"
      $SUDO systemctl disable --now "$u" >/dev/null 2>&1 || $SUDO systemctl disable "$u" >/dev/null 2>&1 || true
    fi
  done
  [ -L "$link" ] && $SUDO rm -f "$link"
done
exit 0
