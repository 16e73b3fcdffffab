#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The `minimal` template: busybox-static and the bare bones of a Unix tree,
# as an ext4 image built with `mkfs.ext4 -d` (no mounts, seconds to build).
# Usage: build-minimal.sh OUT_DIR [SIZE]   (writes OUT_DIR/rootfs.ext4, template.json)
set -eu
out=$1
size=${2:-64M}
busybox=${BUSYBOX:-/bin/busybox}

[ -x "$busybox" ] || { echo "build-minimal: $busybox missing (apt-get install busybox-static)" >&2; exit 1; }
if ! "$busybox" --list-full >/dev/null 2>&1 || ldd "$busybox" >/dev/null 2>&1; then
	echo "build-minimal: $busybox is not a static busybox (apt-get install busybox-static)" >&2
	exit 1
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/airlock-minimal.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
r=$stage
mkdir -p "$r/bin" "$r/sbin" "$r/usr/bin" "$r/usr/sbin" "$r/etc" "$r/proc" "$r/sys" \
	"$r/dev" "$r/run" "$r/root" "$r/home/user" "$r/var/tmp" "$r/mnt" "$r/opt"
install -m 0755 "$busybox" "$r/bin/busybox"
# Every applet as a symlink where busybox itself says it lives (/bin, /sbin,
# /usr/bin, /usr/sbin), so both `sh` and `/usr/bin/env` work.
"$busybox" --list-full | while read -r applet; do
	case $applet in
	bin/busybox | linuxrc) continue ;;
	usr/*) ln -sf ../../bin/busybox "$r/$applet" ;;
	*/*) ln -sf ../bin/busybox "$r/$applet" ;;
	esac
done
# Debian's busybox-static has no FEATURE_WGET_TIMEOUT, and its wget dies of
# SIGSEGV on `-T N` (getopt32 stores N through the NULL it was given for the
# missing option): a wrapper turns -T into `timeout N` (minimal-wget.sh).
if ! "$busybox" wget --help 2>&1 | grep -q -- '-T SEC'; then
	rm -f "$r/usr/bin/wget"
	install -m 0755 "$(dirname "$0")/minimal-wget.sh" "$r/usr/bin/wget"
	# busybox sh runs its own applets before PATH (FEATURE_SH_STANDALONE), so
	# `sh -c 'wget -T 2 URL'` never reaches the wrapper. In the image's copy,
	# wget's option string loses the `+` after `T:`: -T becomes a string
	# option whose NULL destination getopt32 skips (it checks that for
	# strings, not numbers), so the applet ignores -T instead of crashing.
	# The rest of the string (and its complementary part) moves up a byte.
	spec='\^cqSO:o:P:Y:U:T:\+t:n::\0([^\0]*)\0'
	if [ "$(perl -0777 -ne "print scalar(() = /$spec/g)" "$r/bin/busybox")" = 1 ]; then
		perl -0777 -pi -e "s/$spec/^cqSO:o:P:Y:U:T:t:n::\\0\$1\\0\\0/" "$r/bin/busybox"
		if "$r/bin/busybox" wget -q -T 1 -O /dev/null http://127.0.0.1:1/ 2>/dev/null; [ $? -gt 128 ]; then
			echo "build-minimal: busybox wget -T still crashes after the patch" >&2
			exit 1
		fi
	else
		echo "build-minimal: busybox wget's option string not found: only /usr/bin/wget handles -T" >&2
	fi
fi
mkdir -p -m 1777 "$r/tmp"
chmod 1777 "$r/tmp" "$r/var/tmp"
chmod 0700 "$r/root"

cat >"$r/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
P
cat >"$r/etc/group" <<'G'
root:x:0:
user:x:1000:
nogroup:x:65534:
G
cat >"$r/etc/shadow" <<'S'
root:*:19000:0:99999:7:::
user:*:19000:0:99999:7:::
nobody:*:19000:0:99999:7:::
S
chmod 0640 "$r/etc/shadow"
echo airlock >"$r/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tairlock\n::1\tlocalhost\n' >"$r/etc/hosts"
printf 'ID=airlock-minimal\nNAME="Airlock minimal (busybox)"\n' >"$r/etc/os-release"
chown -R 1000:1000 "$r/home/user"
chmod 0755 "$r/home/user"

find "$r" -exec touch -h -d @0 {} +
mkdir -p "$out"
rm -f "$out/rootfs.ext4.tmp"
truncate -s "$size" "$out/rootfs.ext4.tmp"
mkfs.ext4 -q -F -d "$r" -L minimal -U clear -E root_owner=0:0,hash_seed=00000000-0000-0000-0000-000000000000 \
	"$out/rootfs.ext4.tmp"
mv -f "$out/rootfs.ext4.tmp" "$out/rootfs.ext4"
printf '{"name":"minimal","description":"busybox (static) with root and user (uid 1000); builds in seconds, used by most tests"}\n' >"$out/template.json"
