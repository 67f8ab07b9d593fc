import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  CredentialsError,
  FullError,
  HeldError,
  LeaseLostError,
  LocksError,
  ProblemError,
  RequestFailedError,
  UnexpectedAnswerError,
  ValidationError,
  isNoRoute,
  outcomeUnknown,
  queueTicketOf,
  problemFromAnswer,
  retryable,
} from "./errors.js";
import { Lease, Permit, RWLease, RELEASE_RETRY_TIMEOUT_MS, clockReading, leaseMarginMs, releaseRetrying, roundLimitMs } from "./lease.js";
import { RequestSigner, SigningUnavailableError, resolveRegion, type SigV4Options } from "./sigv4.js";
import { Election } from "./election.js";
import { LockSet, LockSetHeldError, MAX_SET_NAMES, type SetCalls, type SetItem, type SetLock } from "./lockset.js";
import {
  decodeAdminLock,
  decodeAdminPermit,
  decodeAdminRWLease,
  decodeAdminRWLock,
  decodePermit,
  decodeRWLease,
  decodeRWStatus,
  decodeRWWatch,
  MAX_READERS,
  decodeSemaphoreStatus,
  decodeSemaphoreWatch,
  decodeWatch,
  type AdminLock,
  type AdminPermit,
  type ForceReleased,
  type LeaseCalls,
  type LockInfo,
  type LockPage,
  type PermitForceReleased,
  type PermitInfo,
  type PermitPage,
  type AdminRWLock,
  type RWForceReleased,
  type RWLeaseInfo,
  type RWLockPage,
  type RWMode,
  type RWStatus,
  type RWWatchResult,
  type SemaphoreStatus,
  type SemaphoreWatchResult,
  type WatchResult,
} from "./types.js";
import { Backoff, parseRetryAfter, settle, sleep } from "./util.js";
import {
  checkLockDelay,
  checkOptions,
  checkOwner,
  checkResource,
  checkToken,
  checkTtl,
  encode,
  errorText,
  lockPath,
  rwPath,
  semaphorePath,
  parseJSON,
  parseLock,
  readLimited,
} from "./wire.js";

/** The endpoint {@link Client.fromEnv} uses without `LOCKS_ENDPOINT`: what `make run` serves. */
export const DEFAULT_ENDPOINT = "http://127.0.0.1:8080";
/** A lease's time-to-live when `ttlSeconds` is not given, as in the Go (`DefaultTTL`) and Python (`DEFAULT_TTL`) clients. */
export const DEFAULT_TTL_SECONDS = 30;
/**
 * How long {@link Client.acquire} (and {@link Client.withLock}) waits for a
 * held lock when `waitMs` is not given, as in the Go (`DefaultAcquireWait`)
 * and Python (`DEFAULT_ACQUIRE_WAIT`) clients. `waitMs: Infinity` waits
 * until the lock is free or `signal` aborts; `waitMs: 0` tries once.
 */
export const DEFAULT_ACQUIRE_WAIT_MS = 30_000;
/** The User-Agent header sent unless `userAgent` sets another. */
export const DEFAULT_USER_AGENT = "ft288-locks-ts-client/0.1";
/** Bounds one HTTP exchange (plus any time the service is asked to wait). */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** The first retry delay's upper bound. */
export const DEFAULT_BACKOFF_BASE_MS = 50;
/** Caps retry delays, and Retry-After with them, so an early release is noticed within about this long. */
export const DEFAULT_BACKOFF_MAX_MS = 2_000;
/**
 * The longest the service is asked to hold one acquire or watch
 * (`wait_seconds`), and a watch's wait by default. An acquire's round is
 * shorter for a short lease: see {@link Client.acquire}.
 */
export const MAX_SERVER_WAIT_SECONDS = 20;

const MAX_RESPONSE_BYTES = 1 << 20;
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface ClientOptions {
  /**
   * The API's base URL, e.g. "http://127.0.0.1:8080" or
   * "https://abc123.execute-api.eu-west-1.amazonaws.com" (a stage path is
   * kept). Required by `new Client({ endpoint })`; {@link Client.fromEnv}
   * takes it from `LOCKS_ENDPOINT`.
   */
  endpoint?: string | URL;
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
  /**
   * Sign every request with SigV4 for `execute-api` (API Gateway with IAM
   * auth). `true`: region and credentials from the environment. Needs the
   * optional packages {@link SIGV4_INSTALL} installs.
   */
  sigv4?: SigV4Options | boolean;
}

/** @deprecated The old name of {@link ClientOptions}. */
export type LockClientOptions = ClientOptions;

/** {@link Client.fromEnv}'s options: a client's, but the endpoint comes from the environment. */
export interface FromEnvOptions extends Omit<ClientOptions, "endpoint"> {
  /** The environment to read. Default `process.env`. */
  env?: Record<string, string | undefined>;
}

export interface TryAcquireOptions {
  /** The lease's time-to-live in whole seconds, at least 1. Default {@link DEFAULT_TTL_SECONDS} (30). */
  ttlSeconds?: number;
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
  /**
   * How long to wait for the lock in total, in ms. Default
   * {@link DEFAULT_ACQUIRE_WAIT_MS} (30 s); `Infinity` waits until the lock
   * is free or `signal` aborts; 0 tries once.
   */
  waitMs?: number;
  /** @deprecated Use `waitMs` (`waitSeconds: 5` is `waitMs: 5000`). Without either, the wait is now 30 s, not unlimited. */
  waitSeconds?: number;
}

/** {@link Client.withLock}'s options: it waits for the lock as {@link Client.acquire} does. */
export type WithLockOptions = AcquireOptions;

/** The work {@link Client.withLock} runs: `signal` aborts when the lease is lost (or the caller's signal aborts); `signal.throwIfAborted()` and `lease.check()` read the clock. */
export type LockedFunction<T> = (signal: AbortSignal, fencingToken: number, lease: Lease) => Promise<T> | T;

/** The work {@link Client.withSemaphore} runs: `signal` aborts when the permit is lost (or the caller's signal aborts). */
export type PermitFunction<T> = (signal: AbortSignal, fencingToken: number, permit: Permit) => Promise<T> | T;

/** The work {@link Client.withReadLock} and {@link Client.withWriteLock} run: `signal` aborts when the lease is lost (or the caller's signal aborts). */
export type RWLockedFunction<T> = (signal: AbortSignal, fencingToken: number, lease: RWLease) => Promise<T> | T;

/** {@link Client.tryAcquireSet}'s options: a lock's, plus the set's path prefix. */
export interface TryAcquireSetOptions extends TryAcquireOptions {
  /**
   * The path prefix of the set's requests, `/locksets/{prefix}`: every name
   * must begin with it, so an IAM policy scoped by path prefix covers the
   * set's names (docs/operations.md). Default: the names' longest common
   * prefix.
   */
  prefix?: string;
}

/** {@link Client.acquireSet}'s (and {@link Client.withLockSet}'s) options: it waits as {@link Client.acquire} does. */
export interface AcquireSetOptions extends TryAcquireSetOptions {
  /** How long to wait for the whole set, in ms. Default {@link DEFAULT_ACQUIRE_WAIT_MS} (30 s); `Infinity` until it is free or `signal` aborts; 0 tries once. */
  waitMs?: number;
}

/** The work {@link Client.withLockSet} runs: `signal` aborts when any lease of the set is lost (or the caller's signal aborts); `signal.throwIfAborted()` and `set.check()` read the clock. */
export type LockSetFunction<T> = (signal: AbortSignal, set: LockSet) => Promise<T> | T;

/** The largest number of permits a semaphore may have (the service's bound). */
export const MAX_PERMITS = 100;

/** {@link Client.list}'s options. */
export interface ListOptions {
  /** The most leases in the page, 1 to 1000. Default: the service's (100). */
  limit?: number;
  /** Continues a listing: the `cursor` of the previous page. */
  cursor?: string;
  signal?: AbortSignal;
}

/** {@link Client.forceRelease}'s options. Without any, it ends whichever lease blocks the lock and keeps its lock-delay. */
export interface ForceReleaseOptions {
  /**
   * Free the lock at once, lock-delay or not: for an operator who knows the
   * holder is dead. Without it the lease expires now but keeps its
   * lock-delay: nobody, the evicted owner included, may take the lock until
   * `freeAt`.
   */
  immediate?: boolean;
  /**
   * End only the lease with this token, the one the operator saw; another
   * lease is left alone and the call rejects with a {@link StaleTokenError}
   * whose `current` is that lease.
   */
  fencingToken?: number;
  signal?: AbortSignal;
}

/** {@link Client.watch}'s options. */
export interface WatchOptions {
  /** The `index` of the last answer; 0 (the default) when the caller has seen nothing. */
  index?: number;
  /**
   * How long the service may wait for a change, in whole seconds from 0
   * (answer at once) to {@link MAX_SERVER_WAIT_SECONDS} (20, the default).
   */
  waitSeconds?: number;
  /** Abandons the request: the call rejects with `signal.reason`. */
  signal?: AbortSignal;
}

interface RequestOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** The `queue_ticket` of a refused waiting round's answer (undefined: no place), which the next round brings back. */
function queueTicketIn(body: Record<string, unknown>): string | undefined {
  return typeof body.queue_ticket === "string" && body.queue_ticket !== "" ? body.queue_ticket : undefined;
}

type SetAttemptResult =
  | { granted: true; id: string; locks: LockInfo[]; t0: number }
  | { granted: false; held: LockSetHeldError; queueTicket?: string };

type AttemptResult =
  | { granted: true; lock: LockInfo; t0: number; permit?: PermitInfo; rw?: RWLeaseInfo }
  | { granted: false; held: HeldError; queueTicket?: string };

