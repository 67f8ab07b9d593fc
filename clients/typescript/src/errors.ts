import { decodeAdminLock, decodeAdminPermit, decodeAdminRWLease, type AdminLock, type AdminPermit, type AdminRWLease } from "./types.js";

/** Prefix of the `type` URI of every problem the lock service answers with; the slug follows it. */
export const PROBLEM_TYPE_BASE = "https://ft288.dev/problems/";

/** Base class of every error this package defines. */
export class LocksError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** One invalid field of a validation-failed problem. */
export interface FieldError {
  /** The JSON member or path parameter, e.g. `"ttl_seconds"`. */
  field: string;
  /** What is wrong with it. */
  detail: string;
}

/** The parts of an error answer a {@link ProblemError} is built from. */
export interface ProblemInit {
  status: number;
  type?: string;
  title?: string;
  detail?: string;
  instance?: string;
  errors?: FieldError[];
  retryAfterMs?: number;
  forceReleased?: boolean;
  current?: AdminLock;
  currentPermit?: AdminPermit;
  currentRWLease?: AdminRWLease;
  permits?: number;
}

/**
 * An error answer of the service: an RFC 9457 problem document, or the bare
 * `{"message": "..."}` API Gateway itself answers with (then `type` is "" and
 * `title` is the message). The subclasses name the lock service's problem
 * types; an API Gateway answer (a 403 for a bad signature, a 404 for a wrong
 * URL) is never a {@link ForbiddenError} or a {@link NotFoundError}.
 */
export class ProblemError extends LocksError {
  /** The HTTP status code. */
  readonly status: number;
  /** The problem type URI, e.g. `https://ft288.dev/problems/not-found`; "" when the answer was not a problem document. */
  readonly type: string;
  /** The problem's short summary (or API Gateway's message). */
  readonly title: string;
  /** What happened in this occurrence. */
  readonly detail: string;
  /** The request path the problem is about. */
  readonly instance: string;
  /** The invalid fields of a validation-failed problem. */
  readonly errors: FieldError[];
  /** The Retry-After header in milliseconds; undefined when absent. */
  readonly retryAfterMs: number | undefined;
  /**
   * True on the 404 answer to a renewal or release of a lease that an
   * operator force released (the problem's `force_released` member).
   */
  readonly forceReleased: boolean;
  /**
   * The lease that now blocks the lock, on the 409 `stale-token` answer to a
   * force release whose fencing token was not the live lease's (the
   * problem's `current` member); undefined otherwise.
   */
  readonly current: AdminLock | undefined;
  /**
   * The permit that now keeps the slot, on the 409 `stale-token` answer to
   * {@link Client.forceReleasePermit} with a fencing token that was not the
   * permit's; undefined otherwise.
   */
  readonly currentPermit: AdminPermit | undefined;
  /**
   * The read/write lock's lease that now keeps the writer's place or the
   * reader's slot, on the 409 `stale-token` answer to
   * {@link Client.forceReleaseRW} with a fencing token that was not the
   * lease's; undefined otherwise.
   */
  readonly currentRWLease: AdminRWLease | undefined;

  constructor(operation: string, init: ProblemInit) {
    super(`${operation}: ${describe(init)}`);
    this.status = init.status;
    this.type = init.type ?? "";
    this.title = init.title ?? "";
    this.detail = init.detail ?? "";
    this.instance = init.instance ?? "";
    this.errors = init.errors ?? [];
    this.retryAfterMs = init.retryAfterMs;
    this.forceReleased = init.forceReleased ?? false;
    this.current = init.current;
    this.currentPermit = init.currentPermit;
    this.currentRWLease = init.currentRWLease;
  }

  /** The slug of `type` ("not-found", "stale-token", ...), or "" when it is not one of the lock service's types. */
  get slug(): string {
    return this.type.startsWith(PROBLEM_TYPE_BASE) ? this.type.slice(PROBLEM_TYPE_BASE.length) : "";
  }

  /**
   * Whether the same request may succeed later: server errors, throttling
   * (API Gateway's 429 and 500 `{"message"}` included) and timeouts. The
   * service's own 500 `internal` problem (a setup error) is not.
   */
  get temporary(): boolean {
    if (this.slug === "internal") return false;
    return this.status >= 500 || this.status === 429 || this.status === 408;
  }
}

