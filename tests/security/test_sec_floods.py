# SPDX-License-Identifier: Apache-2.0
"""Category 7: resource floods from inside a guest. Each flood runs while a
SECOND sandbox (the peer) keeps answering `exec echo ok` within
RESPONSIVE_S and the daemon keeps answering /healthz; what the flood may
consume on the host is bounded and checked (the VMM's memory, the overlay's
size, the console log, the daemon's memory, the gateway's connections).

Two disposable sandboxes: `bomber` (minimal: disk fill, memory hog, fork
bomb, in that order) and `flooder` (base: console, output, connections,
DNS, and at the very end garbage on its own agent channel: an attempt of
category 1, made here because it ends the sandbox)."""
import json
import os
import time

import pytest

import secutil as su
from secutil import attempt, fn

RESPONSIVE_S = 10.0   # the bound on the peer's `echo ok` and /healthz during a flood
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def bomber(secd):
    sb = secd.api.create_ok(template="minimal", vcpus=1, memory_mib=256)
    yield sb["id"]
    secd.api.delete(sb["id"])


@pytest.fixture(scope="module")
def flooder(secd):
    sb = secd.api.create_ok(template="base", vcpus=1, memory_mib=256,
                            network={"allow": [fn.WWW_ALLOWED, "203.0.113.0/24:9000"]})
    yield sb["id"]
    secd.api.delete(sb["id"])


def Responsiveness(api, peer_id):
    return su.Responsiveness(api, peer_id, RESPONSIVE_S)


def start_bg(api, sid, script, timeout_s=60):
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes",
                    body={"cmd": ["sh", "-c", script], "timeout_s": timeout_s})
    assert r.status == 201, r
    return r.json["id"]


def proc(api, sid, pid):
    r = api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}")
    assert r.status == 200, r
    return r.json


def wait_proc(api, sid, pid, timeout_s):
    r = api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}/wait?timeout_s={int(timeout_s)}",
                    timeout=timeout_s + 30)
    assert r.status in (200, 408), r
    return r.json


def host_pids():
    return sum(1 for e in os.listdir("/proc") if e.isdigit())


# ------------------------------------------------------------------ the bomber: disk, memory, processes

def test_disk_fill(api, secd, peer, bomber):
    overlay = os.path.join(secd.vm_dir(bomber), "disk.qcow2")
    vfs0 = os.statvfs(secd.state_dir)
    with attempt("floods", "disk-fill", "fill the guest's disk (dd until ENOSPC), twice"):
        with Responsiveness(api, peer["id"]) as resp:
            for i in range(2):
                code, out, err = su.sh(api, bomber, f"dd if=/dev/zero of=/fill{i} bs=1M 2>&1; sync; df -k / | tail -1",
                                       timeout=180)
                assert "No space left" in out, out
        resp.check(min_rounds=1)
        virt = int(su.sh_ok(api, bomber, "cat /sys/block/vda/size")) * 512
        assert os.path.getsize(overlay) <= virt + 32 * MIB, (os.path.getsize(overlay), virt)
        vfs1 = os.statvfs(secd.state_dir)
        used = (vfs0.f_bavail - vfs1.f_bavail) * vfs0.f_frsize
        assert used <= virt + 64 * MIB, f"the host lost {used} bytes for a {virt}-byte guest disk"
        su.sh(api, bomber, "rm -f /fill0 /fill1; sync")


def test_memory_hog(api, secd, peer, bomber):
    pid = su.vmm_pid(bomber)
    mem_mib = api.get(bomber).json["memory_mib"]
    with attempt("floods", "memory-hog", "allocate far more than the guest's memory (until the guest's OOM killer)"):
        with Responsiveness(api, peer["id"]) as resp:
            # dd's buffer is one block, touched as it reads: 3 x 200 MiB in a 256 MiB guest.
            code, out, err = su.sh(api, bomber, "for i in 1 2 3; do dd if=/dev/zero of=/dev/null bs=200M count=4 "
                                                "2>/dev/null & done; wait; dmesg | grep -ci 'out of memory'",
                                   timeout=120)
            time.sleep(1)
        resp.check(min_rounds=1)
        assert int(out.strip().splitlines()[-1]) >= 1, out  # the guest's OOM killer ended it
        rss_mib = su.rss_kib(pid) / 1024
        # The VMM's memory is the guest's RAM plus QEMU's own (TCG's code cache included).
        assert rss_mib < mem_mib + 512, f"the VMM of a {mem_mib} MiB guest holds {rss_mib:.0f} MiB"
        assert su.sh_ok(api, bomber, "echo alive") == "alive\n"


