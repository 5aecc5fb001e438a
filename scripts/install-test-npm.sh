#!/usr/bin/env bash
# Installs the npm packages the tests need into build/npm (never the
# system's node_modules): speedscope, whose published file-format schema
# (dist/release/file-format-schema.json) the speedscope export is
# validated against (tests/integration/test_exports.py). Idempotent:
# nothing happens when the pinned versions are already there. Install
# scripts of the packages are not run.
. "$(dirname "$0")/install-test-lib.sh" # strict mode, in the repository root
target=build/npm
want="speedscope@1.22.2"
installed "$target" "$want" && exit 0
if ! command -v npm >/dev/null 2>&1; then
  echo "install-test-npm: npm is missing (apt install npm)" >&2
  exit 1
fi
rm -rf "$target"
mkdir -p "$target"
npm install --silent --no-audit --no-fund --ignore-scripts --no-save --prefix "$target" $want
mark_installed "$target" "$want"
