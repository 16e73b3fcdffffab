#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fetches Debian's cloud kernel without installing it on the host:
#   apt-cache depends linux-image-cloud-amd64  -> the current ABI
#   apt-get download linux-image-ABI-cloud-amd64 into CACHE, dpkg-deb -x, depmod.
# Writes OUT/vmlinuz and OUT/kernel-abi, each only when its content changes, so
# make rebuilds what depends on them only when the kernel really changed.
# Usage: build-kernel.sh OUT_DIR CACHE_DIR
set -eu
out=$1
cache=$2
mkdir -p "$out" "$cache"

abi=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
	sed -n 's/^ *Depends: linux-image-\(.*-cloud-amd64\)$/\1/p' | head -n1 || true)
if [ -z "$abi" ]; then
	# No package lists (offline, before apt-get update): keep what we have.
	if [ -s "$out/kernel-abi" ] && [ -s "$out/vmlinuz" ]; then
		echo "build-kernel: apt-cache knows no linux-image-cloud-amd64; keeping $(cat "$out/kernel-abi")" >&2
		exit 0
	fi
	echo "build-kernel: cannot find the cloud kernel ABI; run 'apt-get update' first" >&2
	exit 1
fi

pkg="linux-image-$abi"
root="$cache/kernel-$abi"
if [ ! -e "$root/.complete" ]; then
	deb=$(ls "$cache"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)
	if [ -z "$deb" ]; then
		echo "build-kernel: downloading $pkg" >&2
		(cd "$cache" && apt-get download -q "$pkg" >/dev/null)
		deb=$(ls "$cache"/"${pkg}"_*.deb | head -n1)
	fi
	rm -rf "$root"
	mkdir -p "$root"
	dpkg-deb -x "$deb" "$root"
	depmod -b "$root" "$abi"
	touch "$root/.complete"
fi

update_if_changed() { # SRC DST
	if ! cmp -s "$1" "$2"; then
		cp "$1" "$2.tmp.$$"
		mv -f "$2.tmp.$$" "$2"
	fi
}
update_if_changed "$root/boot/vmlinuz-$abi" "$out/vmlinuz"
printf '%s\n' "$abi" >"$out/kernel-abi.new.$$"
update_if_changed "$out/kernel-abi.new.$$" "$out/kernel-abi"
rm -f "$out/kernel-abi.new.$$"
