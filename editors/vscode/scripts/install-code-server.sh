#!/usr/bin/env bash
# Installs a real VS Code (code-server, from npm) for tests/test_vscode_code_server.py, offline apart
# from apt, npm and PyPI (no GitHub access), on Debian 12 with Node 20:
#
#   editors/vscode/scripts/install-code-server.sh [PREFIX] [VERSION]
#
# PREFIX defaults to editors/vscode/.code-server (git-ignored); the test looks there, after
# $DIFFUSION_LSP_CODE_SERVER and before PATH. VERSION defaults to 4.100.3 (VS Code 1.100.3), the newest
# code-server whose engines.node is "20" (4.103 and later want Node 22).
#
# What it does, each step only when needed (a second run with the same VERSION exits at once):
#   1. apt: the build tools and headers the native modules need, ripgrep (search) and chromium (the
#      browser the test drives), installed when missing and running as root, else named and exit 1;
#   2. pip: the `playwright` Python package (Playwright's own browser download is never used: the
#      test drives Debian's /usr/bin/chromium);
#   3. npm: code-server itself, with code-server's postinstall.sh done by hand, step by step:
#      - every npm install runs with --ignore-scripts (so @vscode/ripgrep never tries GitHub, and
#        postinstall.sh never asks for --unsafe-perm as root),
#      - native modules are rebuilt with node-gyp against Node's own headers (/usr/include/node),
#      - Debian's /usr/bin/rg is copied to where @vscode/ripgrep expects bin/rg.
# Nothing goes into the user's ~/.config/code-server or ~/.local/share/code-server: the one run of
# code-server here (--version) gets throwaway config and data folders.
# Environment: PYTHON (default python3) is the interpreter that gets playwright.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PREFIX=${1:-"$HERE/../.code-server"}
VERSION=${2:-4.100.3}
PYTHON=${PYTHON:-python3}
APT_PACKAGES=(build-essential python3 pkg-config libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev ripgrep chromium)
STAMP_NAME=".installed-code-server-$VERSION"   # written last, so a half-done install is redone

say() { echo "install-code-server: $*"; }
t0=$(date +%s)

# ---- 1. apt prerequisites ----------------------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    say "apt: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y --no-install-recommends "${missing[@]}"
  else
    say "missing apt packages: ${missing[*]}"
    say "install them first: sudo apt-get install -y --no-install-recommends ${missing[*]}"
    exit 1
  fi
else
  say "apt: ${APT_PACKAGES[*]} already installed"
fi

# Node 20 (nodesource; Debian 12's own nodejs is 18) with its headers in /usr/include/node:
# node-gyp must build against them instead of downloading headers from nodejs.org.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  say "node and npm are needed (Node 20, e.g. the nodesource nodejs package)"; exit 1
fi
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" != 20 ]; then
  say "warning: node $(node --version); code-server $VERSION declares engines.node 20"
fi
if [ ! -f /usr/include/node/node_version.h ]; then
  say "Node's headers are not in /usr/include/node (the nodesource nodejs package has them)"; exit 1
fi

# ---- 2. playwright (Python) -------------------------------------------------------------------
if "$PYTHON" -c 'import playwright.sync_api' >/dev/null 2>&1; then
  say "pip: playwright already importable by $PYTHON"
else
  say "pip: installing playwright for $PYTHON (never run \`playwright install\`: the test uses Debian's chromium)"
  "$PYTHON" -m pip install -q playwright
fi

