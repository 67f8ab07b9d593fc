import "./dispose.js";
import {
  ForbiddenError,
  LeaseExpiredError,
  LeaseLostError,
  LeaseReleasedError,
  NotFoundError,
  StaleTokenError,
  outcomeUnknown,
  retryable,
} from "./errors.js";
import type { LeaseCalls, LockInfo, PermitInfo, RWLeaseInfo, RWMode } from "./types.js";
import { Backoff, sleep } from "./util.js";

/**
 * How long a release retries temporary failures (503, throttling, no answer)
 * unless its signal aborts sooner: {@link Lease.release} and the release of a
 * grant nobody waited for.
 */
export const RELEASE_RETRY_TIMEOUT_MS = 10_000;

/**
 * How long before a lease's local deadline its timer ends it, in ms: the
 * asynchronous signal (the `abort` event, `signal.onabort`) is then normally
 * delivered before the deadline. The synchronous checks (`held`, `check()`,
 * `signal.aborted`, `signal.throwIfAborted()`) compare the clock with the
 * deadline itself. The same in the Go and Python clients.
 */
export const DELIVERY_ALLOWANCE_MS = 5;

const nativeAborted = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "aborted")!.get!;
const nativeReason = Object.getOwnPropertyDescriptor(AbortSignal.prototype, "reason")!.get!;
const nativeThrowIfAborted = AbortSignal.prototype.throwIfAborted;

/**
 * Makes `signal`'s `aborted`, `reason` and `throwIfAborted()` call `due`
 * first (own properties of this instance): `due` aborts the signal when the
 * clock says the lease is over, so these answer by the clock at the moment
 * they are asked. Code that reads them (fetch, timers/promises, your own
 * checks) sees the loss even before the timer has run; the `abort` event
 * still fires only when something aborts the signal.
 */
export function clockReading(signal: AbortSignal, due: () => void): AbortSignal {
  Object.defineProperties(signal, {
    aborted: {
      configurable: true,
      get(this: AbortSignal) {
        due();
        return nativeAborted.call(this) as boolean;
      },
    },
    reason: {
      configurable: true,
      get(this: AbortSignal) {
        due();
        return nativeReason.call(this) as unknown;
      },
    },
    throwIfAborted: {
      configurable: true,
      writable: true,
      value(this: AbortSignal) {
        due();
        nativeThrowIfAborted.call(this);
      },
    },
  });
  return signal;
}

/** The margin of a lease of `ttlMs`: `optionMs` unless it is not below the TTL, else min(ttl/10, 1 s). */
export function leaseMarginMs(ttlMs: number, optionMs: number | undefined): number {
  return optionMs !== undefined && optionMs > 0 && optionMs < ttlMs ? optionMs : Math.min(ttlMs / 10, 1000);
}

/**
 * The longest a lease of `ttlMs` and `marginMs` may wait at the service in one
 * round, in ms: two thirds of its local validity (ttl − margin). Its local
 * deadline counts from before the request, and the grant may come at the end
 * of the round: this leaves a third of the validity for the first renewal.
 * It also caps the keep-alive's interval.
 */
export function roundLimitMs(ttlMs: number, marginMs: number): number {
  return ((ttlMs - marginMs) * 2) / 3;
}

/** A release's retry state that outlives one call: an attempt whose outcome is unknown makes a later 404 count as released. */
export interface ReleaseState {
  unsure: boolean;
}

/**
 * Releases `owner`'s lease, retrying temporary failures with backoff until
 * `signal` aborts, {@link RELEASE_RETRY_TIMEOUT_MS} pass, or (when given)
 * performance.now() reaches `untilMs`. A 404 after an attempt with an unknown
 * outcome counts as released, unless the service says an operator force
 * released the lease. Rejects with the last attempt's error.
 */
