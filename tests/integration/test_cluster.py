# SPDX-License-Identifier: Apache-2.0
"""Cluster mode (docs/cluster.md) on one machine: a real PostgreSQL, three
airlockd nodes each in its own network namespace and state dir, two
airlock-api fronts, a shared snapshot store (clusterutil.py). One cluster for
the module; the tests that take nodes down come last and bring them back."""
import http.client
import json
import os
import signal
import threading

import pytest

from clusterutil import GRACE_S, LEASE_S, Cluster
from conftest import require_build, wait_for

CREATE = {"template": "minimal", "vcpus": 1, "memory_mib": 256}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_build()
    c = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def acme(cluster):
    return cluster.token("acme")


@pytest.fixture(scope="module")
def other(cluster):
    return cluster.token("other")


def create(c, tok, front=0, **extra):
    r = c.http(front, "POST", "/v1/sandboxes", {**CREATE, **extra}, token=tok)
    assert r.status == 201, r
    return r.json["id"]


def run(c, tok, sid, cmd, front=0):
    r = c.http(front, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", cmd]}, token=tok)
    assert r.status == 200, r
    return r.json


def delete(c, tok, sid):
    r = c.http(0, "DELETE", f"/v1/sandboxes/{sid}", token=tok)
    assert r.status in (200, 204), r


def test_nodes_register_with_lease_and_capacity(cluster):
    rows = cluster.node_rows()
    assert sorted(rows) == ["n1", "n2", "n3"]
    for name, r in rows.items():
        assert r["state"] == "up" and r["live"] and r["epoch"] >= 1, (name, r)
        assert r["memory_free_mib"] > 0
    templates = cluster.sql("SELECT templates FROM airlock_nodes WHERE name = 'n1'")[0]
    assert "minimal" in json.loads(templates)
    # The lease is renewed: it moves forward.
    before = cluster.sql("SELECT lease_until FROM airlock_nodes WHERE name = 'n2'")[0]
    wait_for(lambda: cluster.sql("SELECT lease_until FROM airlock_nodes WHERE name = 'n2'")[0] != before,
             LEASE_S, "a lease renewal")


def test_creates_spread_over_nodes_by_capacity(cluster, acme):
    sids = [create(cluster, acme, front=i % 2) for i in range(3)]
    nodes = [cluster.row(s)["node"] for s in sids]
    # Best of all three (--place-k 3) by free memory: each create goes where
    # the previous ones are not.
    assert sorted(nodes) == ["n1", "n2", "n3"], nodes
    for s in sids:
        assert run(cluster, acme, s, "hostname")["stdout"].strip() == s
    # Either front reaches every sandbox: they hold no state.
    assert run(cluster, acme, sids[0], "echo via-front-1", front=1)["stdout"] == "via-front-1\n"
    listed = cluster.http(1, "GET", "/v1/sandboxes", token=acme)
    assert listed.status == 200, listed
    assert set(sids) <= {s["id"] for s in listed.json["sandboxes"]}
    for s in sids:
        delete(cluster, acme, s)


def test_tenants_are_isolated_across_nodes(cluster, acme, other):
    sid = create(cluster, acme)
    node = cluster.row(sid)["node"]
    for i in (0, 1):
        assert cluster.http(i, "GET", f"/v1/sandboxes/{sid}", token=other).status == 404
        r = cluster.http(i, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}, token=other)
        assert r.status == 404, r
    assert sid not in {s["id"] for s in cluster.http(0, "GET", "/v1/sandboxes", token=other).json["sandboxes"]}
    assert cluster.http(0, "GET", f"/v1/sandboxes/{sid}", token="alk_" + "x" * 43).status == 401
    # On the node itself a delegation for another tenant sees nothing either,
    # and only the cluster key makes one.
    assert cluster.node_http(node, "GET", f"/v1/sandboxes/{sid}", principal="tenant:other").status == 404
    assert cluster.node_http(node, "GET", f"/v1/sandboxes/{sid}", principal="tenant:acme").status == 200
    forged = cluster.delegation("tenant:acme", key=b"k" * 32)
    r = cluster.node_http(node, "GET", f"/v1/sandboxes/{sid}", principal=None, headers=forged)
    assert r.status == 401, r
    expired = cluster.delegation("tenant:acme", exp_s=-5)
    assert cluster.node_http(node, "GET", f"/v1/sandboxes/{sid}", principal=None, headers=expired).status == 401
    # A client's own token means nothing to a node: tokens live in PostgreSQL.
    r = cluster.node_http(node, "GET", f"/v1/sandboxes/{sid}", principal=None,
                          headers={"Authorization": f"Bearer {acme}"})
    assert r.status == 401, r
    # The node-only route is the operator's.
    r = cluster.node_http(node, "POST", f"/v1/cluster/sandboxes/{sid}/adopt", principal="tenant:acme")
    assert r.status == 403, r
    delete(cluster, acme, sid)