# ---- 3. code-server ---------------------------------------------------------------------------
# `code-server --version` prints "4.100.3 <commit> with Code 1.100.3", but even --version first reads
# its config file and opens its log folder: on a first run it writes a default config.yaml (and logs
# "[<time>] info  Wrote default config file to ...") and creates coder-logs/. So it runs with its
# config and data folders in a throwaway directory (none of it in the user's home), and the version
# is the first word of the line that starts with one (matched without a pipe: with pipefail, an early
# exit of the reader would fail the pipeline).
installed_version() {
  local tmp v line
  tmp=$(mktemp -d)
  v=$(HOME="$tmp" XDG_CONFIG_HOME="$tmp/config" XDG_DATA_HOME="$tmp/data" "$1" --version 2>/dev/null) || true
  rm -rf "$tmp"
  while IFS= read -r line; do
    if [[ $line =~ ^([0-9]+\.[0-9]+\.[0-9]+)([[:space:]]|$) ]]; then echo "${BASH_REMATCH[1]}"; return 0; fi
  done <<<"$v"
  echo "${v//$'\n'/ | }"   # no version line: what it printed, for the error message
}
BIN="$PREFIX/node_modules/.bin/code-server"
if [ -f "$PREFIX/$STAMP_NAME" ] && [ -x "$BIN" ] && [ "$(installed_version "$BIN")" = "$VERSION" ]; then
  say "code-server $VERSION already installed in $(cd "$PREFIX" && pwd) ($(( $(date +%s) - t0 )) s)"
  exit 0
fi
mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)
say "npm: installing code-server $VERSION into $PREFIX"
rm -f "$PREFIX/$STAMP_NAME"
BIN="$PREFIX/node_modules/.bin/code-server"
export npm_config_nodedir=/usr   # headers from the nodesource nodejs package; node-gyp must not download them
NODE_GYP="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"   # npm's bundled node-gyp (no npx download)
test -f "$NODE_GYP" || { say "npm's bundled node-gyp is not at $NODE_GYP"; exit 1; }

# --ignore-scripts: code-server's postinstall.sh refuses to run as root without --unsafe-perm, and with
# it, its nested npm install runs @vscode/ripgrep's postinstall, which downloads from GitHub and fails
# offline. Every step of postinstall.sh is done by hand below instead.
npm install --prefix "$PREFIX" --ignore-scripts --no-audit --no-fund "code-server@$VERSION"
CS="$PREFIX/node_modules/code-server"

# argon2 (password auth; loaded by code-server even with --auth none): its prebuilt download from
# GitHub fails -> node-pre-gyp falls back to building it from source, which works
say "building argon2"
(cd "$PREFIX" && npm rebuild --foreground-scripts argon2)

# --- what postinstall.sh -> vscode_install does ---
cd "$CS/lib/vscode"
say "installing VS Code's own dependencies"
npm install --omit=dev --ignore-scripts --no-audit --no-fund
# native modules: kerberos' prebuild-install (GitHub) fails and falls back to node-gyp rebuild, fine
say "building native modules"
npm rebuild --foreground-scripts kerberos @parcel/watcher @vscode/deviceid @vscode/spdlog native-watchdog
# node-pty (terminals): build only; its postinstall runs `npx node-gyp configure -f compile_commands_json`,
# which writes a developer file and fails offline (npx wants to download node-gyp)
(cd node_modules/node-pty && node "$NODE_GYP" rebuild)
test -f node_modules/node-pty/build/Release/pty.node
# ripgrep (search): @vscode/ripgrep's postinstall downloads its binary from GitHub; use Debian's rg
mkdir -p node_modules/@vscode/ripgrep/bin
cp "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
# the links postinstall.sh makes
ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && rm -rf code-server && ln -s code-linux.sh code-server)
(cd bin/helpers && rm -rf browser.sh && ln -s browser-linux.sh browser.sh)
# the built-in extensions' dependencies
say "installing the built-in extensions' dependencies"
cd extensions
npm install --omit=dev --ignore-scripts --no-audit --no-fund
node ./postinstall.mjs >/dev/null

got=$(installed_version "$BIN")
[ "$got" = "$VERSION" ] || { say "code-server --version says '$got', not $VERSION"; exit 1; }
touch "$PREFIX/$STAMP_NAME"
say "installed: code-server $got in $PREFIX ($(du -sh "$PREFIX" | cut -f1), $(( $(date +%s) - t0 )) s)"
say "binary: $BIN"
