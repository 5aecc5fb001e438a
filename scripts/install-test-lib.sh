# install-test-lib.sh - sourced by scripts/install-test-npm.sh and
# install-test-pydeps.sh, which install a pinned set of packages into a
# folder of build/ once.
#
# installed TARGET WANT: true when TARGET already holds exactly WANT (the
# line its .installed stamp keeps). mark_installed TARGET WANT: writes it.
installed() {
  [ -f "$1/.installed" ] && [ "$(cat "$1/.installed")" = "$2" ]
}

mark_installed() {
  echo "$2" > "$1/.installed"
}