function describe(p: ProblemInit): string {
  let s = String(p.status);
  if (p.title) s += ` ${p.title}`;
  if (p.detail) s += `: ${p.detail}`;
  if (p.errors?.length) s += ` (${p.errors.map((f) => `${f.field}: ${f.detail}`).join("; ")})`;
  return s;
}

/** 404 `not-found`: no live lease (never taken, released, expired, or force released by an operator: then `forceReleased`). Take the lock again. */
export class NotFoundError extends ProblemError {}
/** 403 `forbidden`: a live lease exists but belongs to another owner (or, with IAM auth, another principal). */
export class ForbiddenError extends ProblemError {}
/**
 * 409 `stale-token`: the owner matches but the fencing token does not; a
 * newer lease replaced the caller's. To a force release with a fencing token:
 * another lease blocks the lock, and `current` is that lease.
 */
export class StaleTokenError extends ProblemError {}
/**
 * 409 `permits-mismatch`: a semaphore acquire asked for another number of
 * permits than the semaphore has while some permit is held; `permits` is the
 * semaphore's. Every acquirer must give the same number. Not "full": the
 * semaphore may have free permits. Not retried.
 */
export class PermitsMismatchError extends ProblemError {
  /** The semaphore's number of permits, when the service said. */
  readonly permits: number | undefined;
  constructor(operation: string, init: ProblemInit) {
    super(operation, init);
    this.permits = init.permits;
  }
}
/** The service refused the request as invalid (400, 413, 422). Sending it again will not help. */
export class InvalidRequestError extends ProblemError {}
/** 422 `validation-failed`: a field is missing, of the wrong type, out of range or unknown; see `errors`. */
export class ValidationError extends InvalidRequestError {}
/** 400 `invalid-json`: the body is not one JSON object. */
export class InvalidJsonError extends InvalidRequestError {}
/** 413 `payload-too-large`: the body is over 16 KiB. */
export class PayloadTooLargeError extends InvalidRequestError {}
/**
 * 503 `service-unavailable` (the store was throttled, failed or too slow), a
 * gateway's 502/503/504, or API Gateway's throttle answers: 429
 * `{"message":"Too Many Requests"}` for a throttled route, 500
 * `{"message":"Internal Server Error"}` for a throttled function. Nothing the
 * caller was told about changed; retrying is safe, and the client retries
 * these with backoff.
 */
export class UnavailableError extends ProblemError {}
/** @deprecated The old name of {@link UnavailableError}: the same class. */
export const ServiceUnavailableError = UnavailableError;
/** @deprecated The old name of {@link UnavailableError}. */
export type ServiceUnavailableError = UnavailableError;
/** 500 `internal`: a failure of the service (a setup error); the cause is in its logs. Not retried. */
export class InternalError extends ProblemError {}

const bySlug: Record<string, new (operation: string, init: ProblemInit) => ProblemError> = {
  "not-found": NotFoundError,
  forbidden: ForbiddenError,
  "stale-token": StaleTokenError,
  "permits-mismatch": PermitsMismatchError,
  "validation-failed": ValidationError,
  "invalid-json": InvalidJsonError,
  "payload-too-large": PayloadTooLargeError,
  "service-unavailable": UnavailableError,
  internal: InternalError,
};

/**
 * Builds the error for a non-2xx answer: the problem document's class by its
 * slug; else (API Gateway's `{"message"}`, a proxy's page) a class by status
 * only where that is safe: 502/503/504 and the gateway's throttle answers
 * 429/500 → UnavailableError, 400/413/422 → InvalidRequestError,
 * anything else a plain ProblemError.
 */
