#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the guest initramfs (newc, uncompressed, reproducible: sorted names,
# fixed owner and mtime):
#   /init                  the agent (static)
#   /lib/modules/NAME.ko   the kernel modules the guest needs, decompressed
#   /etc/airlock/modules   their paths in load order (one per line)
# Modules come from `modprobe --show-depends` against the unpacked kernel, so
# dependencies and load order follow the kernel's own modules.dep; modules
# built into the kernel are skipped.
# Usage: build-initramfs.sh AGENT KERNEL_CACHE_DIR ABI OUT.cpio
set -eu
agent=$1
cache=$2
abi=$3
out=$4

root="$cache/kernel-$abi"
[ -e "$root/.complete" ] || { echo "build-initramfs: no unpacked kernel $abi in $cache" >&2; exit 1; }

# What the guest needs; their dependencies are added in load order.
wanted="virtio_ring virtio virtio_mmio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
virtio_blk failover net_failover virtio_net virtio_console vsock
vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport virtio-rng"

stage=$(mktemp -d "${TMPDIR:-/tmp}/airlock-initramfs.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
mkdir -p "$stage/lib/modules" "$stage/etc/airlock" "$stage/proc" "$stage/sys" \
	"$stage/dev" "$stage/newroot" "$stage/run" "$stage/tmp"
install -m 0755 "$agent" "$stage/init"
: >"$stage/etc/airlock/modules"

for m in $wanted; do
	modprobe -d "$root" -S "$abi" --show-depends "$m" | while read -r kind path _rest; do
		case $kind in
		builtin) continue ;;
		insmod) ;;
		*) echo "build-initramfs: unexpected modprobe output: $kind $path" >&2; exit 1 ;;
		esac
		base=$(basename "$path")
		name=${base%%.ko*}
		dst="/lib/modules/$name.ko"
		grep -qxF "$dst" "$stage/etc/airlock/modules" && continue
		case $base in
		*.ko) cp "$path" "$stage$dst" ;;
		*.ko.xz) xz -dc "$path" >"$stage$dst" ;;
		*.ko.zst) zstd -qdc "$path" >"$stage$dst" ;;
		*.ko.gz) gzip -dc "$path" >"$stage$dst" ;;
		*) echo "build-initramfs: unknown module format $base" >&2; exit 1 ;;
		esac
		chmod 0644 "$stage$dst"
		echo "$dst" >>"$stage/etc/airlock/modules"
	done
done
[ -s "$stage/etc/airlock/modules" ] || { echo "build-initramfs: no modules found" >&2; exit 1; }

# The kernel gives /init its console through /dev/console before devtmpfs is up.
mknod -m 0600 "$stage/dev/console" c 5 1 2>/dev/null || true

find "$stage" -exec touch -h -d @0 {} +
mkdir -p "$(dirname "$out")"
(cd "$stage" && find . -print0 | LC_ALL=C sort -z |
	cpio --null -o -H newc --reproducible -R 0:0 --quiet) >"$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