/**
 * Talks to one lock service. Build one per process and share it.
 *
 * ```ts
 * const client = Client.fromEnv(); // LOCKS_ENDPOINT, LOCKS_SIGV4
 * await using lease = await client.acquire("payment:42"); // waits up to 30 s; a 30 s lease, renewed
 * lease.check(); // before each step: throws LeaseLostError once the lock may be gone (a pause past the lease)
 * await charge({ signal: lease.signal, fencingToken: lease.fencingToken });
 * ```
 */
export class Client {
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
  /** The same for semaphore acquires: a service may wait for locks and not (yet) for permits. */
  #semServerWait: boolean | undefined;
  /** The same for read/write locks: a service may wait for locks and not for them. */
  #rwServerWait: boolean | undefined;
  /** The same for lock sets: false once `…/wait` answered 422 naming `wait_seconds` (or no such route): poll with tries. */
  #setServerWait: boolean | undefined;
  /**
   * Whether the stack predates the waiting routes (its `…/wait` answered API
   * Gateway's 404): waiting rounds then go to the try route with
   * `wait_seconds`, as before the split.
   */
  #tryRouteWaits = false;
  readonly #pending = new Set<Promise<void>>();

  /**
   * `new Client({ endpoint, ...options })`, or `new Client(endpoint, options?)`.
   * The endpoint is the API's base URL, e.g. "http://127.0.0.1:8080" or
   * "https://abc123.execute-api.eu-west-1.amazonaws.com". Nothing is sent
   * until a method is called.
   */
  constructor(options: ClientOptions & { endpoint: string | URL });
  constructor(endpoint: string | URL, options?: ClientOptions);
  constructor(first: string | URL | ClientOptions, second?: ClientOptions) {
    const positional = typeof first === "string" || first instanceof URL;
    const options: ClientOptions = (positional ? second : first) ?? {};
    if (positional && options.endpoint !== undefined) throw new TypeError("Client: endpoint given twice: as the first argument and in the options");
    const endpoint = positional ? first : options.endpoint;
    if (endpoint === undefined) {
      throw new TypeError(`Client: no endpoint: new Client({ endpoint: "${DEFAULT_ENDPOINT}" }), or Client.fromEnv() for LOCKS_ENDPOINT`);
    }
    const u = parseEndpoint(endpoint);
    this.endpoint = u.href.replace(/\/+$/, "");
    const f = options.fetch;
    this.#fetch = f ?? ((input, init) => globalThis.fetch(input, init));
    this.#userAgent = options.userAgent ?? DEFAULT_USER_AGENT;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!(this.#timeoutMs > 0 && this.#timeoutMs <= MAX_TIMER_MS)) throw new RangeError(`Client: timeoutMs ${this.#timeoutMs}: want a positive number`);
    const b = options.backoff ?? { baseMs: DEFAULT_BACKOFF_BASE_MS, maxMs: DEFAULT_BACKOFF_MAX_MS };
    if (!(b.baseMs > 0 && b.maxMs >= b.baseMs && b.maxMs <= MAX_TIMER_MS)) throw new RangeError(`Client: backoff ${b.baseMs}..${b.maxMs} ms: want 0 < base ≤ max`);
    this.#backoff = new Backoff(b.baseMs, b.maxMs);
    if (options.leaseMarginMs !== undefined && !(options.leaseMarginMs > 0)) throw new RangeError(`Client: leaseMarginMs ${options.leaseMarginMs}: want a positive number`);
    this.#marginMs = options.leaseMarginMs;
    if (options.sigv4) {
      const o = options.sigv4 === true ? {} : options.sigv4;
      this.#signer = new RequestSigner(resolveRegion(o.region, u), o.credentials);
    }
  }

  /**
   * A client from the environment: `LOCKS_ENDPOINT` (default
   * {@link DEFAULT_ENDPOINT}, http://127.0.0.1:8080, what `make run` serves),
   * signing when `LOCKS_SIGV4` is 1, true, yes or on (region from the
   * endpoint or `AWS_REGION`, credentials from the default chain). `options`
   * are the client's (an explicit `sigv4` wins over `LOCKS_SIGV4`), plus
   * `env` to read instead of `process.env`.
   */
  static fromEnv(options?: FromEnvOptions): Client;
  /** @deprecated Pass the environment as `Client.fromEnv({ env, ...options })`. */
  static fromEnv(env: Record<string, string | undefined>, options?: ClientOptions): Client;
  static fromEnv(first?: FromEnvOptions | Record<string, string | undefined>, second?: ClientOptions): Client {
    let env: Record<string, string | undefined>;
    let options: ClientOptions;
    if (second !== undefined || isEnvironment(first)) {
      env = (first as Record<string, string | undefined> | undefined) ?? process.env;
      options = second ?? {};
    } else {
      const { env: e, ...rest } = (first ?? {}) as FromEnvOptions;
      env = e ?? process.env;
      options = rest;
    }
    const endpoint = env.LOCKS_ENDPOINT?.trim() || DEFAULT_ENDPOINT;
    let sigv4 = options.sigv4 ?? /^(1|true|yes|on)$/i.test(env.LOCKS_SIGV4?.trim() ?? "");
    if (sigv4) {
      const o = sigv4 === true ? {} : sigv4;
      sigv4 = { ...o, region: resolveRegion(o.region, parseEndpoint(endpoint), env) };
    }
    return new Client(endpoint, { ...options, sigv4 });
  }

