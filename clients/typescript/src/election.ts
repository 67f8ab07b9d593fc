// Leader election on one lock: campaign (acquire and hold), leader (status),
// observe (a loop over watch), resign (release).
import type { Client } from "./client.js";
import { ForbiddenError, LocksError, NotFoundError, StaleTokenError, ValidationError, retryable } from "./errors.js";
import type { Lease } from "./lease.js";
import type { LockInfo, WatchResult } from "./types.js";
import { Backoff, sleep } from "./util.js";
import { checkOptions } from "./wire.js";

/** Who leads: the live lease on the election's lock. Its times are the service's clock: informational only. */
export interface Leader {
  /** The leader's owner string: pass `owner` to {@link Election.campaign} to make it say who leads. */
  owner: string;
  /** The leadership lease's fencing token: each new leader's is larger. */
  fencingToken: number;
  acquiredAt: Date;
  expiresAt: Date;
}

/** One change of leadership, as {@link Election.observe} reports it. */
export interface Observation {
  /** The leader now; null when nobody leads. */
  leader: Leader | null;
  /** The watch index of this state (see {@link Client.watch}). */
  index: number;
  /**
   * Leases the service granted since the previous observation that this one
   * does not show as `leader`: leaderships that began and ended between two
   * of the service's reads, or while reconnecting. 0 in the first
   * observation. After a lock never taken (index 0) it counts only what it
   * can know: 1 when the lease it sees has ended already. A huge number
   * means garbage collection deleted the idle lock and its counter started
   * again above the clock.
   */
  skipped: number;
}

/** {@link Election.campaign}'s options. */
export interface CampaignOptions {
  /**
   * The candidate's identity, which {@link Election.leader} and observers
   * see. Default: a fresh `${hostname}:${pid}:${random}` for every campaign.
   */
  owner?: string;
  /** The leadership lease's TTL in whole seconds; it renews itself every ttl/3. Default 30. */
  ttlSeconds?: number;
  /** A lock-delay for the leadership lease, as `acquire`'s: a leader that expires unreleased keeps the others out that much longer. */
  lockDelaySeconds?: number;
  /** How long to wait for leadership, in ms. Default `Infinity`: until elected or `signal` aborts. */
  waitMs?: number;
  /** Stops campaigning: the call rejects with `signal.reason`. */
  signal?: AbortSignal;
}

/** {@link Election.observe}'s options. */
export interface ObserveOptions {
  /** Ends the iteration (normally: the loop just ends), also in the middle of a wait. */
  signal?: AbortSignal;
}

/** How a {@link Client} makes an election; not for direct use. */
export interface ElectionSetup {
  client: Client;
  name: string;
  backoff: Backoff;
}

/** How long one round of {@link Election.observe} waits at the service, in seconds. */
const OBSERVE_WAIT_SECONDS = 20;

/**
 * A leader election on one lock, as {@link Client.election} makes it: the
 * leader is whoever holds the lease on `name`. The service grants it to one
 * owner at a time; a leader whose process pauses can still believe it leads
 * after its lease has ended, so pass the lease's `fencingToken` with every
 * write the leadership protects (see `@ft288/locks/fence`).
 *
 * ```ts
 * const election = client.election("scheduler");
 * const lease = await election.campaign({ owner: "host-a" }); // waits until elected
 * // signal: leadership lost; runScheduler calls lease.check() before each step (a pause past the lease)
 * await runScheduler({ lease, signal: lease.signal, fencingToken: lease.fencingToken });
 * await election.resign();
 * ```
 */
export class Election {
  /** The lock the election is held on. */
  readonly name: string;
  readonly #client: Client;
  readonly #backoff: Backoff;
  #lease: Lease | undefined;
  #campaigning = false;

  /** Elections are made by {@link Client.election}, not directly. */
  constructor(setup: ElectionSetup) {
    this.name = setup.name;
    this.#client = setup.client;
    this.#backoff = setup.backoff;
  }

  /**
   * The leadership lease of this election's latest campaign while it holds
   * it, judged by the clock now (as `lease.held`): undefined once the lease's
   * local deadline has passed, also before any timer has run.
   */
  get lease(): Lease | undefined {
    return this.#lease?.held ? this.#lease : undefined;
  }

