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
  /** The lock's waiters in queue order; in the listing only, empty when none. */
  queue: QueueEntry[];
  /** The lock set whose request granted the lease ({@link LockSet.id}); undefined for a lease of its own. */
  setId: string | undefined;
}

/** A waiter's place in a queue, as the admin listings show it. */
export interface QueueEntry {
  owner: string;
  /** The waiter's IAM principal, "" without IAM auth. */
  principal: string;
  /** When it joined; undefined for a place taken before the service recorded it. */
  joinedAt: Date | undefined;
  /** When the place lapses unless the waiter's next round keeps it. */
  until: Date;
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

/**
 * A live permit of a semaphore as the service reports it. Its times are the
 * service's clock: informational only.
 */
export interface PermitInfo {
  /** The semaphore's name. */
  name: string;
  /** The permit's slot, 0 to N − 1: fence per slot (`fence_${slot}`). */
  slot: number;
  owner: string;
  /** Strictly greater than every token issued before for any permit of the semaphore. */
  fencingToken: number;
  acquiredAt: Date;
  expiresAt: Date;
  /** The permit's lock-delay in seconds, 0 when it has none. */
  lockDelaySeconds: number;
}

/**
 * A permit as the admin routes show it: the permit, the semaphore's number
 * of permits and the IAM principal bound to it ("" without IAM auth). A
 * permit inside its lock-delay has an `expiresAt` in the past.
 */
export interface AdminPermit extends PermitInfo {
  permits: number;
  principal: string;
  /** An operator force released it; listed while its lock-delay still keeps the slot. */
  forceReleased: boolean;
  /** The semaphore's waiters in queue order, on its first permit listed only; empty otherwise. */
  queue: QueueEntry[];
}

/** {@link Client.semaphoreStatus}: the semaphore's number of permits (undefined when it has no record) and its live permits. */
export interface SemaphoreStatus {
  name: string;
  permits: number | undefined;
  holders: PermitInfo[];
}

/**
 * One answer of {@link Client.watchSemaphore}. `index` is 0 for a semaphore
 * never taken, else 2 × the latest token + 1 − the number of live permits:
 * it grows at every grant and every end of a permit (a renewal is no change).
 */
export interface SemaphoreWatchResult {
  name: string;
  index: number;
  changed: boolean;
  permits: number | undefined;
  /** The latest permit's token, live or not; undefined for a semaphore never taken. */
  fencingToken: number | undefined;
  holders: PermitInfo[];
}

/** One page of {@link Client.listSemaphores}: follow `cursor` until it is undefined. */
export interface PermitPage {
  /** The page's permits; a semaphore's permits are never split over two pages. */
  holders: AdminPermit[];
  cursor: string | undefined;
}

/** What {@link Client.forceReleasePermit} did: the permit it ended, as it was, and when others may take the slot. */
export interface PermitForceReleased extends AdminPermit {
  reason: string;
  immediate: boolean;
  freeAt: Date | undefined;
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
  const queue = decodeQueue((v as Record<string, unknown>).queue);
  const setId = (v as Record<string, unknown>).set_id;
  if (!queue || (setId !== undefined && (typeof setId !== "string" || setId === ""))) return undefined;
  return { ...lock, principal: p ?? "", queue, setId };
}

/** A listing row's queue (absent: none); undefined when malformed. */
function decodeQueue(v: unknown): QueueEntry[] | undefined {
  if (v === undefined) return [];
  if (!Array.isArray(v)) return undefined;
  const out: QueueEntry[] = [];
  for (const e of v) {
    const o = typeof e === "object" && e !== null ? (e as Record<string, unknown>) : {};
    const until = new Date(typeof o.until === "string" ? o.until : NaN);
    const joinedAt = typeof o.joined_at === "string" ? new Date(o.joined_at) : undefined;
    if (typeof o.owner !== "string" || o.owner === "" || Number.isNaN(until.getTime()) ||
      (o.principal !== undefined && typeof o.principal !== "string") ||
      (o.joined_at !== undefined && (joinedAt === undefined || Number.isNaN(joinedAt.getTime())))) {
      return undefined;
    }
    out.push({ owner: o.owner, principal: (o.principal as string | undefined) ?? "", joinedAt, until });
  }
  return out;
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

/** A read/write lock's lease kind: a reader's (shared, in a slot) or the writer's (exclusive). */
export type RWMode = "read" | "write";

/** The largest number of readers a read/write lock holds at once (the service's bound). */
export const MAX_READERS = 64;

/**
 * A live lease of a read/write lock as the service reports it. Its times are
 * the service's clock: informational only.
 */
export interface RWLeaseInfo {
  /** The read/write lock's name. */
  name: string;
  mode: RWMode;
  /** A reader's slot, 0 to {@link MAX_READERS} − 1; undefined for the writer. */
  slot: number | undefined;
  owner: string;
  /** Strictly greater than every token issued before for the name, read or write. */
  fencingToken: number;
  acquiredAt: Date;
  expiresAt: Date;
  /** The lease's lock-delay in seconds, 0 when it has none. */
  lockDelaySeconds: number;
}

/** {@link Client.rwStatus}: the live writer or readers, the waiters in queue order, and the latest grant's token (undefined: never taken). */
export interface RWStatus {
  name: string;
  writer: RWLeaseInfo | undefined;
  readers: RWLeaseInfo[];
  queue: { mode: RWMode; owner: string; until: Date }[];
  fencingToken: number | undefined;
}

/** A read/write lock's lease document as an {@link RWLeaseInfo}; undefined when malformed. */
export function decodeRWLease(v: unknown): RWLeaseInfo | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const lock = decodeLock({ ...o, resource: o.name });
  const { mode, slot } = o;
  if (!lock || (mode !== "read" && mode !== "write")) return undefined;
  if (mode === "read" && (typeof slot !== "number" || !Number.isSafeInteger(slot) || slot < 0 || slot >= MAX_READERS)) return undefined;
  return { name: lock.resource, mode, slot: mode === "read" ? (slot as number) : undefined, owner: lock.owner,
    fencingToken: lock.fencingToken, acquiredAt: lock.acquiredAt, expiresAt: lock.expiresAt, lockDelaySeconds: lock.lockDelaySeconds };
}

/**
 * The writer (undefined: none) and the readers (absent: none) of a status,
 * watch or listing answer about `name`, each decoded by `decode`; undefined
 * when one is malformed, of the other mode or another name's.
 */
function decodeRWHolders<L extends RWLeaseInfo>(name: string, o: Record<string, unknown>, decode: (v: unknown) => L | undefined): { writer: L | undefined; readers: L[] } | undefined {
  const writer = o.writer === undefined || o.writer === null ? undefined : decode(o.writer);
  if (o.writer !== undefined && o.writer !== null && (writer?.mode !== "write" || writer.name !== name)) return undefined;
  if (o.readers !== undefined && !Array.isArray(o.readers)) return undefined;
  const readers = ((o.readers ?? []) as unknown[]).map(decode);
  if (!readers.every((r): r is L => r !== undefined && r.mode === "read" && r.name === name)) return undefined;
  return { writer, readers };
}

/** A read/write lock's status answer of `name`; undefined when malformed. */
export function decodeRWStatus(name: string, v: unknown): RWStatus | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const holders = Array.isArray(o.readers) ? decodeRWHolders(name, o, decodeRWLease) : undefined;
  if (!holders || !Array.isArray(o.queue)) return undefined;
  const { writer, readers } = holders;
  const queue: RWStatus["queue"] = [];
  for (const e of o.queue as unknown[]) {
    const q = typeof e === "object" && e !== null ? (e as Record<string, unknown>) : {};
    const until = new Date(typeof q.until === "string" ? q.until : NaN);
    if ((q.mode !== "read" && q.mode !== "write") || typeof q.owner !== "string" || Number.isNaN(until.getTime())) return undefined;
    queue.push({ mode: q.mode, owner: q.owner, until });
  }
  const token = o.fencing_token ?? undefined;
  if (token !== undefined && (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1)) return undefined;
  return { name, writer, readers, queue, fencingToken: token };
}

