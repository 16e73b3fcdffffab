# SPDX-License-Identifier: Apache-2.0
"""airlockd's backend choice as the binary makes it (--print-backend): on
this kind of host (no /dev/kvm, no firecracker) auto picks qemu and says why;
the rule itself is unit-tested in tests/unit/test-vmm-select.c."""
import os
import subprocess

import pytest

from conftest import BUILD, FAKE

AIRLOCKD = os.path.join(BUILD, "airlockd")
NO_KVM = not os.access("/dev/kvm", os.R_OK | os.W_OK)


def print_backend(*args, path=None):
    env = dict(os.environ)
    if path:
        env["PATH"] = f"{path}:{env.get('PATH', '/usr/bin:/bin')}"
    p = subprocess.run([AIRLOCKD, *args, "--print-backend"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    out = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    return p.returncode, out, p.stderr


@pytest.fixture(autouse=True)
def _built():
    if not os.path.exists(AIRLOCKD):
        pytest.fail("build/airlockd is missing: run 'make all'", pytrace=False)


@pytest.mark.skipif(not NO_KVM, reason="this host has KVM: the combinations are unit-tested")
def test_auto_picks_qemu_here_and_says_why():
    rc, out, _ = print_backend()
    assert rc == 0
    assert out["backend"] == "qemu" and out["accel"] == "tcg"
    assert out["reason"].startswith("auto: qemu with TCG (software emulation, slower), because ")
    assert "/dev/kvm does not exist" in out["reason"]


@pytest.mark.skipif(not NO_KVM, reason="this host has KVM")
def test_firecracker_without_kvm(tmp_path):
    (tmp_path / "firecracker").symlink_to(FAKE)
    rc, out, _ = print_backend(path=str(tmp_path))
    assert rc == 0 and out["backend"] == "qemu"
    assert f"{tmp_path}/firecracker is on PATH but Firecracker needs KVM" in out["reason"]
    rc, _, err = print_backend("--backend", "firecracker", path=str(tmp_path))
    assert rc == 1 and "--backend firecracker: Firecracker needs KVM, and /dev/kvm does not exist" in err


def test_explicit_choices():
    rc, out, _ = print_backend("--backend", "qemu")
    assert rc == 0 and out["backend"] == "qemu" and out["reason"].startswith("--backend qemu: qemu with ")
    rc, out, err = print_backend("--backend", "firecracker")
    if rc == 0:  # a KVM host with firecracker installed
        assert out["backend"] == "firecracker" and out["accel"] == "kvm"
    else:
        assert rc == 1 and "--backend firecracker: " in err and "docs/kvm-host.md" in err
    rc, _, err = print_backend("--backend", "kvm")
    assert rc == 2 and "--backend is auto, qemu or firecracker, not \"kvm\"" in err


def test_help_names_the_backends_of_the_table():
    """--help's words for --backend come from the backend table (vmm-select.c),
    the same list an unknown --backend is refused with: a backend added to the
    table shows in both without an edit of main."""
    p = subprocess.run([AIRLOCKD, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    out = p.stdout + p.stderr
    assert "--backend B          the VMM: auto, qemu or firecracker (docs/kvm-host.md)" in out, out
    rc, _, err = print_backend("--backend", "cloud-hypervisor")
    assert rc == 2 and '--backend is auto, qemu or firecracker, not "cloud-hypervisor"' in err
