// The shapes both the client and its leases use, and their decoders. This
// module imports nothing of the package, so client.ts, lease.ts and
// errors.ts can all import it without a cycle.

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

/**
 * A lease as the admin routes show it: the lock and the IAM principal bound
 * to it ("" without IAM auth). A lease inside its lock-delay has an
 * `expiresAt` in the past.
 */
export interface AdminLock extends LockInfo {
  principal: string;
}

/** One page of {@link Client.list}: follow `cursor` until it is undefined. */
export interface LockPage {
  /** The page's leases, in no order of names. A page may be short, even empty, and still have a cursor. */
  locks: AdminLock[];
  /** Set when the listing goes on: pass it as `cursor` for the next page. */
  cursor: string | undefined;
}

/** What {@link Client.forceRelease} did: the lease it ended, as it was, and when others may take the lock. */
export interface ForceReleased extends AdminLock {
  /** The reason the service recorded. */
  reason: string;
  /** Whether the lock was freed at once, lock-delay or not. */
  immediate: boolean;
  /**
   * When others may take the lock: now for an immediate force release or a
   * lease without lock-delay, else the end of its lock-delay. Undefined when
   * the service did not say (one that predates it frees the lock at once).
   */
  freeAt: Date | undefined;
}

/**
 * One answer of {@link Client.watch}: the lock's state as of a strongly
 * consistent read, and the index to pass next time.
 */
export interface WatchResult {
  resource: string;
  /**
   * 0 for a lock never taken, else 2 × `fencingToken`, plus 1 once that lease
   * has ended (released, expired, force released). It only grows, and
   * changes exactly when the lease does; a renewal is no change. Pass it as
   * `index` to wait for the next change.
   */
  index: number;
  /** Whether `index` differs from the one asked with (false: the wait ran out). */
  changed: boolean;
  /**
   * The latest lease's token, live or not; undefined for a lock never taken.
   * Tokens grow by one per grant: a watcher that saw token a and now sees b
   * missed b − a − 1 leases (a far larger jump: garbage collection deleted
   * the idle record and a new counter started above the clock).
   */
  fencingToken: number | undefined;
  /** The live lease; undefined when there is none. */
  lock: LockInfo | undefined;
}

/** The two calls a {@link Lease} makes on its client: {@link Client} has them. */
export interface LeaseCalls {
  renew(resource: string, options: { owner: string; ttlSeconds: number; fencingToken?: number; signal?: AbortSignal }): Promise<LockInfo>;
  release(resource: string, options: { owner: string; fencingToken?: number; signal?: AbortSignal }): Promise<void>;
}

/** A lock document of the service as a {@link LockInfo}; undefined when malformed. */
export function decodeLock(v: unknown): LockInfo | undefined {
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
    return undefined;
  }
  return { resource: o.resource, owner: o.owner, fencingToken: token, acquiredAt, expiresAt, lockDelaySeconds: delay };
}

/** A lock document of the admin routes (a lock plus `principal`); undefined when malformed. */
export function decodeAdminLock(v: unknown): AdminLock | undefined {
  const lock = decodeLock(v);
  if (!lock) return undefined;
  const p = (v as Record<string, unknown>).principal;
  if (p !== undefined && typeof p !== "string") return undefined;
  return { ...lock, principal: p ?? "" };
}

/** A watch answer's body as a {@link WatchResult}; undefined when malformed. */
export function decodeWatch(v: unknown): WatchResult | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const { index, changed } = o;
  const token = o.fencing_token ?? undefined;
  const lock = o.lock === undefined || o.lock === null ? undefined : decodeLock(o.lock);
  if (
    typeof o.resource !== "string" ||
    typeof index !== "number" || !Number.isSafeInteger(index) || index < 0 ||
    typeof changed !== "boolean" ||
    (token !== undefined && (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1)) ||
    (o.lock !== undefined && o.lock !== null && lock === undefined)
  ) {
    return undefined;
  }
  return { resource: o.resource, index, changed, fencingToken: token, lock };
}
