#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make test-kvm: on a KVM host, the whole integration and security suites
# with QEMU on KVM (AIRLOCK_TEST_ACCEL=kvm, and the CPU model airlockd's own
# probe chose), then with Firecracker when its binary is on PATH
# (AIRLOCK_TEST_BACKEND=firecracker becomes --backend firecracker in
# tests/integration/conftest.py), then `make bench` (bench/results.md says
# which accelerator each figure ran on). Where KVM cannot run a guest it says
# why, in the words of `airlockd --check --accel kvm`, and exits 0.
# Preparing a host: docs/kvm-host.md.
set -eu
MAKE=${MAKE:-make}
PYTEST=${PYTEST:-pytest-3}
PYTEST_ARGS=${PYTEST_ARGS:-}
BUILD=${BUILD:-build}

if [ ! -e /dev/kvm ]; then
	echo "test-kvm: SKIP: no /dev/kvm on this host (docs/kvm-host.md says how to prepare a KVM host)"
	exit 0
fi
"$MAKE" --no-print-directory all images-all
if ! proven=$(BUILD="$BUILD" scripts/kvm-proven.sh); then
	echo "test-kvm: SKIP: $proven (docs/kvm-host.md says how to prepare a KVM host)"
	exit 0
fi
cpu=$(echo "$proven" | sed -n 's/^cpu=//p')
echo "test-kvm: $(echo "$proven" | sed -n 's/^reason=//p'); host kernel $(uname -r)"

echo "test-kvm: QEMU on KVM (-cpu $cpu)"
# shellcheck disable=SC2086
AIRLOCK_TEST_ACCEL=kvm AIRLOCK_TEST_CPU="$cpu" "$PYTEST" -v $PYTEST_ARGS tests/integration tests/security

fc=$(command -v firecracker 2>/dev/null || true)
if [ -n "$fc" ]; then
	echo "test-kvm: $("$fc" --version 2>&1 | head -n1) at $fc"
	# The daemon's own choice must agree before a quarter of an hour of tests.
	"$BUILD/airlockd" --backend firecracker --print-backend
	# shellcheck disable=SC2086
	AIRLOCK_TEST_BACKEND=firecracker "$PYTEST" -v $PYTEST_ARGS tests/integration tests/security
else
	echo "test-kvm: Firecracker: SKIP: no firecracker binary on PATH (docs/kvm-host.md, \"Getting the binary\")"
fi
"$MAKE" --no-print-directory bench
