#!/bin/bash
# make demo: start airlockd on a private socket and state dir, run real
# commands in real microVMs through it, and clean up.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TEMPLATE=${DEMO_TEMPLATE:-base}
work=$(mktemp -d /tmp/airlock-demo.XXXXXX)
sock="$work/airlockd.sock"
daemon_pid=
cleanup() {
	if [ -n "$daemon_pid" ]; then
		# Delete what the demo created, then stop the daemon.
		for id in $("$BUILD/airlock" --socket "$sock" ls --json 2>/dev/null |
			/usr/bin/python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]' 2>/dev/null); do
			"$BUILD/airlock" --socket "$sock" rm "$id" >/dev/null || true
		done
		kill "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

"$BUILD/airlockd" --socket "$sock" --state-dir "$work/state" --image-dir "$BUILD/images" \
	2>"$work/airlockd.log" &
daemon_pid=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	sleep 0.1
done
if [ ! -S "$sock" ]; then
	cat "$work/airlockd.log" >&2
	echo "demo: airlockd did not start" >&2
	exit 1
fi
head -n 1 "$work/airlockd.log"

export AIRLOCK_SOCKET="$sock"
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step "$BUILD/airlock" run --template "$TEMPLATE" -- sh -c \
	'echo "hello from $(hostname), kernel $(uname -r)"; python3 -c "import sys; print(\"python\", sys.version.split()[0])"'
# The accelerator airlockd decided (its probe ran before the first boot).
echo
grep -E 'airlockd info: accelerator: (kvm|tcg)' "$work/airlockd.log" | tail -n 1 | sed 's/.*info: /airlockd: /'
id=$("$BUILD/airlock" create --template minimal)
printf '\n\033[1m$ airlock create --template minimal\033[0m\n%s\n' "$id"
step "$BUILD/airlock" exec "$id" -- sh -c 'echo "pid 1 is $(cat /proc/1/comm)"; exit 3' || echo "(exit code $?)"
step "$BUILD/airlock" ls
step "$BUILD/airlock" rm "$id"
echo
echo "demo: OK"
