#!/usr/bin/env bash
# Builds dice-lsp's wheel from this repository into bundled/, which the .vsix ships (dice.importStrategy useBundled,
# and "Install into this interpreter"). It is built from a copy of the package's own files (tracked and new, not
# ignored): setuptools' in-tree build/ keeps modules a rebuild no longer has, and would write into the checkout.
# Skipped when those files are as they were at the last build (a digest of their names and contents).
# Needs python3 with pip, setuptools >= 68 and wheel: the build uses them (--no-build-isolation), so it runs offline.
set -euo pipefail
cd "$(dirname "$0")/.."
extension=$PWD
repository=$(git rev-parse --show-toplevel)
sources=(pyproject.toml README.md dice_lsp engine harness)

listed() { # the package's files that exist, NUL-separated
    git -C "$repository" ls-files -z -co --exclude-standard -- "${sources[@]}" |
        while IFS= read -r -d '' file; do [ -f "$repository/$file" ] && printf '%s\0' "$file"; done
}
digest=$(cd "$repository" && listed | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ -f bundled/.digest ] && [ "$(cat bundled/.digest)" = "$digest" ] && ls bundled/dice_lsp-*.whl >/dev/null 2>&1; then
    echo "bundled/$(cd bundled && ls dice_lsp-*.whl) is up to date"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/dist"
(cd "$repository" && listed | tar --null -T - -cf -) | tar -xf - -C "$work/src"
python3 -m pip wheel --no-deps --no-build-isolation --no-cache-dir --quiet -w "$work/dist" "$work/src"
rm -rf bundled
mkdir bundled
mv "$work"/dist/dice_lsp-*.whl bundled/
echo "$digest" > bundled/.digest
ls -l "$extension"/bundled/dice_lsp-*.whl
