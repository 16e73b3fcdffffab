#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in for airlock-jailer in tests/fc, where the VMM is the fake
# firecracker (a Python script, which the real jail cannot run: it binds
# only the VMM's libraries) on a host without /dev/kvm (which the real jail
# must have for Firecracker). It builds NO jail: it records its command line
# (what the daemon asks of the real jailer, which the tests check), joins
# the network namespace it is given and execs the VMM's command line. The
# real jailer's own behaviour is tested by tests/unit (jailer) and
# tests/security; Firecracker under the real jailer needs a KVM host
# (make test-kvm).
#
#   FAKE_JAILER_LOG   one line per run: the arguments, NUL-separated
set -eu
case "${1:-}" in
--check)
	echo "fake-jailer: builds no jail (tests/fc only)"
	exit 0
	;;
--help) exit 0 ;;
esac
if [ -n "${FAKE_JAILER_LOG:-}" ]; then
	{
		printf '%s\0' "$@"
		printf '\n'
	} >>"$FAKE_JAILER_LOG"
fi
cleanup=0
netns=
while [ $# -gt 0 ]; do
	case "$1" in
	--) shift; break ;;
	--cleanup) cleanup=1; shift ;;
	--new-pid-ns) shift ;;
	--netns-fd) netns=$2; shift 2 ;;
	*) shift 2 ;;
	esac
done
[ "$cleanup" = 1 ] && exit 0
if [ -n "$netns" ]; then
	exec nsenter "--net=/proc/self/fd/$netns" -- "$@"
fi
exec "$@"