  /**
   * Asks once for a lease on `resource` (`ttlSeconds`, default 30). Resolves
   * to the lease (with its keep-alive running unless `keepAlive: false`), or
   * rejects with {@link HeldError} when another owner holds the lock. An
   * owner that already holds it gets a new lease with a larger fencing token.
   */
  tryAcquire(resource: string, options: TryAcquireOptions = {}): Promise<Lease> {
    const op = `acquire ${JSON.stringify(resource)}`;
    try {
      checkOptions(op, options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(op, resource, options, 0);
  }

  /**
   * Waits for a lease on `resource` (`ttlSeconds`, default 30) until `signal`
   * aborts or `waitMs` pass (default {@link DEFAULT_ACQUIRE_WAIT_MS}, 30 s;
   * `Infinity`: no limit). It tries first (`POST /locks/{resource}`, the quick
   * route: an uncontended acquire is that one request); only while the lock
   * is held does it wait, where the service supports it at the
   * service (`POST /locks/{resource}/wait` with `wait_seconds`, up to 20 s per request, within the time left,
   * and at most ⅔ × (ttl − margin) whole seconds: the lease's local deadline
   * counts from before the request, so a grant at the end of a round still
   * leaves a third of it for the first renewal). Against a stack without the
   * waiting routes (API Gateway's 404 `{"message"}` on `…/wait`) it sends its
   * rounds to the try route with `wait_seconds`, as released clients did.
   * When that is under a second, and against an older service (422 naming
   * `wait_seconds`), which it remembers, it polls with jittered
   * exponential backoff, waiting at least the service's Retry-After (capped
   * at the backoff maximum). Temporary failures (503, API Gateway's throttle
   * answers 429 and 500 `{"message"}`, other 5xx but the service's `internal`
   * problem, no answer) are retried the same way; repeating an acquire is
   * safe.
   *
   * It rejects with `signal.reason` when the signal aborts; when the wait
   * runs out, with the last attempt's error ({@link HeldError} while the lock
   * stayed held). A grant that arrives after it gave up is released.
   */
  acquire(resource: string, options: AcquireOptions = {}): Promise<Lease> {
    const op = `acquire ${JSON.stringify(resource)}`;
    let waitMs: number;
    try {
      checkOptions(op, options);
      waitMs = waitBudgetMs(op, options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(op, resource, options, waitMs);
  }

  /**
   * Runs `fn(signal, fencingToken, lease)` under a lease on `resource` and
   * always releases it. It waits for the lock as {@link Client.acquire} does
   * (30 s by default; `waitMs: 0` tries once, so a second host skips the job
   * with a {@link HeldError}). `signal` aborts when the lease is lost (and
   * when `options.signal` does); its `aborted` and `throwIfAborted()` read
   * the clock as `lease.check()` does: call one of them before each step
   * that touches the protected resource. It resolves to what `fn` returns, and
   * rejects with what `fn` throws; when `fn` returns but the lease was lost
   * meanwhile, or the release shows that it had ended at the service, it
   * rejects with a {@link LeaseLostError}: the work ran at least partly
   * unprotected. A release that fails temporarily is ignored (the lease runs
   * out by itself). `await using lease = await client.acquire(...)` does the
   * same around a block.
   */
  async withLock<T>(resource: string, fn: LockedFunction<T>, options: WithLockOptions = {}): Promise<T> {
    const lease = await this.acquire(resource, options);
    const signal = options.signal ? clockReading(AbortSignal.any([lease.signal, options.signal]), () => lease.held) : lease.signal;
    let result: T;
    try {
      result = await fn(signal, lease.fencingToken, lease);
    } catch (err) {
      await lease.release().catch(() => {});
      throw err;
    }
    await lease[Symbol.asyncDispose]();
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
   * A blocking status, as Consul's blocking queries: resolves to the state of
   * `resource` as soon as it differs from the one of `index` (a grant, or the
   * lease's end: released, expired, force released; a renewal is no change),
   * or once `waitSeconds` (default 20) have passed, with `changed: false`.
   * Pass the answer's `index` to the next call. One request, not retried:
   * {@link Election.observe} loops over it, reconnecting with backoff. A
   * lease that began and ended between the service's reads is not seen; the
   * answer's `fencingToken` tells how many were missed. The request may take
   * `waitSeconds` plus the client's `timeoutMs`.
   */
  async watch(resource: string, options: WatchOptions = {}): Promise<WatchResult> {
    const op = `watch ${JSON.stringify(resource)}`;
    checkResource(op, resource);
    checkOptions(op, options);
    const { index = 0, waitSeconds = MAX_SERVER_WAIT_SECONDS, signal } = options;
    checkWatchArgs(op, index, waitSeconds);
    const path = `${lockPath(resource)}/watch?index=${index}&wait_seconds=${waitSeconds}`;
    const ans = await this.#send(op, "GET", path, undefined, { signal, timeoutMs: this.#timeoutMs + waitSeconds * 1000 });
    const w = decodeWatch(parseJSON(op, ans.text));
    if (!w || w.resource !== resource) throw new UnexpectedAnswerError(`${op}: malformed answer`);
    return w;
  }

  /**
   * A leader election on the lock `name`: {@link Election.campaign} waits for
   * and holds leadership (a lease with its keep-alive), {@link Election.leader}
   * says who leads, {@link Election.observe} follows the changes,
   * {@link Election.resign} gives leadership up. Nothing is sent until a
   * method is called.
   */
  election(name: string): Election {
    checkResource(`election ${JSON.stringify(name)}`, name);
    return new Election({ client: this, name, backoff: this.#backoff });
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
    checkOptions(op, options);
    checkOwner(op, options.owner);
    checkTtl(op, options.ttlSeconds);
    checkToken(op, options.fencingToken);
    const payload: Record<string, unknown> = { owner: options.owner, ttl_seconds: options.ttlSeconds };
    if (options.fencingToken !== undefined) payload.fencing_token = options.fencingToken;
    const ans = await this.#send(op, "POST", `${lockPath(resource)}/renew`, payload, options);
    const body = parseJSON(op, ans.text);
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
    checkOptions(op, options);
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
  async drain(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }

  /** @deprecated The old name of {@link Client.drain}. */
  flush(): Promise<void> {
    return this.drain();
  }

  /**
   * Admin: one page of the leases that keep others from their lock (live, or
   * expired but inside their lock-delay) whose name starts with `prefix`. A
   * page may be short, even empty, and still have a `cursor`: follow it, or
   * use {@link Client.listAll}. In AWS only administrators may call it.
   */
  async list(prefix = "", options: ListOptions = {}): Promise<LockPage> {
    const op = `list ${JSON.stringify(prefix)}`;
    const { rows: locks, cursor } = await this.#page(op, "/admin/locks", "locks", prefix, options, (v) => {
      const l = decodeAdminLock(v);
      return l && l.resource.startsWith(prefix) ? l : undefined;
    });
    return { locks, cursor };
  }

  /** Admin: every lease {@link Client.list} finds under `prefix`, following the cursor page by page. */
  async listAll(prefix = "", options: { signal?: AbortSignal } = {}): Promise<AdminLock[]> {
    return followPages((cursor) => this.list(prefix, { limit: 1000, cursor, signal: options.signal }), (page) => page.locks);
  }

  /**
   * Admin: ends the lease on `resource` whoever holds it, with `reason`
   * (1–500 bytes) for the audit log, and resolves to the lease it ended and
   * when others may take the lock (`freeAt`). By default the lease keeps its
   * lock-delay; `immediate` frees the lock at once. Rejects with
   * {@link NotFoundError} when no lease blocks the lock, or, with
   * `fencingToken`, {@link StaleTokenError} whose `current` is the lease that
   * does. Not retried: a repeat could end a lease nobody saw.
   */
  async forceRelease(resource: string, reason: string, options: ForceReleaseOptions = {}): Promise<ForceReleased> {
    const op = `force-release ${JSON.stringify(resource)}`;
    checkResource(op, resource);
    checkOptions(op, options);
    return this.#forceRelease(op, `/admin/locks/${encode(resource)}`, {}, reason, options, (v) => {
      const ended = decodeAdminLock(v);
      return ended && ended.resource === resource ? ended : undefined;
    });
  }

  /**
   * Asks once for one of the `permits` permits of the semaphore `name`
   * (every acquirer gives the same number, 1 to {@link MAX_PERMITS}), with
   * {@link Client.tryAcquire}'s options. Resolves to the {@link Permit} (a
   * lease in a slot of its own, renewing itself), or rejects with
   * {@link FullError} (a {@link HeldError}) when every permit is held by
   * others, or {@link PermitsMismatchError} when the semaphore has another
   * number of permits. An owner that holds a permit gets its slot again,
   * with a new token: one permit per owner.
   */
  tryAcquireSemaphore(name: string, permits: number, options: TryAcquireOptions = {}): Promise<Permit> {
    const op = `acquire semaphore ${JSON.stringify(name)}`;
    try {
      checkOptions(op, options);
      checkPermits(op, permits);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(op, name, options, 0, permits) as Promise<Permit>;
  }

  /**
   * Waits for one of the `permits` permits of the semaphore `name` as
   * {@link Client.acquire} waits for a lock (`waitMs`, default 30 s;
   * `signal`): a try first, then, while the semaphore is full, in rounds at
   * the service (`POST /semaphores/{name}/wait`) that
   * send back their place in the queue, or polling a service that does not wait for permits (it answers
   * 422 to `wait_seconds`; remembered). Rejects with {@link FullError} when
   * the wait runs out while the semaphore stays full; otherwise as
   * {@link Client.tryAcquireSemaphore}.
   */
  acquireSemaphore(name: string, permits: number, options: AcquireOptions = {}): Promise<Permit> {
    const op = `acquire semaphore ${JSON.stringify(name)}`;
    let waitMs: number;
    try {
      checkOptions(op, options);
      checkPermits(op, permits);
      waitMs = waitBudgetMs(op, options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(op, name, options, waitMs, permits) as Promise<Permit>;
  }

  /**
   * {@link Client.withLock} for a semaphore: runs `fn(signal, fencingToken,
   * permit)` under one of the `permits` permits of `name`, taken as
   * {@link Client.acquireSemaphore} takes it, and always releases it;
   * `signal` aborts when the permit is lost, and a loss is reported with a
   * {@link LeaseLostError} (whose `slot` is the permit's).
   */
  async withSemaphore<T>(name: string, permits: number, fn: PermitFunction<T>, options: WithLockOptions = {}): Promise<T> {
    const permit = await this.acquireSemaphore(name, permits, options);
    const signal = options.signal ? clockReading(AbortSignal.any([permit.signal, options.signal]), () => permit.held) : permit.signal;
    let result: T;
    try {
      result = await fn(signal, permit.fencingToken, permit);
    } catch (err) {
      await permit.release().catch(() => {});
      throw err;
    }
    await permit[Symbol.asyncDispose]();
    return result;
  }

  /**
   * Asks once for a reader's lease of the read/write lock `name`, with
   * {@link Client.tryAcquire}'s options. Resolves to the {@link RWLease} (in
   * a slot of its own, renewing itself), or rejects with {@link HeldError}
   * when a writer holds or is queued, or every one of the 64 slots is taken.
   * One owner may hold several readers' leases.
   */
  tryAcquireRead(name: string, options: TryAcquireOptions = {}): Promise<RWLease> {
    return this.#rw("read", name, options, false);
  }

  /**
   * Asks once for the writer's lease of the read/write lock `name`. Rejects
   * with {@link HeldError} while any lease is held (a reader's of the same
   * owner too: there is no upgrade) or a waiter is queued.
   */
  tryAcquireWrite(name: string, options: TryAcquireOptions = {}): Promise<RWLease> {
    return this.#rw("write", name, options, false);
  }

  /**
   * Waits for a reader's lease of `name` as {@link Client.acquire} waits for
   * a lock (`waitMs`, default 30 s; `signal`): a try first, then rounds on
   * `POST /rwlocks/{name}/read/wait` in the lock's one queue (a reader behind
   * a queued writer waits for it), or polling a service that does not wait
   * (422 to `wait_seconds`, or no such route; remembered). Rejects with
   * {@link HeldError} when the wait runs out.
   */
  acquireRead(name: string, options: AcquireOptions = {}): Promise<RWLease> {
    return this.#rw("read", name, options, true);
  }

  /**
   * Waits for the writer's lease of `name` as {@link Client.acquireRead}
   * waits for a reader's; once queued, it keeps every later reader out and
   * waits only for the leases granted before.
   */
  acquireWrite(name: string, options: AcquireOptions = {}): Promise<RWLease> {
    return this.#rw("write", name, options, true);
  }

  /**
   * {@link Client.withLock} for a reader's lease of `name`: runs
   * `fn(signal, fencingToken, lease)` under it, taken as
   * {@link Client.acquireRead} takes it, and always releases it; a loss is
   * reported with a {@link LeaseLostError} (`mode` "read", `slot`).
   */
  withReadLock<T>(name: string, fn: RWLockedFunction<T>, options: WithLockOptions = {}): Promise<T> {
    return this.#withRW(this.acquireRead(name, options), fn, options);
  }

  /** {@link Client.withReadLock} with the writer's lease ({@link Client.acquireWrite}). */
  withWriteLock<T>(name: string, fn: RWLockedFunction<T>, options: WithLockOptions = {}): Promise<T> {
    return this.#withRW(this.acquireWrite(name, options), fn, options);
  }

  async #withRW<T>(acquired: Promise<RWLease>, fn: RWLockedFunction<T>, options: WithLockOptions): Promise<T> {
    const lease = await acquired;
    const signal = options.signal ? clockReading(AbortSignal.any([lease.signal, options.signal]), () => lease.held) : lease.signal;
    let result: T;
    try {
      result = await fn(signal, lease.fencingToken, lease);
    } catch (err) {
      await lease.release().catch(() => {});
      throw err;
    }
    await lease[Symbol.asyncDispose]();
    return result;
  }

  #rw(mode: RWMode, name: string, options: AcquireOptions, waits: boolean): Promise<RWLease> {
    const op = `acquire ${mode} lock ${JSON.stringify(name)}`;
    let waitMs = 0;
    try {
      checkOptions(op, options);
      if (waits) waitMs = waitBudgetMs(op, options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquire(op, name, options, waitMs, 0, mode) as Promise<RWLease>;
  }

  /** The read/write lock `name`'s live writer or readers, its queue and latest token (none held is not an error). A strongly consistent read. */
  async rwStatus(name: string, options: { signal?: AbortSignal } = {}): Promise<RWStatus> {
    const op = `status of read/write lock ${JSON.stringify(name)}`;
    checkResource(op, name);
    const ans = await this.#send(op, "GET", rwPath(name), undefined, options);
    const st = decodeRWStatus(name, parseJSON(op, ans.text));
    if (!st) throw new UnexpectedAnswerError(`${op}: malformed answer`);
    return st;
  }

  /**
   * {@link Client.watch} for a read/write lock: its writer and readers as
   * soon as its state differs from the one of `index` (a grant or an end,
   * read or write), or once `waitSeconds` (default 20) have passed. One
   * request, not retried.
   */
  async watchRW(name: string, options: WatchOptions = {}): Promise<RWWatchResult> {
    const op = `watch read/write lock ${JSON.stringify(name)}`;
    checkResource(op, name);
    checkOptions(op, options);
    const { index = 0, waitSeconds = MAX_SERVER_WAIT_SECONDS, signal } = options;
    checkWatchArgs(op, index, waitSeconds);
    const path = `${rwPath(name)}/watch?index=${index}&wait_seconds=${waitSeconds}`;
    const ans = await this.#send(op, "GET", path, undefined, { signal, timeoutMs: this.#timeoutMs + waitSeconds * 1000 });
    const w = decodeRWWatch(name, parseJSON(op, ans.text));
    if (!w) throw new UnexpectedAnswerError(`${op}: malformed answer`);
    return w;
  }

  /**
   * Admin: one page of the read/write locks whose name starts with `prefix`
   * and that have a lease keeping others out (live, or inside its
   * lock-delay) or a live waiter. `limit` counts locks. A page may be short,
   * even empty, and still have a `cursor`: follow it, or use
   * {@link Client.listAllRWLocks}.
   */
  async listRWLocks(prefix = "", options: ListOptions = {}): Promise<RWLockPage> {
    const op = `list read/write locks ${JSON.stringify(prefix)}`;
    const { rows: rwlocks, cursor } = await this.#page(op, "/admin/rwlocks", "rwlocks", prefix, options, (v) => {
      const l = decodeAdminRWLock(v);
      return l && l.name.startsWith(prefix) ? l : undefined;
    });
    return { rwlocks, cursor };
  }

  /** Admin: every read/write lock {@link Client.listRWLocks} finds under `prefix`, following the cursor page by page. */
  async listAllRWLocks(prefix = "", options: { signal?: AbortSignal } = {}): Promise<AdminRWLock[]> {
    return followPages((cursor) => this.listRWLocks(prefix, { limit: 1000, cursor, signal: options.signal }), (page) => page.rwlocks);
  }

  /**
   * Admin: {@link Client.forceRelease} for one holder of the read/write lock
   * `name`, whoever holds it: the writer (`mode` "write", `slot`
   * undefined) or the reader in `slot` (`mode` "read"); the other holders
   * keep their leases. Resolves to the lease it ended and `freeAt`; with
   * `fencingToken` that is not the lease's, rejects with
   * {@link StaleTokenError} whose `currentRWLease` is the lease that keeps
   * the place. Not retried.
   */
  async forceReleaseRW(name: string, mode: RWMode, slot: number | undefined, reason: string, options: ForceReleaseOptions = {}): Promise<RWForceReleased> {
    const op = mode === "read" ? `force-release read/write lock ${JSON.stringify(name)} reader in slot ${slot}` : `force-release read/write lock ${JSON.stringify(name)} writer`;
    checkResource(op, name);
    checkOptions(op, options);
    if (mode === "write" && slot !== undefined) throw new TypeError(`${op}: a writer has no slot`);
    const target = rwTarget(op, mode, slot);
    return this.#forceRelease(op, `/admin${rwPath(name)}`, target, reason, options, (v) => {
      const ended = decodeAdminRWLease(v);
      return ended && ended.name === name && ended.mode === mode && ended.slot === slot ? ended : undefined;
    });
  }

  /**
   * Extends `owner`'s live lease of `mode` (a reader's: in `slot`) of the
   * read/write lock `name` to `ttlSeconds` from now (with `fencingToken`:
   * only that lease). Errors as for {@link Client.renew}; a lease the other
   * mode's later grant judged ended is {@link NotFoundError}.
   */
  async renewRW(name: string, options: { owner: string; mode: RWMode; slot?: number; ttlSeconds: number; fencingToken?: number; signal?: AbortSignal }): Promise<RWLeaseInfo> {
    const op = `renew ${options.mode} lock ${JSON.stringify(name)}`;
    checkResource(op, name);
    checkOptions(op, options);
    checkTtl(op, options.ttlSeconds);
    const payload = rwBody(op, options);
    payload.ttl_seconds = options.ttlSeconds;
    const ans = await this.#send(op, "POST", `${rwPath(name)}/renew`, payload, options);
    const body = parseJSON(op, ans.text);
    const lease = decodeRWLease(body.lease);
    if (body.renewed !== true || !lease || lease.name !== name || lease.mode !== options.mode || lease.slot !== payload.slot) {
      throw new UnexpectedAnswerError(`${op}: malformed answer`);
    }
    return lease;
  }

  /** Ends `owner`'s live lease of `mode` (a reader's: in `slot`) of the read/write lock `name` (with `fencingToken`: only that lease). Errors as for {@link Client.release}. */
  async releaseRW(name: string, options: { owner: string; mode: RWMode; slot?: number; fencingToken?: number; signal?: AbortSignal }): Promise<void> {
    const op = `release ${options.mode} lock ${JSON.stringify(name)}`;
    checkResource(op, name);
    checkOptions(op, options);
    await this.#send(op, "DELETE", rwPath(name), rwBody(op, options), options);
  }

  /** The semaphore `name`'s number of permits and live permits (none is not an error). A strongly consistent read. */
  async semaphoreStatus(name: string, options: { signal?: AbortSignal } = {}): Promise<SemaphoreStatus> {
    const op = `status of semaphore ${JSON.stringify(name)}`;
    checkResource(op, name);
    const ans = await this.#send(op, "GET", semaphorePath(name), undefined, options);
    const st = decodeSemaphoreStatus(name, parseJSON(op, ans.text));
    if (!st) throw new UnexpectedAnswerError(`${op}: malformed answer`);
    return st;
  }

  /**
   * {@link Client.watch} for a semaphore: its state as soon as it differs
   * from the one of `index` (a grant, or the end of a permit), or once
   * `waitSeconds` (default 20) have passed. One request, not retried.
   */
  async watchSemaphore(name: string, options: WatchOptions = {}): Promise<SemaphoreWatchResult> {
    const op = `watch semaphore ${JSON.stringify(name)}`;
    checkResource(op, name);
    checkOptions(op, options);
    const { index = 0, waitSeconds = MAX_SERVER_WAIT_SECONDS, signal } = options;
    checkWatchArgs(op, index, waitSeconds);
    const path = `${semaphorePath(name)}/watch?index=${index}&wait_seconds=${waitSeconds}`;
    const ans = await this.#send(op, "GET", path, undefined, { signal, timeoutMs: this.#timeoutMs + waitSeconds * 1000 });
    const w = decodeSemaphoreWatch(name, parseJSON(op, ans.text));
    if (!w) throw new UnexpectedAnswerError(`${op}: malformed answer`);
    return w;
  }

  /**
   * Extends `owner`'s live permit in `slot` of the semaphore `name` to
   * `ttlSeconds` from now (with `fencingToken`: only that permit). Errors as
   * for {@link Client.renew}. Most callers use {@link Permit.renew} or the
   * keep-alive instead.
   */
  async renewPermit(name: string, options: { owner: string; slot: number; ttlSeconds: number; fencingToken?: number; signal?: AbortSignal }): Promise<PermitInfo> {
    const op = `renew semaphore ${JSON.stringify(name)}`;
    checkResource(op, name);
    checkOptions(op, options);
    checkOwner(op, options.owner);
    checkSlot(op, options.slot);
    checkTtl(op, options.ttlSeconds);
    checkToken(op, options.fencingToken);
    const payload: Record<string, unknown> = { owner: options.owner, slot: options.slot, ttl_seconds: options.ttlSeconds };
    if (options.fencingToken !== undefined) payload.fencing_token = options.fencingToken;
    const ans = await this.#send(op, "POST", `${semaphorePath(name)}/renew`, payload, options);
    const body = parseJSON(op, ans.text);
    const permit = decodePermit(body.permit);
    if (body.renewed !== true || !permit || permit.name !== name || permit.slot !== options.slot) {
      throw new UnexpectedAnswerError(`${op}: malformed answer`);
    }
    return permit;
  }

  /**
   * Ends `owner`'s live permit in `slot` of the semaphore `name` (with
   * `fencingToken`: only that permit); the slot is free at once. Errors as
   * for {@link Client.release}.
   */
  async releasePermit(name: string, options: { owner: string; slot: number; fencingToken?: number; signal?: AbortSignal }): Promise<void> {
    const op = `release semaphore ${JSON.stringify(name)}`;
    checkResource(op, name);
    checkOptions(op, options);
    checkOwner(op, options.owner);
    checkSlot(op, options.slot);
    checkToken(op, options.fencingToken);
    const payload: Record<string, unknown> = { owner: options.owner, slot: options.slot };
    if (options.fencingToken !== undefined) payload.fencing_token = options.fencingToken;
    await this.#send(op, "DELETE", semaphorePath(name), payload, options);
  }

  /**
   * Admin: one page of the permits that keep their slot (live, or inside
   * their lock-delay) of the semaphores whose name starts with `prefix`.
   * `limit` counts permits, but a page ends after the semaphore that reaches
   * it. Follow `cursor`, or use {@link Client.listAllSemaphores}.
   */
  async listSemaphores(prefix = "", options: ListOptions = {}): Promise<PermitPage> {
    const op = `list semaphores ${JSON.stringify(prefix)}`;
    const { rows: holders, cursor } = await this.#page(op, "/admin/semaphores", "holders", prefix, options, (v) => {
      const p = decodeAdminPermit(v);
      return p && p.name.startsWith(prefix) ? p : undefined;
    });
    return { holders, cursor };
  }

  /** Admin: every permit {@link Client.listSemaphores} finds under `prefix`, following the cursor page by page. */
  async listAllSemaphores(prefix = "", options: { signal?: AbortSignal } = {}): Promise<AdminPermit[]> {
    return followPages((cursor) => this.listSemaphores(prefix, { limit: 1000, cursor, signal: options.signal }), (page) => page.holders);
  }

  /**
   * Admin: {@link Client.forceRelease} for the permit in `slot` of the
   * semaphore `name`: resolves to the permit it ended and `freeAt`; with
   * `fencingToken` that is not the permit's, rejects with
   * {@link StaleTokenError} whose `currentPermit` is the permit that keeps
   * the slot. Not retried.
   */
  async forceReleasePermit(name: string, slot: number, reason: string, options: ForceReleaseOptions = {}): Promise<PermitForceReleased> {
    const op = `force-release semaphore ${JSON.stringify(name)} slot ${slot}`;
    checkResource(op, name);
    checkOptions(op, options);
    checkSlot(op, slot);
    return this.#forceRelease(op, `/admin${semaphorePath(name)}`, { slot }, reason, options, (v) => {
      const ended = decodeAdminPermit(v);
      return ended && ended.name === name && ended.slot === slot ? ended : undefined;
    });
  }

