#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Does KVM run a guest here? airlockd's own answer: `airlockd --check --accel
# kvm` (its probe boots a jailed guest to the agent's hello; /dev/kvm's
# presence proves nothing). Exit 0 and two lines, "cpu=MODEL" and
# "reason=...", when it does; exit 1 and one line, why not, when it does not.
# Used by make kvm-pass and make test-kvm.
set -eu
BUILD=${BUILD:-build}
if [ ! -e /dev/kvm ]; then
	echo "no /dev/kvm on this host"
	exit 1
fi
work=$(mktemp -d /tmp/airlock-kvm-proven.XXXXXX)
trap 'rm -rf "$work"' EXIT
rc=0
"$BUILD/airlockd" --check --accel kvm --socket "$work/check.sock" --state-dir "$work/state" \
	--image-dir "$BUILD/images" >"$work/check.out" 2>"$work/check.err" || rc=$?
if [ "$rc" != 0 ]; then
	why=$(grep -E 'airlockd error: ' "$work/check.err" | tail -n1 | sed 's/.*airlockd error: //')
	[ -n "$why" ] || why=$(grep '^accel.reason=' "$work/check.out" | cut -d= -f2-)
	echo "${why:-airlockd --check exited $rc}"
	exit 1
fi
echo "cpu=$(grep '^accel.cpu=' "$work/check.out" | cut -d= -f2-)"
echo "reason=$(grep '^accel.reason=' "$work/check.out" | cut -d= -f2-)"