/**
 * A read/write lock's lease as the admin routes show it: the lease and the
 * IAM principal bound to it ("" without IAM auth). A lease inside its
 * lock-delay has an `expiresAt` in the past.
 */
export interface AdminRWLease extends RWLeaseInfo {
  principal: string;
  /** An operator force released it; listed while its lock-delay still keeps the place. */
  forceReleased: boolean;
}

/** A waiter of a read/write lock as the admin listing shows it: a {@link QueueEntry} and the lease it asks for. */
export interface AdminRWQueueEntry extends QueueEntry {
  mode: RWMode;
}

/** One read/write lock of {@link Client.listRWLocks}: its writer or readers (each in its slot), its waiters in queue order, and the latest token. */
export interface AdminRWLock {
  name: string;
  writer: AdminRWLease | undefined;
  readers: AdminRWLease[];
  queue: AdminRWQueueEntry[];
  /** The latest grant's token, read or write, live or not. */
  fencingToken: number;
}

/** One page of {@link Client.listRWLocks}: follow `cursor` until it is undefined. */
export interface RWLockPage {
  /** The page's read/write locks, in no order of names. A page may be short, even empty, and still have a cursor. */
  rwlocks: AdminRWLock[];
  cursor: string | undefined;
}

/**
 * One answer of {@link Client.watchRW}. `index` is 0 for a name never taken,
 * else 2 × the latest token + 1 − the number of live leases: it grows at
 * every grant and every end, read or write (a renewal is no change).
 */
export interface RWWatchResult {
  name: string;
  index: number;
  changed: boolean;
  writer: RWLeaseInfo | undefined;
  readers: RWLeaseInfo[];
  /** The latest grant's token, read or write, live or not; undefined for a name never taken. */
  fencingToken: number | undefined;
}

