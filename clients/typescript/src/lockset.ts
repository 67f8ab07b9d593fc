// Lock sets: several locks taken all or none (docs/design.md#lock-sets).
// Each name of a set is a Lease of its own (its token, its local deadline);
// the set renews all of them with one request per renewal and releases
// them with one more.
import "./dispose.js";
import { HeldError, LeaseLostError, LeaseReleasedError, LocksError, ProblemError, NotFoundError, outcomeUnknown, retryable } from "./errors.js";
import { Lease, RELEASE_RETRY_TIMEOUT_MS, clockReading, leaseInternals, leaseMarginMs, roundLimitMs } from "./lease.js";
import type { LockInfo } from "./types.js";
import { Backoff, sleep } from "./util.js";

/** The most names one lock set may have (the service's bound). */
export const MAX_SET_NAMES = 25;

/**
 * A lock set refused because one of its names is held by another owner (or
 * has waiters queued, or is in its lock-delay): nothing is held, but for
 * `unreleased`, which lapse at their TTL. A {@link HeldError} whose
 * `resource` is `blockedBy`.
 */
export class LockSetHeldError extends HeldError {
  /** The name that refused the set. */
  readonly blockedBy: string;
  /** When `blockedBy` comes free by the service's clock; undefined when the service did not say. */
  readonly freeAt: Date | undefined;
  /** Names the set took and the service could not release: held until their TTL. */
  readonly unreleased: string[];

  constructor(blockedBy: string, freeAt?: Date, retryAfterMs?: number, unreleased: string[] = []) {
    let what = `lock set refused: ${JSON.stringify(blockedBy)} is held by another owner`;
    if (unreleased.length > 0) what = `${what} (held until their TTL: ${JSON.stringify(unreleased)})`;
    super(blockedBy, freeAt, retryAfterMs, what);
    this.blockedBy = blockedBy;
    this.freeAt = freeAt;
    this.unreleased = unreleased;
  }
}

/** A lock set's renewal or release that failed for some names: each name's error in `failed`. */
export class LockSetError extends LocksError {
  /** "renew" or "release". */
  readonly operation: string;
  /** Each failed name's error: a {@link ProblemError} the service answered for it, or why the request failed. */
  readonly failed: ReadonlyMap<string, unknown>;

  constructor(operation: string, failed: ReadonlyMap<string, unknown>) {
    const parts = [...failed].map(([n, e]) => `${JSON.stringify(n)}: ${e instanceof Error ? e.message : String(e)}`);
    super(`${operation} lock set: ${parts.join("; ")}`);
    this.operation = operation;
    this.failed = failed;
  }
}

/** One name's outcome of a set's renewal or release. */
export type SetItem = { resource: string; ok: true; lock?: LockInfo } | { resource: string; ok: false; error: ProblemError };

/** The set's own calls, as a {@link Client} makes them; not for direct use. */
export interface SetCalls {
  /** POST /locksets/{prefix}/renew: each name's outcome. */
  renewSet(prefix: string, o: { owner: string; ttlSeconds: number; locks: SetLock[]; signal?: AbortSignal }): Promise<SetItem[]>;
  /** DELETE /locksets/{prefix}: each name's outcome ([] when all were released). */
  releaseSet(prefix: string, o: { owner: string; locks: SetLock[]; signal?: AbortSignal }): Promise<SetItem[]>;
}

/** One lease of a held set as the renew and release requests name it. */
export interface SetLock {
  resource: string;
  fencingToken: number;
}

/** How a {@link Client} sets up a lock set; not for direct use. */
export interface LockSetSetup {
  calls: SetCalls;
  prefix: string;
  id: string;
  owner: string;
  ttlSeconds: number;
  /** The leases of the set's names, in name order, each without a keep-alive of its own. */
  leases: Lease[];
  marginMs: number | undefined;
  backoff: Backoff;
  keepAlive: boolean;
}

/**
 * A lock set held by this client, as {@link Client.acquireSet} and
 * {@link Client.tryAcquireSet} return it: one {@link Lease} per name, in
 * name order (byte order), each with its own fencing token — send each
 * name's token with every write to what that name protects.
 *
 * Unless turned off, a keep-alive renews every lease with one request every
 * ttl/3, timed from the request of the grant or the latest renewal, retrying
 * temporary failures until the earliest local deadline. The set is lost as
 * soon as any of its leases is: a renewal refused for one name, or the
 * earliest local deadline passed by the monotonic clock. `held`, `check()`
 * and the `signal`'s `aborted`, `reason` and `throwIfAborted()` read the
 * clock when asked, as a lease's do. Call `check()` before each step that
 * touches the protected resources.
 *
 * It is `AsyncDisposable`: `await using set = await client.acquireSet(...)`
 * releases it when the block ends.
 */
export class LockSet implements AsyncDisposable {
  /** The set's id; the admin listing shows it on each of its leases. */
  readonly id: string;
  /** The path prefix every name begins with (the route's `{prefix}`). */
  readonly prefix: string;
  /** The owner the set is held for. */
  readonly owner: string;
  /** The leases' time-to-live; every renewal restarts it. */
  readonly ttlSeconds: number;
  /** The set's leases in name order. */
  readonly leases: readonly Lease[];

