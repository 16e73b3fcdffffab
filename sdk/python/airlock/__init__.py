# SPDX-License-Identifier: Apache-2.0
"""Airlock's Python SDK: sandboxes (microVMs) on an airlockd, over its unix
socket or its TCP listener with a token. Standard library only.

    from airlock import Sandbox
    with Sandbox.create(template="base") as sb:
        print(sb.exec(["python3", "-c", "print(6 * 7)"]).stdout)

See sdk/python/README.md."""
from ._http import DEFAULT_SOCKET
from .client import Client, EventStream, Snapshot, parse_metrics
from .errors import (AirlockError, BootFailed, CommandFailed, Conflict, ConnectionFailed, Forbidden, GuestError,
                     InternalError, InvalidArgument, MethodNotAllowed, NotFound, PayloadTooLarge, ProtocolError,
                     QuotaExceeded, Timeout, Unauthorized, Unavailable, UnsupportedMediaType)
from .files import Files
from .process import ExecResult, OutputChunk, OutputStream, Process, Pty
from .sandbox import Sandbox
from .templates import DockerIgnore, Templates

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOCKET", "Client", "EventStream", "Snapshot", "parse_metrics", "Files", "ExecResult", "OutputChunk",
    "OutputStream", "Process", "Pty", "Sandbox", "Templates", "DockerIgnore", "AirlockError", "BootFailed",
    "CommandFailed", "Conflict", "ConnectionFailed", "Forbidden", "GuestError", "InternalError", "InvalidArgument",
    "MethodNotAllowed", "NotFound", "PayloadTooLarge", "ProtocolError", "QuotaExceeded", "Timeout", "Unauthorized",
    "Unavailable", "UnsupportedMediaType",
]
