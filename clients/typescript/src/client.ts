import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  CredentialsError,
  ForbiddenError,
  HeldError,
  LeaseLostError,
  LocksError,
  NotFoundError,
  ProblemError,
  RequestFailedError,
  StaleTokenError,
  UnexpectedAnswerError,
  ValidationError,
  outcomeUnknown,
  problemFromAnswer,
  retryable,
} from "./errors.js";
import { Lease, leaseMarginMs, releaseRetrying, roundLimitMs } from "./lease.js";
import { RequestSigner, resolveRegion, type SigV4Options } from "./sigv4.js";
import { Backoff, parseRetryAfter, settle, sleep } from "./util.js";

/** The User-Agent header sent unless `userAgent` sets another. */
export const DEFAULT_USER_AGENT = "ft288-locks-ts-client/0.1";
/** Bounds one HTTP exchange (plus any time the service is asked to wait). */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** The first retry delay's upper bound. */
export const DEFAULT_BACKOFF_BASE_MS = 50;
/** Caps retry delays, and Retry-After with them, so an early release is noticed within about this long. */
export const DEFAULT_BACKOFF_MAX_MS = 2_000;
/**
 * The longest the service is asked to hold one acquire (`wait_seconds`). A
 * round is shorter for a short lease: see {@link LockClient.acquire}.
 */
export const MAX_SERVER_WAIT_SECONDS = 20;

const MAX_RESPONSE_BYTES = 1 << 20;
const MAX_TIMER_MS = 2 ** 31 - 1;

/** A live lease as the service reports it. Its times are the service's clock: informational only. */
export interface LockInfo {
  resource: string;
  owner: string;
  /** Grows with every acquire of `resource`. */
  fencingToken: number;
  acquiredAt: Date;
  expiresAt: Date;
  /** The lease's lock-delay in seconds, 0 when it has none: expired unreleased, it keeps others out that much longer. */
  lockDelaySeconds: number;
}

export interface LockClientOptions {
  /** The fetch to send requests with. Default: the global fetch. */
  fetch?: typeof globalThis.fetch;
  /** The User-Agent header; "" sends fetch's own. Default {@link DEFAULT_USER_AGENT}. */
  userAgent?: string;
  /** Bound on one HTTP exchange, in ms (a waiting acquire gets its wait on top). Default {@link DEFAULT_TIMEOUT_MS}. */
  timeoutMs?: number;
  /**
   * Retry delays of `acquire` and of the keep-alive: the n-th retry waits a
   * random time up to min(max, base·2ⁿ); `acquire` also waits at least the
   * service's Retry-After, capped at max. Default 50 ms to 2 s.
   */
  backoff?: { baseMs: number; maxMs: number };
  /**
   * How long before the end of its TTL (counted from before the request that
   * granted or renewed it) a lease is given up when no renewal succeeded.
   * Default min(ttl/10, 1 s); a margin of the TTL or more falls back to it.
   */
  leaseMarginMs?: number;
  /** Sign every request with SigV4 for `execute-api` (API Gateway with IAM auth). `true`: region and credentials from the environment. */
  sigv4?: SigV4Options | boolean;
}

export interface TryAcquireOptions {
  /** The lease's time-to-live in whole seconds, at least 1. */
  ttlSeconds: number;
  /**
   * Who holds the lease. Default: a fresh `${hostname}:${pid}:${random}` for
   * every acquire, so two acquires in one process never share a lease and a
   * grant nobody heard of can always be given back.
   */
  owner?: string;
  /** Stops waiting; a grant that arrives afterwards is released. */
  signal?: AbortSignal;
  /** Renew every ttl/3 from the moment the lease exists. Default true. */
  keepAlive?: boolean;
  /**
   * Ask for a lock-delay of this many whole seconds (the service allows 0–300
   * by default): should the lease expire without a release, no other owner
   * can take the lock until that long after its expiry, so a holder that is
   * slow rather than dead cannot overlap the next one. A release frees the
   * lock at once. Default 0: none.
   */
  lockDelaySeconds?: number;
}