export function problemFromAnswer(operation: string, status: number, body: string, retryAfterMs: number | undefined): ProblemError {
  let doc: unknown;
  try {
    doc = JSON.parse(body);
  } catch {
    doc = undefined;
  }
  const o = typeof doc === "object" && doc !== null && !Array.isArray(doc) ? (doc as Record<string, unknown>) : {};
  const str = (v: unknown) => (typeof v === "string" ? v : undefined);
  const type = str(o.type);
  const title = str(o.title);
  if (type || title) {
    const errors = Array.isArray(o.errors)
      ? o.errors
          .filter((e): e is Record<string, unknown> => typeof e === "object" && e !== null)
          .map((e) => ({ field: str(e.field) ?? "", detail: str(e.detail) ?? "" }))
      : [];
    const init: ProblemInit = {
      status, type, title, detail: str(o.detail), instance: str(o.instance), errors, retryAfterMs, forceReleased: o.force_released === true,
      current: decodeAdminLock(o.current),
      currentPermit: decodeAdminPermit(o.current),
      currentRWLease: decodeAdminRWLease(o.current),
      permits: typeof o.permits === "number" ? o.permits : undefined,
    };
    const slug = type?.startsWith(PROBLEM_TYPE_BASE) ? type.slice(PROBLEM_TYPE_BASE.length) : "";
    const Cls = Object.hasOwn(bySlug, slug) ? bySlug[slug]! : ProblemError;
    const err = new Cls(operation, init);
    const ticket = str(o.queue_ticket);
    if (ticket) queueTickets.set(err, ticket);
    return err;
  }
  const init: ProblemInit = { status, title: str(o.message) ?? statusText(status), retryAfterMs };
  let err: ProblemError;
  if (status === 429 || status === 500 || status === 502 || status === 503 || status === 504) err = new UnavailableError(operation, init);
  else if (status === 400 || status === 413 || status === 422) err = new InvalidRequestError(operation, init);
  else err = new ProblemError(operation, init);
  if (str(o.message) !== undefined) gatewayAnswers.add(err);
  return err;
}

/**
 * The waiter's place in the queue that a waiting round's 503 may carry
 * (`queue_ticket`: the service could not learn whether its queue write
 * landed), by error.
 */
const queueTickets = new WeakMap<ProblemError, string>();

/**
 * The `queue_ticket` of the problem answer `err`, if it carries one: the
 * next round sends it back to reclaim the place. Internal: not exported by
 * the package.
 */
export function queueTicketOf(err: unknown): string | undefined {
  return err instanceof ProblemError ? queueTickets.get(err) : undefined;
}

/** The errors built from API Gateway's own JSON `{"message"}` answers (not a problem document). */
const gatewayAnswers = new WeakSet<ProblemError>();

/**
 * Whether `err` is API Gateway's own 404 `{"message": ...}`, its answer for a
 * route it does not have (a stack without the waiting routes), and not the
 * service's problem+json not-found. Internal: not exported by the package.
 */
export function isNoRoute(err: unknown): boolean {
  return err instanceof ProblemError && err.status === 404 && gatewayAnswers.has(err);
}

function statusText(status: number): string {
  const texts: Record<number, string> = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
    413: "Content Too Large", 422: "Unprocessable Content", 429: "Too Many Requests",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
  };
  return texts[status] ?? "";
}

/** The answer of {@link Client.tryAcquire} (and of an `acquire` whose wait ran out) when another owner holds the lock. */
export class HeldError extends LocksError {
  /** The lock's name. */
  readonly resource: string;
  /** When the holder's lease ends by the service's clock, when the service said; the holder may renew it. */
  readonly expiresAt: Date | undefined;
  /** The service's advice on when to try again (Retry-After), in milliseconds, when given. */
  readonly retryAfterMs: number | undefined;

  constructor(resource: string, expiresAt?: Date, retryAfterMs?: number, what?: string) {
    let msg = what ?? `lock ${JSON.stringify(resource)} is held by another owner`;
    if (expiresAt) msg += ` until ${expiresAt.toISOString()}`;
    if (retryAfterMs !== undefined) msg += ` (retry after ${retryAfterMs} ms)`;
    super(msg);
    this.resource = resource;
    this.expiresAt = expiresAt;
    this.retryAfterMs = retryAfterMs;
  }
}

/**
 * The answer of {@link Client.tryAcquireSemaphore} (and of an
 * `acquireSemaphore` whose wait ran out) when every permit is held by
 * another owner: a {@link HeldError} (the semaphore's "held"), whose
 * `resource` is the semaphore's name. A semaphore with another number of
 * permits is a {@link PermitsMismatchError} instead.
 */
export class FullError extends HeldError {
  /**
   * The earliest time a permit comes free by the service's clock (an
   * expiry, or the end of a lock-delay); undefined when the service did not
   * say: the permits it saw free were taken meanwhile, and trying again at
   * once may succeed. (`expiresAt` is the same date.)
   */
  readonly freeAt: Date | undefined;

  constructor(name: string, freeAt?: Date, retryAfterMs?: number) {
    super(name, freeAt, retryAfterMs, `semaphore ${JSON.stringify(name)} is full: every permit is held by another owner`);
    this.freeAt = freeAt;
  }
}

/**
 * The reason of a {@link LeaseLostError} when no renewal succeeded before the
 * lease's local deadline (the service was unreachable or slow, or nobody
 * renewed).
 */
