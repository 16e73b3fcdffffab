# SPDX-License-Identifier: Apache-2.0
"""9. A hostile agent (issue 17, item 2): guest root takes the agent's
channel over (hostile_agent.py: pidfd_getfd of the real agent's
virtio-serial fd, the real agent stopped with ptrace) and answers the
daemon's requests against the protocol: output beyond its window, endless
and malformed list answers, fat entries, huge and wide results, answers of
the wrong kind, late answers, HELLO floods, frames for streams never
opened, an oversize frame.

Each attempt asserts from outside: airlockd's resident memory stays under
its size at the start of the module plus RSS_CAP_MIB, the attacked request
ends with an error, the sandbox ends in state error where the policy says
(docs/guest.md, "Protocol violations": the third violation, or a frame that
cannot be read), and the `peer` sandbox of another tenant keeps answering
`echo ok` within RESPONSIVE_S throughout.
"""
import json
import os
import socket
import time

import pytest

import secutil as su
from secutil import attempt

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1024 * 1024
# What the daemon may grow by while this module runs. Before the bounds, one
# endless list answer alone took hundreds of MiB (12.5 MiB of guest frames
# became ~930 MiB of heap); now a list keeps at most 10000 entries / 8 MiB.
RSS_CAP_MIB = 64
# The peer's `echo ok` takes about 0.5 s under TCG; 20 s is a generous bound
# (a machine shared with other builds), not a timing measurement.
RESPONSIVE_S = 20.0
STRIKES = 3  # GUEST_STRIKES_MAX


@pytest.fixture(scope="module")
def baseline(secd):
    return su.rss_kib(secd.proc.pid)


def rss_ok(secd, baseline):
    now = su.rss_kib(secd.proc.pid)
    assert now < baseline + RSS_CAP_MIB * 1024, \
        f"airlockd grew from {baseline // 1024} MiB to {now // 1024} MiB (cap: +{RSS_CAP_MIB} MiB)"


def Peer(api, peer_id):
    """The peer answers `echo ok` within RESPONSIVE_S while an attack runs
    (checked when the block ends without an exception)."""
    return su.Responsiveness(api, peer_id, RESPONSIVE_S, interval_s=0.3, healthz=False, check_on_exit=True)


def hostile_sandbox(api, startup=None):
    """A `base` sandbox whose agent hostile_agent.py has taken over."""
    sb = api.create_ok(template="base", vcpus=1, memory_mib=256)
    sid = sb["id"]
    with open(os.path.join(HERE, "hostile_agent.py")) as f:
        su.put_file(api, sid, "/tmp/hostile.py", f.read())
    cmd = ["python3", "-S", "/tmp/hostile.py"] + ([startup] if startup else [])
    r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": cmd})
    assert r.status == 201, r
    return sid


def wait_hostile(api, sid):
    """Until the hostile agent answers (the real one says 404 to this path)."""
    def ready():
        r = api.request("GET", f"/v1/sandboxes/{sid}/files/stat?path=/h/ready")
        return r.status == 200 and r.json.get("name") == "HOSTILE"
    su.wait_for(ready, 90, "the hostile agent to take over the channel")


def stat(api, sid, name, timeout=90):
    return api.request("GET", f"/v1/sandboxes/{sid}/files/stat?path=/h/{name}", timeout=timeout)


def listing(api, sid, name, timeout=120):
    return api.request("GET", f"/v1/sandboxes/{sid}/files/list?path=/h/{name}", timeout=timeout)


def state(api, sid):
    return api.get(sid).json


def in_error(api, sid, needle):
    su.wait_for(lambda: state(api, sid)["state"] == "error", 60, f"{sid} to be in state error")
    sb = state(api, sid)
    assert needle in (sb.get("error") or ""), sb
    return sb


def peer_fine(api, peer):
    assert su.sh_ok(api, peer["id"], "echo ok") == "ok\n"