export interface AcquireOptions extends TryAcquireOptions {
  /** How long to wait for the lock in total, in seconds. Default: until `signal` aborts. */
  waitSeconds?: number;
}

export interface WithLockOptions extends AcquireOptions {
  /** How long to wait for the lock, in seconds. Default 0: try once, and reject with {@link HeldError} when it is held. */
  waitSeconds?: number;
}

/** The work {@link LockClient.withLock} runs: `signal` aborts when the lease is lost (or the caller's signal aborts). */
export type LockedFunction<T> = (signal: AbortSignal, fencingToken: number, lease: Lease) => Promise<T> | T;

interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

type AttemptResult = { granted: true; lock: LockInfo; t0: number } | { granted: false; held: HeldError };

/**
 * Talks to one lock service. Build one per process and share it.
 *
 * ```ts
 * const locks = new LockClient("https://abc123.execute-api.eu-west-1.amazonaws.com", { sigv4: true });
 * const lease = await locks.acquire("payment:42", { ttlSeconds: 30, waitSeconds: 60 });
 * try {
 *   await charge({ signal: lease.signal, fencingToken: lease.fencingToken });
 * } finally {
 *   await lease.release();
 * }
 * ```
 */
export class LockClient {
  /** The service's base URL, without a trailing slash. */
  readonly endpoint: string;
  readonly #fetch: typeof globalThis.fetch;
  readonly #userAgent: string;
  readonly #timeoutMs: number;
  readonly #backoff: Backoff;
  readonly #marginMs: number | undefined;
  readonly #signer: RequestSigner | undefined;
  /** Whether the service holds an acquire for `wait_seconds`: undefined until known. */
  #serverWait: boolean | undefined;
  readonly #pending = new Set<Promise<void>>();