export async function releaseRetrying(
  client: LeaseCalls,
  resource: string,
  options: { owner: string; fencingToken?: number; signal?: AbortSignal; backoff: Backoff; untilMs?: number; state?: ReleaseState },
): Promise<void> {
  const state = options.state ?? { unsure: false };
  const budget = AbortSignal.timeout(RELEASE_RETRY_TIMEOUT_MS);
  const signal = options.signal ? AbortSignal.any([options.signal, budget]) : budget;
  for (let attempt = 0; ; attempt++) {
    try {
      await client.release(resource, { owner: options.owner, fencingToken: options.fencingToken, signal });
      return;
    } catch (err) {
      if (err instanceof NotFoundError && state.unsure && !err.forceReleased) return;
      if (!retryable(err) || signal.aborted) throw err;
      if (outcomeUnknown(err)) state.unsure = true;
      const delay = options.backoff.delay(attempt, retryAfter(err));
      if (options.untilMs !== undefined && performance.now() + delay > options.untilMs) throw err;
      if (!(await sleep(delay, signal))) throw err;
    }
  }
}

function retryAfter(err: unknown): number {
  const ms = (err as { retryAfterMs?: unknown }).retryAfterMs;
  return typeof ms === "number" ? ms : 0;
}

/**
 * What a lock set ({@link LockSet}, lockset.ts) does to the leases of its
 * names, which it renews and releases together: record a renewal, lose one,
 * end one as released, and read when it was last renewed. Filled in by
 * {@link Lease}'s static block; not exported by the package.
 */
export const leaseInternals = {} as {
  extend(l: Lease, t0: number, lock: LockInfo): boolean;
  lose(l: Lease, reason: Error): void;
  endReleased(l: Lease): void;
  renewedAt(l: Lease): number;
};

/** How a {@link Client} sets up a lease; not for direct use. */
export interface LeaseSetup {
  client: LeaseCalls;
  lock: LockInfo;
  ttlSeconds: number;
  /** performance.now() just before the request that granted the lease was sent. */
  t0: number;
  marginMs: number | undefined;
  backoff: Backoff;
  keepAlive: boolean;
  /** A semaphore's permit: its slot (`lock.resource` is the semaphore's name, `client` renews and releases by slot). */
  slot?: number;
  /** A read/write lock's lease: its mode (`client` renews and releases by mode and slot). */
  mode?: RWMode;
}

/**
 * A lock held by this client, as {@link Client.acquire} and
 * {@link Client.tryAcquire} return it.
 *
 * Its local deadline is measured on the monotonic clock (performance.now())
 * from before the request that granted or last renewed it was sent:
 * t0 + ttl − margin, margin min(ttl/10, 1 s) unless the client sets another.
 * The service's clock (`expiresAt`) never decides whether the client believes
 * it holds the lock.
 *
 * Unless turned off, a keep-alive renews the lease every ttl/3 (every
 * ⅔ × (ttl − margin) when that is shorter: a margin over ttl/2), timed from
 * the request that granted it, from the moment the lease exists — at once
 * when that time has passed, as after a grant late in a wait at the service.
 * The lease is lost when a renewal is refused, or when none succeeded before
 * the local deadline. Every way of asking — `held`, `check()`, and the
 * `signal`'s `aborted`, `reason` and `throwIfAborted()` — reads the clock at
 * the moment it is asked and ends the lease then if the deadline has passed,
 * so a process resumed from a pause learns of the loss at its first
 * question; a timer ends the lease {@link DELIVERY_ALLOWANCE_MS} before the
 * deadline to wake `signal`'s listeners. `signal`'s reason is a
 * {@link LeaseLostError}, or after `release()` a {@link LeaseReleasedError}.
 * Call `check()` before each step that touches the protected resource, and
 * send `fencingToken` with every write to it.
 *
 * It is `AsyncDisposable`: `await using lease = await client.acquire(...)`
 * releases it when the block ends (see {@link Lease.[Symbol.asyncDispose]}).
 */
