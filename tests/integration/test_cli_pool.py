# SPDX-License-Identifier: Apache-2.0
"""`airlock pool` and `airlock info` against a daemon with a warm pool
(docs/cli.md; docs/api.md, "Warm pools")."""
import json

import pytest

from conftest import Cli, Daemon, _report_on_failure, wait_for

POOL_FILL_TIMEOUT_S = 180  # a restore from the template snapshot on TCG


def text(b):
    return b.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def pool_daemon(tmp_path_factory):
    """A daemon of the module's own with a shared pool of one minimal VM."""
    d = Daemon(tmp_path_factory.mktemp("airlockd-pool"), extra_args=["--warm-pool", "minimal=1"]).start()
    yield d
    leftovers = d.cleanup()
    assert not leftovers, f"QEMU processes left after the daemon stopped: {leftovers}; log:\n{d.log()}"


@pytest.fixture
def pcli(pool_daemon, request):
    yield Cli(pool_daemon.socket)
    _report_on_failure(request, pool_daemon)


def pool_rows(pcli):
    """The data rows of `airlock pool ls`, split into columns."""
    p = pcli("pool", "ls")
    assert p.returncode == 0, text(p.stderr)
    lines = text(p.stdout).splitlines()
    assert lines[0].split() == ["TEMPLATE", "VCPUS", "MIB", "TENANT", "SIZE", "READY", "PSS_MIB", "PER_VM_MIB",
                               "HITS/MISSES"]
    return [line.split() for line in lines[1:] if not line.startswith(" ")]


def test_pool_ls_shows_the_flags_pool_and_it_fills(pcli):
    rows = pool_rows(pcli)
    assert [r[:5] for r in rows] == [["minimal", "1", "256", "shared", "1"]], rows

    def ready():
        rows = pool_rows(pcli)
        return rows and rows[0][5] == "1"
    wait_for(ready, POOL_FILL_TIMEOUT_S, "the pool's one VM to be ready")
    row = pool_rows(pcli)[0]
    assert int(row[6]) > 0 and int(row[7]) == int(row[6]), f"a ready VM has memory: {row}"
    assert row[8] == "0/0", row

    p = pcli("pool", "ls", "--json")
    assert p.returncode == 0, text(p.stderr)
    answer = json.loads(p.stdout)
    assert answer["ready"] == 1 and answer["pss_bytes"] > 0
    assert answer["pools"][0]["tenant"] is None and answer["pools"][0]["template"] == "minimal"


def test_info_shows_the_daemon_and_pool_memory(pcli, pool_daemon):
    wait_for(lambda: pool_daemon.api.request("GET", "/v1/pools").json["ready"] == 1, POOL_FILL_TIMEOUT_S, "a ready VM")
    p = pcli("info")
    assert p.returncode == 0, text(p.stderr)
    lines = {line.split()[0]: line for line in text(p.stdout).splitlines()}
    assert set(lines) >= {"version", "backend", "accel", "warm", "host"}, lines
    assert "1 VMs ready" in lines["warm"], lines["warm"]
    assert "high-water mark 80%" in lines["host"] and "not shedding" in lines["host"], lines["host"]

    p = pcli("info", "--json")
    assert p.returncode == 0, text(p.stderr)
    answer = json.loads(p.stdout)
    assert answer["healthz"]["status"] == "ok"
    assert answer["pools"]["host_memory"]["high_pct"] == 80


def test_pool_set_adds_a_shape_and_zero_removes_it(pcli):
    p = pcli("pool", "set", "minimal:2:320", "0")
    assert p.returncode == 0, text(p.stderr)
    p = pcli("pool", "set", "minimal:2:320", "1")
    assert p.returncode == 0, text(p.stderr)
    shapes = [r[:5] for r in pool_rows(pcli)]
    assert ["minimal", "2", "320", "shared", "1"] in shapes, shapes
    # The PUT's answer is the listing too.
    assert b"minimal" in p.stdout and b"TEMPLATE" in p.stdout

    p = pcli("pool", "set", "minimal:2:320", "0")
    assert p.returncode == 0, text(p.stderr)
    p = pcli("pool", "set", "minimal", "0")
    assert p.returncode == 0, text(p.stderr)
    assert pool_rows(pcli) == []


@pytest.mark.parametrize("args, says", [
    (["bad:name", "1"], "TEMPLATE or TEMPLATE:VCPUS:MiB"),
    (["minimal:1", "2"], "TEMPLATE or TEMPLATE:VCPUS:MiB"),
    (["minimal:x:256", "2"], "whole numbers"),
    (["minimal", "-1"], "whole number from 0"),
    (["minimal", "many"], "whole number from 0"),
    (["minimal"], "pool set takes TEMPLATE[:VCPUS:MiB] N"),
])
def test_pool_set_usage_errors(pcli, args, says):
    p = pcli("pool", "set", *args)
    assert p.returncode == 2, (p.returncode, text(p.stderr))
    assert says in text(p.stderr), text(p.stderr)
    assert p.stdout == b""


@pytest.mark.parametrize("args, says", [
    (["minimal", "65"], "size: must be an integer from 0 to 64"),
    (["Minimal", "1"], "template: must be 1 to 63 characters"),
    (["minimal:17:256", "1"], "vcpus: must be an integer from 1 to 16"),
    (["minimal", "1", "--tenant", "Bad Name"], "tenant: must match"),
])
def test_pool_set_daemon_refusals(pcli, args, says):
    p = pcli("pool", "set", *args)
    assert p.returncode == 125, (p.returncode, text(p.stderr))
    assert says in text(p.stderr) and "HTTP 400" in text(p.stderr), text(p.stderr)


def test_pool_unknown_subcommand(pcli):
    p = pcli("pool", "rm", "minimal")
    assert p.returncode == 2 and b"ls, set" in p.stderr, text(p.stderr)
