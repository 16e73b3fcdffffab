# SPDX-License-Identifier: Apache-2.0
"""Every sandbox's guest has a MAC address of its own (issue 21, warm pool:
nothing a guest derives from its MAC, a uuid1 node or a DHCP client id, is
shared by two sandboxes).

Each VM's address is drawn with its network namespace (whose rules accept
only it); a restore (of the template's snapshot, of a user's snapshot, a
fork copy) gets it by THAW, a cold boot on QEMU's command line. What is
checked is what a user would: /sys/class/net/eth0/address in each guest,
the address GET .../network reports, and that egress through the gateway
still works with it.

airlockd runs in the fake internet's host namespace (fakenet.py), as in
test_network.py, with `minimal` guests (busybox wget) and 1 vCPU.
"""
import re

import pytest

import fakenet as fn
import lifecycleutil as lu
from conftest import stdout_bytes
from fakenet import fakenet  # noqa: F401  (the session fixture)
from test_network import netd  # noqa: F401  (the module's daemon in the fake internet)

OLD_CONSTANT = "02:a1:0c:00:02:0f"  # what every guest had before
MAC_RE = re.compile(r"^02(:[0-9a-f]{2}){5}$")


@pytest.fixture
def api(netd):  # noqa: F811
    yield netd.api


def create(api, **fields):
    sb = api.create_ok(template="minimal", vcpus=1, memory_mib=256, network={"allow": [fn.WWW_ALLOWED]}, **fields)
    return sb


def guest_mac(api, sid):
    r = api.exec_ok(sid, ["cat", "/sys/class/net/eth0/address"])
    assert r["exit_code"] == 0, r
    return stdout_bytes(r).decode().strip()


def reported_mac(api, sid):
    r = api.request("GET", f"/v1/sandboxes/{sid}/network")
    assert r.status == 200, r
    return r.json["guest"]["mac"]


def check_own_mac(api, sid, others):
    """The guest's address: a new locally administered one, the one the API
    reports, and none of the others'."""
    mac = guest_mac(api, sid)
    assert MAC_RE.match(mac), mac
    assert mac != OLD_CONSTANT
    assert mac == reported_mac(api, sid)
    assert mac not in others, (mac, others)
    return mac


def check_egress(api, sid, fakenet):  # noqa: F811
    """An allowed plain HTTP request through the gateway (busybox nc to the
    allowed host's address: static busybox cannot resolve names)."""
    fakenet.clear_logs()
    script = (f"printf 'GET / HTTP/1.0\\r\\nHost: {fn.WWW_ALLOWED}\\r\\n\\r\\n' | "
              f"nc -w 20 {fn.ALLOWED_IP} 80")
    r = api.exec_ok(sid, ["sh", "-c", script], timeout_s=60)
    body = stdout_bytes(r).decode(errors="replace")
    assert r["exit_code"] == 0 and body.startswith("HTTP/1.") and f"hello from {fn.WWW_ALLOWED}" in body, (r, body)
    assert [q["host"].split(":")[0] for q in fakenet.http_requests()] == [fn.WWW_ALLOWED]


def test_every_sandbox_has_its_own_mac_and_egress_works(api, fakenet):  # noqa: F811
    made, macs = [], []
    try:
        a = create(api)
        made.append(a["id"])
        b = create(api)
        made.append(b["id"])
        assert a["boot"] == b["boot"] == "template", (a, b)
        macs.append(check_own_mac(api, a["id"], macs))
        macs.append(check_own_mac(api, b["id"], macs))
        check_egress(api, a["id"], fakenet)
        check_egress(api, b["id"], fakenet)

        # A snapshot: the original keeps its address (THAW after the save
        # gives it the same) and its network; the restore gets a new one.
        snap = lu.snapshot(api, a["id"], "mac")
        assert guest_mac(api, a["id"]) == macs[0]
        check_egress(api, a["id"], fakenet)
        r = lu.restore(api, snap["id"])
        made.append(r["id"])
        assert r["boot"] == "snapshot", r
        macs.append(check_own_mac(api, r["id"], macs))
        check_egress(api, r["id"], fakenet)

        # A fork's copy too.
        f = api.request("POST", f"/v1/sandboxes/{b['id']}/fork", body={"count": 1})
        assert f.status == 201, f
        fid = f.json["sandboxes"][0]["id"]
        made.append(fid)
        macs.append(check_own_mac(api, fid, macs))
        assert guest_mac(api, b["id"]) == macs[1]
        check_egress(api, fid, fakenet)

        # A cold boot: its address from QEMU's command line, no THAW.
        c = create(api, boot="cold")
        made.append(c["id"])
        assert c["boot"] == "cold", c
        macs.append(check_own_mac(api, c["id"], macs))
        check_egress(api, c["id"], fakenet)
    finally:
        for sid in made:
            api.delete(sid)