export class Lease implements AsyncDisposable {
  /** The lock's name. */
  readonly resource: string;
  /** The owner the lease is held for, as the service stored it. */
  readonly owner: string;
  /** Grows with every acquire of the resource; renewals keep it. Send it with every write the lock protects. */
  readonly fencingToken: number;
  /** The lease's time-to-live; every renewal restarts it. */
  readonly ttlSeconds: number;

  readonly #client: LeaseCalls;
  readonly #backoff: Backoff;
  readonly #ttlMs: number;
  readonly #marginMs: number;
  readonly #ac = new AbortController();
  readonly #signal = clockReading(this.#ac.signal, () => this.#expireIfDue());
  readonly #release: ReleaseState = { unsure: false };
  #lock: LockInfo;
  #deadline: number;
  #lastT0: number;
  #watchdog: ReturnType<typeof setTimeout> | undefined;
  #ended = false;
  #keepAlive: { stop: AbortController; done: Promise<void> } | undefined;
  /** Whether a release has settled the lease at the service: it succeeded, or was refused for good. */
  #settled = false;
  /** A permit's slot, for its lost-lease error; undefined for a lock. */
  readonly #slot: number | undefined;
  /** A read/write lock's lease's mode, for its lost-lease error. */
  readonly #mode: RWMode | undefined;

  static {
    Object.assign(leaseInternals, {
      extend: (l: Lease, t0: number, lock: LockInfo) => l.#extend(t0, lock),
      lose: (l: Lease, reason: Error) => l.#lose(reason),
      endReleased: (l: Lease) => l.#endReleased(),
      renewedAt: (l: Lease) => l.#lastT0,
    });
  }

  /** Leases are made by {@link Client.acquire} and {@link Client.tryAcquire}, not directly. */
  constructor(setup: LeaseSetup) {
    const { lock, ttlSeconds, t0 } = setup;
    this.resource = lock.resource;
    this.owner = lock.owner;
    this.fencingToken = lock.fencingToken;
    this.ttlSeconds = ttlSeconds;
    this.#client = setup.client;
    this.#backoff = setup.backoff;
    this.#ttlMs = ttlSeconds * 1000;
    this.#marginMs = leaseMarginMs(this.#ttlMs, setup.marginMs);
    this.#lock = lock;
    this.#slot = setup.slot;
    this.#mode = setup.mode;
    this.#lastT0 = t0;
    this.#deadline = t0 + this.#ttlMs - this.#marginMs;
    if (performance.now() >= this.#deadline) {
      // The grant came too late to trust: the lease may have lapsed already.
      this.#lose(new LeaseExpiredError());
      return;
    }
    this.#arm();
    if (setup.keepAlive) this.keepAlive();
  }

  /**
   * Aborts when the lease is lost (reason: {@link LeaseLostError}) or
   * released (reason: {@link LeaseReleasedError}). Its `aborted`, `reason`
   * and `throwIfAborted()` read the clock as `held` does; its `abort` event
   * comes from the timer, {@link DELIVERY_ALLOWANCE_MS} before the deadline.
   */
  get signal(): AbortSignal {
    return this.#signal;
  }

  /** True while the lease is neither lost nor released and its local deadline has not passed, by the clock now. */
  get held(): boolean {
    this.#expireIfDue();
    return !this.#ended;
  }