def test_fork_bomb(api, secd, peer, bomber):
    pids0 = host_pids()
    with attempt("floods", "fork-bomb", "a shell fork bomb in the guest for 12 s"):
        with Responsiveness(api, peer["id"]) as resp:
            start_bg(api, bomber, "bomb() { bomb | bomb & }; bomb", timeout_s=12)
            time.sleep(12)
            assert host_pids() < pids0 + 64, (pids0, host_pids())  # guest processes are not host processes
        resp.check()
        su.wait_for(lambda: api.request("GET", "/healthz").status == 200, 30, "the daemon")
        assert api.get(bomber).json["state"] in ("running", "error"), api.get(bomber).json


# ------------------------------------------------------------------ the flooder: console, output, network

def test_console_flood(api, secd, peer, flooder):
    d = secd.sandbox_dir(flooder)
    with attempt("floods", "console-flood", "2.15 MB written to the serial console (the log is capped at 1 MiB + one rotation)"):
        with Responsiveness(api, peer["id"]) as resp:
            p = start_bg(api, flooder, "head -c 2150000 /dev/zero | tr '\\0' C > /dev/ttyS0", timeout_s=120)
            r = wait_proc(api, flooder, p, 110)
        resp.check()
        assert r["state"] == "exited", r
        cur = os.path.getsize(os.path.join(d, "console.log"))
        old = os.path.getsize(os.path.join(d, "console.log.1"))
        assert cur <= MIB and old <= MIB, (cur, old)
        total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("console.log"))
        assert total <= 2 * MIB, total
        assert [f for f in os.listdir(d) if f.startswith("console.log")] in (["console.log", "console.log.1"],
                                                                             ["console.log.1", "console.log"])


def test_output_floods(api, secd, peer, flooder):
    dpid = secd.proc.pid
    with attempt("floods", "output-flood-exec", "an exec that writes 16 MB to stdout and to stderr (max_output_bytes 1 MiB)"):
        rss0 = su.rss_kib(dpid)
        with Responsiveness(api, peer["id"]) as resp:
            r = api.exec(flooder, ["sh", "-c", "head -c 16000000 /dev/zero; head -c 16000000 /dev/zero >&2"],
                         max_output_bytes=MIB, timeout_s=120)
        resp.check(min_rounds=1)
        assert r.status == 200, r
        j = r.json
        assert j["stdout_truncated"] and j["stderr_truncated"], {k: v for k, v in j.items() if "std" not in k}
        assert len(su.stdout_bytes(j)) <= MIB and len(j["stderr"]) <= 2 * MIB
        assert su.rss_kib(dpid) - rss0 < 128 * 1024, (rss0, su.rss_kib(dpid))

    with attempt("floods", "output-flood-background", "a background process writing as fast as it can, nobody reading"):
        rss0 = su.rss_kib(dpid)
        with Responsiveness(api, peer["id"]) as resp:
            p = start_bg(api, flooder, "yes AIRLOCKFLOOD", timeout_s=7)
            r = wait_proc(api, flooder, p, 60)
        resp.check()
        assert r["state"] == "exited" and r["output_bytes"] > 2 * MIB, r
        assert r["output_dropped"] > 0, r  # the kept log is bounded: the rest was dropped, and counted
        assert su.rss_kib(dpid) - rss0 < 128 * 1024, (rss0, su.rss_kib(dpid))


CONN_FLOOD = r'''
import json, resource, select, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
n, hold = int(sys.argv[1]), float(sys.argv[2])
t0 = time.monotonic()
socks, failed = [], 0
for i in range(n):
    try:
        socks.append(socket.create_connection(("203.0.113.7", 9000), timeout=5))
    except OSError:
        failed += 1
opened = time.monotonic() - t0
# One byte on every connection, then up to 3 s for the echoes (never a
# blocking wait per socket: the ones over the limit are reset or closed).
for s in socks:
    s.setblocking(False)
    try:
        s.send(b"x")
    except OSError:
        pass
echoing, pending = 0, {s.fileno(): s for s in socks}
poll = select.poll()
for fd in pending:
    poll.register(fd, select.POLLIN)
deadline = time.monotonic() + 3
while pending and time.monotonic() < deadline:
    for fd, ev in poll.poll(200):
        s = pending.pop(fd, None)
        if s is None:
            continue
        poll.unregister(fd)
        try:
            if s.recv(1) == b"x":
                echoing += 1
        except OSError:
            pass
res = {"connected": len(socks), "failed": failed, "echoing": echoing, "open_s": round(opened, 1)}
open("/tmp/conn-flood.json", "w").write(json.dumps(res))
time.sleep(hold)
print(json.dumps(res))
'''


