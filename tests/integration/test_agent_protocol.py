# SPDX-License-Identifier: Apache-2.0
"""The guest agent's frame protocol, driven directly by agent_harness.py
(no daemon): exec, stdin/output flow control, PTY, file transfers, FILE_OP,
METRICS, errors, FREEZE/THAW. `local` runs the agent on this host over a
socketpair; `vm` boots it as PID 1 of a QEMU microVM from build/images (~30 s
under TCG); `snapshot` takes a real snapshot of a VM (QMP stop + migrate to a
file) and restores it twice (~10 s)."""
import os

import pytest

import agent_harness


def _require(*paths):
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        pytest.fail("missing build outputs: " + ", ".join(missing) + "; run 'make all images' "
                    "(or 'make integration', which does)", pytrace=False)


def test_agent_local():
    _require(agent_harness.AGENT)
    agent_harness.run_local()


def test_agent_vm():
    _require(os.path.join(agent_harness.IMAGES, "kernels", "vmlinuz"),
             os.path.join(agent_harness.IMAGES, "kernels", "initramfs.cpio"),
             os.path.join(agent_harness.IMAGES, "templates", "minimal", "rootfs.ext4"))
    agent_harness.run_vm()


def test_agent_snapshot():
    _require(os.path.join(agent_harness.IMAGES, "kernels", "vmlinuz"),
             os.path.join(agent_harness.IMAGES, "kernels", "initramfs.cpio"),
             os.path.join(agent_harness.IMAGES, "templates", "minimal", "rootfs.ext4"))
    agent_harness.run_snapshot()
