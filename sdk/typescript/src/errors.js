// SPDX-License-Identifier: Apache-2.0
// Typed errors mapped from the API's error codes (docs/api.md, the error table).

/** Every error the SDK throws for an API answer or a failed connection. */
export class AirlockError extends Error {
  constructor(message, { code = "unknown", status = 0, retryAfter = null, body = null } = {}) {
    super(message);
    this.name = new.target.name;
    /** The API's error code ("not_found", …), or "connection" / "protocol". */
    this.code = code;
    /** The HTTP status (0 when there was no answer). */
    this.status = status;
    /** Seconds from a Retry-After header (429, 503), else null. */
    this.retryAfter = retryAfter;
    /** The parsed JSON answer, when there was one. */
    this.body = body;
  }
}
export class InvalidArgumentError extends AirlockError {}
export class UnauthorizedError extends AirlockError {}
export class ForbiddenError extends AirlockError {}
export class NotFoundError extends AirlockError {}
export class MethodNotAllowedError extends AirlockError {}
export class ConflictError extends AirlockError {}
export class PayloadTooLargeError extends AirlockError {}
export class QuotaExceededError extends AirlockError {}
export class UnsupportedMediaTypeError extends AirlockError {}
export class BootFailedError extends AirlockError {}
export class InternalError extends AirlockError {}
export class GuestError extends AirlockError {}
export class UnavailableError extends AirlockError {}
/** 504 `timeout`, and a wait() that ran out of time. */
export class TimeoutError extends AirlockError {}
/** The daemon could not be reached (no socket, refused, reset). */
export class ConnectionError extends AirlockError {}
/** The daemon answered something the SDK does not understand. */
export class ProtocolError extends AirlockError {}

export const ERROR_CLASSES = {
  invalid_argument: InvalidArgumentError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  conflict: ConflictError,
  payload_too_large: PayloadTooLargeError,
  quota_exceeded: QuotaExceededError,
  unsupported_media_type: UnsupportedMediaTypeError,
  boot_failed: BootFailedError,
  internal: InternalError,
  guest_error: GuestError,
  unavailable: UnavailableError,
  timeout: TimeoutError,
};

const BY_STATUS = {
  400: "invalid_argument", 401: "unauthorized", 403: "forbidden", 404: "not_found",
  405: "method_not_allowed", 409: "conflict", 413: "payload_too_large", 415: "unsupported_media_type",
  429: "quota_exceeded", 500: "internal", 502: "guest_error", 503: "unavailable", 504: "timeout",
};

/** The error for an API error body `{"error":{"code","message"}}` (or for a status alone). */
export function errorFromBody(status, body, { retryAfter = null, what = "" } = {}) {
  const e = body && typeof body === "object" && body.error && typeof body.error === "object" ? body.error : null;
  const code = e && typeof e.code === "string" ? e.code : BY_STATUS[status] || "unknown";
  const msg = e && typeof e.message === "string" ? e.message : `HTTP ${status}${what ? ` from ${what}` : ""}`;
  const Cls = ERROR_CLASSES[code] || AirlockError;
  return new Cls(msg, { code, status, retryAfter, body });
}
