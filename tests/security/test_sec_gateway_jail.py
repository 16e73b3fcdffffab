# SPDX-License-Identifier: Apache-2.0
"""Issue 17, part 4: the egress gateway's jail. airlock-egress holds every
tenant's secret values and the Airlock CA key while it parses guest bytes:
it runs as a uid of its own (not nobody, not a VMM's), without
capabilities, with no_new_privs, not dumpable, under its own seccomp
allow-list (src/egress/egress-seccomp.c; anything else kills it). Read from
/proc of the session daemon's running gateway, and from processes of other
uids (a VMM's, nobody) that try to reach it."""
import json
import os
import re
import signal
import subprocess
import time

import fakenet as fn
import secutil as su
from secutil import attempt

EGRESS = os.path.join(os.path.dirname(su.AIRLOCK), "airlock-egress")
EGRESS_UID = 1499999999  # EGRESS_DEFAULT_UID (egress-supervisor.h)


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def gateway_pid(secd):
    out = subprocess.run(["pgrep", "-P", str(secd.proc.pid), "-f", "airlock-egress"], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 1, f"airlock-egress children of airlockd: {pids}"
    return pids[0]


def uids_of_all_processes():
    owners = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                owners[int(d)] = int(status(d)["Uid"].split()[0])
            except (OSError, KeyError):
                pass  # gone meanwhile
    return owners


def test_gateway_runs_as_a_uid_of_its_own(secd, attacker, peer):
    pid = gateway_pid(secd)
    with attempt("gateway", "gateway-uid", "the gateway's uid/gid is its own: not root, not nobody, not a VMM's (airlockd refuses those), no groups, "
                 "and no other process runs as it"):
        s = status(pid)
        uids, gids = set(s["Uid"].split()), set(s["Gid"].split())
        assert uids == {str(EGRESS_UID)} and gids == {str(EGRESS_UID)}, (s["Uid"], s["Gid"])
        assert s["Groups"].strip() == "", s["Groups"]
        for vmm in (su.vmm_pid(attacker["id"]), su.vmm_pid(peer["id"])):
            assert status(vmm)["Uid"].split()[0] != str(EGRESS_UID)
        others = [p for p, u in uids_of_all_processes().items() if u == EGRESS_UID and p != pid
                  and status(p).get("Tgid") != str(pid)]
        assert others == [], others
        # airlockd refuses to give it root, nobody or a uid of the VMMs' range.
        airlockd = os.path.join(os.path.dirname(su.AIRLOCK), "airlockd")
        for uid, why in (("0", "must be from 1"), ("65534", "nobody"), ("1500000007", "jail range")):
            p = subprocess.run([airlockd, "--egress-uid", uid, "--jail-uid-base", "1500000000", "--check"],
                               capture_output=True, text=True, timeout=30)
            assert p.returncode == 2 and why in p.stderr, (uid, p.returncode, p.stderr)
        # It owns no file of the daemon's state.
        for root, dirs, files in os.walk(secd.state_dir):
            for n in dirs + files:
                st = os.lstat(os.path.join(root, n))
                assert st.st_uid != EGRESS_UID and st.st_gid != EGRESS_UID, os.path.join(root, n)


def test_gateway_privileges_and_seccomp(secd):
    pid = gateway_pid(secd)
    with attempt("gateway", "gateway-seccomp", "the gateway has a seccomp filter (mode 2) in every thread, no_new_privs, "
                 "no capabilities, and is not dumpable"):
        s = status(pid)
        assert s.get("Seccomp") == "2" and int(s.get("Seccomp_filters", "0")) >= 1, s.get("Seccomp")
        assert s.get("NoNewPrivs") == "1", s.get("NoNewPrivs")
        for k in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
            assert int(s[k], 16) == 0, (k, s[k])
        tids = os.listdir(f"/proc/{pid}/task")
        assert len(tids) > 1, tids  # its threads came after the filter
        for tid in tids:
            assert status(f"{pid}/task/{tid}").get("Seccomp") == "2", tid
        # Not dumpable: /proc/PID/mem, environ and fds belong to root, not to its uid.
        st = os.stat(f"/proc/{pid}/mem")
        assert st.st_uid == 0, st.st_uid


def test_gateway_unreachable_from_other_uids(secd, attacker):
    pid = gateway_pid(secd)
    vmm_uid = int(status(su.vmm_pid(attacker["id"]))["Uid"].split()[0])
    probe = r'''
import ctypes, errno, json, os, signal, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
res = {}
for name, req in (("attach", 16), ("seize", 0x4206)):
    r = libc.ptrace(req, pid, None, None)
    res[name] = ctypes.get_errno() if r != 0 else 0
try:
    os.kill(pid, 0)
    res["kill"] = 0
except OSError as e:
    res["kill"] = e.errno
for f in ("mem", "environ", "maps", "fd/3"):
    try:
        with open(f"/proc/{pid}/{f}", "rb") as fh:
            fh.read(16)
        res[f] = 0
    except OSError as e:
        res[f] = e.errno
print(json.dumps(res))
'''
    with attempt("gateway", "gateway-ptrace-signal", "as a VMM's uid and as nobody: ptrace, signal, read /proc/PID/mem, "
                 "environ, maps and its control fd"):
        for uid in (vmm_uid, 65534):
            p = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3",
                                "-c", probe, str(pid)], capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, p.stderr
            res = json.loads(p.stdout.strip().splitlines()[-1])
            for k in ("attach", "seize", "kill", "mem", "environ", "maps", "fd/3"):
                assert res[k] in (1, 13), (uid, k, res)  # EPERM / EACCES
        assert status(pid).get("TracerPid") == "0"


def wait_gateway(secd, old, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["pgrep", "-P", str(secd.proc.pid), "-f", "airlock-egress"], capture_output=True,
                             text=True)
        pids = [int(p) for p in out.stdout.split()]
        m = secd.api.request("GET", "/metrics").raw.decode()
        if pids and pids[0] != old and re.search(r"^airlock_egress_up 1$", m, re.M):
            return pids[0]
        time.sleep(0.2)
    raise AssertionError("the gateway was not restarted")


def test_forbidden_syscall_kills_the_gateway(secd, api, attacker):
    with attempt("gateway", "gateway-forbidden-syscall", "the gateway's filter kills it on a syscall outside the list "
                 "(--check-seccomp calls ptrace under it, as its uid)"):
        p = subprocess.run(["setpriv", f"--reuid={EGRESS_UID}", f"--regid={EGRESS_UID}", "--clear-groups",
                            "--no-new-privs", EGRESS, "--check-seccomp"], capture_output=True, text=True, timeout=30)
        assert p.returncode == -signal.SIGSYS, (p.returncode, p.stderr)
        assert "calling ptrace" in p.stderr and "not enforced" not in p.stderr, p.stderr
    with attempt("gateway", "gateway-death-reported", "a gateway killed by SIGSYS: airlockd says it was its seccomp filter, "
                 "restarts it, and the sandbox's network comes back"):
        old = gateway_pid(secd)
        log_before = len(secd.log(100000).splitlines())
        os.kill(old, signal.SIGSYS)
        new = wait_gateway(secd, old)
        assert status(new).get("Seccomp") == "2"
        lines = secd.log(100000).splitlines()[log_before:]
        assert any(f"pid {old} was killed by its seccomp filter" in ln for ln in lines), lines[-20:]
        # The attacker's policy allows it (conftest.py, ATTACKER_ALLOW).
        rc, code, _ = su.curl(api, attacker["id"], f"http://{fn.WWW_ALLOWED}/")
        assert code == 200, (rc, code)
