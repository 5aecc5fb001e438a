#!/usr/bin/env bash
# Installs every Debian package ember's build, run and tests need.
# Idempotent: packages already present are not touched, and apt is not
# called at all when nothing is missing. Needs root (or sudo) only when
# something must be installed.
set -euo pipefail

packages=(
  # toolchain
  make gcc clang llvm pkg-config
  # BPF: libbpf + skeleton generator; kernel headers for uapi types
  libbpf-dev bpftool linux-libc-dev
  # libraries the binaries link
  libelf-dev libdw-dev zlib1g-dev libzstd-dev libssl-dev libxxhash-dev
  libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev libsqlite3-dev
  libprotobuf-c-dev protobuf-c-compiler libpcre2-dev libiberty-dev libdebuginfod-dev
  # tests: unit framework, sanitizers and fuzzing runtimes, integration harness
  libcmocka-dev libclang-rt-14-dev python3 python3-pytest python3-websocket python3-pip
  # the CPython headers the Python unwinder's layout check compiles against;
  # what scripts/install-test-python.sh needs to fetch and verify a newer one
  python3-dev patchelf gpgv xz-utils debian-archive-keyring
  # browser tests
  chromium
  # the container-name test runs a containerd of its own (private root,
  # state and socket; tests/integration/test_containerd.py); the system
  # service the package brings is neither started nor enabled (below)
  containerd
  # tools the tests and `make run` use; perf to compare against, a
  # debuginfod server and glibc's detached debug info to symbolize from
  curl procps util-linux linux-perf debuginfod libc6-dbg
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# No service of a package installed here is started (the tests start what
# they need, privately): a policy-rc.d refusing every start, unless the
# host has its own; a containerd newly installed is not enabled either.
policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  policy=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [[ " ${missing[*]} " == *" containerd "* ]] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable containerd.service >/dev/null 2>&1 || true
fi