def stalled_download(api, sid, name):
    """GET .../files of a hostile answer with a client that reads nothing
    for 8 s (its receive buffer small), then everything until the end."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(api.socket_path)
    s.sendall(f"GET /v1/sandboxes/{sid}/files?path=/h/{name} HTTP/1.1\r\nHost: airlock\r\n\r\n".encode())
    time.sleep(8)
    s.settimeout(15)
    data = b""
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    s.close()
    return data


def console_tail(secd, sid):
    path = os.path.join(secd.state_dir, "sandboxes", sid, "console.log")
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-40:])
    except OSError as e:
        return str(e)


def test_hostile_answers(api, secd, peer, baseline):
    """One hostile agent: what costs no strike first, then three violations
    (the third closes its channel)."""
    sid = hostile_sandbox(api)
    try:
        wait_hostile(api, sid)
        with Peer(api, peer["id"]):
            with attempt("agent", "list-endless", "answer a list with endless FILE_DATA (within the window)"):
                r = listing(api, sid, "endless")
                assert r.status == 413, r
                assert "10000 entries" in r.json["error"]["message"], r.json
                rss_ok(secd, baseline)
            with attempt("agent", "list-fat-entries", "list entries of 2500 junk members each, endlessly"):
                r = listing(api, sid, "fat-entries")
                assert r.status == 413, r
                assert "MiB" in r.json["error"]["message"], r.json
                rss_ok(secd, baseline)
            with attempt("agent", "list-malformed", "answer a list with a FILE_DATA that is not JSON"):
                r = listing(api, sid, "malformed")
                assert r.status == 502 and "malformed" in r.json["error"]["message"], r
                rss_ok(secd, baseline)
            with attempt("agent", "wide-error", "an ERROR with an 8000-byte message and 300 nested members"):
                r = stat(api, sid, "wide-error")
                assert 400 <= r.status < 600, r
                assert len(json.dumps(r.json)) < 2048, len(json.dumps(r.json))
            with attempt("agent", "deep-error", "an ERROR of 8000 nested arrays (16 KB)"):
                r = stat(api, sid, "deep-error")
                assert r.status == 502 and "malformed reply" in r.json["error"]["message"], r
                assert state(api, sid)["state"] == "running"
                rss_ok(secd, baseline)
            with attempt("agent", "huge-hello", "an unasked HELLO with 20 KB fields and terminal escapes"):
                r = stat(api, sid, "huge-hello")
                assert r.status == 200 and r.json["name"] == "hello-sent", r
                assert state(api, sid)["state"] == "running"
                rss_ok(secd, baseline)
            with attempt("agent", "process-endless-output", "a process's endless STDOUT (within the window), nobody reading"):
                r = api.request("POST", f"/v1/sandboxes/{sid}/processes", body={"cmd": ["endless"]})
                assert r.status == 201, r
                pid = r.json["id"]
                time.sleep(10)  # under TCG: tens of MiB
                p = api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}").json
                assert p["state"] == "running", p
                rss_ok(secd, baseline)
                r = api.request("GET", f"/v1/sandboxes/{sid}/processes/{pid}/output", timeout=30)
                # What is kept for a late reader: at most the log (1 MiB) and a window.
                assert r.status == 200 and len(r.raw) < 8 * MIB, (r.status, len(r.raw))
            with attempt("agent", "wide-metrics", "a METRICS answer of 900 members (13 KB)"):
                r = api.request("GET", f"/v1/sandboxes/{sid}/metrics")
                assert r.status == 200, r
                assert len(r.json) <= 32, len(r.json)
            with attempt("agent", "late-answers", "200 rounds of OK, EXIT and FILE_DATA after a stream's end"):
                r = stat(api, sid, "late-answers")
                assert r.status == 200 and r.json["name"] == "late", r
                time.sleep(2)
                r = stat(api, sid, "ready")  # the channel still works, no strike taken
                assert r.status == 200 and r.json["name"] == "HOSTILE", r
                assert state(api, sid)["state"] == "running"
                rss_ok(secd, baseline)
            with attempt("agent", "download-window-overrun",
                         "8 MiB of a download's FILE_DATA without waiting for credit, to a client that does not read"):
                data = stalled_download(api, sid, "overrun")
                assert data.startswith(b"HTTP/1.1 200"), data[:200]
                # Cut short: no end of the chunked body, far less than was sent.
                assert not data.endswith(b"0\r\n\r\n") and len(data) < 4 * MIB, len(data)
                assert state(api, sid)["state"] == "running"
                rss_ok(secd, baseline)
            with attempt("agent", "huge-error", "an ERROR of 60 KB (the limit of a result is 16 KiB)"):
                r = stat(api, sid, "huge-error")
                assert r.status == 502, r
                assert "violation 2," in r.json["error"]["message"], r.json  # the overrun was the first
                assert "16384" in r.json["error"]["message"] and len(r.raw) < 4096, r
                assert state(api, sid)["state"] == "running"
            with attempt("agent", "repeat-offender", "a third violation (EXIT on a FILE_OP stream) closes the channel"):
                r = stat(api, sid, "exit-on-stat")
                assert r.status == 502, r
                sb = in_error(api, sid, "broke the protocol 3 times")
                assert "EXIT on a stream opened with FILE_OP" in sb["error"], sb
                r = stat(api, sid, "ready")
                assert r.status >= 400, r
                rss_ok(secd, baseline)
        peer_fine(api, peer)
    except BaseException:
        print("---- the hostile sandbox's console ----\n" + console_tail(secd, sid))
        raise
    finally:
        api.delete(sid)


def test_answers_of_the_wrong_kind(api, secd, peer, baseline):
    sid = hostile_sandbox(api)
    try:
        wait_hostile(api, sid)
        with Peer(api, peer["id"]):
            with attempt("agent", "stdout-on-stat", "STDOUT on a stat's stream (output nobody asked for)"):
                r = stat(api, sid, "stdout-on-stat")
                assert r.status == 502 and "STDOUT on a stream opened with FILE_OP" in r.json["error"]["message"], r
            with attempt("agent", "huge-metrics", "a METRICS answer of 60 KB"):
                r = api.request("GET", f"/v1/sandboxes/{sid}/metrics")
                r = api.request("GET", f"/v1/sandboxes/{sid}/metrics")  # the first was the wide one
                assert r.status == 502 and "OK of" in r.json["error"]["message"], r
                assert state(api, sid)["state"] == "running"
            with attempt("agent", "host-frame-from-guest", "an EXEC frame (host to guest only) sent to the host"):
                r = stat(api, sid, "exec-frame-on-stat")
                assert r.status == 502, r
                in_error(api, sid, "EXEC on a stream opened with FILE_OP")
                rss_ok(secd, baseline)
        peer_fine(api, peer)
    finally:
        api.delete(sid)


@pytest.mark.parametrize("startup,name,what,reason", [
    ("hello-flood", "hello-flood", "200 HELLOs nobody asked for", "HELLO or stream-0 frames unasked"),
    ("stray-flood", "stray-flood", "EXIT/OK/ERROR and 64 KiB FILE_DATA for 20000 streams never opened",
     "which is not open"),
    ("oversize-frame", "oversize-frame", "a frame header announcing a 64 MiB payload", "unreadable frame"),
])
def test_floods_close_the_channel(api, secd, peer, baseline, startup, name, what, reason):
    sid = hostile_sandbox(api, startup)
    try:
        with Peer(api, peer["id"]):
            with attempt("agent", name, what):
                in_error(api, sid, reason)
                rss_ok(secd, baseline)
        peer_fine(api, peer)
    finally:
        api.delete(sid)