  /**
   * Waits until this candidate leads, and resolves to the leadership lease:
   * its keep-alive runs, and its `signal` aborts with a `LeaseLostError` the
   * moment leadership may be lost (campaign again to stand anew). It waits
   * at the service as `acquire` does, until `waitMs` pass (default: no
   * limit; then a `HeldError`) or `signal` aborts. One campaign at a time per
   * `Election`: another while it campaigns or leads rejects (resign first).
   */
  async campaign(options: CampaignOptions = {}): Promise<Lease> {
    const op = `campaign ${JSON.stringify(this.name)}`;
    checkOptions(op, options);
    const current = this.lease;
    if (this.#campaigning || current) {
      const why = current ? `leads already (fencing token ${current.fencingToken})` : "is campaigning already";
      throw new LocksError(`${op}: this election ${why}: resign first, or make another Election`);
    }
    this.#campaigning = true;
    try {
      const lease = await this.#client.acquire(this.name, {
        owner: options.owner,
        ttlSeconds: options.ttlSeconds,
        lockDelaySeconds: options.lockDelaySeconds,
        waitMs: options.waitMs ?? Infinity,
        signal: options.signal,
      });
      this.#lease = lease;
      return lease;
    } finally {
      this.#campaigning = false;
    }
  }

  /** Who leads now (a strongly consistent read), or null when nobody does. */
  async leader(options: { signal?: AbortSignal } = {}): Promise<Leader | null> {
    try {
      return toLeader(await this.#client.status(this.name, options));
    } catch (err) {
      if (err instanceof NotFoundError) return null;
      throw err;
    }
  }

  /**
   * Follows the leadership: first the state now, then each change (a new
   * leader, or nobody once the lease ends), in order, each with the number
   * of leaderships it `skipped`. It waits at the service
   * ({@link Client.watch}, 20 s a round, ~7 eventually consistent reads a
   * second there, one request a round here) and reconnects after a
   * temporary failure (503, throttling, no answer) with backoff, from the
   * last index it saw, so nothing is counted twice. It ends when `signal`
   * aborts or the loop breaks, and throws an error that retrying cannot
   * help (a 403 of the gateway, a validation error).
   *
   * ```ts
   * for await (const { leader, skipped } of election.observe({ signal })) {
   *   console.log(leader ? `${leader.owner} leads` : "nobody leads", `(${skipped} missed since the last change)`);
   * }
   * ```
   */
  observe(options: ObserveOptions = {}): AsyncIterableIterator<Observation> {
    checkOptions(`observe ${JSON.stringify(this.name)}`, options);
    // A break (return()) also abandons a wait in flight.
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const gen = this.#observe(signal);
    return {
      next: () => gen.next(),
      return: (value?: unknown) => {
        stop.abort();
        return gen.return(value as undefined);
      },
      throw: (err?: unknown) => {
        stop.abort();
        return gen.throw(err);
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }

  async *#observe(signal: AbortSignal): AsyncGenerator<Observation, void, undefined> {
    let index: number | undefined; // undefined: nothing seen yet
    let wait = OBSERVE_WAIT_SECONDS;
    let failures = 0;
    let early = 0;
    while (!signal.aborted) {
      const waitSeconds = index === undefined ? 0 : wait;
      const started = performance.now();
      let r: WatchResult;
      try {
        r = await this.#client.watch(this.name, { index: index ?? 0, waitSeconds, signal });
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof ValidationError && waitSeconds > 1 && err.errors.some((f) => f.field === "wait_seconds")) {
          wait = Math.max(1, Math.floor(wait / 2)); // a service with a lower MAX_WAIT_SECONDS
          continue;
        }
        if (!retryable(err)) throw err;
        const hint = (err as { retryAfterMs?: number }).retryAfterMs ?? 0;
        if (!(await sleep(this.#backoff.delay(failures++, hint), signal))) return;
        continue;
      }
      failures = 0;
      if (index === undefined || r.index !== index) {
        const leader = r.lock ? toLeader(r.lock) : null;
        const skipped = index === undefined ? 0 : skippedLeases(index, r.index, leader !== null);
        index = r.index;
        early = 0;
        yield { leader, index: r.index, skipped };
      } else if (waitSeconds >= 1 && performance.now() - started < 1000) {
        // "No change" long before the wait was up: do not spin on a service that does not wait.
        if (!(await sleep(this.#backoff.delay(early++), signal))) return;
      } else {
        early = 0;
      }
    }
  }

  /**
   * Gives up leadership: releases the lease of this election's latest
   * campaign (retrying temporary failures, as `Lease.release` does), so
   * another candidate takes over at once. Resolves also when there is
   * nothing to give up: no campaign won, or the lease had ended already (lost
   * or force released). Rejects when the release still fails after its
   * retries (the lease then runs out by itself); it may be called again. A
   * campaign still waiting is stopped by its own `signal`, not by this.
   */
  async resign(options: { signal?: AbortSignal } = {}): Promise<void> {
    const lease = this.#lease;
    if (!lease) return;
    try {
      await lease.release(options);
    } catch (err) {
      if (!(err instanceof NotFoundError || err instanceof ForbiddenError || err instanceof StaleTokenError)) throw err;
    }
    if (this.#lease === lease) this.#lease = undefined;
  }
}

function toLeader(lock: LockInfo): Leader {
  return { owner: lock.owner, fencingToken: lock.fencingToken, acquiredAt: lock.acquiredAt, expiresAt: lock.expiresAt };
}

/**
 * The leases granted between the states of watch index `prev` and `next`
 * that the state of `next` does not show live. An index is 2 × the latest
 * token, + 1 once its lease ended; 0: never taken (no counter to count from).
 */
export function skippedLeases(prev: number, next: number, live: boolean): number {
  const shown = live ? 1 : 0;
  if (next === 0) return 0;
  if (prev === 0 || next < prev) return 1 - shown;
  return Math.max(0, Math.floor(next / 2) - Math.floor(prev / 2) - shown);
}
