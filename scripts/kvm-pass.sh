#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make test's KVM pass (issue 15): the suites above ran on TCG, the record on
# every host. Where KVM really runs a guest, the integration smoke and the
# security suite run again on it; elsewhere this says SKIP and why, in the
# words of airlockd's own probe (a jailed guest boot to the agent's hello).
set -eu
PYTEST=${PYTEST:-pytest-3}
PYTEST_ARGS=${PYTEST_ARGS:-}
BUILD=${BUILD:-build}
SMOKE="tests/integration/test_exec.py tests/integration/test_lifecycle.py tests/integration/test_lifecycle_snapshots.py
 tests/integration/test_network.py tests/integration/test_accel.py"

if [ ! -e /dev/kvm ]; then
	echo "kvm pass: SKIP: no /dev/kvm on this host; the TCG run above is the record"
	exit 0
fi
work=$(mktemp -d /tmp/airlock-kvm-pass.XXXXXX)
trap 'rm -rf "$work"' EXIT
rc=0
"$BUILD/airlockd" --check --accel kvm --socket "$work/check.sock" --state-dir "$work/state" \
	--image-dir "$BUILD/images" >"$work/check.out" 2>"$work/check.err" || rc=$?
if [ "$rc" != 0 ]; then
	why=$(grep -E 'airlockd error: ' "$work/check.err" | tail -n1 | sed 's/.*airlockd error: //')
	[ -n "$why" ] || why=$(grep '^accel.reason=' "$work/check.out" | cut -d= -f2-)
	echo "kvm pass: SKIP: /dev/kvm is there but KVM cannot run a guest here: ${why:-airlockd --check exited $rc}"
	echo "kvm pass: the TCG run above is the record"
	exit 0
fi
cpu=$(grep '^accel.cpu=' "$work/check.out" | cut -d= -f2-)
echo "kvm pass: $(grep '^accel.reason=' "$work/check.out" | cut -d= -f2-)"
echo "kvm pass: the integration smoke and the security suite on KVM (-cpu $cpu)"
# shellcheck disable=SC2086
AIRLOCK_TEST_ACCEL=kvm AIRLOCK_TEST_CPU="$cpu" "$PYTEST" -v $PYTEST_ARGS $SMOKE tests/security
