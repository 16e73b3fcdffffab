#!/bin/sh
# Installs the Debian packages Airlock needs to build, test and run.
# Idempotent: skips apt entirely when everything is already installed.
set -eu
PKGS="build-essential gcc clang clang-format libclang-rt-14-dev make pkg-config
 libmicrohttpd-dev libjansson-dev libsqlite3-dev libcmocka-dev libcurl4-openssl-dev libssl-dev
 qemu-system-x86 qemu-utils busybox-static mmdebstrap e2fsprogs cpio kmod zstd lz4
 python3-pytest python3-yaml iproute2 procps psmisc
 nftables libc-ares-dev openssl dnsutils
 libseccomp-dev strace"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing; run 'make deps' as root" >&2
	exit 1
fi
echo "deps: installing$missing"
apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