export class LeaseExpiredError extends LocksError {
  constructor() {
    super("no successful renewal before the lease's local deadline");
  }
}

/**
 * Why a lease was lost: `reason` (also `cause`) is the refusal of a renewal
 * (a {@link NotFoundError}, {@link ForbiddenError}, {@link StaleTokenError}
 * or another answer renewing cannot get past) or a {@link LeaseExpiredError}.
 * It is the `reason` of the lease's `signal`. `forceReleased` is true, and the
 * message says so, when the service said an operator force released it.
 */
export class LeaseLostError extends LocksError {
  /** The lock's name. */
  readonly resource: string;
  /** The lost lease's fencing token. */
  readonly fencingToken: number;
  /** Why it was lost. */
  readonly reason: Error;
  /** True when an operator force released the lease (a 404 with `force_released`). */
  readonly forceReleased: boolean;
  /** The permit's slot when the lease was a semaphore's permit (`resource` is then the semaphore's name), or a reader's of a read/write lock; undefined for a lock. */
  readonly slot: number | undefined;
  /** The lease's mode when it was a read/write lock's; undefined otherwise. */
  readonly mode: "read" | "write" | undefined;

  constructor(resource: string, fencingToken: number, reason: Error, slot?: number, mode?: "read" | "write") {
    const forced = reason instanceof ProblemError && reason.forceReleased;
    const why = forced ? `it was force released by an operator (${reason.message})` : reason.message;
    const what =
      mode === "read" ? `read lease in slot ${slot} of ${JSON.stringify(resource)}`
      : mode === "write" ? `write lease on ${JSON.stringify(resource)}`
      : slot === undefined ? `lease on ${JSON.stringify(resource)}` : `permit in slot ${slot} of semaphore ${JSON.stringify(resource)}`;
    super(`${what} (fencing token ${fencingToken}) lost: ${why}`, { cause: reason });
    this.resource = resource;
    this.fencingToken = fencingToken;
    this.reason = reason;
    this.forceReleased = forced;
    this.slot = slot;
    this.mode = mode;
  }
}

/** The `reason` of a lease's `signal` after {@link Lease.release}. */
export class LeaseReleasedError extends LocksError {
  constructor(resource: string) {
    super(`lease on ${JSON.stringify(resource)} released`);
  }
}

/**
 * A write to the protected resource that its fencing check refused: it
 * carried `token`, and the resource had already accepted a larger one, so
 * another holder has taken the lock since (this one's lease ended, perhaps
 * while it was paused). Stop: do not retry with the same token. Thrown by
 * the `check` of `sqlFence` (`@ft288/locks/fence`) when no row changed.
 */
export class FencedError extends LocksError {
  /** The fencing token of the refused write. */
  readonly token: number;

  constructor(token: number, message?: string) {
    super(message ?? `the write with fencing token ${token} changed nothing: a newer token has written (or no row matched)`);
    this.token = token;
  }
}

/**
 * A request that got no answer: a network failure or the client's own
 * timeout (`cause` says which). The service may or may not have acted on it;
 * every request of this API is safe to repeat.
 */
export class RequestFailedError extends LocksError {}

/**
 * A 2xx answer that is not what the API promises (a proxy's page, a
 * truncated body). Treated like no answer: retried, and an acquire that got
 * it may have been granted.
 */
export class UnexpectedAnswerError extends LocksError {}

/**
 * Signing was asked for but no credentials could be had. `temporary` is true
 * when credentials were obtained before (a refresh failed: renewals keep
 * trying until the lease's deadline), false on the first try (misconfigured:
 * nothing will work).
 */
export class CredentialsError extends LocksError {
  readonly temporary: boolean;
  constructor(message: string, temporary: boolean, options?: ErrorOptions) {
    super(message, options);
    this.temporary = temporary;
  }
}

/** Whether a failed request may be sent again: no answer, a temporary answer, a credentials refresh hiccup. */
export function retryable(err: unknown): boolean {
  if (err instanceof ProblemError) return err.temporary;
  if (err instanceof RequestFailedError || err instanceof UnexpectedAnswerError) return true;
  if (err instanceof CredentialsError) return err.temporary;
  return false;
}

/** Whether a failed acquire may have been granted all the same: it was sent and no definite answer came. */
export function outcomeUnknown(err: unknown): boolean {
  return err instanceof RequestFailedError || err instanceof UnexpectedAnswerError || (err instanceof ProblemError && err.status >= 500);
}
