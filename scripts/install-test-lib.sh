# install-test-lib.sh - sourced by scripts/install-test-npm.sh,
# install-test-pydeps.sh, install-test-nvtx.sh and install-test-cudatools.sh,
# which install a pinned set of packages into a folder of build/ once.
#
# Sourcing it sets bash's strict mode and goes to the repository root
# (the caller's folder's parent).
#
# installed TARGET WANT: true when TARGET already holds exactly WANT (the
# line its .installed stamp keeps). mark_installed TARGET WANT: writes it.
# pip_target TARGET WANT [PIP-OPTION...]: installs WANT (pinned packages,
# space-separated) from PyPI into a fresh TARGET with the system's python3
# (never into the system's site-packages), with pip's options given after.

set -euo pipefail
cd "$(dirname "$0")/.."

installed() {
  [ -f "$1/.installed" ] && [ "$(cat "$1/.installed")" = "$2" ]
}

mark_installed() {
  echo "$2" > "$1/.installed"
}

pip_target() {
  local target=$1 want=$2
  shift 2
  if ! /usr/bin/python3 -m pip --version >/dev/null 2>&1; then
    echo "$(basename "$0" .sh): pip is missing (apt install python3-pip)" >&2
    exit 1
  fi
  rm -rf "$target"
  # $want is split into its packages on purpose.
  # shellcheck disable=SC2086
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --root-user-action=ignore "$@" --target "$target" $want
}
