#!/usr/bin/env bash
# The VS Code extension's CI: install from the lockfile, type-check, lint, test (unit tests on a vscode stand-in and
# the bundled extension against the real `python3 -m dice_lsp` of this checkout), bundle, package the .vsix.
# Needs node >= 20 with npm, and this repository's Python package installed (`pip install -e .`).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- npm ci"
npm ci --no-audit --no-fund
echo "-- type-check"
npm run --silent typecheck
echo "-- lint"
npm run --silent lint
echo "-- test"
npm test --silent
echo "-- bundle and package"
npm run --silent package
ls -l dice-lsp.vsix