  /**
   * Throws the {@link LeaseLostError} if the lease is lost — also when its
   * local deadline has just passed, by the clock now — and the
   * {@link LeaseReleasedError} after `release()`. Call it before each step
   * that touches the protected resource.
   */
  check(): void {
    this.#expireIfDue();
    if (this.#ended) throw nativeReason.call(this.#ac.signal);
  }

  /** The local deadline on the performance.now() clock: the lease is given up then unless a renewal succeeds first. */
  get deadline(): number {
    return this.#deadline;
  }

  /** Milliseconds left until the local deadline (0 once the lease has ended). */
  get remainingMs(): number {
    this.#expireIfDue();
    return this.#ended ? 0 : Math.max(0, this.#deadline - performance.now());
  }

  /** The lease as the service last reported it (at the grant or the latest renewal). */
  get lock(): LockInfo {
    return this.#lock;
  }

  /** When the lease ends by the service's clock, as of the latest grant or renewal. Informational only: use `check()`, `held` or `signal`. */
  get expiresAt(): Date {
    return this.#lock.expiresAt;
  }

  /**
   * Renews the lease by its TTL once. A refusal that means the lease is gone
   * (404, 403, 409, or another answer renewing cannot get past) ends the
   * lease and rejects with the {@link LeaseLostError}; a temporary failure (5xx,
   * no answer) rejects with that error and leaves the lease held until its
   * local deadline. Aborting `options.signal` only abandons this request.
   */
  async renew(options: { signal?: AbortSignal } = {}): Promise<void> {
    this.check();
    const t0 = performance.now();
    let lock: LockInfo;
    try {
      lock = await this.#client.renew(this.resource, {
        owner: this.owner,
        ttlSeconds: this.ttlSeconds,
        fencingToken: this.fencingToken,
        signal: options.signal,
      });
    } catch (err) {
      if (options.signal?.aborted && err === options.signal.reason) throw err;
      if (!retryable(err)) {
        this.#lose(err instanceof Error ? err : new Error(String(err)));
        throw nativeReason.call(this.#ac.signal);
      }
      throw err;
    }
    if (!this.#extend(t0, lock)) throw nativeReason.call(this.#ac.signal);
  }

  /**
   * Starts renewing the lease every ttl/3 (or ⅔ × (ttl − margin) when that is
   * shorter), timed from the request of the latest grant or renewal, until it
   * is released or lost. Temporary failures are retried with
   * short backoff until the local deadline. The lease starts this itself
   * unless `keepAlive: false` was given; calls after the first do nothing.
   */
  keepAlive(): void {
    if (this.#ended || this.#keepAlive) return;
    const stop = new AbortController();
    // A keep-alive must not die silently: a bug in it ends the lease.
    const done = this.#keepAliveLoop(stop.signal).catch((err: unknown) => this.#lose(err instanceof Error ? err : new Error(String(err))));
    this.#keepAlive = { stop, done };
  }

  /**
   * Stops the keep-alive, aborts `signal` with {@link LeaseReleasedError}
   * (unless the lease was lost) and ends the lease at the service, sending its
   * fencing token so that a newer lease of the same owner is left alone.
   * Temporary failures (503, API Gateway's throttle answers, no answer) are
   * retried with backoff until `options.signal` aborts, for at most
   * {@link RELEASE_RETRY_TIMEOUT_MS}, and not past the lease's end by the local
   * clock (its TTL after the request of the grant or latest renewal); a 404
   * after an attempt whose outcome is unknown counts as released. Rejects with
   * {@link NotFoundError} when the lease had already ended at the service
   * (`forceReleased` when an operator ended it), {@link ForbiddenError} or
   * {@link StaleTokenError} when another lease replaced it, or the last
   * temporary failure; it may be called again after one.
   */
  async release(options: { signal?: AbortSignal } = {}): Promise<void> {
    const ka = this.#keepAlive;
    if (ka) {
      ka.stop.abort();
      await ka.done;
    }
    this.#endReleased();
    try {
      await releaseRetrying(this.#client, this.resource, {
        owner: this.owner, fencingToken: this.fencingToken, signal: options.signal,
        backoff: this.#backoff, untilMs: this.#lastT0 + this.#ttlMs, state: this.#release,
      });
      this.#settled = true;
    } catch (err) {
      if (!retryable(err)) this.#settled = true;
      throw err;
    }
  }

  /**
   * Releases the lease when an `await using` block ends, and reports a lease
   * the block did not hold throughout, as {@link Client.withLock} does: it
   * rejects with the {@link LeaseLostError} when the lease was lost, or when
   * the release finds that it had ended at the service (404, 403, 409;
   * `forceReleased` when an operator ended it). A release that still fails
   * temporarily after its retries is ignored (the lease runs out by itself),
   * and after a `release()` that settled it, this does nothing. When the
   * block threw as well, JavaScript reports both in a `SuppressedError`.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#settled) return;
    this.#expireIfDue(); // a block that ran past the deadline ran partly unprotected
    const reason: unknown = nativeReason.call(this.#ac.signal);
    const lost = reason instanceof LeaseLostError ? reason : undefined;
    try {
      await this.release();
    } catch (err) {
      if (lost) throw lost;
      if (err instanceof NotFoundError || err instanceof ForbiddenError || err instanceof StaleTokenError) {
        throw new LeaseLostError(this.resource, this.fencingToken, err, this.#slot, this.#mode);
      }
      return; // a temporary failure: the lease runs out by itself
    }
    if (lost) throw lost;
  }

  /** Ends the lease if its local deadline has passed by the clock now: the one judgement of every query. */
  #expireIfDue(): void {
    if (!this.#ended && performance.now() >= this.#deadline) this.#lose(new LeaseExpiredError());
  }

  /** Sets the timer that ends the lease {@link DELIVERY_ALLOWANCE_MS} before its local deadline. */
  #arm(): void {
    clearTimeout(this.#watchdog);
    this.#watchdog = setTimeout(() => this.#expire(), Math.max(0, this.#deadline - DELIVERY_ALLOWANCE_MS - performance.now()));
    this.#watchdog.unref();
  }

  #expire(): void {
    if (this.#ended) return;
    if (performance.now() < this.#deadline - DELIVERY_ALLOWANCE_MS) {
      this.#arm(); // a renewal moved the deadline, or the timer fired early
      return;
    }
    this.#lose(new LeaseExpiredError());
  }

  /** Ends the lease as released (`signal`'s reason {@link LeaseReleasedError}) unless it has ended already. */
  #endReleased(): void {
    if (this.#ended) return;
    this.#ended = true;
    clearTimeout(this.#watchdog);
    this.#ac.abort(new LeaseReleasedError(this.resource));
  }

  #lose(reason: Error): void {
    if (this.#ended) return;
    this.#ended = true;
    clearTimeout(this.#watchdog);
    this.#keepAlive?.stop.abort();
    this.#ac.abort(new LeaseLostError(this.resource, this.fencingToken, reason, this.#slot, this.#mode));
  }

  /** Records a renewal sent at t0; false when the lease had ended before its answer came. */
  #extend(t0: number, lock: LockInfo): boolean {
    if (this.#ended) return false;
    if (performance.now() >= this.#deadline) {
      // Too late: the lease may have lapsed before the renewal reached the service.
      this.#lose(new LeaseExpiredError());
      return false;
    }
    this.#lock = lock;
    const d = t0 + this.#ttlMs - this.#marginMs;
    if (d > this.#deadline) {
      this.#deadline = d;
      this.#lastT0 = t0;
      this.#arm();
    }
    return true;
  }

  async #keepAliveLoop(stop: AbortSignal): Promise<void> {
    const interval = Math.min(this.#ttlMs / 3, roundLimitMs(this.#ttlMs, this.#marginMs));
    for (;;) {
      if (!(await sleep(this.#lastT0 + interval - performance.now(), stop, true))) return;
      if (!(await this.#renewUntilDeadline(stop, interval))) return;
    }
  }

  /** Renews, retrying temporary failures with short backoff until the local deadline; false when the lease or the keep-alive ended. */
  async #renewUntilDeadline(stop: AbortSignal, interval: number): Promise<boolean> {
    const base = this.#backoff.baseMs;
    const b = new Backoff(base, Math.max(base, Math.min(this.#backoff.maxMs, this.#ttlMs / 8)));
    for (let attempt = 0; ; attempt++) {
      const deadline = this.#deadline;
      const t0 = performance.now();
      if (t0 >= deadline || this.#ended || stop.aborted) return false;
      // One try may take until the next renewal is due, never past the deadline.
      const cut = AbortSignal.any([stop, AbortSignal.timeout(Math.max(1, Math.ceil(Math.min(interval, deadline - t0))))]);
      try {
        await this.renew({ signal: cut });
        return true;
      } catch {
        if (this.#ended || stop.aborted) return false;
      }
      if (!(await sleep(Math.min(b.delay(attempt), deadline - performance.now()), stop, true))) return false;
    }
  }
}

/**
 * A permit of a semaphore held by this client, as
 * {@link Client.acquireSemaphore} and {@link Client.tryAcquireSemaphore}
 * return it: a {@link Lease} (keep-alive, `signal` aborting on loss,
 * `release()`, `await using`) in a slot of its own, renewed and released by
 * slot. Its `fencingToken` is larger than every token of the semaphore
 * before it, so a protected resource fences per slot: it keeps the largest
 * token seen for each slot (`fence_${slot}`) and refuses a smaller one,
 * which a permit that lost its slot has; one "largest token" would refuse
 * the other live permits. `resource` is the semaphore's name.
 */
export class Permit extends Lease {
  /** The semaphore's name (as `resource`). */
  readonly name: string;
  /** The permit's slot, 0 to `permits` − 1. */
  readonly slot: number;
  /** The semaphore's number of permits, as acquired. */
  readonly permits: number;

  /** Permits are made by {@link Client.acquireSemaphore} and {@link Client.tryAcquireSemaphore}, not directly. */
  constructor(setup: LeaseSetup & { slot: number; permits: number }) {
    super(setup);
    this.name = this.resource;
    this.slot = setup.slot;
    this.permits = setup.permits;
  }

  /** The permit as the service last reported it (at the grant or the latest renewal). */
  get info(): PermitInfo {
    const l = this.lock;
    return { name: l.resource, slot: this.slot, owner: l.owner, fencingToken: l.fencingToken, acquiredAt: l.acquiredAt,
      expiresAt: l.expiresAt, lockDelaySeconds: l.lockDelaySeconds };
  }
}

/**
 * A reader's or the writer's lease of a read/write lock held by this client,
 * as {@link Client.acquireRead}, {@link Client.acquireWrite} and their tries
 * return it: a {@link Lease} (keep-alive, `signal` aborting on loss,
 * `check()` by the clock, `release()`, `await using`) renewed and released
 * by mode, slot and token. Its `fencingToken` is larger than every earlier
 * token of the name, read or write: a resource that keeps the largest
 * writer's token it saw refuses a writer with a smaller one, and a reader
 * whose token is below it (a writer came after that reader's grant).
 */
export class RWLease extends Lease {
  /** The read/write lock's name (as `resource`). */
  readonly name: string;
  /** "read" or "write". */
  readonly mode: RWMode;
  /** A reader's slot, 0 to 63; undefined for the writer. */
  readonly slot: number | undefined;

  /** Made by the client's read/write lock calls, not directly. */
  constructor(setup: LeaseSetup & { mode: RWMode; slot: number | undefined }) {
    super(setup);
    this.name = this.resource;
    this.mode = setup.mode;
    this.slot = setup.slot;
  }

  /** The lease as the service last reported it (at the grant or the latest renewal). */
  get info(): RWLeaseInfo {
    const l = this.lock;
    return { name: l.resource, mode: this.mode, slot: this.slot, owner: l.owner, fencingToken: l.fencingToken,
      acquiredAt: l.acquiredAt, expiresAt: l.expiresAt, lockDelaySeconds: l.lockDelaySeconds };
  }
}