def test_connection_flood(api, secd, peer, flooder, attacker, fakenet):
    su.put_file(api, flooder, "/tmp/flood.py", CONN_FLOOD)
    with attempt("floods", "connection-flood", "800 TCP connections through the gateway, held open (the limit is 256)"):
        m = su.EventMark(api)
        fakenet.clear_tcp_log()
        su.set_policy(api, attacker["id"], allow=[fn.WWW_ALLOWED])
        with Responsiveness(api, peer["id"]) as resp:
            p = start_bg(api, flooder, "python3 -S /tmp/flood.py 800 4", timeout_s=200)
            deadline = time.monotonic() + 120
            while not su.sh(api, flooder, "cat /tmp/conn-flood.json 2>/dev/null")[1].strip():
                assert time.monotonic() < deadline, proc(api, flooder, p)
                time.sleep(1)
            # Meanwhile another sandbox still gets out.
            t0 = time.monotonic()
            rs = su.curls(api, attacker["id"], [f"https://{fn.WWW_ALLOWED}/", f"http://{fn.WWW_ALLOWED}/"])
            assert [st for _, st in rs] == [200, 200] and time.monotonic() - t0 < RESPONSIVE_S, rs
            stats = su.sh(api, flooder, "cat /tmp/conn-flood.json")[1]
            wait_proc(api, flooder, p, 120)
        resp.check()
        got = json.loads(stats)
        assert got["echoing"] <= 256, got  # the gateway's per-sandbox limit
        assert len(fakenet.tcp_connections(fn.ECHO_IP, 9000)) <= 256 + 8, len(fakenet.tcp_connections(fn.ECHO_IP, 9000))
        denied = [e for e in m.since(api, flooder, "network.deny") if "limit" in (e["data"].get("reason") or "")]
        assert denied, "no network.deny event for the connection limit"
        # Once the flood is gone the flooder gets out again (nothing leaked).
        su.wait_for(lambda: su.probe(api, attacker["id"], "tcp", fn.ALLOWED_IP, 80,
                                     su.b64(f"GET / HTTP/1.1\r\nHost: {fn.WWW_ALLOWED}\r\nConnection: close\r\n\r\n"),
                                     "2").get("status") == 200, 30, "the attacker to get out")


def test_dns_flood(api, secd, peer, flooder, attacker):
    script = r'''
import json, os, socket, struct, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setblocking(False)
def q(name, i):
    return struct.pack("!HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + b"".join(
        bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
sent = 0
t0 = time.monotonic()
while time.monotonic() - t0 < 8:
    for i in range(200):
        name = "www.allowed.test" if i % 2 else "r%d.flood.evil.test" % sent
        try:
            u.sendto(q(name, sent), ("10.0.2.2", 53))
            sent += 1
        except BlockingIOError:
            pass
    time.sleep(0.01)
print(json.dumps({"sent": sent}))
'''
    su.put_file(api, flooder, "/tmp/dnsflood.py", script)
    with attempt("floods", "dns-flood", "8 s of DNS queries as fast as the guest can send (half need the resolver)"):
        with Responsiveness(api, peer["id"]) as resp:
            p = start_bg(api, flooder, "python3 -S /tmp/dnsflood.py", timeout_s=60)
            time.sleep(2)
            t0 = time.monotonic()
            out, = su.digs(api, attacker["id"], [f"+tries=3 {fn.WWW_ALLOWED} A"])
            assert fn.ALLOWED_IP in out and time.monotonic() - t0 < RESPONSIVE_S, out
            r = wait_proc(api, flooder, p, 60)
        resp.check()
        assert r["state"] == "exited" and r["exit_code"] == 0, r


def test_garbage_on_the_agent_channel(api, secd, peer, flooder, attacker):
    script = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open(1)
fd = libc.syscall(438, pidfd, int(os.environ.get("FD", "4")), 0)  # pidfd_getfd: the agent's channel
if fd < 0:
    raise SystemExit("pidfd_getfd: errno %d" % ctypes.get_errno())
os.write(fd, b"\xff" * 12 + os.urandom(4096))
print("written")
'''
    su.put_file(api, flooder, "/tmp/garbage.py", script)
    fd = su.sh_ok(api, flooder, "ls -l /proc/1/fd | grep vport | sed 's/.* \\([0-9]*\\) -> .*/\\1/'").strip()
    assert fd.isdigit(), fd
    vmm = su.vmm_pid(flooder)
    with attempt("files", "agent-channel-garbage", "guest root steals the agent's virtio-serial fd (pidfd_getfd) and writes garbage frames"):
        with Responsiveness(api, peer["id"]) as resp:
            api.exec(flooder, ["python3", "/tmp/garbage.py"], env={"FD": fd}, timeout_s=30)
            su.wait_for(lambda: api.get(flooder).json["state"] == "error", 30, "the flooder to be in state error")
        resp.check(min_rounds=1)
        sb = api.get(flooder).json
        assert sb["error"], sb
        su.wait_for(lambda: not su.pid_alive(vmm), 30, "the flooder's VMM to be killed")
        assert api.get(attacker["id"]).json["state"] == "running"
        assert su.sh_ok(api, attacker["id"], "echo ok") == "ok\n"
