# SPDX-License-Identifier: Apache-2.0
"""Category 19: cluster mode (issue 24, docs/cluster.md). A hostile tenant
(mallory, with its own token) against a cluster of its own for the module
(tests/integration/clusterutil.py: PostgreSQL, two nodes in network
namespaces, one front): forged, replayed and altered delegations, a
principal or a delegation smuggled through the front, its token at a node,
another tenant's sandboxes running and paused, the node-only adopt route;
and a snapshot in the shared store that was tampered with.

Containment is read from outside: the victim's rows in PostgreSQL (node,
state, snapshot), the VMs on each node, the victim's files in its guest."""
import json
import os

import pytest

from clusterutil import Cluster
from conftest import require_build
from secutil import attempt

CREATE = {"template": "minimal", "vcpus": 1, "memory_mib": 256}


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    require_build()
    c = Cluster(tmp_path_factory.mktemp("sec-cluster"), nodes=2, fronts=1, place_k=2).start()
    c.victim = c.token("victim")
    c.mallory = c.token("mallory")
    yield c
    c.stop()


def victim_sandbox(c, paused=False):
    r = c.http(0, "POST", "/v1/sandboxes", CREATE, token=c.victim)
    assert r.status == 201, r
    sid = r.json["id"]
    assert c.http(0, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", "echo mine > /root/v"]},
                  token=c.victim).status == 200
    if paused:
        assert c.http(0, "POST", f"/v1/sandboxes/{sid}/pause", token=c.victim).status == 200
    return sid


def victim_intact(c, sid, row):
    assert c.row(sid) == row, (c.row(sid), row)
    if row["node"]:
        r = c.http(0, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["cat", "/root/v"]}, token=c.victim)
        assert r.status == 200 and r.json["stdout"] == "mine\n", r


def test_delegations_only_from_the_key(cl):
    sid = victim_sandbox(cl)
    row = cl.row(sid)
    node = row["node"]
    path = f"/v1/sandboxes/{sid}"

    with attempt("cluster", "forged-delegation", "a delegation for the victim signed with a guessed key"):
        h = cl.delegation("tenant:victim", key=os.urandom(32))
        assert cl.node_http(node, "GET", path, principal=None, headers=h).status == 401
        assert cl.node_http(node, "DELETE", path, principal=None, headers=h).status == 401
        victim_intact(cl, sid, row)

    with attempt("cluster", "principal-swapped", "mallory's valid delegation with the principal changed to the "
                                                  "victim's (or the operator's)"):
        h = cl.delegation("tenant:mallory")
        exp = h["X-Airlock-Principal"].split(";exp=")[1]
        for who in ("tenant:victim", "operator"):
            swapped = {**h, "X-Airlock-Principal": f"{who};exp={exp}"}
            assert cl.node_http(node, "DELETE", path, principal=None, headers=swapped).status == 401
        victim_intact(cl, sid, row)

    with attempt("cluster", "delegation-expired", "a captured delegation replayed after its expiry, and one "
                                                   "made to last a day"):
        for exp_s in (-2, 86400):
            h = cl.delegation("tenant:victim", exp_s=exp_s)
            assert cl.node_http(node, "DELETE", path, principal=None, headers=h).status == 401
        victim_intact(cl, sid, row)

    with attempt("cluster", "principal-malformed", "principals with header tricks: CR LF, a second exp, "
                                                    "a tenant name the API refuses"):
        for p in ("tenant:victim;exp=9999999999;exp=1", "tenant:Victim", "tenant:victim\tx", "operator "):
            h = cl.delegation(p)
            r = cl.node_http(node, "DELETE", path, principal=None, headers=h)
            assert r.status in (400, 401), (p, r)
        victim_intact(cl, sid, row)

    with attempt("cluster", "token-at-node", "mallory's and the victim's own tokens sent straight to a node"):
        for tok in (cl.mallory, cl.victim):
            r = cl.node_http(node, "DELETE", path, principal=None, headers={"Authorization": f"Bearer {tok}"})
            assert r.status == 401, r
        victim_intact(cl, sid, row)


