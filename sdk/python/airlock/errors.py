# SPDX-License-Identifier: Apache-2.0
"""Typed exceptions, one per error code of the API (docs/api.md, the error
table). Every API error body is {"error": {"code", "message"}}; the code picks
the class, the HTTP status is kept for codes the SDK does not know."""


class AirlockError(Exception):
    """Base of every error the SDK raises.

    code: the API's error code ("not_found", ...), or the SDK's own
    ("connection", "protocol", "command_failed"); status: the HTTP status
    (None when no answer came); retry_after: seconds from a Retry-After
    header (429, 503), else None."""

    code = "error"

    def __init__(self, message, code=None, status=None, retry_after=None, body=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status
        self.retry_after = retry_after
        self.body = body

    def __str__(self):
        prefix = f"{self.status} {self.code}" if self.status else self.code
        return f"{prefix}: {self.message}"


ERROR_CLASSES = {}  # the API's error code -> its class
STATUS_CLASSES = {}  # an HTTP status -> the class of a code the SDK does not know


def _api_error(name, code, status, doc):
    """The AirlockError subclass `name` for the API's error `code`; it also
    stands for HTTP `status` (None: no status of its own)."""
    cls = type(name, (AirlockError,), {"__doc__": doc, "__module__": __name__, "code": code})
    ERROR_CLASSES[code] = cls
    if status is not None:
        STATUS_CLASSES[status] = cls
    return cls


InvalidArgument = _api_error(
    "InvalidArgument", "invalid_argument", 400,
    "400: malformed JSON, unknown field, wrong type, value out of range, unknown template, a command that cannot "
    "be started.")
Unauthorized = _api_error(
    "Unauthorized", "unauthorized", 401,
    "401 (TCP only): missing, malformed, unknown or revoked token.")
Forbidden = _api_error(
    "Forbidden", "forbidden", 403,
    "403: an operator route over a token, another tenant named, a network rule outside the operator's ceiling, or "
    "the guest refused (eacces, eperm).")
NotFound = _api_error(
    "NotFound", "not_found", 404,
    "404: unknown sandbox, snapshot, process, secret or guest path.")
MethodNotAllowed = _api_error("MethodNotAllowed", "method_not_allowed", 405, None)
Conflict = _api_error(
    "Conflict", "conflict", 409,
    "409: the sandbox is not in a state that allows it (paused, deleted, ...), or a guest path exists / is not "
    "empty / is (not) a directory.")
PayloadTooLarge = _api_error("PayloadTooLarge", "payload_too_large", 413, None)
UnsupportedMediaType = _api_error("UnsupportedMediaType", "unsupported_media_type", 415, None)
QuotaExceeded = _api_error(
    "QuotaExceeded", "quota_exceeded", 429,
    "429: a tenant's quota, or its request rate (then retry_after is set).")
BootFailed = _api_error(
    "BootFailed", "boot_failed", None,
    "500 boot_failed: the VM did not come up; the sandbox is in state error.")
InternalError = _api_error(
    "InternalError", "internal", 500,
    "500 internal: a bug or a host failure.")
GuestError = _api_error(
    "GuestError", "guest_error", 502,
    "502: the guest agent broke the protocol or went away.")
Unavailable = _api_error(
    "Unavailable", "unavailable", 503,
    "503: the daemon is shutting down, re-attaching the sandbox, or no start slot came in time; retry after "
    "retry_after seconds.")
Timeout = _api_error(
    "Timeout", "timeout", 504,
    "504 (the operation did not finish in time), or a wait() that ran out (status 408, with the still-running "
    "process in .process).")


class ConnectionFailed(AirlockError):
    """The daemon could not be reached (no answer at all)."""
    code = "connection"


class ProtocolError(AirlockError):
    """The daemon's answer was not what the API describes."""
    code = "protocol"


class CommandFailed(AirlockError):
    """exec(..., check=True) of a command that exited non-zero; .result is
    the ExecResult."""
    code = "command_failed"

    def __init__(self, message, result):
        super().__init__(message)
        self.result = result


def error_from(code, message, status=None, retry_after=None, body=None):
    """The exception for an API error code (falling back on the status)."""
    cls = ERROR_CLASSES.get(code) or STATUS_CLASSES.get(status) or AirlockError
    return cls(message, code=code or cls.code, status=status, retry_after=retry_after, body=body)