def test_pause_is_durable_and_resumes_on_another_node(cluster, acme):
    sid = create(cluster, acme)
    first = cluster.row(sid)["node"]
    run(cluster, acme, sid, "echo kept > /root/state")
    r = cluster.http(0, "POST", f"/v1/sandboxes/{sid}/pause", token=acme)
    assert r.status == 200 and r.json["state"] == "paused", r
    # Acknowledged once its snapshot is in the shared store: the row is on no
    # node, its VM gone from the node it ran on.
    row = cluster.row(sid)
    assert row["node"] is None and row["state"] == "paused" and row["snapshot"].startswith("cs-"), row
    assert not cluster.vms(first, sid)
    assert cluster.http(1, "GET", f"/v1/sandboxes/{sid}", token=acme).json["state"] == "paused"
    r = cluster.http(0, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]}, token=acme)
    assert r.status == 409, r
    # Its node gets a big sandbox: the resume goes where there is more room.
    big = cluster.node_http(first, "POST", "/v1/sandboxes", {**CREATE, "memory_mib": 2048},
                            principal="tenant:acme")
    assert big.status == 201, big
    r = cluster.http(1, "POST", f"/v1/sandboxes/{sid}/resume", token=acme)
    assert r.status == 200 and r.json["state"] == "running", r
    row = cluster.row(sid)
    assert row["node"] not in (None, first), (first, row)
    out = run(cluster, acme, sid, "cat /root/state; hostname")["stdout"]
    assert out == f"kept\n{sid}\n"
    assert [e[0] for e in cluster.events(sid)][-2:] == ["sandbox.paused", "sandbox.resumed"]
    delete(cluster, acme, sid)
    delete(cluster, acme, big.json["id"])


def test_resume_on_the_node_it_was_paused_on(cluster, acme):
    sid = create(cluster, acme)
    home = cluster.row(sid)["node"]
    assert cluster.http(0, "POST", f"/v1/sandboxes/{sid}/pause", token=acme).status == 200
    # The other nodes are fuller: the resume comes back home, where its old
    # (deleted) record is, and its row follows it again.
    others = [n.name for n in cluster.nodes if n.name != home]
    big = [cluster.node_http(n, "POST", "/v1/sandboxes", {**CREATE, "memory_mib": 2048},
                             principal="tenant:acme").json["id"] for n in others]
    r = cluster.http(0, "POST", f"/v1/sandboxes/{sid}/resume", token=acme)
    assert r.status == 200, r
    assert cluster.row(sid)["node"] == home
    wait_for(lambda: cluster.row(sid)["state"] == "running", 10, f"the row of {sid} running")
    assert run(cluster, acme, sid, "hostname")["stdout"] == f"{sid}\n"
    assert cluster.http(1, "POST", f"/v1/sandboxes/{sid}/pause", token=acme).json["state"] == "paused"
    assert cluster.row(sid)["node"] is None
    for b in big + [sid]:
        delete(cluster, acme, b)


