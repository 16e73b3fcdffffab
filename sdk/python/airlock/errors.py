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


class InvalidArgument(AirlockError):
    """400: malformed JSON, unknown field, wrong type, value out of range,
    unknown template, a command that cannot be started."""
    code = "invalid_argument"


class Unauthorized(AirlockError):
    """401 (TCP only): missing, malformed, unknown or revoked token."""
    code = "unauthorized"


class Forbidden(AirlockError):
    """403: an operator route over a token, another tenant named, a network
    rule outside the operator's ceiling, or the guest refused (eacces, eperm)."""
    code = "forbidden"


class NotFound(AirlockError):
    """404: unknown sandbox, snapshot, process, secret or guest path."""
    code = "not_found"


class MethodNotAllowed(AirlockError):
    code = "method_not_allowed"


class Conflict(AirlockError):
    """409: the sandbox is not in a state that allows it (paused, deleted,
    ...), or a guest path exists / is not empty / is (not) a directory."""
    code = "conflict"


class PayloadTooLarge(AirlockError):
    code = "payload_too_large"


class UnsupportedMediaType(AirlockError):
    code = "unsupported_media_type"


class QuotaExceeded(AirlockError):
    """429: a tenant's quota, or its request rate (then retry_after is set)."""
    code = "quota_exceeded"


class BootFailed(AirlockError):
    """500 boot_failed: the VM did not come up; the sandbox is in state error."""
    code = "boot_failed"


class InternalError(AirlockError):
    """500 internal: a bug or a host failure."""
    code = "internal"


class GuestError(AirlockError):
    """502: the guest agent broke the protocol or went away."""
    code = "guest_error"


class Unavailable(AirlockError):
    """503: the daemon is shutting down, re-attaching the sandbox, or no start
    slot came in time; retry after retry_after seconds."""
    code = "unavailable"


class Timeout(AirlockError):
    """504 (the operation did not finish in time), or a wait() that ran out
    (status 408, with the still-running process in .process)."""
    code = "timeout"


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


ERROR_CLASSES = {
    cls.code: cls
    for cls in (InvalidArgument, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, PayloadTooLarge,
                UnsupportedMediaType, QuotaExceeded, BootFailed, InternalError, GuestError, Unavailable, Timeout)
}

STATUS_CLASSES = {400: InvalidArgument, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed,
                  409: Conflict, 413: PayloadTooLarge, 415: UnsupportedMediaType, 429: QuotaExceeded,
                  500: InternalError, 502: GuestError, 503: Unavailable, 504: Timeout}


def error_from(code, message, status=None, retry_after=None, body=None):
    """The exception for an API error code (falling back on the status)."""
    cls = ERROR_CLASSES.get(code) or STATUS_CLASSES.get(status) or AirlockError
    return cls(message, code=code or cls.code, status=status, retry_after=retry_after, body=body)
