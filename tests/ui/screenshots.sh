#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The pictures of docs/console.md: runs the console's browser test
# (tests/integration/test_ui.py, which starts its own airlockd and boots a
# sandbox) with AIRLOCK_UI_SCREENSHOTS set, so that it saves
# docs/img/console-*.png as it goes. Needs `make all images ui` and the npm
# packages of tests/ui (`make deps-npm`).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$root/docs/img"
cd "$root"
AIRLOCK_UI_SCREENSHOTS="$root/docs/img" pytest-3 -q tests/integration/test_ui.py -k chromium
ls -l "$root"/docs/img/console-*.png