def test_secrets_are_the_clusters_and_move_with_the_sandbox(cluster, acme, other):
    value = "ghp_cluster_" + "x" * 24
    r = cluster.http(0, "POST", "/v1/secrets", {"name": "gh", "value": value, "hosts": ["api.github.test"]},
                     token=acme)
    assert r.status == 201, r
    # Any front, any node: the secret is in PostgreSQL, and only ciphertext.
    listed = cluster.http(1, "GET", "/v1/secrets", token=acme)
    assert [s["name"] for s in listed.json["secrets"]] == ["gh"], listed
    assert cluster.http(1, "GET", "/v1/secrets/gh", token=other).status == 404
    assert cluster.sql("SELECT count(*) FROM airlock_secrets WHERE tenant = 'acme' AND name = 'gh'") == ["1"]
    raw = cluster.sql("SELECT encode(value, 'hex') FROM airlock_secrets WHERE name = 'gh'")[0]
    assert value.encode().hex() not in raw
    # A sandbox bound to it on every node: each node decrypts it (a binding
    # that does not resolve fails the start).
    sids = []
    for n in cluster.nodes:
        r = cluster.node_http(n.name, "POST", "/v1/sandboxes", {**CREATE, "secrets": {"GH_TOKEN": "gh"}},
                              principal="tenant:acme")
        assert r.status == 201, (n.name, r)
        sids.append(r.json["id"])
    sid = sids[0]
    placeholder = run(cluster, acme, sid, "echo $GH_TOKEN")["stdout"].strip()
    assert placeholder and placeholder != value
    assert cluster.http(0, "POST", f"/v1/sandboxes/{sid}/pause", token=acme).status == 200
    r = cluster.http(1, "POST", f"/v1/sandboxes/{sid}/resume", token=acme)
    assert r.status == 200, r
    assert [b["placeholder"] for b in r.json["secrets"]] == [placeholder], r.json["secrets"]
    assert run(cluster, acme, sid, "echo $GH_TOKEN")["stdout"].strip() == placeholder
    for s in sids:
        delete(cluster, acme, s)
    assert cluster.http(0, "DELETE", "/v1/secrets/gh", token=acme).status == 204
    assert cluster.sql("SELECT count(*) FROM airlock_secrets") == ["0"]


def test_templates_are_shared_through_the_store(cluster, acme, other):
    from test_templates import context_tar
    tar = context_tar({"Dockerfile": "FROM minimal\nRUN echo built-once > /etc/marker\n"})
    r = cluster.http(0, "POST", "/v1/templates?name=clt", raw=tar, token=acme,
                     headers={"Content-Type": "application/x-tar"}, timeout=300)
    assert r.status == 200 and b'"done"' in r.body, r
    assert cluster.sql("SELECT tenant FROM airlock_templates WHERE name = 'clt'") == ["acme"]
    built_on = [n.name for n in cluster.nodes
                if os.path.exists(os.path.join(n.daemon.state_dir, "templates", "clt", "rootfs.ext4"))]
    assert len(built_on) == 1, built_on
    # Every node starts it: the others fetch it from the shared store.
    sids = []
    for n in cluster.nodes:
        r = cluster.node_http(n.name, "POST", "/v1/sandboxes", {**CREATE, "template": "clt"},
                              principal="tenant:acme")
        assert r.status == 201, (n.name, r)
        sids.append(r.json["id"])
        assert run(cluster, acme, sids[-1], "cat /etc/marker")["stdout"] == "built-once\n"
    # The name is the cluster's: another tenant can neither use nor take it.
    r = cluster.http(0, "POST", "/v1/sandboxes", {**CREATE, "template": "clt"}, token=other)
    assert r.status == 400, r
    for i in range(len(cluster.nodes)):
        tar2 = context_tar({"Dockerfile": "FROM minimal\nRUN true\n"})
        r = cluster.node_http(cluster.nodes[i].name, "POST", "/v1/templates?name=clt", principal="tenant:other",
                              headers={"Content-Type": "application/x-tar"}, raw=tar2)
        assert r.status == 409, r
    for s in sids:
        delete(cluster, acme, s)
    r = cluster.http(1, "DELETE", "/v1/templates/clt", token=acme)
    assert r.status in (200, 204), r
    assert cluster.sql("SELECT count(*) FROM airlock_templates") == ["0"]
    # The copies fetched elsewhere are dropped by their nodes' lease threads.
    wait_for(lambda: not any(os.path.exists(os.path.join(n.daemon.state_dir, "templates", "clt"))
                             for n in cluster.nodes), 30, "the fetched copies dropped")


def test_two_resumes_race_one_adopts(cluster, acme):
    sid = create(cluster, acme)
    assert cluster.http(0, "POST", f"/v1/sandboxes/{sid}/pause", token=acme).status == 200
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(
        cluster.http(i, "POST", f"/v1/sandboxes/{sid}/resume", token=acme))) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status for r in results)[0] == 200, results
    node = cluster.row(sid)["node"]
    running = [n.name for n in cluster.nodes if cluster.vms(n.name, sid)]
    assert running == [node], (running, node)
    wait_for(lambda: cluster.row(sid)["state"] == "running", 10, f"the row of {sid} running")
    delete(cluster, acme, sid)


