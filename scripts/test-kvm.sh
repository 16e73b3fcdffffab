#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make test-kvm: the integration and security suites with airlockd on the
# Firecracker backend (AIRLOCK_TEST_BACKEND=firecracker becomes --backend
# firecracker in tests/integration/conftest.py), on a KVM host with the
# firecracker binary on PATH. Anywhere else it says what is missing and
# exits 0. Preparing a host: docs/kvm-host.md.
set -eu
MAKE=${MAKE:-make}
PYTEST=${PYTEST:-pytest-3}
PYTEST_ARGS=${PYTEST_ARGS:-}
BUILD=${BUILD:-build}

missing=""
if [ ! -e /dev/kvm ]; then
	missing="no /dev/kvm on this host"
elif [ ! -r /dev/kvm ] || [ ! -w /dev/kvm ]; then
	missing="/dev/kvm is not readable and writable by $(id -un)"
fi
fc=$(command -v firecracker 2>/dev/null || true)
if [ -z "$fc" ]; then
	missing="${missing:+$missing; }no firecracker binary on PATH"
fi
if [ -n "$missing" ]; then
	echo "test-kvm: SKIP: $missing (docs/kvm-host.md says how to prepare a KVM host)"
	exit 0
fi

echo "test-kvm: $("$fc" --version 2>&1 | head -n1) at $fc, host kernel $(uname -r)"
"$MAKE" --no-print-directory all images-all
# The daemon's own choice must agree before a quarter of an hour of tests.
"$BUILD/airlockd" --backend firecracker --print-backend
AIRLOCK_TEST_BACKEND=firecracker "$PYTEST" -v $PYTEST_ARGS tests/integration tests/security
