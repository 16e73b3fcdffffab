# SPDX-License-Identifier: Apache-2.0
"""The Sandbox: create, find, exec, processes, PTY, files, lifecycle."""
import urllib.parse

from ._record import Record
from .files import Files
from .process import ExecResult, OutputStream, Process, command_body, raise_if_failed, seconds

# How long past a command's own timeout the SDK waits for the daemon's answer.
_EXEC_SLACK_S = 60
_EXEC_DEFAULT_TIMEOUT_S = 300  # the API's default timeout_s of an exec


def _client(client):
    if client is None:
        from .client import Client
        return Client()
    return client


def _network_body(network):
    """A policy from {"allow": [...], "deny": [...]} or a list of allow rules."""
    if network is None:
        return None
    if isinstance(network, dict):
        return {"allow": list(network.get("allow", [])), "deny": list(network.get("deny", []))}
    return {"allow": list(network), "deny": []}


class Sandbox(Record):
    """A sandbox (a microVM). Attributes of the sandbox object (state,
    template, vcpus, memory_mib, env, metadata, ...) read from .data, as of
    the last answer (.data["network"]: the policy; get_network() asks);
    refresh() asks again. `with Sandbox.create() as sb:`
    deletes it at the end of the block."""

    def __init__(self, client, data):
        self.client = client
        self.data = data
        self.files = Files(self)
        # Exec, process, file and metrics requests resume a paused sandbox
        # first when this is true (?resume=true).
        self.auto_resume = False

    def __repr__(self):
        return f"Sandbox({self.data.get('id')!r}, state={self.data.get('state')!r})"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.delete()

    def _path(self):
        return f"/v1/sandboxes/{urllib.parse.quote(self.data['id'], safe='')}"

    def _resume_q(self):
        return {"resume": "true"} if self.auto_resume else {}

    @property
    def _t(self):
        return self.client.transport

    # ---- finding and making sandboxes

    @classmethod
    def create(cls, template=None, vcpus=None, memory_mib=None, env=None, network=None, secrets=None,
               metadata=None, timeout=None, on_timeout=None, idle_timeout=None, disk_mib=None, snapshot=None,
               boot=None, tenant=None, auto_resume=None, client=None):
        """POST /v1/sandboxes: boots (or restores `snapshot`) and answers once
        the guest is up. timeout / idle_timeout are the sandbox's timeout_s /
        idle_timeout_s (seconds; on_timeout "kill" or "pause"); network is
        {"allow": [...], "deny": [...]} or a list of allow rules; secrets
        maps ENV_NAME -> secret name; tenant only over the unix socket;
        auto_resume=True: traffic to its ports resumes it when paused."""
        body = {"template": template, "vcpus": vcpus, "memory_mib": memory_mib, "disk_mib": disk_mib,
                "env": env, "metadata": metadata, "snapshot": snapshot, "timeout_s": seconds(timeout),
                "on_timeout": on_timeout, "idle_timeout_s": seconds(idle_timeout),
                "network": _network_body(network), "secrets": secrets, "boot": boot, "tenant": tenant,
                "auto_resume": auto_resume}
        body = {k: v for k, v in body.items() if v is not None}
        client = _client(client)
        return cls(client, client.transport.request("POST", "/v1/sandboxes", json=body).json())

    @classmethod
    def get(cls, sandbox_id, client=None):
        """GET /v1/sandboxes/{id} (deleted ones too)."""
        client = _client(client)
        return cls(client, client.transport.request("GET", f"/v1/sandboxes/{urllib.parse.quote(sandbox_id, safe='')}")
                   .json())

    @classmethod
    def connect(cls, sandbox_id, client=None):
        """A running handle to an existing sandbox: get, and resume it if it
        is paused."""
        sb = cls.get(sandbox_id, client=client)
        if sb.data.get("state") == "paused":
            sb.resume()
        return sb

    @classmethod
    def list(cls, all=False, metadata=None, client=None):
        """GET /v1/sandboxes: newest first; all=True includes deleted ones;
        metadata={KEY: VALUE} keeps those whose metadata has every pair."""
        client = _client(client)
        q = {"all": "true"} if all else {}
        for k, v in (metadata or {}).items():
            q[f"metadata.{k}"] = v
        return [cls(client, d) for d in client.transport.request("GET", "/v1/sandboxes", query=q).json()["sandboxes"]]

    def refresh(self):
        self.data = self._t.request("GET", self._path()).json()
        return self

    def delete(self):
        """DELETE /v1/sandboxes/{id} (idempotent)."""
        self.data = self._t.request("DELETE", self._path()).json()
        return self

    # ---- commands

    def exec(self, cmd, stream=None, stdin=None, timeout=None, env=None, cwd=None, uid=None, gid=None,
             max_output_bytes=None, check=False):
        """POST .../exec: runs cmd (a list, or a string for `sh -c`) to its
        end and returns an ExecResult. stream: a callable given each
        OutputChunk as it comes (the exec is streamed; the result still has
        all of the output). stdin: str or bytes. timeout: seconds, after
        which the process group is killed (result.timed_out). check=True
        raises CommandFailed unless it exited 0."""
        body = command_body(cmd, env=env, cwd=cwd, uid=uid, gid=gid, timeout=timeout, stdin=stdin)
        argv = body["cmd"]
        http_timeout = body.get("timeout_s", _EXEC_DEFAULT_TIMEOUT_S) + _EXEC_SLACK_S
        if stream is None:
            if max_output_bytes is not None:
                body["max_output_bytes"] = int(max_output_bytes)
            j = self._t.request("POST", f"{self._path()}/exec", query=self._resume_q(), json=body,
                                timeout=http_timeout).json()
            return raise_if_failed(ExecResult.from_json(j, argv), check)
        body["stream"] = True
        out, err = bytearray(), bytearray()
        with OutputStream(self._t.lines("POST", f"{self._path()}/exec", query=self._resume_q(), json=body,
                                        timeout=http_timeout)) as s:
            for chunk in s:
                (out if chunk.stream == "stdout" else err).extend(chunk.data)
                stream(chunk)
            x = s.exit or {}
            result = ExecResult(s.process_id, x.get("exit_code"), x.get("signal"), bool(x.get("timed_out")),
                                bytes(out), bytes(err), x.get("duration_ms"), cmd=argv)
        return raise_if_failed(result, check)

    def exec_stream(self, cmd, stdin_stream=False, timeout=None, env=None, cwd=None):
        """POST .../exec with "stream": true, as an OutputStream to iterate
        (its process_id is known after the first item or at the end;
        closing it early kills the process). stdin_stream=True keeps stdin
        open for self.process(id).write_stdin()."""
        body = command_body(cmd, env=env, cwd=cwd, timeout=timeout)
        body["stream"] = True
        if stdin_stream:
            body["stdin_stream"] = True
        return OutputStream(self._t.lines("POST", f"{self._path()}/exec", query=self._resume_q(), json=body))

    def start(self, cmd, tag=None, stdin=None, stdin_stream=False, pty=None, timeout=None, env=None, cwd=None,
              uid=None, gid=None):
        """POST .../processes: a background process (outlives the request).
        pty=(rows, cols) gives it a terminal (then attach()). Returns a
        Process."""
        body = command_body(cmd, env=env, cwd=cwd, uid=uid, gid=gid, timeout=timeout, stdin=stdin)
        if tag is not None:
            body["tag"] = tag
        if stdin_stream:
            body["stdin_stream"] = True
        if pty is not None:
            rows, cols = pty
            body["pty"] = {"rows": int(rows), "cols": int(cols)}
        return Process(self, self._t.request("POST", f"{self._path()}/processes", query=self._resume_q(),
                                             json=body).json())

    def processes(self):
        """GET .../processes: running ones and recent exited ones."""
        j = self._t.request("GET", f"{self._path()}/processes", query=self._resume_q()).json()
        return [Process(self, p) for p in j["processes"]]

    def process(self, pid):
        """GET .../processes/{pid}."""
        return Process(self, {"id": pid}).refresh()

    def pty(self, cmd=("sh",), rows=24, cols=80, env=None, cwd=None, tag=None):
        """Starts cmd with a terminal and attaches to it: a Pty (write,
        resize, read, wait, close; .process is its Process)."""
        return self.start(list(cmd) if not isinstance(cmd, str) else cmd, pty=(rows, cols), env=env, cwd=cwd,
                          tag=tag).attach()

    # ---- lifecycle

    def pause(self):
        """POST .../pause: freezes the VM (memory and processes stay)."""
        self.data = self._t.request("POST", f"{self._path()}/pause").json()
        return self

    def resume(self):
        """POST .../resume."""
        self.data = self._t.request("POST", f"{self._path()}/resume").json()
        return self

    def snapshot(self, name=None):
        """POST .../snapshots: a Snapshot of memory, devices and disk."""
        from .client import Snapshot
        body = {"name": name} if name is not None else None
        return Snapshot(self.client, self._t.request("POST", f"{self._path()}/snapshots", json=body).json())

    def fork(self, count=1, secrets=None):
        """POST .../fork: count running copies (a list of Sandbox)."""
        body = {"count": int(count)}
        if secrets:
            body["secrets"] = dict(secrets)
        j = self._t.request("POST", f"{self._path()}/fork", json=body).json()
        return [Sandbox(self.client, d) for d in j["sandboxes"]]

    def recover(self, memory=True):
        """POST .../recover: brings back a sandbox in state error (from its
        latest snapshot, else its disk; memory=False: its disk)."""
        self.data = self._t.request("POST", f"{self._path()}/recover", json={"memory": bool(memory)}).json()
        return self

    def set_timeout(self, timeout=None, on_timeout=None, idle_timeout=None, auto_resume=None):
        """POST .../timeout: changes the running-time timeout (counted from
        now), its action, the idle timeout, auto_resume (traffic to its
        ports resumes it when paused); 0 turns a timeout off, None keeps it."""
        body = {"timeout_s": seconds(timeout), "on_timeout": on_timeout, "idle_timeout_s": seconds(idle_timeout),
                "auto_resume": auto_resume}
        self.data = self._t.request("POST", f"{self._path()}/timeout",
                                    json={k: v for k, v in body.items() if v is not None}).json()
        return self

    # ---- network and metrics

    def get_network(self):
        """GET .../network: {"sandbox","policy","guest","dropped"} (the
        policy as of now; .data["network"] is the one of the last answer)."""
        return self._t.request("GET", f"{self._path()}/network").json()

    def set_network(self, allow=(), deny=()):
        """PUT .../network: replaces the egress policy atomically."""
        return self._t.request("PUT", f"{self._path()}/network",
                               json={"allow": list(allow), "deny": list(deny)}).json()

    def metrics(self):
        """GET .../metrics: CPU, memory, disk, uptime and processes of the guest."""
        return self._t.request("GET", f"{self._path()}/metrics", query=self._resume_q()).json()

    # ---- ports (docs/api.md, "Ports")

    def _port_path(self, port):
        port = int(port)
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port}: must be 1-65535")
        return f"{self._path()}/ports/{port}"

    def _keep_ports(self, answer):
        """The exposed ports of a ports answer into .data["ports"] (as the sandbox object has them)."""
        self.data["ports"] = [{"port": p["port"], "public": p["public"], "url": p["url"]}
                              for p in answer["ports"] if p.get("exposed")]
        self.data["auto_resume"] = answer.get("auto_resume", self.data.get("auto_resume"))
        return answer

    def ports(self):
        """GET .../ports: {"ports": [{"port","exposed","public","url","path_url",
        "requests","bytes_in","bytes_out","errors"}], "traffic_token",
        "auto_resume", "proxy"}; url and path_url are None without a proxy."""
        return self._keep_ports(self._t.request("GET", f"{self._path()}/ports").json())

    def expose(self, port, public=False):
        """PUT .../ports/{port}: exposes the guest's port on the daemon's
        proxy (public=True: without the traffic token); the ports answer."""
        return self._keep_ports(self._t.request("PUT", self._port_path(port), json={"public": bool(public)}).json())

    def unexpose(self, port):
        """DELETE .../ports/{port} (NotFound when it is not exposed); the ports answer."""
        return self._keep_ports(self._t.request("DELETE", self._port_path(port)).json())

    def get_host(self, port):
        """The host name of the port's URL on the proxy ("8000-sb-….DOMAIN"),
        or None when the port is not exposed or the daemon runs no proxy."""
        for p in self.ports()["ports"]:
            if p["port"] == int(port) and p.get("url"):
                return urllib.parse.urlsplit(p["url"]).netloc
        return None

    def connect_port(self, port, timeout=None):
        """GET .../ports/{port}/connect (Upgrade: airlock-tcp/1): a
        PortTunnel, a TCP stream to the guest's port (which need not be
        exposed) made by the daemon from the sandbox's namespace. A paused
        sandbox is resumed when its auto_resume is on, else Conflict;
        GuestError when nothing listens."""
        sock, rest = self._t.upgrade(f"{self._port_path(port)}/connect", PORT_PROTOCOL, timeout=timeout)
        return PortTunnel(sock, rest)


PORT_PROTOCOL = "airlock-tcp/1"


class PortTunnel:
    """A TCP stream to a guest's port (Sandbox.connect_port): sendall(),
    recv(), shutdown_write(), close(); `with` closes it."""

    def __init__(self, sock, buffered=b""):
        self.socket = sock
        self._buf = bytes(buffered)

    def sendall(self, data):
        self.socket.sendall(data)

    def recv(self, n=65536):
        """Up to n bytes; b"" once the guest's side closed."""
        if self._buf:
            out, self._buf = self._buf[:n], self._buf[n:]
            return out
        return self.socket.recv(n)

    def shutdown_write(self):
        import socket
        self.socket.shutdown(socket.SHUT_WR)

    def close(self):
        self.socket.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