def test_front_killed_mid_stream_client_retries_on_the_other(cluster, acme):
    sid = create(cluster, acme)
    body = {"cmd": ["sh", "-c", "for i in $(seq 1 40); do echo line$i; sleep 0.1; done"], "stream": True}
    c = http.client.HTTPConnection("127.0.0.1", cluster.fronts[0].port, timeout=30)
    c.request("POST", f"/v1/sandboxes/{sid}/exec", body=json.dumps(body),
              headers={"Authorization": f"Bearer {acme}", "Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200
    first = resp.readline()
    assert first, "no first line of the stream"
    cluster.fronts[0].kill()
    with pytest.raises(Exception):
        while resp.readline():
            pass
        raise ConnectionError("the stream ended")
    # The client retries on the other front: the sandbox is where it was.
    assert run(cluster, acme, sid, "echo again", front=1)["stdout"] == "again\n"
    cluster.fronts[0].start()
    assert run(cluster, acme, sid, "echo back", front=0)["stdout"] == "back\n"
    delete(cluster, acme, sid)


def test_killed_node_sandboxes_recovered_from_their_snapshots(cluster, acme):
    # Two sandboxes on one node: one with a snapshot, one without.
    a = create(cluster, acme)
    victim = cluster.row(a)["node"]
    b = cluster.node_http(victim, "POST", "/v1/sandboxes", CREATE, principal="tenant:acme").json["id"]
    run(cluster, acme, a, "echo before-snapshot > /root/mark")
    r = cluster.http(0, "POST", f"/v1/sandboxes/{a}/snapshots", {"name": "keep"}, token=acme)
    assert r.status == 201, r
    assert cluster.row(a)["snapshot"].startswith("cs-")
    old_qemus = cluster.vms(victim)
    epoch = cluster.node_rows()[victim]["epoch"]
    cluster.kill_node(victim)
    # Lease + grace, then the reaper: a recovered elsewhere, b lost.
    wait_for(lambda: cluster.node_rows()[victim]["state"] == "lost", LEASE_S + GRACE_S + 10, "the node lost")
    wait_for(lambda: cluster.row(a)["state"] == "running" and cluster.row(a)["node"] not in (None, victim),
             60, f"{a} recovered: {cluster.debug()}")
    assert cluster.row(b)["state"] == "lost" and cluster.row(b)["node"] is None
    assert run(cluster, acme, a, "cat /root/mark")["stdout"] == "before-snapshot\n"
    assert "sandbox.recovered" in [e[0] for e in cluster.events(a)]
    assert "sandbox.lost" in [e[0] for e in cluster.events(b)]
    r = cluster.http(0, "POST", f"/v1/sandboxes/{b}/exec", {"cmd": ["true"]}, token=acme)
    assert r.status == 409, r
    # The node comes back: fenced out of what it had, it deletes its stale
    # copies (their VMs too) and registers under a new epoch.
    assert old_qemus
    cluster.start_node(victim)
    wait_for(lambda: cluster.node_rows()[victim]["state"] == "up", 20, "the node up again")
    assert cluster.node_rows()[victim]["epoch"] > epoch
    wait_for(lambda: not cluster.vms(victim), 30, "stale VMs gone")
    assert cluster.row(a)["node"] != victim
    delete(cluster, acme, a)


def test_fenced_node_cannot_write(cluster, acme):
    sid = create(cluster, acme)
    victim = cluster.row(sid)["node"]
    assert cluster.http(0, "POST", f"/v1/sandboxes/{sid}/snapshots", {}, token=acme).status == 201
    d = cluster.node(victim).daemon
    # Frozen (SIGSTOP) past its lease and the grace: the reaper moves its
    # sandbox while the node cannot see it happen.
    d.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: cluster.row(sid)["node"] not in (None, victim) and cluster.row(sid)["state"] == "running",
                 LEASE_S + GRACE_S + 60, "the sandbox recovered elsewhere")
    finally:
        d.proc.send_signal(signal.SIGCONT)
    moved_to = cluster.row(sid)["node"]
    # The node wakes up with its old epoch: whatever it tries to write is
    # refused; it fences itself, deletes its stale copy and registers anew.
    r = cluster.node_http(victim, "POST", f"/v1/sandboxes/{sid}/pause", principal="tenant:acme")
    assert r.status in (404, 409, 503), r
    assert cluster.row(sid)["node"] == moved_to
    wait_for(lambda: cluster.node_rows()[victim]["state"] == "up" and cluster.node_rows()[victim]["live"], 30,
             "the node registered again")
    wait_for(lambda: not cluster.vms(victim, sid), 30, "its stale copy deleted")
    assert cluster.row(sid)["node"] == moved_to
    assert run(cluster, acme, sid, "echo alive")["stdout"] == "alive\n"
    delete(cluster, acme, sid)