  /**
   * @param endpoint the API's base URL, e.g. "http://127.0.0.1:8080" or
   *   "https://abc123.execute-api.eu-west-1.amazonaws.com". Nothing is sent
   *   until a method is called.
   */
  constructor(endpoint: string | URL, options: LockClientOptions = {}) {
    let u: URL;
    try {
      u = new URL(endpoint);
    } catch {
      throw new TypeError(`LockClient: endpoint ${JSON.stringify(String(endpoint))}: want http(s)://host[:port][/path]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.host) {
      throw new TypeError(`LockClient: endpoint ${JSON.stringify(u.href)}: want http(s)://host[:port][/path]`);
    }
    if (u.search || u.hash || u.username || u.password) {
      throw new TypeError(`LockClient: endpoint ${JSON.stringify(u.href)}: must not have a query, fragment or credentials`);
    }
    this.endpoint = u.href.replace(/\/+$/, "");
    const f = options.fetch;
    this.#fetch = f ?? ((input, init) => globalThis.fetch(input, init));
    this.#userAgent = options.userAgent ?? DEFAULT_USER_AGENT;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!(this.#timeoutMs > 0 && this.#timeoutMs <= MAX_TIMER_MS)) throw new RangeError(`LockClient: timeoutMs ${this.#timeoutMs}: want a positive number`);
    const b = options.backoff ?? { baseMs: DEFAULT_BACKOFF_BASE_MS, maxMs: DEFAULT_BACKOFF_MAX_MS };
    if (!(b.baseMs > 0 && b.maxMs >= b.baseMs && b.maxMs <= MAX_TIMER_MS)) throw new RangeError(`LockClient: backoff ${b.baseMs}..${b.maxMs} ms: want 0 < base ≤ max`);
    this.#backoff = new Backoff(b.baseMs, b.maxMs);
    if (options.leaseMarginMs !== undefined && !(options.leaseMarginMs > 0)) throw new RangeError(`LockClient: leaseMarginMs ${options.leaseMarginMs}: want a positive number`);
    this.#marginMs = options.leaseMarginMs;
    if (options.sigv4) {
      const o = options.sigv4 === true ? {} : options.sigv4;
      this.#signer = new RequestSigner(resolveRegion(o.region, u), o.credentials);
    }
  }

  /**
   * A client from the environment: `LOCKS_ENDPOINT` (default
   * http://127.0.0.1:8080, as `lockctl`), signing when `LOCKS_SIGV4` is 1 or
   * true (region from the endpoint or `AWS_REGION`, credentials from the
   * default chain).
   */
  static fromEnv(env: Record<string, string | undefined> = process.env, options: LockClientOptions = {}): LockClient {
    const sign = /^(1|true|yes)$/i.test(env.LOCKS_SIGV4 ?? "");
    return new LockClient(env.LOCKS_ENDPOINT || "http://127.0.0.1:8080", { ...(sign ? { sigv4: true } : {}), ...options });
  }

  /**
   * Asks once for a lease of `ttlSeconds` on `resource`. Resolves to the
   * lease (with its keep-alive running unless `keepAlive: false`), or rejects
   * with {@link HeldError} when another owner holds the lock. An owner that
   * already holds it gets a new lease with a larger fencing token.
   */
  tryAcquire(resource: string, options: TryAcquireOptions): Promise<Lease> {
    return this.#acquire(`acquire ${JSON.stringify(resource)}`, resource, options, 0);
  }

  /**
   * Waits for a lease of `ttlSeconds` on `resource` until `signal` aborts or
   * `waitSeconds` pass. Where the service supports it, it waits at the
   * service (`wait_seconds`, up to 20 s per request, within the time left,
   * and at most ⅔ × (ttl − margin) whole seconds: the lease's local deadline
   * counts from before the request, so a grant at the end of a round still
   * leaves a third of it for the first renewal). When that is under a second,
   * and against an older service, which it remembers, it polls with jittered
   * exponential backoff, waiting at least the service's Retry-After (capped
   * at the backoff maximum). Temporary failures (503, API Gateway's throttle
   * answers 429 and 500 `{"message"}`, other 5xx but the service's `internal`
   * problem, no answer) are retried the same way; repeating an acquire is
   * safe.
   *
   * It rejects with `signal.reason` when the signal aborts; when
   * `waitSeconds` run out, with the last attempt's error ({@link HeldError}
   * while the lock stayed held). A grant that arrives after it gave up is
   * released.
   */
  acquire(resource: string, options: AcquireOptions): Promise<Lease> {
    const wait = options.waitSeconds;
    if (wait !== undefined && !(typeof wait === "number" && wait >= 0)) {
      return Promise.reject(new RangeError(`acquire ${JSON.stringify(resource)}: waitSeconds ${wait}: want a number ≥ 0`));
    }
    const waitMs = wait === undefined || wait * 1000 > MAX_TIMER_MS ? Infinity : wait * 1000;
    return this.#acquire(`acquire ${JSON.stringify(resource)}`, resource, options, waitMs);
  }

  /**
   * Runs `fn(signal, fencingToken, lease)` under a lease on `resource` and
   * always releases it. By default it tries once (`waitSeconds: 0`), so a
   * second host skips the job with a {@link HeldError}. `signal` aborts when the
   * lease is lost (and when `options.signal` does). It resolves to what `fn`
   * returns, and rejects with what `fn` throws; when `fn` returns but the
   * lease was lost meanwhile, or the release shows that it had ended at the
   * service, it rejects with a {@link LeaseLostError}: the work ran at least
   * partly unprotected. A release that fails temporarily is ignored (the
   * lease runs out by itself).
   */
  async withLock<T>(resource: string, fn: LockedFunction<T>, options: WithLockOptions): Promise<T> {
    const lease = await this.acquire(resource, { ...options, waitSeconds: options.waitSeconds ?? 0 });
    const signal = options.signal ? AbortSignal.any([lease.signal, options.signal]) : lease.signal;
    let result: T;
    try {
      result = await fn(signal, lease.fencingToken, lease);
    } catch (err) {
      await lease.release().catch(() => {});
      throw err;
    }
    if (!lease.held) {
      const lost = lease.signal.reason as LeaseLostError;
      await lease.release().catch(() => {}); // after a local expiry the service may still hold it
      throw lost;
    }
    try {
      await lease.release();
    } catch (err) {
      if (err instanceof NotFoundError || err instanceof ForbiddenError || err instanceof StaleTokenError) {
        throw new LeaseLostError(resource, lease.fencingToken, err);
      }
    }
    return result;
  }

  /** The live lease on `resource`; rejects with {@link NotFoundError} when there is none. A strongly consistent read. */
  async status(resource: string, options: { signal?: AbortSignal } = {}): Promise<LockInfo> {
    const op = `status ${JSON.stringify(resource)}`;
    checkResource(op, resource);
    const ans = await this.#send(op, "GET", lockPath(resource), undefined, options);
    return parseLock(op, parseJSON(op, ans.text));
  }

  /**
   * Extends `owner`'s live lease on `resource` to `ttlSeconds` from now. With
   * `fencingToken` the live lease must carry it ({@link StaleTokenError}
   * otherwise). An expired lease cannot be renewed ({@link NotFoundError}).
   * Most callers use {@link Lease.renew} or the keep-alive instead.
   */
  async renew(resource: string, options: { owner: string; ttlSeconds: number; fencingToken?: number; signal?: AbortSignal }): Promise<LockInfo> {
    const op = `renew ${JSON.stringify(resource)}`;
    checkResource(op, resource);
    checkOwner(op, options.owner);
    checkTtl(op, options.ttlSeconds);
    checkToken(op, options.fencingToken);
    const payload: Record<string, unknown> = { owner: options.owner, ttl_seconds: options.ttlSeconds };
    if (options.fencingToken !== undefined) payload.fencing_token = options.fencingToken;
    const ans = await this.#send(op, "POST", `${lockPath(resource)}/renew`, payload, options);
    const body = parseJSON(op, ans.text) as Record<string, unknown>;
    if (body.renewed !== true) throw new UnexpectedAnswerError(`${op}: malformed answer: "renewed" is not true`);
    return parseLock(op, body.lock);
  }

  /**
   * Ends `owner`'s live lease on `resource` (with `fencingToken`: only that
   * lease). Rejects with {@link NotFoundError} when there is no live lease,
   * {@link ForbiddenError} when another owner holds it, {@link StaleTokenError}
   * when a newer lease replaced the token's.
   */
  async release(resource: string, options: { owner: string; fencingToken?: number; signal?: AbortSignal }): Promise<void> {
    const op = `release ${JSON.stringify(resource)}`;
    checkResource(op, resource);
    checkOwner(op, options.owner);
    checkToken(op, options.fencingToken);
    const payload: Record<string, unknown> = { owner: options.owner };
    if (options.fencingToken !== undefined) payload.fencing_token = options.fencingToken;
    await this.#send(op, "DELETE", lockPath(resource), payload, options);
  }

  /**
   * Resolves when every background release has finished: those of grants
   * that arrived after the caller stopped waiting. Await it before a Lambda
   * handler returns if it aborts acquires, so the release is not frozen with
   * the execution environment.
   */
  async flush(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }

  async #acquire(op: string, resource: string, options: TryAcquireOptions, waitMs: number): Promise<Lease> {
    checkResource(op, resource);
    if (options.owner !== undefined) checkOwner(op, options.owner);
    checkTtl(op, options.ttlSeconds);
    checkLockDelay(op, options.lockDelaySeconds);
    const { signal, ttlSeconds } = options;
    // The longest round at the service the lease allows, in whole seconds.
    const ttlMs = ttlSeconds * 1000;
    const roundLimit = Math.floor(roundLimitMs(ttlMs, leaseMarginMs(ttlMs, this.#marginMs)) / 1000);
    signal?.throwIfAborted();
    const generated = options.owner === undefined;
    const owner = options.owner ?? defaultOwner();
    const end = performance.now() + waitMs;
    const budget = new AbortController();
    const timer =
      waitMs > 0 && waitMs < Infinity
        ? setTimeout(() => budget.abort(new DOMException(`${op}: gave up waiting after ${waitMs} ms`, "TimeoutError")), waitMs)
        : undefined;
    const stop = signal ? AbortSignal.any([signal, budget.signal]) : budget.signal;
    let last: unknown;
    let lastUnknown = false; // the last attempt may have been granted unheard
    try {
      for (let attempt = 0; !stop.aborted; ) {
        let wait = 0;
        if (waitMs > 0 && this.#serverWait !== false) {
          // Leave time for the answer to come back within the budget, and a
          // third of the lease's local validity after a grant at the end.
          wait = Math.min(MAX_SERVER_WAIT_SECONDS, Math.floor((end - performance.now() - 250) / 1000), roundLimit);
        }
        const serverWaits = wait >= 1;
        const started = performance.now();
        const p = this.#attempt(op, resource, owner, ttlSeconds, serverWaits ? wait : undefined, options.lockDelaySeconds);
        const r = await settle(p, stop);
        if (r.status === "aborted") {
          this.#releaseLate(p, resource, owner, generated);
          lastUnknown = false;
          break;
        }
        if (r.status === "ok") {
          lastUnknown = false;
          if (serverWaits) this.#serverWait = true;
          const a = r.value;
          if (a.granted) {
            const lease = new Lease({
              client: this, lock: a.lock, ttlSeconds, t0: a.t0,
              marginMs: this.#marginMs, backoff: this.#backoff, keepAlive: options.keepAlive ?? true,
            });
            if (lease.held) return lease;
            // The answer came after the lease's local deadline: give it back and try again.
            this.#background(this.#cleanUp(resource, owner, a.lock.fencingToken));
            last = (lease.signal.reason as LeaseLostError).reason;
          } else {
            last = a.held;
            if (serverWaits && performance.now() - started >= Math.min(wait * 1000, 1000)) {
              attempt = 0; // the service did the waiting: ask again at once
              continue;
            }
          }
        } else {
          const err = r.error;
          if (serverWaits && err instanceof ValidationError && err.errors.some((f) => f.field === "wait_seconds")) {
            this.#serverWait = false; // an older service: poll from now on
            continue;
          }
          if (!retryable(err)) throw err;
          last = err;
          lastUnknown = outcomeUnknown(err);
        }
        if (waitMs === 0 || performance.now() >= end) break;
        const delay = Math.min(this.#backoff.delay(attempt++, hint(last)), end - performance.now());
        if (!(await sleep(delay, stop)) || performance.now() >= end) break;
      }
      if (lastUnknown && generated) {
        // Nobody else uses this owner: end whatever lease it may have.
        this.#background(this.#cleanUp(resource, owner));
      }
      if (signal?.aborted) throw signal.reason;
      throw last ?? budget.signal.reason;
    } finally {
      clearTimeout(timer);
    }
  }

  /** One acquire request. It is deliberately not cancelled by the caller's signal, so that a late grant is heard and released. */
  async #attempt(op: string, resource: string, owner: string, ttlSeconds: number, waitSeconds: number | undefined, lockDelaySeconds: number | undefined): Promise<AttemptResult> {
    const payload: Record<string, unknown> = { owner, ttl_seconds: ttlSeconds };
    if (waitSeconds !== undefined) payload.wait_seconds = waitSeconds;
    if (lockDelaySeconds) payload.lock_delay_seconds = lockDelaySeconds;
    const t0 = performance.now(); // before sending: the lease cannot have started earlier
    const ans = await this.#send(op, "POST", lockPath(resource), payload, { timeoutMs: this.#timeoutMs + (waitSeconds ?? 0) * 1000 });
    const body = parseJSON(op, ans.text) as Record<string, unknown>;
    if (body.acquired === true) return { granted: true, lock: parseLock(op, body.lock), t0 };
    if (body.acquired === false) {
      const exp = typeof body.expires_at === "string" ? new Date(body.expires_at) : undefined;
      const expiresAt = exp && !Number.isNaN(exp.getTime()) ? exp : undefined;
      return { granted: false, held: new HeldError(resource, expiresAt, parseRetryAfter(ans.headers.get("retry-after"))) };
    }
    throw new UnexpectedAnswerError(`${op}: malformed answer: no "acquired"`);
  }

  /** Releases what an abandoned attempt turns out to have been granted. A clean acquired:false needs nothing. */
  #releaseLate(p: Promise<AttemptResult>, resource: string, owner: string, generated: boolean): void {
    this.#background(
      p.then(
        (a) => (a.granted ? this.#cleanUp(resource, owner, a.lock.fencingToken) : undefined),
        (err: unknown) => (generated && outcomeUnknown(err) ? this.#cleanUp(resource, owner) : undefined),
      ),
    );
  }

  /** The clean-up release of a grant nobody will use: temporary failures are retried for up to {@link RELEASE_RETRY_TIMEOUT_MS}. */
  #cleanUp(resource: string, owner: string, fencingToken?: number): Promise<void> {
    return releaseRetrying(this, resource, { owner, fencingToken, backoff: this.#backoff });
  }

  #background(p: Promise<unknown>): void {
    const q: Promise<void> = p.then(
      () => {},
      () => {}, // best effort: the lease runs out by itself
    ).finally(() => this.#pending.delete(q));
    this.#pending.add(q);
  }

  /** One request; resolves to a 2xx answer, rejects with a ProblemError for any other status, a RequestFailedError without an answer, or `signal.reason`. */
  async #send(op: string, method: string, path: string, payload: unknown, options: RequestOptions): Promise<{ status: number; headers: Headers; text: string }> {
    const url = new URL(this.endpoint + path);
    const body = payload === undefined ? undefined : JSON.stringify(payload);
    let headers: Record<string, string> = { accept: "application/json, application/problem+json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (this.#userAgent) headers["user-agent"] = this.#userAgent;
    if (this.#signer) {
      try {
        headers = await this.#signer.sign(method, url, headers, body);
      } catch (err) {
        if (err instanceof CredentialsError) throw err;
        throw new LocksError(`${op}: sigv4: sign: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
    }
    const { signal } = options;
    const timeoutMs = Math.ceil(Math.min(options.timeoutMs ?? this.#timeoutMs, MAX_TIMER_MS));
    const timeout = AbortSignal.timeout(timeoutMs);
    const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
    const failed = (what: string, err: unknown): unknown => {
      if (signal?.aborted) return signal.reason;
      const why = timeout.aborted ? `no answer within ${timeoutMs} ms` : errorText(err);
      return new RequestFailedError(`${op}: ${what}: ${why}`, { cause: err });
    };
    let res: Response;
    try {
      res = await this.#fetch(url, { method, headers, body, signal: combined });
    } catch (err) {
      throw failed(`${method} ${url.pathname}`, err);
    }
    let text: string;
    try {
      text = await readLimited(res, MAX_RESPONSE_BYTES);
    } catch (err) {
      throw failed(`read ${res.status} answer`, err);
    }
    if (!res.ok) throw problemFromAnswer(op, res.status, text, parseRetryAfter(res.headers.get("retry-after")));
    return { status: res.status, headers: res.headers, text };
  }
}

/** The default client of {@link withLock}: {@link LockClient.fromEnv}, made on first use. */
let envClient: LockClient | undefined;

/**
 * {@link LockClient.withLock} on `options.client`, or on a client from the
 * environment (`LOCKS_ENDPOINT`, `LOCKS_SIGV4`; see {@link LockClient.fromEnv}).
 *
 * ```ts
 * await withLock("nightly-report", async (signal, token) => {
 *   await writeReport({ signal, fencingToken: token });
 * }, { ttlSeconds: 30 });
 * ```
 */
export function withLock<T>(resource: string, fn: LockedFunction<T>, options: WithLockOptions & { client?: LockClient }): Promise<T> {
  const { client, ...rest } = options;
  return (client ?? (envClient ??= LockClient.fromEnv())).withLock(resource, fn, rest);
}

/** A fresh owner: `${hostname}:${pid}:${random}`. */
export function defaultOwner(): string {
  return `${hostname()}:${process.pid}:${randomBytes(6).toString("hex")}`;
}

/** The earliest the service suggested trying again after err, in ms. */
function hint(err: unknown): number {
  if (err instanceof HeldError) {
    if (err.retryAfterMs !== undefined) return err.retryAfterMs;
    if (err.expiresAt) return Math.max(0, err.expiresAt.getTime() - Date.now());
    return 0;
  }
  if (err instanceof ProblemError) return err.retryAfterMs ?? 0;
  return 0;
}

function checkResource(op: string, resource: unknown): void {
  if (typeof resource !== "string" || resource === "") throw new TypeError(`${op}: resource must be a non-empty string`);
  // The service refuses "/" too, but a gateway may route an encoded slash
  // elsewhere first; "." and ".." would be resolved away by URL parsing.
  if (resource.includes("/")) throw new TypeError(`${op}: resource must not contain "/"`);
  if (resource === "." || resource === "..") throw new TypeError(`${op}: resource must not be "." or ".."`);
}

function checkOwner(op: string, owner: unknown): void {
  if (typeof owner !== "string" || owner.trim() === "") throw new TypeError(`${op}: owner must be a non-empty string`);
}

function checkTtl(op: string, ttl: unknown): void {
  if (typeof ttl !== "number" || !Number.isSafeInteger(ttl) || ttl < 1) {
    throw new RangeError(`${op}: ttlSeconds ${String(ttl)}: must be a whole number of seconds, at least 1`);
  }
}

function checkLockDelay(op: string, secs: unknown): void {
  if (secs !== undefined && (typeof secs !== "number" || !Number.isSafeInteger(secs) || secs < 0)) {
    throw new RangeError(`${op}: lockDelaySeconds ${String(secs)}: must be a whole number of seconds, 0 or more`);
  }
}

function checkToken(op: string, token: unknown): void {
  if (token !== undefined && (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1)) {
    throw new RangeError(`${op}: fencingToken ${String(token)}: must be a positive integer`);
  }
}

/** The path of a lock: every character but the unreserved ones percent-encoded, so URL parsing and SigV4 see the same bytes. */
function lockPath(resource: string): string {
  return `/locks/${encodeURIComponent(resource).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)}`;
}

function parseJSON(op: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new UnexpectedAnswerError(`${op}: malformed answer: not JSON`);
  }
}

function parseLock(op: string, v: unknown): LockInfo {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const acquiredAt = new Date(typeof o.acquired_at === "string" ? o.acquired_at : NaN);
  const expiresAt = new Date(typeof o.expires_at === "string" ? o.expires_at : NaN);
  const token = o.fencing_token;
  const delay = o.lock_delay_seconds ?? 0;
  if (
    typeof o.resource !== "string" ||
    typeof o.owner !== "string" || o.owner === "" ||
    typeof token !== "number" || !Number.isSafeInteger(token) || token < 1 ||
    typeof delay !== "number" || !Number.isSafeInteger(delay) || delay < 0 ||
    Number.isNaN(acquiredAt.getTime()) || Number.isNaN(expiresAt.getTime())
  ) {
    throw new UnexpectedAnswerError(`${op}: malformed lock in answer`);
  }
  return { resource: o.resource, owner: o.owner, fencingToken: token, acquiredAt, expiresAt, lockDelaySeconds: delay };
}

async function readLimited(res: Response, limit: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      break;
    }
  }
  return new TextDecoder().decode(Buffer.concat(chunks).subarray(0, limit));
}

function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return err.message + cause;
}