  readonly #calls: SetCalls;
  readonly #backoff: Backoff;
  readonly #ttlMs: number;
  readonly #marginMs: number;
  readonly #ac = new AbortController();
  readonly #signal = clockReading(this.#ac.signal, () => this.#expireIfDue());
  #keepAlive: { stop: AbortController; done: Promise<void> } | undefined;
  #releaseUnsure = false;
  #settled = false;

  /** Sets are made by {@link Client.acquireSet} and {@link Client.tryAcquireSet}, not directly. */
  constructor(setup: LockSetSetup) {
    this.id = setup.id;
    this.prefix = setup.prefix;
    this.owner = setup.owner;
    this.ttlSeconds = setup.ttlSeconds;
    this.leases = setup.leases;
    this.#calls = setup.calls;
    this.#backoff = setup.backoff;
    this.#ttlMs = setup.ttlSeconds * 1000;
    this.#marginMs = leaseMarginMs(this.#ttlMs, setup.marginMs);
    for (const l of this.leases) {
      // Synchronous: the lease's abort reaches the set's signal at once.
      const onAbort = () => {
        if (!this.#ac.signal.aborted) this.#ac.abort(l.signal.reason);
      };
      if (l.signal.aborted) onAbort();
      else l.signal.addEventListener("abort", onAbort, { once: true });
    }
    if (setup.keepAlive) this.keepAlive();
  }

  /** The names, in name order. */
  get names(): string[] {
    return this.leases.map((l) => l.resource);
  }

  /** The set's lease on `name`; undefined when `name` is not in the set. */
  lease(name: string): Lease | undefined {
    return this.leases.find((l) => l.resource === name);
  }

  /**
   * Aborts when any lease of the set is lost (reason: its
   * {@link LeaseLostError}) or the set is released (reason:
   * {@link LeaseReleasedError}). Its `aborted`, `reason` and
   * `throwIfAborted()` read the clock as `held` does.
   */
  get signal(): AbortSignal {
    return this.#signal;
  }

  /** True while every lease of the set is held, by the clock now. */
  get held(): boolean {
    return this.leases.every((l) => l.held);
  }

  /**
   * Throws the first lost lease's {@link LeaseLostError} (also when a local
   * deadline has just passed, by the clock now), or a
   * {@link LeaseReleasedError} after `release()`. Call it before each step.
   */
  check(): void {
    for (const l of this.leases) l.check();
  }

  /** The earliest local deadline of the set's leases, on the performance.now() clock. */
  get deadline(): number {
    return Math.min(...this.leases.map((l) => l.deadline));
  }

  /**
   * Renews every lease of the set by its TTL with one request. A name the
   * service refused for good (404, 403, 409) loses its lease, and so the
   * set; a temporary failure leaves the leases held until their local
   * deadlines. Rejects with a {@link LockSetError} naming the names that
   * failed, or with the request's error.
   */
  async renew(options: { signal?: AbortSignal } = {}): Promise<void> {
    this.check();
    const t0 = performance.now();
    let items: SetItem[];
    try {
      items = await this.#calls.renewSet(this.prefix, {
        owner: this.owner, ttlSeconds: this.ttlSeconds, locks: this.#locks(this.leases), signal: options.signal,
      });
    } catch (err) {
      if (options.signal?.aborted && err === options.signal.reason) throw err;
      if (!retryable(err)) {
        for (const l of this.leases) leaseInternals.lose(l, err instanceof Error ? err : new Error(String(err)));
      }
      throw err;
    }
    const failed = new Map<string, unknown>();
    for (const it of items) {
      const l = this.lease(it.resource);
      if (!l) continue;
      if (it.ok) {
        if (!it.lock || !leaseInternals.extend(l, t0, it.lock)) failed.set(it.resource, l.signal.reason);
        continue;
      }
      failed.set(it.resource, it.error);
      if (!retryable(it.error)) leaseInternals.lose(l, it.error);
    }
    if (failed.size > 0) throw new LockSetError("renew", failed);
  }

  /**
   * Starts renewing the set every ttl/3 (or ⅔ × (ttl − margin) when that is
   * shorter), one request for every name, until it is released or lost;
   * temporary failures are retried with short backoff until the earliest
   * local deadline. The set starts this itself unless `keepAlive: false`.
   */
  keepAlive(): void {
    if (this.#ac.signal.aborted || this.#keepAlive) return;
    const stop = new AbortController();
    const done = this.#keepAliveLoop(stop.signal).catch((err: unknown) => {
      for (const l of this.leases) leaseInternals.lose(l, err instanceof Error ? err : new Error(String(err)));
    });
    this.#keepAlive = { stop, done };
  }

  /**
   * Stops the keep-alive, ends every lease of the set (`signal`'s reason
   * {@link LeaseReleasedError}) and releases every name with one request,
   * by owner and fencing token, retrying temporary failures of the names
   * not yet released for at most {@link RELEASE_RETRY_TIMEOUT_MS} (within
   * `options.signal`); a 404 after an attempt whose outcome is unknown
   * counts as released. Rejects with a {@link LockSetError} naming the names
   * not released: they lapse at their TTL.
   */
  async release(options: { signal?: AbortSignal } = {}): Promise<void> {
    const ka = this.#keepAlive;
    if (ka) {
      ka.stop.abort();
      await ka.done;
    }
    if (!this.#ac.signal.aborted) this.#ac.abort(new LeaseReleasedError(`lock set ${JSON.stringify(this.names)}`));
    for (const l of this.leases) leaseInternals.endReleased(l);
    const budget = AbortSignal.timeout(RELEASE_RETRY_TIMEOUT_MS);
    const signal = options.signal ? AbortSignal.any([options.signal, budget]) : budget;
    const untilMs = Math.max(...this.leases.map((l) => leaseInternals.renewedAt(l))) + this.#ttlMs;
    let remaining = [...this.leases];
    const failed = new Map<string, unknown>();
    for (let attempt = 0; remaining.length > 0; attempt++) {
      let temp: unknown;
      try {
        const items = await this.#calls.releaseSet(this.prefix, { owner: this.owner, locks: this.#locks(remaining), signal });
        const again: Lease[] = [];
        for (const it of items) {
          if (it.ok) continue;
          const l = this.lease(it.resource);
          if (!l) continue;
          if (it.error instanceof NotFoundError && this.#releaseUnsure && !it.error.forceReleased) continue; // an earlier attempt may have released it
          if (retryable(it.error)) {
            again.push(l);
            temp = it.error;
          } else {
            failed.set(it.resource, it.error);
          }
        }
        remaining = again;
      } catch (err) {
        if (!retryable(err)) {
          for (const l of remaining) failed.set(l.resource, err);
          remaining = [];
          break;
        }
        if (outcomeUnknown(err)) this.#releaseUnsure = true;
        temp = err;
      }
      if (remaining.length === 0) break;
      const delay = this.#backoff.delay(attempt, retryAfterMs(temp));
      if (signal.aborted || performance.now() + delay > untilMs || !(await sleep(delay, signal))) {
        for (const l of remaining) failed.set(l.resource, temp);
        break;
      }
    }
    this.#settled = true;
    if (failed.size > 0) throw new LockSetError("release", failed);
  }

  /**
   * Releases the set when an `await using` block ends, and reports a set the
   * block did not hold throughout: it rejects with the first lost lease's
   * {@link LeaseLostError}. A release that fails only temporarily is ignored
   * (the leases run out by themselves); one the service refused for a name
   * that had ended there is reported as that name's lost lease.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#settled) return;
    this.#expireIfDue();
    const reason: unknown = this.#ac.signal.aborted ? this.#ac.signal.reason : undefined;
    const lost = reason instanceof LeaseLostError ? reason : undefined;
    try {
      await this.release();
    } catch (err) {
      if (lost) throw lost;
      if (err instanceof LockSetError) {
        for (const [name, e] of err.failed) {
          if (e instanceof ProblemError && !e.temporary) throw new LeaseLostError(name, this.lease(name)?.fencingToken ?? 0, e);
        }
      }
      return;
    }
    if (lost) throw lost;
  }

  #expireIfDue(): void {
    for (const l of this.leases) void l.held; // each ends itself past its deadline, which aborts the set's signal
  }

  #locks(leases: readonly Lease[]): SetLock[] {
    return leases.map((l) => ({ resource: l.resource, fencingToken: l.fencingToken }));
  }

  async #keepAliveLoop(stop: AbortSignal): Promise<void> {
    const interval = Math.min(this.#ttlMs / 3, roundLimitMs(this.#ttlMs, this.#marginMs));
    const base = this.#backoff.baseMs;
    const b = new Backoff(base, Math.max(base, Math.min(this.#backoff.maxMs, this.#ttlMs / 8)));
    for (;;) {
      const renewedAt = Math.min(...this.leases.map((l) => leaseInternals.renewedAt(l)));
      if (!(await sleep(renewedAt + interval - performance.now(), stop, true))) return;
      for (let attempt = 0; ; attempt++) {
        const deadline = this.deadline;
        const t0 = performance.now();
        if (t0 >= deadline || this.#ac.signal.aborted || stop.aborted) return;
        const cut = AbortSignal.any([stop, AbortSignal.timeout(Math.max(1, Math.ceil(Math.min(interval, deadline - t0))))]);
        try {
          await this.renew({ signal: cut });
          break;
        } catch {
          if (this.#ac.signal.aborted || stop.aborted) return;
        }
        if (!(await sleep(Math.min(b.delay(attempt), deadline - performance.now()), stop, true))) return;
      }
    }
  }
}

function retryAfterMs(err: unknown): number {
  const ms = (err as { retryAfterMs?: unknown } | undefined)?.retryAfterMs;
  return typeof ms === "number" ? ms : 0;
}
