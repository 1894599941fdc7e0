#!/usr/bin/env bash
# The VS Code extension's CI: install from the lockfile, type-check, lint, test (unit tests on a vscode stand-in, the
# bundled extension against the real `python3 -m dice_lsp` of this checkout and of its wheel, real pip into venvs),
# bundle, package the .vsix with dice-lsp's wheel (scripts/wheel.sh, built before the tests and reused if unchanged).
# Needs node >= 20 with npm, git, and this repository's Python package installed (`pip install -e .`) in a python3
# with pip, setuptools and wheel.
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
echo "-- the .vsix carries the interpreter probe and the server's wheel"
python3 -m zipfile -l dice-lsp.vsix | grep -E 'extension/(python/probe\.py|bundled/dice_lsp-.+\.whl) '
[ "$(python3 -m zipfile -l dice-lsp.vsix | grep -cE 'extension/(python/probe\.py|bundled/dice_lsp-.+\.whl) ')" = 2 ]
ls -l dice-lsp.vsix
