# install-test-lib.sh - sourced by scripts/install-test-npm.sh and
# install-test-pydeps.sh, which install a pinned set of packages into a
# folder of build/ once.
#
# Sourcing it sets bash's strict mode and goes to the repository root
# (the caller's folder's parent).
#
# installed TARGET WANT: true when TARGET already holds exactly WANT (the
# line its .installed stamp keeps). mark_installed TARGET WANT: writes it.

set -euo pipefail
cd "$(dirname "$0")/.."

installed() {
  [ -f "$1/.installed" ] && [ "$(cat "$1/.installed")" = "$2" ]
}

mark_installed() {
  echo "$2" > "$1/.installed"
}
