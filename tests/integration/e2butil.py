# SPDX-License-Identifier: Apache-2.0
"""Shared by the E2B compatibility tests (test_e2b_*.py): an airlockd with a
TCP listener, a tenant token for it, and the environment E2B's SDK reads
(docs/e2b.md). The SDK itself runs from tests/e2b (test_e2b_sdk.py)."""
import os

from apiutil import ListeningDaemon, free_port
from conftest import ROOT

E2B_DIR = os.path.join(ROOT, "tests", "e2b")
TENANT = "e2b"


class E2bDaemon(ListeningDaemon):
    """airlockd listening on 127.0.0.1:PORT, with a token of tenant TENANT
    (made by start()) and a second tenant's token for isolation checks."""

    def start(self, *a, **kw):
        super().start(*a, **kw)
        self.key = self._token(TENANT)
        self.other_key = self._token(TENANT + "-other")
        return self

    def _token(self, tenant):
        r = self.api.request("POST", "/v1/tokens", body={"tenant": tenant, "description": "e2b tests"})
        assert r.status == 201, r
        return r.json["token"]

    @property
    def api_url(self):
        return f"http://127.0.0.1:{self.port}/e2b"

    @property
    def sandbox_url(self):
        return f"http://127.0.0.1:{self.port}/e2b/envd"

    def sdk_env(self, template="base"):
        """What an E2B user sets: the two URLs and the key (nothing else)."""
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("E2B_"):
                del env[k]
        env.update(E2B_API_URL=self.api_url, E2B_SANDBOX_URL=self.sandbox_url, E2B_API_KEY=self.key,
                   AIRLOCK_E2B_TEMPLATE=template, AIRLOCK_E2B_OTHER_KEY=self.other_key)
        return env


def e2b_daemon_start(tmp_path_factory, name="airlockd-e2b"):
    return E2bDaemon(tmp_path_factory.mktemp(name), free_port()).start()