  /**
   * Asks once for every one of `names` (1 to {@link MAX_SET_NAMES}, none
   * twice), all or none, for one owner, with {@link Client.tryAcquire}'s
   * options and `prefix` (default: the names' longest common prefix; every
   * name must begin with it). Resolves to the {@link LockSet} (a lease per
   * name, renewed together), or rejects with {@link LockSetHeldError} (a
   * {@link HeldError}) naming the name that refused the set: nothing is held
   * then. One request: `POST /locksets/{prefix}`.
   */
  tryAcquireSet(names: string[], options: TryAcquireSetOptions = {}): Promise<LockSet> {
    const op = `acquire lock set ${JSON.stringify(names)}`;
    try {
      checkOptions(op, options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquireSet(op, names, options, 0);
  }

  /**
   * Waits for every one of `names`, all or none, as {@link Client.acquire}
   * waits for a lock (`waitMs`, default 30 s; `signal`): a try first on the
   * quick route, and only while the set is refused, rounds at the service
   * (`POST /locksets/{prefix}/wait`), where the set queues for each held
   * name in byte order, holding the names before it (every caller takes
   * names in one order, so sets cannot deadlock). Against a service
   * that does not wait for sets (422 naming `wait_seconds`, or no such
   * route; remembered) it polls with tries. Rejects with
   * {@link LockSetHeldError} when the wait runs out; otherwise as
   * {@link Client.tryAcquireSet}. A grant that arrives after it gave up is
   * released.
   */
  acquireSet(names: string[], options: AcquireSetOptions = {}): Promise<LockSet> {
    const op = `acquire lock set ${JSON.stringify(names)}`;
    let waitMs: number;
    try {
      checkOptions(op, options);
      waitMs = waitBudgetMs(op, options);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#acquireSet(op, names, options, waitMs);
  }

  /**
   * Runs `fn(signal, set)` under a lock set on `names`, taken as
   * {@link Client.acquireSet} takes it, and always releases it (one
   * request). `signal` aborts when any lease of the set is lost (and when
   * `options.signal` does); call `set.check()` or `signal.throwIfAborted()`
   * before each step. It resolves to what `fn` returns and rejects with what
   * `fn` throws; when `fn` returns but a lease of the set was lost meanwhile,
   * it rejects with that {@link LeaseLostError}.
   */
  async withLockSet<T>(names: string[], fn: LockSetFunction<T>, options: AcquireSetOptions = {}): Promise<T> {
    const set = await this.acquireSet(names, options);
    const signal = options.signal ? clockReading(AbortSignal.any([set.signal, options.signal]), () => set.held) : set.signal;
    let result: T;
    try {
      result = await fn(signal, set);
    } catch (err) {
      await set.release().catch(() => {});
      throw err;
    }
    await set[Symbol.asyncDispose]();
    return result;
  }

  async #acquireSet(op: string, names: string[], options: TryAcquireSetOptions, waitMs: number): Promise<LockSet> {
    const prefix = setPrefix(op, names, options.prefix);
    if (options.owner !== undefined) checkOwner(op, options.owner);
    const { signal, ttlSeconds = DEFAULT_TTL_SECONDS } = options;
    checkTtl(op, ttlSeconds);
    checkLockDelay(op, options.lockDelaySeconds);
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
    const roundSeconds = () =>
      waitMs > 0 && this.#setServerWait !== false
        ? Math.min(MAX_SERVER_WAIT_SECONDS, Math.floor((end - performance.now() - 250) / 1000), roundLimit)
        : 0;
    let last: unknown;
    let lastUnknown = false;
    let held = false; // a try found the set refused: rounds at the service from then on
    // The last round's queue_ticket: its place in the queue it waited in.
    let ticket: string | undefined;
    try {
      for (let attempt = 0; !stop.aborted; ) {
        const wait = held ? roundSeconds() : 0;
        const serverWaits = wait >= 1;
        const started = performance.now();
        const p = this.#setAttempt(op, prefix, names, owner, ttlSeconds, serverWaits ? wait : undefined, options.lockDelaySeconds, serverWaits ? ticket : undefined);
        const r = await settle(p, stop);
        if (r.status === "aborted") {
          this.#background(p.then((a) => (a.granted ? this.#releaseSetGrant(prefix, owner, a.locks) : undefined)));
          lastUnknown = false;
          break;
        }
        if (r.status === "ok") {
          lastUnknown = false;
          if (serverWaits) this.#setServerWait = true;
          const a = r.value;
          if (a.granted) {
            const leases = a.locks.map(
              (lock) => new Lease({ client: this, lock, ttlSeconds, t0: a.t0, marginMs: this.#marginMs, backoff: this.#backoff, keepAlive: false }),
            );
            const set = new LockSet({
              calls: this.#setCalls, prefix, id: a.id, owner, ttlSeconds, leases,
              marginMs: this.#marginMs, backoff: this.#backoff, keepAlive: options.keepAlive ?? true,
            });
            if (set.held) return set;
            // The answer came after the leases' local deadline: give them back and try again.
            this.#background(this.#releaseSetGrant(prefix, owner, a.locks));
            last = set.signal.reason;
          } else {
            last = a.held;
            if (serverWaits) ticket = a.queueTicket;
            if (!held) {
              held = true;
              if (roundSeconds() >= 1) continue;
            }
            if (serverWaits && performance.now() - started >= Math.min(wait * 1000, 1000)) {
              attempt = 0; // the service did the waiting: ask again at once
              continue;
            }
          }
        } else {
          const err = r.error;
          if (serverWaits && (isNoRoute(err) || (err instanceof ValidationError && err.errors.some((f) => f.field === "wait_seconds")))) {
            this.#setServerWait = false; // a service that does not wait for sets: poll with tries from now on
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
        // Nobody else uses this owner: end whatever leases it may have, name by name.
        for (const name of names) this.#background(this.#cleanUp(name, owner));
      }
      if (signal?.aborted) throw signal.reason;
      throw last ?? budget.signal.reason;
    } finally {
      clearTimeout(timer);
    }
  }

  /** One set request: a try to `POST /locksets/{prefix}`, or with `waitSeconds` a round to its `…/wait`. Not cancelled by the caller's signal, so a late grant is heard and released. */
  async #setAttempt(
    op: string, prefix: string, names: string[], owner: string, ttlSeconds: number, waitSeconds: number | undefined, lockDelaySeconds: number | undefined,
    queueTicket?: string,
  ): Promise<SetAttemptResult> {
    const payload: Record<string, unknown> = { owner, ttl_seconds: ttlSeconds, names };
    if (waitSeconds !== undefined) payload.wait_seconds = waitSeconds;
    if (waitSeconds !== undefined && queueTicket) payload.queue_ticket = queueTicket;
    if (lockDelaySeconds) payload.lock_delay_seconds = lockDelaySeconds;
    const t0 = performance.now(); // before sending: no lease of the set can have started earlier
    const path = `/locksets/${encode(prefix)}${waitSeconds !== undefined ? "/wait" : ""}`;
    const ans = await this.#send(op, "POST", path, payload, { timeoutMs: this.#timeoutMs + (waitSeconds ?? 0) * 1000 });
    const body = parseJSON(op, ans.text);
    if (body.acquired === true) {
      if (typeof body.set_id !== "string" || !Array.isArray(body.locks)) throw new UnexpectedAnswerError(`${op}: malformed answer: no set_id or locks`);
      const locks = body.locks.map((l: unknown) => parseLock(op, l));
      const got = new Set(locks.map((l) => l.resource));
      if (locks.length !== names.length || names.some((n) => !got.has(n))) {
        throw new UnexpectedAnswerError(`${op}: malformed answer: ${locks.length} locks for ${names.length} names`);
      }
      return { granted: true, id: body.set_id, locks, t0 };
    }
    if (body.acquired === false) {
      if (typeof body.blocked_by !== "string") throw new UnexpectedAnswerError(`${op}: malformed answer: no blocked_by`);
      const at = typeof body.free_at === "string" ? new Date(body.free_at) : undefined;
      const unreleased = Array.isArray(body.unreleased) ? body.unreleased.filter((n): n is string => typeof n === "string") : [];
      return {
        granted: false,
        held: new LockSetHeldError(body.blocked_by, at && !Number.isNaN(at.getTime()) ? at : undefined, parseRetryAfter(ans.headers.get("retry-after")), unreleased),
        queueTicket: queueTicketIn(body),
      };
    }
    throw new UnexpectedAnswerError(`${op}: malformed answer: no "acquired"`);
  }

  /** The clean-up release of a set's grant nobody will use: one request, temporary failures retried for up to {@link RELEASE_RETRY_TIMEOUT_MS}. */
  async #releaseSetGrant(prefix: string, owner: string, locks: LockInfo[]): Promise<void> {
    const signal = AbortSignal.timeout(RELEASE_RETRY_TIMEOUT_MS);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#setCalls.releaseSet(prefix, { owner, locks: locks.map((l) => ({ resource: l.resource, fencingToken: l.fencingToken })), signal });
        return;
      } catch (err) {
        if (!retryable(err) || !(await sleep(this.#backoff.delay(attempt, hint(err)), signal))) return;
      }
    }
  }

  /** The set's renew and release, as a {@link LockSet} calls them. */
  readonly #setCalls: SetCalls = {
    renewSet: async (prefix, o) => {
      const op = `renew lock set ${JSON.stringify(o.locks.map((l) => l.resource))}`;
      const ans = await this.#send(op, "POST", `/locksets/${encode(prefix)}/renew`,
        { owner: o.owner, ttl_seconds: o.ttlSeconds, locks: setLocks(o.locks) }, { signal: o.signal });
      return setItems(op, parseJSON(op, ans.text), o.locks);
    },
    releaseSet: async (prefix, o) => {
      const op = `release lock set ${JSON.stringify(o.locks.map((l) => l.resource))}`;
      const ans = await this.#send(op, "DELETE", `/locksets/${encode(prefix)}`, { owner: o.owner, locks: setLocks(o.locks) }, { signal: o.signal });
      if (ans.status === 204) return [];
      return setItems(op, parseJSON(op, ans.text), o.locks);
    },
  };

  async #acquire(op: string, resource: string, options: TryAcquireOptions, waitMs: number, permits = 0, rw?: RWMode): Promise<Lease> {
    checkResource(op, resource);
    const serverWaitKnown = () => (rw ? this.#rwServerWait : permits ? this.#semServerWait : this.#serverWait);
    const setServerWait = (v: boolean) => {
      if (rw) this.#rwServerWait = v;
      else if (permits) this.#semServerWait = v;
      else this.#serverWait = v;
    };
    if (options.owner !== undefined) checkOwner(op, options.owner);
    const { signal, ttlSeconds = DEFAULT_TTL_SECONDS } = options;
    checkTtl(op, ttlSeconds);
    checkLockDelay(op, options.lockDelaySeconds);
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
    let queueTicket: string | undefined; // the place in the lock's queue the last round answered
    // The next round's wait_seconds; under 1: a plain try.
    const roundSeconds = () =>
      waitMs > 0 && serverWaitKnown() !== false
        ? // Leave time for the answer to come back within the budget, and a
          // third of the lease's local validity after a grant at the end.
          Math.min(MAX_SERVER_WAIT_SECONDS, Math.floor((end - performance.now() - 250) / 1000), roundLimit)
        : 0;
    // A try has found the lock held (the semaphore full). Until then every
    // attempt is a try on the quick route, so an uncontended acquire never
    // spends the waiting route's small throttle; from then on, rounds.
    let held = false;
    try {
      for (let attempt = 0; !stop.aborted; ) {
        const wait = held ? roundSeconds() : 0;
        const serverWaits = wait >= 1;
        // Read/write locks came with their waiting routes: never the try route with wait_seconds.
        const waitRoute = serverWaits && (!this.#tryRouteWaits || rw !== undefined);
        const started = performance.now();
        const p = this.#attempt(op, resource, owner, ttlSeconds, serverWaits ? wait : undefined, options.lockDelaySeconds,
          serverWaits ? queueTicket : undefined, permits, waitRoute, rw);
        const r = await settle(p, stop);
        if (r.status === "aborted") {
          this.#releaseLate(p, resource, owner, generated, permits, rw);
          lastUnknown = false;
          break;
        }
        if (r.status === "ok") {
          lastUnknown = false;
          if (serverWaits) setServerWait(true);
          const a = r.value;
          if (a.granted) {
            const setup = {
              client: this as LeaseCalls, lock: a.lock, ttlSeconds, t0: a.t0,
              marginMs: this.#marginMs, backoff: this.#backoff, keepAlive: options.keepAlive ?? true,
            };
            const lease = a.rw
              ? new RWLease({ ...setup, client: this.#rwCalls(a.rw.mode, a.rw.slot), mode: a.rw.mode, slot: a.rw.slot })
              : a.permit
                ? new Permit({ ...setup, client: this.#permitCalls(a.permit.slot), slot: a.permit.slot, permits })
                : new Lease(setup);
            if (lease.held) return lease;
            // The answer came after the lease's local deadline: give it back and try again.
            this.#background(this.#cleanUp(resource, owner, a));
            last = (lease.signal.reason as LeaseLostError).reason;
          } else {
            last = a.held;
            // The next round sends back the place this one was given, and
            // goes at once: the place lapses 2 s after this round's end.
            queueTicket = a.queueTicket;
            if (!held) {
              // The try found it held: wait at the service from now on, at
              // once (the round wakes at the holder's release or expiry).
              held = true;
              if (roundSeconds() >= 1) continue;
            }
            if (serverWaits && (performance.now() - started >= Math.min(wait * 1000, 1000) || queueTicket !== undefined)) {
              attempt = 0; // the service did the waiting: ask again at once
              continue;
            }
          }
        } else {
          const err = r.error;
          if (waitRoute && isNoRoute(err)) {
            // A stack without the waiting routes: the old request from now on
            // (read/write locks, which never had it: polling).
            if (rw) setServerWait(false);
            else this.#tryRouteWaits = true;
            continue;
          }
          if (serverWaits && err instanceof ValidationError && err.errors.some((f) => f.field === "wait_seconds")) {
            setServerWait(false); // an older service (for permits: one that does not wait for them yet): poll from now on
            continue;
          }
          if (!retryable(err)) throw err;
          // A 503's place in the queue (its queue write may have landed):
          // the next round reclaims it, as a held round's.
          queueTicket = queueTicketOf(err) ?? queueTicket;
          last = err;
          lastUnknown = outcomeUnknown(err);
        }
        if (waitMs === 0 || performance.now() >= end) break;
        const delay = Math.min(this.#backoff.delay(attempt++, hint(last)), end - performance.now());
        if (!(await sleep(delay, stop)) || performance.now() >= end) break;
      }
      if (lastUnknown && generated) {
        // Nobody else uses this owner: end whatever lease it may have.
        this.#background(this.#cleanUp(resource, owner, undefined, permits, rw));
      }
      if (signal?.aborted) throw signal.reason;
      throw last ?? budget.signal.reason;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * One acquire request: a try to `POST /locks/{resource}` (`/semaphores/{name}`),
   * or with `waitRoute` a waiting round to its `…/wait`. It is deliberately not
   * cancelled by the caller's signal, so that a late grant is heard and released.
   */
  async #attempt(
    op: string, resource: string, owner: string, ttlSeconds: number, waitSeconds: number | undefined, lockDelaySeconds: number | undefined,
    queueTicket: string | undefined, permits: number, waitRoute = false, rw?: RWMode,
  ): Promise<AttemptResult> {
    const payload: Record<string, unknown> = { owner, ttl_seconds: ttlSeconds };
    if (permits) payload.permits = permits;
    if (waitSeconds !== undefined) payload.wait_seconds = waitSeconds;
    if (lockDelaySeconds) payload.lock_delay_seconds = lockDelaySeconds;
    if (queueTicket !== undefined) payload.queue_ticket = queueTicket;
    const t0 = performance.now(); // before sending: the lease cannot have started earlier
    const path = (rw ? `${rwPath(resource)}/${rw}` : permits ? semaphorePath(resource) : lockPath(resource)) + (waitRoute ? "/wait" : "");
    const ans = await this.#send(op, "POST", path, payload, { timeoutMs: this.#timeoutMs + (waitSeconds ?? 0) * 1000 });
    const body = parseJSON(op, ans.text);
    if (rw && body.acquired === true) {
      const lease = decodeRWLease(body.lease);
      if (!lease || lease.name !== resource || lease.mode !== rw) throw new UnexpectedAnswerError(`${op}: malformed lease in answer`);
      return { granted: true, lock: rwAsLock(lease), t0, rw: lease };
    }
    if (rw && body.acquired === false) {
      const at = typeof body.free_at === "string" ? new Date(body.free_at) : undefined;
      const held = new HeldError(resource, at && !Number.isNaN(at.getTime()) ? at : undefined, parseRetryAfter(ans.headers.get("retry-after")));
      return { granted: false, held, queueTicket: queueTicketIn(body) };
    }
    if (permits && body.acquired === true) {
      const permit = decodePermit(body.permit);
      if (!permit || permit.name !== resource) throw new UnexpectedAnswerError(`${op}: malformed permit in answer`);
      return { granted: true, lock: permitAsLock(permit), t0, permit };
    }
    if (permits && body.acquired === false) {
      const at = typeof body.free_at === "string" ? new Date(body.free_at) : undefined;
      const full = new FullError(resource, at && !Number.isNaN(at.getTime()) ? at : undefined, parseRetryAfter(ans.headers.get("retry-after")));
      return { granted: false, held: full, queueTicket: queueTicketIn(body) };
    }
    if (body.acquired === true) return { granted: true, lock: parseLock(op, body.lock), t0 };
    if (body.acquired === false) {
      const exp = typeof body.expires_at === "string" ? new Date(body.expires_at) : undefined;
      const expiresAt = exp && !Number.isNaN(exp.getTime()) ? exp : undefined;
      const held = new HeldError(resource, expiresAt, parseRetryAfter(ans.headers.get("retry-after")));
      // A waiting round that ended held answers its place in the lock's queue.
      return { granted: false, held, queueTicket: queueTicketIn(body) };
    }
    throw new UnexpectedAnswerError(`${op}: malformed answer: no "acquired"`);
  }

  /** Releases what an abandoned attempt turns out to have been granted. A clean acquired:false needs nothing. */
  #releaseLate(p: Promise<AttemptResult>, resource: string, owner: string, generated: boolean, permits: number, rw?: RWMode): void {
    this.#background(
      p.then(
        (a) => (a.granted ? this.#cleanUp(resource, owner, a) : undefined),
        (err: unknown) => (generated && outcomeUnknown(err) ? this.#cleanUp(resource, owner, undefined, permits, rw) : undefined),
      ),
    );
  }

  /**
   * The clean-up release of a grant nobody will use (with its token, and its
   * slot for a permit), or of whatever lease `owner` may hold (a lock's by
   * owner; a permit's found by a status read): temporary failures are retried
   * for up to {@link RELEASE_RETRY_TIMEOUT_MS}.
   */
  async #cleanUp(resource: string, owner: string, grant?: { lock: LockInfo; permit?: PermitInfo; rw?: RWLeaseInfo }, permits = 0, rw?: RWMode): Promise<void> {
    if (grant?.rw) {
      return releaseRetrying(this.#rwCalls(grant.rw.mode, grant.rw.slot), resource, { owner, fencingToken: grant.lock.fencingToken, backoff: this.#backoff });
    }
    if (!grant && rw) {
      // A generated owner's leases of this mode are this acquire's alone.
      const st = await this.rwStatus(resource, { signal: AbortSignal.timeout(RELEASE_RETRY_TIMEOUT_MS) });
      const mine = [...(st.writer ? [st.writer] : []), ...st.readers].filter((l) => l.owner === owner && l.mode === rw);
      await Promise.all(mine.map((l) =>
        releaseRetrying(this.#rwCalls(l.mode, l.slot), resource, { owner, fencingToken: l.fencingToken, backoff: this.#backoff })));
      return;
    }
    if (grant?.permit) {
      return releaseRetrying(this.#permitCalls(grant.permit.slot), resource, { owner, fencingToken: grant.lock.fencingToken, backoff: this.#backoff });
    }
    if (!grant && permits) {
      const st = await this.semaphoreStatus(resource, { signal: AbortSignal.timeout(RELEASE_RETRY_TIMEOUT_MS) });
      const mine = st.holders.find((h) => h.owner === owner);
      if (!mine) return;
      return releaseRetrying(this.#permitCalls(mine.slot), resource, { owner, fencingToken: mine.fencingToken, backoff: this.#backoff });
    }
    return releaseRetrying(this, resource, { owner, fencingToken: grant?.lock.fencingToken, backoff: this.#backoff });
  }

  /** The renew and release of a read/write lock's lease of `mode` (and `slot`), as a {@link Lease} calls them. */
  #rwCalls(mode: RWMode, slot: number | undefined): LeaseCalls {
    return {
      renew: async (name, o) => rwAsLock(await this.renewRW(name, { ...o, mode, slot })),
      release: (name, o) => this.releaseRW(name, { ...o, mode, slot }),
    };
  }

  /** The renew and release of a permit in `slot`, as a {@link Lease} calls them. */
  #permitCalls(slot: number): LeaseCalls {
    return {
      renew: async (name, o) => permitAsLock(await this.renewPermit(name, { ...o, slot })),
      release: (name, o) => this.releasePermit(name, { ...o, slot }),
    };
  }

  #background(p: Promise<unknown>): void {
    const q: Promise<void> = p.then(
      () => {},
      () => {}, // best effort: the lease runs out by itself
    ).finally(() => this.#pending.delete(q));
    this.#pending.add(q);
  }

  /** One request; resolves to a 2xx answer, rejects with a ProblemError for any other status, a RequestFailedError without an answer, or `signal.reason`. */
  /**
   * One page of the listing at `route`: its rows (the array under `field`,
   * each decoded; `decode` answers undefined for a row that is malformed or
   * outside the prefix) and the next page's cursor, undefined after the last.
   */
  /**
   * The force release at `path` of what `target` names (nothing: the lock;
   * a slot; a mode and slot), with `reason` and `options`: the lease
   * `decode` finds in the answer's `ended` (undefined: not the one asked
   * for), with the reason recorded, whether it was immediate and `freeAt`.
   */
  async #forceRelease<T>(op: string, path: string, target: Record<string, unknown>, reason: string, options: ForceReleaseOptions,
    decode: (ended: unknown) => T | undefined): Promise<T & { reason: string; immediate: boolean; freeAt: Date | undefined }> {
    if (typeof reason !== "string" || reason.trim() === "") throw new TypeError(`${op}: reason must be a non-empty string`);
    checkToken(op, options.fencingToken);
    const payload: Record<string, unknown> = { ...target, reason };
    if (options.immediate) payload.immediate = true;
    if (options.fencingToken !== undefined) payload.fencing_token = options.fencingToken;
    const ans = await this.#send(op, "DELETE", path, payload, options);
    const body = parseJSON(op, ans.text);
    const ended = decode(body.ended);
    if (ended === undefined) throw new UnexpectedAnswerError(`${op}: malformed answer: not the lease asked for ended`);
    const freeAt = typeof body.free_at === "string" ? new Date(body.free_at) : undefined;
    return {
      ...ended,
      reason: typeof body.reason === "string" ? body.reason : reason,
      immediate: body.immediate === true,
      freeAt: freeAt && !Number.isNaN(freeAt.getTime()) ? freeAt : undefined,
    };
  }

  async #page<T>(op: string, route: string, field: "locks" | "holders" | "rwlocks", prefix: string, options: ListOptions,
    decode: (v: unknown) => T | undefined): Promise<{ rows: T[]; cursor?: string }> {
    const ans = await this.#send(op, "GET", listPath(op, route, prefix, options), undefined, options);
    const body = parseJSON(op, ans.text);
    const rows: unknown = body[field];
    if (!Array.isArray(rows)) throw new UnexpectedAnswerError(`${op}: malformed answer: no "${field}"`);
    const what = { locks: "lock", holders: "permit", rwlocks: "read/write lock" }[field];
    return {
      rows: rows.map((v: unknown) => {
        const row = decode(v);
        if (row === undefined) throw new UnexpectedAnswerError(`${op}: malformed ${what} in answer`);
        return row;
      }),
      cursor: typeof body.cursor === "string" && body.cursor !== "" ? body.cursor : undefined,
    };
  }

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
        if (err instanceof CredentialsError || err instanceof SigningUnavailableError) throw err;
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

/** The default client of {@link withLock}: {@link Client.fromEnv}, made on first use. */
let envClient: Client | undefined;

/**
 * {@link Client.withLock} on `options.client`, or on a client from the
 * environment (`LOCKS_ENDPOINT`, `LOCKS_SIGV4`; see {@link Client.fromEnv}).
 *
 * ```ts
 * await withLock("nightly-report", async (signal, token, lease) => {
 *   for (const part of ["summary", "details"]) {
 *     lease.check(); // before each step: throws LeaseLostError once the lock may be gone
 *     await writeReport(part, { signal, fencingToken: token });
 *   }
 * });
 * ```
 */
export function withLock<T>(resource: string, fn: LockedFunction<T>, options: WithLockOptions & { client?: Client } = {}): Promise<T> {
  const { client, ...rest } = options;
  return (client ?? (envClient ??= Client.fromEnv())).withLock(resource, fn, rest);
}

/** {@link Client.withSemaphore} on `options.client`, or on a client from the environment (see {@link withLock}). */
export function withSemaphore<T>(
  name: string, permits: number, fn: PermitFunction<T>, options: WithLockOptions & { client?: Client } = {},
): Promise<T> {
  const { client, ...rest } = options;
  return (client ?? (envClient ??= Client.fromEnv())).withSemaphore(name, permits, fn, rest);
}

/** {@link Client.withReadLock} on `options.client`, or on a client from the environment (see {@link withLock}). */
export function withReadLock<T>(name: string, fn: RWLockedFunction<T>, options: WithLockOptions & { client?: Client } = {}): Promise<T> {
  const { client, ...rest } = options;
  return (client ?? (envClient ??= Client.fromEnv())).withReadLock(name, fn, rest);
}

/** {@link Client.withWriteLock} on `options.client`, or on a client from the environment (see {@link withLock}). */
export function withWriteLock<T>(name: string, fn: RWLockedFunction<T>, options: WithLockOptions & { client?: Client } = {}): Promise<T> {
  const { client, ...rest } = options;
  return (client ?? (envClient ??= Client.fromEnv())).withWriteLock(name, fn, rest);
}

/** {@link Client.withLockSet} on `options.client`, or on a client from the environment (see {@link withLock}). */
export function withLockSet<T>(names: string[], fn: LockSetFunction<T>, options: AcquireSetOptions & { client?: Client } = {}): Promise<T> {
  const { client, ...rest } = options;
  return (client ?? (envClient ??= Client.fromEnv())).withLockSet(names, fn, rest);
}

/** {@link Client.fromEnv} as a function: a client from `LOCKS_ENDPOINT`, `LOCKS_SIGV4` and `AWS_REGION`. */
export function fromEnv(options?: FromEnvOptions): Client {
  return Client.fromEnv(options);
}

/** @deprecated The old name of {@link Client}: the same class. */
export const LockClient = Client;
/** @deprecated The old name of {@link Client}. */
export type LockClient = Client;

/** A fresh owner: `${hostname}:${pid}:${random}`. */
export function defaultOwner(): string {
  return `${hostname()}:${process.pid}:${randomBytes(6).toString("hex")}`;
}

/** A read/write lock's lease as the {@link LockInfo} of its {@link Lease} (`resource` is the lock's name). */
function rwAsLock(l: RWLeaseInfo): LockInfo {
  return { resource: l.name, owner: l.owner, fencingToken: l.fencingToken, acquiredAt: l.acquiredAt, expiresAt: l.expiresAt, lockDelaySeconds: l.lockDelaySeconds };
}

/** The body naming `owner`'s lease of `mode` (and `slot`, a reader's), checked. */
function rwBody(op: string, o: { owner: string; mode: RWMode; slot?: number; fencingToken?: number }): Record<string, unknown> {
  checkOwner(op, o.owner);
  checkToken(op, o.fencingToken);
  const body: Record<string, unknown> = { owner: o.owner, ...rwTarget(op, o.mode, o.slot) };
  if (o.fencingToken !== undefined) body.fencing_token = o.fencingToken;
  return body;
}

/** The lease a read/write lock's body names, checked: the writer, or the reader in `slot`. */
function rwTarget(op: string, mode: RWMode, slot: number | undefined): { mode: RWMode; slot?: number } {
  if (mode !== "read" && mode !== "write") throw new TypeError(`${op}: mode ${JSON.stringify(mode)}: want "read" or "write"`);
  if (mode === "write") return { mode };
  if (typeof slot !== "number" || !Number.isSafeInteger(slot) || slot < 0 || slot >= MAX_READERS) {
    throw new RangeError(`${op}: slot ${String(slot)}: want a whole number from 0 to ${MAX_READERS - 1}`);
  }
  return { mode, slot };
}

/** A permit as the {@link LockInfo} of its {@link Lease} (`resource` is the semaphore's name). */
function permitAsLock(p: PermitInfo): LockInfo {
  return { resource: p.name, owner: p.owner, fencingToken: p.fencingToken, acquiredAt: p.acquiredAt, expiresAt: p.expiresAt, lockDelaySeconds: p.lockDelaySeconds };
}

/**
 * A set's path prefix: `given`, or the names' longest common prefix (whole
 * characters). Checks the names: 1 to {@link MAX_SET_NAMES}, each a lock
 * name beginning with the prefix, none twice.
 */
function setPrefix(op: string, names: unknown, given: unknown): string {
  if (!Array.isArray(names) || names.length < 1 || names.length > MAX_SET_NAMES) {
    throw new RangeError(`${op}: names: want an array of 1 to ${MAX_SET_NAMES} lock names`);
  }
  for (const n of names) checkResource(op, n);
  if (new Set(names).size !== names.length) throw new TypeError(`${op}: names: a name is given twice`);
  let prefix: string;
  if (given !== undefined) {
    if (typeof given !== "string" || given === "") throw new TypeError(`${op}: prefix must be a non-empty string`);
    prefix = given;
  } else {
    const chars = [...(names[0] as string)];
    let n = chars.length;
    for (const name of names.slice(1) as string[]) {
      const other = [...name];
      let i = 0;
      while (i < n && i < other.length && chars[i] === other[i]) i++;
      n = i;
    }
    prefix = chars.slice(0, n).join("");
    if (prefix === "") throw new TypeError(`${op}: the names share no prefix: give one as \`prefix\` (each name must begin with it)`);
  }
  checkResource(op, prefix);
  const outside = (names as string[]).find((n) => !n.startsWith(prefix));
  if (outside !== undefined) throw new TypeError(`${op}: ${JSON.stringify(outside)} does not begin with the prefix ${JSON.stringify(prefix)}`);
  return prefix;
}

/** The `locks` of a set's renew or release request. */
function setLocks(locks: SetLock[]): Array<{ resource: string; fencing_token: number }> {
  return locks.map((l) => ({ resource: l.resource, fencing_token: l.fencingToken }));
}

/** Each name's outcome of a set's renew or release answer (200). */
function setItems(op: string, body: Record<string, unknown>, sent: SetLock[]): SetItem[] {
  if (!Array.isArray(body.locks)) throw new UnexpectedAnswerError(`${op}: malformed answer: no "locks"`);
  const names = new Set(sent.map((l) => l.resource));
  return body.locks.map((v: unknown): SetItem => {
    const it = (typeof v === "object" && v !== null ? v : {}) as Record<string, unknown>;
    if (typeof it.resource !== "string" || !names.has(it.resource) || typeof it.ok !== "boolean") {
      throw new UnexpectedAnswerError(`${op}: malformed answer: an item of "locks"`);
    }
    if (it.ok) return { resource: it.resource, ok: true, lock: it.lock === undefined ? undefined : parseLock(op, it.lock) };
    const p = (typeof it.problem === "object" && it.problem !== null ? it.problem : {}) as Record<string, unknown>;
    const status = typeof p.status === "number" ? p.status : 0;
    return { resource: it.resource, ok: false, error: problemFromAnswer(`${op}: ${JSON.stringify(it.resource)}`, status, JSON.stringify(p), undefined) };
  });
}

function checkPermits(op: string, permits: unknown): void {
  if (typeof permits !== "number" || !Number.isSafeInteger(permits) || permits < 1 || permits > MAX_PERMITS) {
    throw new RangeError(`${op}: permits ${String(permits)}: want a whole number from 1 to ${MAX_PERMITS}`);
  }
}

function checkSlot(op: string, slot: unknown): void {
  if (typeof slot !== "number" || !Number.isSafeInteger(slot) || slot < 0 || slot >= MAX_PERMITS) {
    throw new RangeError(`${op}: slot ${String(slot)}: want a whole number from 0 to ${MAX_PERMITS - 1}`);
  }
}

function checkWatchArgs(op: string, index: unknown, waitSeconds: unknown): void {
  if (!(typeof index === "number" && Number.isSafeInteger(index) && index >= 0)) {
    throw new RangeError(`${op}: index ${String(index)}: want a whole number ≥ 0 (the index of the last answer)`);
  }
  if (!(typeof waitSeconds === "number" && Number.isSafeInteger(waitSeconds) && waitSeconds >= 0 && waitSeconds <= MAX_SERVER_WAIT_SECONDS)) {
    throw new RangeError(`${op}: waitSeconds ${String(waitSeconds)}: want a whole number from 0 to ${MAX_SERVER_WAIT_SECONDS}`);
  }
}

/** The rows of every page, from the first on, following each page's cursor until it has none. */
async function followPages<P extends { cursor?: string }, T>(page: (cursor: string | undefined) => Promise<P>, rows: (p: P) => T[]): Promise<T[]> {
  const all: T[] = [];
  let cursor: string | undefined;
  do {
    const p = await page(cursor);
    all.push(...rows(p));
    cursor = p.cursor;
  } while (cursor);
  return all;
}

/** The path of one page of a listing at `route`. */
function listPath(op: string, route: string, prefix: unknown, options: ListOptions): string {
  checkOptions(op, options);
  if (typeof prefix !== "string" || prefix.includes("/")) throw new TypeError(`${op}: prefix must be a string without "/"`);
  const { limit, cursor } = options;
  if (limit !== undefined && !(Number.isSafeInteger(limit) && limit >= 1 && limit <= 1000)) {
    throw new RangeError(`${op}: limit ${String(limit)}: want a whole number from 1 to 1000`);
  }
  const q: string[] = [];
  if (prefix) q.push(`prefix=${encode(prefix)}`);
  if (limit !== undefined) q.push(`limit=${limit}`);
  if (cursor) q.push(`cursor=${encode(cursor)}`);
  return `${route}${q.length ? `?${q.join("&")}` : ""}`;
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

/** An acquire's wait in ms: `waitMs`, else the deprecated `waitSeconds`, else {@link DEFAULT_ACQUIRE_WAIT_MS}; Infinity past the timers' range. */
function waitBudgetMs(op: string, options: AcquireOptions): number {
  const { waitMs, waitSeconds } = options;
  if (waitMs !== undefined && waitSeconds !== undefined) throw new TypeError(`${op}: waitMs and waitSeconds (deprecated) both given: give waitMs`);
  const [name, ms] = waitSeconds !== undefined ? ["waitSeconds", waitSeconds * 1000] : ["waitMs", waitMs ?? DEFAULT_ACQUIRE_WAIT_MS];
  if (!(typeof ms === "number" && ms >= 0)) {
    throw new RangeError(`${op}: ${name} ${String(waitSeconds ?? waitMs)}: want a number ≥ 0 (Infinity: until the lock is free)`);
  }
  return ms > MAX_TIMER_MS ? Infinity : ms;
}

function parseEndpoint(endpoint: string | URL): URL {
  let u: URL;
  try {
    u = new URL(endpoint);
  } catch {
    throw new TypeError(`Client: endpoint ${JSON.stringify(String(endpoint))}: want http(s)://host[:port][/path]`);
  }
  if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.host) {
    throw new TypeError(`Client: endpoint ${JSON.stringify(u.href)}: want http(s)://host[:port][/path]`);
  }
  if (u.search || u.hash || u.username || u.password) {
    throw new TypeError(`Client: endpoint ${JSON.stringify(u.href)}: must not have a query, fragment or credentials`);
  }
  return u;
}

/** Whether `fromEnv`'s one argument is an environment (the deprecated form) rather than options: process.env, or names like LOCKS_ENDPOINT. */
function isEnvironment(v: unknown): boolean {
  return v === process.env || (typeof v === "object" && v !== null && Object.keys(v).some((k) => /^[A-Z][A-Z0-9_]*$/.test(k)));
}