/** What {@link Client.forceReleaseRW} did: the lease it ended, as it was, and when others may take its place. */
export interface RWForceReleased extends AdminRWLease {
  reason: string;
  immediate: boolean;
  freeAt: Date | undefined;
}

/** A read/write lock's lease document of the admin routes; undefined when malformed. */
export function decodeAdminRWLease(v: unknown): AdminRWLease | undefined {
  const l = decodeRWLease(v);
  if (!l) return undefined;
  const o = v as Record<string, unknown>;
  if (o.principal !== undefined && typeof o.principal !== "string") return undefined;
  return { ...l, principal: o.principal ?? "", forceReleased: o.force_released === true };
}

/** A row of the read/write lock listing; undefined when malformed. */
export function decodeAdminRWLock(v: unknown): AdminRWLock | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const { name, fencing_token: token } = o;
  if (typeof name !== "string" || name === "" || typeof token !== "number" || !Number.isSafeInteger(token) || token < 0) return undefined;
  const holders = decodeRWHolders(name, o, decodeAdminRWLease);
  if (!holders) return undefined;
  const { writer, readers } = holders;
  const raw = o.queue === undefined ? [] : o.queue;
  const entries = decodeQueue(raw);
  if (!entries || !Array.isArray(raw)) return undefined;
  const queue: AdminRWQueueEntry[] = [];
  for (const [i, e] of entries.entries()) {
    const mode = (raw[i] as Record<string, unknown>).mode;
    if (mode !== "read" && mode !== "write") return undefined;
    queue.push({ ...e, mode });
  }
  return { name, writer, readers, queue, fencingToken: token };
}

/** A read/write lock's watch answer of `name`; undefined when malformed. */
export function decodeRWWatch(name: string, v: unknown): RWWatchResult | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const holders = decodeRWHolders(name, o, decodeRWLease);
  if (!holders) return undefined;
  const { writer, readers } = holders;
  const { index, changed } = o;
  const token = o.fencing_token ?? undefined;
  if (
    (o.name !== undefined && o.name !== name) ||
    typeof index !== "number" || !Number.isSafeInteger(index) || index < 0 ||
    typeof changed !== "boolean" ||
    (token !== undefined && (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1))
  ) {
    return undefined;
  }
  return { name, index, changed, writer, readers, fencingToken: token };
}

/** A permit document of the service as a {@link PermitInfo}; undefined when malformed. */
export function decodePermit(v: unknown): PermitInfo | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const lock = decodeLock({ ...o, resource: o.name });
  const slot = o.slot;
  if (!lock || typeof slot !== "number" || !Number.isSafeInteger(slot) || slot < 0) return undefined;
  return { name: lock.resource, slot, owner: lock.owner, fencingToken: lock.fencingToken, acquiredAt: lock.acquiredAt,
    expiresAt: lock.expiresAt, lockDelaySeconds: lock.lockDelaySeconds };
}

/** A permit document of the admin routes; undefined when malformed. */
export function decodeAdminPermit(v: unknown): AdminPermit | undefined {
  const p = decodePermit(v);
  if (!p) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.permits !== "number" || !Number.isSafeInteger(o.permits) || o.permits < 1) return undefined;
  if (o.principal !== undefined && typeof o.principal !== "string") return undefined;
  const queue = decodeQueue(o.queue);
  if (!queue) return undefined;
  return { ...p, permits: o.permits, principal: o.principal ?? "", forceReleased: o.force_released === true, queue };
}

/** The permits of a status or watch answer of `name`; undefined when malformed. */
function decodeHolders(name: string, v: unknown): PermitInfo[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const holders = v.map(decodePermit);
  return holders.every((h): h is PermitInfo => h !== undefined && h.name === name) ? holders : undefined;
}

function decodePermits(v: unknown): number | undefined | null {
  if (v === undefined) return undefined;
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 1 ? v : null;
}

/** A semaphore status answer; undefined when malformed. */
export function decodeSemaphoreStatus(name: string, v: unknown): SemaphoreStatus | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const holders = decodeHolders(name, o.holders);
  const permits = decodePermits(o.permits);
  if (!holders || permits === null || (o.name !== undefined && o.name !== name)) return undefined;
  return { name, permits, holders };
}

/** A semaphore watch answer; undefined when malformed. */
export function decodeSemaphoreWatch(name: string, v: unknown): SemaphoreWatchResult | undefined {
  const o = typeof v === "object" && v !== null ? (v as Record<string, unknown>) : {};
  const st = decodeSemaphoreStatus(name, v);
  const { index, changed } = o;
  const token = o.fencing_token ?? undefined;
  if (
    !st ||
    typeof index !== "number" || !Number.isSafeInteger(index) || index < 0 ||
    typeof changed !== "boolean" ||
    (token !== undefined && (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1))
  ) {
    return undefined;
  }
  return { name, index, changed, permits: st.permits, fencingToken: token, holders: st.holders };
}
