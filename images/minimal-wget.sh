#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# /usr/bin/wget of the `minimal` template when its busybox lacks -T (see
# build-minimal.sh). Debian's busybox-static is built without
# FEATURE_WGET_TIMEOUT, yet its wget still parses `-T N` as a number option
# whose destination is a NULL pointer: `busybox wget -T 2 URL` dies of
# SIGSEGV before any network I/O. This takes -T SEC, -TSEC, -qT SEC,
# --timeout=SEC and --timeout SEC off the command line and bounds the whole
# run with `timeout SEC` instead (GNU wget's -T bounds each connect/read;
# here it bounds the transfer as a whole). -T 0 means no timeout.
t=
n=$#
i=0
while [ "$i" -lt "$n" ]; do
	a=$1
	shift
	i=$((i + 1))
	case $a in
	-T | --timeout)
		t=${1-}
		[ "$i" -lt "$n" ] && { shift; i=$((i + 1)); }
		;;
	-T*) t=${a#-T} ;;
	--timeout=*) t=${a#--timeout=} ;;
	-[cqS]*T*)
		pre=${a%%T*}
		case $pre in
		-*[!cqS]*) set -- "$@" "$a" ;;
		*)
			set -- "$@" "$pre"
			t=${a#*T}
			if [ -z "$t" ]; then
				t=${1-}
				[ "$i" -lt "$n" ] && { shift; i=$((i + 1)); }
			fi
			;;
		esac
		;;
	-O | -o | -P | -Y | -U | -t | --header | --post-data | --post-file | --output-document | \
		--output-file | --directory-prefix | --proxy | --user-agent | --tries)
		set -- "$@" "$a"
		[ "$i" -lt "$n" ] && { set -- "$@" "$1"; shift; i=$((i + 1)); }
		;;
	--)
		set -- "$@" "$a"
		while [ "$i" -lt "$n" ]; do
			set -- "$@" "$1"
			shift
			i=$((i + 1))
		done
		;;
	*) set -- "$@" "$a" ;;
	esac
done
case $t in
'' | 0) exec /bin/busybox wget "$@" ;;
*[!0-9]*)
	echo "wget: invalid number '$t'" >&2
	exit 1
	;;
esac
/bin/busybox timeout "$t" /bin/busybox wget "$@"
rc=$?
if [ "$rc" -eq 143 ]; then
	echo "wget: timed out after $t s (-T)" >&2
	exit 1
fi
exit "$rc"
