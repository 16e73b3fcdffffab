#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The `base` template: Debian bookworm (minbase) with python3, ca-certificates,
# curl, git, dig (dnsutils) and ip (iproute2), plus a `user` account (uid 1000, home /home/user), as an ext4
# image of its content plus BASE_FREE_MIB of free space. Needs root (mmdebstrap
# in root mode) and Debian's archive; ~35 s.
# Usage: build-base.sh OUT_DIR   (writes OUT_DIR/rootfs.ext4, template.json)
set -eu
out=$1
free_mib=${BASE_FREE_MIB:-512}
packages=${BASE_PACKAGES:-python3,ca-certificates,curl,git,dnsutils,iproute2}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

command -v mmdebstrap >/dev/null || { echo "build-base: mmdebstrap missing (apt-get install mmdebstrap)" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/airlock-base.XXXXXX")
trap 'rm -rf "$stage"' EXIT
rmdir "$stage" # mmdebstrap wants to create it

mmdebstrap --quiet --variant=minbase --include="$packages" \
	--customize-hook='chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash user' \
	--customize-hook='echo airlock >"$1/etc/hostname"' \
	--customize-hook='printf "127.0.0.1\tlocalhost\n127.0.1.1\tairlock\n::1\tlocalhost\n" >"$1/etc/hosts"' \
	--customize-hook='rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; : >"$1/etc/machine-id"' \
	bookworm "$stage" \
	"deb $mirror bookworm main" \
	"deb $mirror bookworm-updates main" \
	"deb $security bookworm-security main"

used_mib=$(du -sm --apparent-size "$stage" | cut -f1)
size_mib=$((used_mib + used_mib / 10 + free_mib))
mkdir -p "$out"
rm -f "$out/rootfs.ext4.tmp"
truncate -s "${size_mib}M" "$out/rootfs.ext4.tmp"
mkfs.ext4 -q -F -d "$stage" -L base "$out/rootfs.ext4.tmp"
mv -f "$out/rootfs.ext4.tmp" "$out/rootfs.ext4"
printf '{"name":"base","description":"Debian bookworm with python3, ca-certificates, curl, git, dig and ip; root and user (uid 1000)"}\n' >"$out/template.json"
echo "build-base: $out/rootfs.ext4: ${used_mib} MiB of files in a ${size_mib} MiB filesystem" >&2