def test_the_front_passes_no_smuggled_authority(cl):
    sid = victim_sandbox(cl)
    row = cl.row(sid)

    with attempt("cluster", "principal-through-front", "mallory's token with an X-Airlock-Principal of the "
                                                        "operator's and of the victim's through the front"):
        for who in ("operator", "tenant:victim"):
            h = {"X-Airlock-Principal": cl.delegation(who)["X-Airlock-Principal"]}
            r = cl.http(0, "GET", "/v1/sandboxes", token=cl.mallory, headers=h)
            assert r.status == 200 and sid not in {s["id"] for s in r.json["sandboxes"]}, r
            r = cl.http(0, "DELETE", f"/v1/sandboxes/{sid}", token=cl.mallory, headers=h)
            assert r.status == 404, r
        victim_intact(cl, sid, row)

    with attempt("cluster", "delegation-through-front", "a whole valid delegation (made with the key, as if "
                                                         "stolen from a node's traffic) sent to the front"):
        h = cl.delegation("tenant:victim")
        r = cl.http(0, "DELETE", f"/v1/sandboxes/{sid}", headers=h)
        assert r.status == 401, r
        victim_intact(cl, sid, row)

    with attempt("cluster", "adopt-as-tenant", "the node-only adopt route, through the front and at a node "
                                                "with mallory's delegation"):
        r = cl.http(0, "POST", f"/v1/cluster/sandboxes/{sid}/adopt", token=cl.mallory)
        assert r.status in (403, 404), r
        for n in cl.nodes:
            r = cl.node_http(n.name, "POST", f"/v1/cluster/sandboxes/{sid}/adopt", principal="tenant:mallory")
            assert r.status == 403, r
        victim_intact(cl, sid, row)

    with attempt("cluster", "other-tenant-running", "exec, pause, snapshot, delete of the victim's running "
                                                     "sandbox through the front"):
        for method, sub, body in (("POST", "/exec", {"cmd": ["true"]}), ("POST", "/pause", None),
                                  ("POST", "/snapshots", {}), ("DELETE", "", None), ("GET", "/files?path=/root/v",
                                                                                        None)):
            r = cl.http(0, method, f"/v1/sandboxes/{sid}{sub}", body, token=cl.mallory)
            assert r.status == 404, (sub, r)
        victim_intact(cl, sid, row)


def test_paused_sandboxes_stay_their_tenants(cl):
    sid = victim_sandbox(cl, paused=True)
    row = cl.row(sid)
    assert row["node"] is None and row["state"] == "paused"

    with attempt("cluster", "other-tenant-paused", "resume, read, delete the victim's paused sandbox (on no "
                                                    "node, its snapshot in the shared store) through the front"):
        for method, sub in (("POST", "/resume"), ("GET", ""), ("DELETE", ""), ("POST", "/exec")):
            r = cl.http(0, method, f"/v1/sandboxes/{sid}{sub}", {"cmd": ["true"]} if sub == "/exec" else None,
                        token=cl.mallory)
            assert r.status == 404, (sub, r)
        assert cl.row(sid) == row
        assert not any(cl.vms(n.name, sid) for n in cl.nodes)


def test_tampered_snapshot_is_not_restored(cl):
    sid = victim_sandbox(cl, paused=True)
    row = cl.row(sid)
    manifest = os.path.join(cl.store, "snapshots", row["snapshot"] + ".json")
    files = json.load(open(manifest))["files"]
    blob = os.path.join(cl.store, "blobs", files["memory.bin"])

    with attempt("cluster", "store-blob-tampered", "the paused sandbox's memory changed in the shared store "
                                                    "(a compromised storage host): the resume must refuse it"):
        with open(blob, "r+b") as f:
            f.seek(4096)
            b = f.read(1)
            f.seek(4096)
            f.write(bytes([b[0] ^ 0xFF]))
        r = cl.http(0, "POST", f"/v1/sandboxes/{sid}/resume", token=cl.victim)
        assert r.status >= 400, r
        assert cl.row(sid)["node"] is None and cl.row(sid)["state"] == "paused", cl.row(sid)
        assert not any(cl.vms(n.name, sid) for n in cl.nodes)

    with attempt("cluster", "store-manifest-tampered", "the paused sandbox's manifest rewritten to name "
                                                        "another tenant's files: it no longer hashes to its key"):
        text = open(manifest).read()
        with open(manifest, "w") as f:
            f.write(text.replace('"victim"', '"mallory"'))
        r = cl.http(0, "POST", f"/v1/sandboxes/{sid}/resume", token=cl.victim)
        assert r.status >= 400, r
        assert cl.row(sid)["node"] is None and cl.row(sid)["state"] == "paused", cl.row(sid)
