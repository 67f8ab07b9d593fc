// Read/write locks against the real local runner (many readers together, a
// writer excludes them, tokens grow, a queued writer keeps a later reader
// out, keep-alive, loss by the clock, release, the scoped helpers) and
// against a stub (renew and release by mode and slot, the fallbacks to
// polling).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  DELIVERY_ALLOWANCE_MS,
  HeldError,
  LeaseExpiredError,
  LeaseLostError,
  LeaseReleasedError,
  NotFoundError,
  RWLease,
  StaleTokenError,
  UnexpectedAnswerError,
} from "../dist/esm/index.js";
import { aborted, delay, json, problem, startRunner, stubFetch, uniqueName, until, type Runner } from "./helpers.js";

let runner: Runner;
let locks: Client;

before(async () => {
  runner = await startRunner();
  locks = new Client(runner.url);
});

after(async () => {
  await runner?.stop();
});

// One at a time: the pause blocks the event loop, which would starve the
// other tests' keep-alives of 1 s leases.
describe("read/write locks against the local runner", () => {
  test("many readers together, each its slot and token; the writer excluded until they release, then above them all", async () => {
    const name = uniqueName("rw-readers");
    const readers = await Promise.all([0, 1, 2, 3, 4].map(() => locks.acquireRead(name, { ttlSeconds: 30, keepAlive: false, waitMs: 10_000 })));
    assert.ok(readers.every((r) => r instanceof RWLease && r.mode === "read" && r.held));
    assert.equal(new Set(readers.map((r) => r.slot)).size, 5, "a slot each");
    assert.equal(new Set(readers.map((r) => r.fencingToken)).size, 5, "a token each");
    const st = await locks.rwStatus(name);
    assert.deepEqual([st.writer, st.readers.length], [undefined, 5]);

    const refused = await locks.tryAcquireWrite(name, { owner: "w" }).catch((e: unknown) => e);
    assert.ok(refused instanceof HeldError, String(refused));
    await Promise.all(readers.map((r) => r.release()));

    const w = await locks.tryAcquireWrite(name, { owner: "w", ttlSeconds: 30, keepAlive: false });
    assert.deepEqual([w.mode, w.slot], ["write", undefined]);
    assert.ok(readers.every((r) => w.fencingToken > r.fencingToken), "the writer's token above every reader's");
    for (const other of [() => locks.tryAcquireRead(name, { owner: "r" }), () => locks.tryAcquireWrite(name, { owner: "w2" })]) {
      const e = await other().catch((err: unknown) => err);
      assert.ok(e instanceof HeldError, String(e));
    }
    await w.release();
  });

  test("a queued writer keeps a later reader out, and is granted at the earlier reader's release", async () => {
    const name = uniqueName("rw-queued");
    const r1 = await locks.tryAcquireRead(name, { owner: "r1", ttlSeconds: 30, keepAlive: false });
    const writer = locks.acquireWrite(name, { owner: "w1", ttlSeconds: 30, keepAlive: false, waitMs: 30_000 });
    // The event: the writer's place in the queue.
    let queued = false;
    for (const end = performance.now() + 10_000; !queued && performance.now() < end; ) {
      const st = await locks.rwStatus(name);
      queued = st.queue.length === 1 && st.queue[0]!.mode === "write" && st.queue[0]!.owner === "w1";
    }
    assert.ok(queued, "the writer queued");
    const later = await locks.tryAcquireRead(name, { owner: "r2" }).catch((e: unknown) => e);
    assert.ok(later instanceof HeldError, `a reader behind a queued writer: ${String(later)}`);
    await r1.release();
    const w = await writer;
    assert.ok(w.fencingToken > r1.fencingToken);
    await w.release();
  });

  test("watchRW, listRWLocks and forceReleaseRW: the watch sees a force released reader end, the listing shows holders and the queued writer, a stale token is refused with the lease that keeps the slot", async () => {
    const name = uniqueName("rw-admin");
    const r1 = await locks.tryAcquireRead(name, { owner: "r1", ttlSeconds: 30, keepAlive: false });
    const r2 = await locks.tryAcquireRead(name, { owner: "r2", ttlSeconds: 30, keepAlive: false });
    const seen = await locks.watchRW(name, { waitSeconds: 0 });
    assert.deepEqual(
      { writer: seen.writer, readers: seen.readers.map((r) => [r.owner, r.slot, r.fencingToken]).sort(), token: seen.fencingToken, index: seen.index },
      { writer: undefined, readers: [["r1", r1.slot, r1.fencingToken], ["r2", r2.slot, r2.fencingToken]], token: r2.fencingToken, index: 2 * r2.fencingToken + 1 - 2 },
    );
    const writer = locks.acquireWrite(name, { owner: "w1", ttlSeconds: 30, keepAlive: false, waitMs: 30_000 });
    let row;
    for (const end = performance.now() + 10_000; performance.now() < end; await delay(20)) {
      [row] = (await locks.listRWLocks(name)).rwlocks;
      if (row?.queue.length === 1) break;
    }
    assert.ok(row, "listed");
    assert.deepEqual(
      { name: row.name, writer: row.writer, readers: row.readers.map((r) => [r.owner, r.mode, r.slot, r.fencingToken, r.principal, r.forceReleased]).sort(), queue: row.queue.map((q) => [q.mode, q.owner]), token: row.fencingToken },
      { name, writer: undefined, readers: [["r1", "read", r1.slot, r1.fencingToken, "", false], ["r2", "read", r2.slot, r2.fencingToken, "", false]], queue: [["write", "w1"]], token: r2.fencingToken },
    );
    assert.ok(row.queue[0]!.joinedAt instanceof Date && row.queue[0]!.until > row.queue[0]!.joinedAt!);

    // A queued writer is no change of the leases: the watch from before it waits on.
    const next = locks.watchRW(name, { index: seen.index, waitSeconds: 10 });
    const stale = await locks.forceReleaseRW(name, "read", r1.slot, "test: not this one", { fencingToken: r2.fencingToken }).catch((e: unknown) => e);
    assert.ok(stale instanceof StaleTokenError, String(stale));
    assert.deepEqual([stale.currentRWLease?.owner, stale.currentRWLease?.fencingToken, stale.current, stale.currentPermit], ["r1", r1.fencingToken, undefined, undefined]);

    const ended = await locks.forceReleaseRW(name, "read", r1.slot, "test: reader is gone", { fencingToken: r1.fencingToken, immediate: true });
    assert.deepEqual([ended.owner, ended.mode, ended.slot, ended.fencingToken, ended.reason, ended.immediate], ["r1", "read", r1.slot, r1.fencingToken, "test: reader is gone", true]);
    const changed = await next;
    assert.deepEqual([changed.changed, changed.readers.map((r) => r.owner), changed.index], [true, ["r2"], seen.index + 1]);
    const renew = await locks.renewRW(name, { owner: "r1", mode: "read", slot: r1.slot, ttlSeconds: 30 }).catch((e: unknown) => e);
    assert.ok(renew instanceof NotFoundError && renew.forceReleased, `r1's renewal after the force release: ${String(renew)}`);
    assert.equal((await locks.listAllRWLocks(name))[0]!.readers.length, 1);

    const gone = await locks.forceReleaseRW(name, "write", undefined, "test: no writer").catch((e: unknown) => e);
    assert.ok(gone instanceof NotFoundError, String(gone));
    await r2.release();
    const w = await writer;
    const forced = await locks.forceReleaseRW(name, "write", undefined, "test: writer is gone");
    assert.deepEqual([forced.owner, forced.mode, forced.slot, forced.fencingToken, forced.immediate], ["w1", "write", undefined, w.fencingToken, false]);
    assert.deepEqual(await locks.listAllRWLocks(name + "-none"), []);
  });

  test("keep-alive renews by mode and slot past the TTL; release ends the lease, and a second release is not found", async () => {
    const name = uniqueName("rw-keepalive");
    for (const mode of ["read", "write"] as const) {
      // A 3 s lease: renewed each second, it survives a renewal slowed by
      // a loaded machine (a 1 s lease lost one slower than ~0.6 s).
      const l = mode === "read" ? await locks.tryAcquireRead(name, { ttlSeconds: 3 }) : await locks.tryAcquireWrite(name, { ttlSeconds: 3 });
      const first = l.expiresAt.getTime();
      await until(() => l.expiresAt.getTime() - first >= 3000 || !l.held, 10000);
      assert.ok(l.held, `${mode}: held after renewals past the TTL`);
      assert.equal(l.info.expiresAt.getTime(), l.expiresAt.getTime());
      await l.release();
      assert.throws(() => l.check(), LeaseReleasedError);
      const st = await locks.rwStatus(name);
      assert.deepEqual([st.writer, st.readers.length], [undefined, 0], `${mode}: nothing held after release`);
      await assert.rejects(locks.releaseRW(name, { owner: l.owner, mode, slot: l.slot, fencingToken: l.fencingToken }), NotFoundError);
    }
  });

  test("loss by the clock: the local deadline ends a lease without keep-alive, and a check after a pause says so", async () => {
    const name = uniqueName("rw-clock");
    const l = await locks.tryAcquireRead(name, { ttlSeconds: 1, keepAlive: false });
    const reason = await aborted(l.signal, 3000);
    assert.ok(performance.now() >= l.deadline - DELIVERY_ALLOWANCE_MS);
    assert.ok(reason instanceof LeaseLostError && reason.reason instanceof LeaseExpiredError && reason.mode === "read" && reason.slot === l.slot, String(reason));
    assert.throws(() => l.check(), LeaseLostError);

    const w = await locks.tryAcquireWrite(uniqueName("rw-pause"), { ttlSeconds: 1, keepAlive: false });
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.ceil(w.deadline - performance.now()) + 5);
    assert.equal(w.held, false, "held reads the clock");
    assert.throws(() => w.check(), (e: unknown) => e instanceof LeaseLostError && e.mode === "write");
  });

  test("withReadLock and withWriteLock: tokens grow, nothing held after", async () => {
    const name = uniqueName("rw-scoped");
    const tokens: number[] = [];
    await locks.withReadLock(name, (signal, token, lease) => { lease.check(); tokens.push(token); }, { ttlSeconds: 5 });
    await locks.withWriteLock(name, (signal, token) => { signal.throwIfAborted(); tokens.push(token); }, { ttlSeconds: 5 });
    await locks.withReadLock(name, (_s, token) => { tokens.push(token); }, { ttlSeconds: 5 });
    assert.ok(tokens[0]! < tokens[1]! && tokens[1]! < tokens[2]!, String(tokens));
    const st = await locks.rwStatus(name);
    assert.deepEqual([st.writer, st.readers.length, st.fencingToken], [undefined, 0, tokens[2]]);
  });
});

function rwLeaseDoc(name: string, mode: "read" | "write", owner: string, token: number): Record<string, unknown> {
  const now = Date.now();
  return {
    name, mode, ...(mode === "read" ? { slot: 3 } : {}), owner, fencing_token: token,
    acquired_at: new Date(now).toISOString(), expires_at: new Date(now + 30_000).toISOString(),
  };
}

describe("read/write locks against a stub", { concurrency: true }, () => {
  test("watchRW, listRWLocks and forceReleaseRW decode a writer, a force released lease and free_at, and refuse a reader as the writer or another name's reader", async () => {
    const writer = { ...rwLeaseDoc("cache", "write", "w1", 8), lock_delay_seconds: 10, principal: "arn:aws:iam::1:role/w" };
    const forced = { ...writer, expires_at: new Date(Date.now() - 1000).toISOString(), force_released: true };
    const freeAt = new Date(Date.now() + 9000).toISOString();
    const answers: Record<string, unknown> = {
      watch: { name: "cache", index: 16, changed: true, writer, fencing_token: 8 },
      list: { rwlocks: [{ name: "cache", writer: forced, readers: [], queue: [], fencing_token: 8 }] },
      force: { ended: writer, reason: "gone", immediate: false, free_at: freeAt },
    };
    const route = (req: { method: string; url: URL }) => (req.method === "DELETE" ? "force" : req.url.pathname.endsWith("/watch") ? "watch" : "list");
    const c = (over: Record<string, unknown> = {}) => new Client("http://locks.test", { fetch: stubFetch((req) => json(200, { ...answers, ...over }[route(req)])).fetch });

    const w = await c().watchRW("cache", { index: 15, waitSeconds: 1 });
    assert.deepEqual([w.writer?.owner, w.writer?.mode, w.writer?.slot, w.writer?.lockDelaySeconds, w.readers, w.fencingToken], ["w1", "write", undefined, 10, [], 8]);
    const [row] = (await c().listRWLocks("ca")).rwlocks;
    assert.deepEqual([row?.writer?.owner, row?.writer?.forceReleased, row?.writer?.principal, row?.readers], ["w1", true, "arn:aws:iam::1:role/w", []]);
    const done = await c().forceReleaseRW("cache", "write", undefined, "gone");
    assert.deepEqual([done.owner, done.mode, done.fencingToken, done.immediate, done.freeAt?.toISOString()], ["w1", "write", 8, false, freeAt]);

    const reader = rwLeaseDoc("cache", "read", "r1", 9);
    for (const [what, over] of [
      ["a reader as the watch's writer", { watch: { ...(answers.watch as object), writer: reader } }],
      ["another name's reader in the watch", { watch: { name: "cache", index: 16, changed: true, readers: [rwLeaseDoc("other", "read", "r", 9)] } }],
      ["a reader as the listing's writer", { list: { rwlocks: [{ name: "cache", writer: reader, readers: [], queue: [], fencing_token: 9 }] } }],
      ["a writer among the listing's readers", { list: { rwlocks: [{ name: "cache", readers: [writer], queue: [], fencing_token: 9 }] } }],
      ["a reader ended for the writer", { force: { ...(answers.force as object), ended: reader } }],
    ] as const) {
      const call = what.includes("watch") ? c(over).watchRW("cache", { waitSeconds: 1 }) : what.includes("listing") ? c(over).listRWLocks("ca") : c(over).forceReleaseRW("cache", "write", undefined, "gone");
      await assert.rejects(call, UnexpectedAnswerError, what);
    }
  });

  for (const mode of ["read", "write"] as const) {
    test(`a ${mode} lease renews and releases by mode${mode === "read" ? " and slot" : ""} and token`, async () => {
      const stub = stubFetch((req) => {
        if (req.method === "DELETE") return new Response(null, { status: 204 });
        if (req.url.pathname.endsWith("/renew")) return json(200, { renewed: true, lease: rwLeaseDoc("c", mode, "o1", 7) });
        return json(200, { acquired: true, lease: rwLeaseDoc("c", mode, "o1", 7) });
      });
      const c = new Client("http://locks.test", { fetch: stub.fetch });
      const l = mode === "read" ? await c.tryAcquireRead("c", { owner: "o1", keepAlive: false }) : await c.tryAcquireWrite("c", { owner: "o1", keepAlive: false });
      await l.renew();
      await l.release();
      const want: Record<string, unknown> = { owner: "o1", mode, fencing_token: 7, ...(mode === "read" ? { slot: 3 } : {}) };
      assert.deepEqual(stub.calls.map((r) => `${r.method} ${r.url.pathname}`), [`POST /rwlocks/c/${mode}`, "POST /rwlocks/c/renew", "DELETE /rwlocks/c"]);
      assert.deepEqual(stub.calls[1]!.body, { ...want, ttl_seconds: 30 });
      assert.deepEqual(stub.calls[2]!.body, want);
    });
  }

  for (const [why, refuse] of [
    ["422 naming wait_seconds", () => problem(422, "validation-failed", { errors: [{ field: "wait_seconds", detail: "no" }] })],
    ["API Gateway's 404 (no waiting route)", () => json(404, { message: "Not Found" })],
  ] as const) {
    test(`a waiting route refused with ${why}: polls on the try route, and remembers`, async () => {
      let grant = false;
      const stub = stubFetch((req) => {
        if (req.url.pathname.endsWith("/wait")) return refuse();
        if (!grant) return json(200, { acquired: false, name: "c" });
        return json(200, { acquired: true, lease: rwLeaseDoc("c", "read", String(req.body?.owner), 9) });
      });
      const c = new Client("http://locks.test", { fetch: stub.fetch, backoff: { baseMs: 10, maxMs: 50 } });
      setTimeout(() => (grant = true), 200);
      const l = await c.acquireRead("c", { keepAlive: false, waitMs: 10_000 });
      assert.equal(l.slot, 3);
      const paths = stub.calls.map((r) => r.url.pathname);
      assert.deepEqual(paths.slice(0, 2), ["/rwlocks/c/read", "/rwlocks/c/read/wait"]);
      assert.ok(paths.length >= 3 && paths.slice(2).every((p) => p === "/rwlocks/c/read"), paths.join(" "));
      assert.ok(stub.calls.every((r) => r.url.pathname.endsWith("/wait") || r.body?.wait_seconds === undefined), "no wait_seconds on the try route");
      grant = false;
      const n = stub.calls.length;
      setTimeout(() => (grant = true), 100);
      await c.acquireRead("c", { keepAlive: false, waitMs: 10_000 });
      assert.ok(stub.calls.slice(n).every((r) => r.url.pathname === "/rwlocks/c/read"), "remembered: no waiting route again");
    });
  }

  test("a bad mode or slot is refused before sending", async () => {
    const stub = stubFetch(() => json(500, {}));
    const c = new Client("http://locks.test", { fetch: stub.fetch });
    await assert.rejects(c.releaseRW("c", { owner: "o", mode: "upgrade" as "read" }), TypeError);
    await assert.rejects(c.releaseRW("c", { owner: "o", mode: "read", slot: 64 }), RangeError);
    await assert.rejects(c.renewRW("c", { owner: "o", mode: "read", ttlSeconds: 30 }), RangeError);
    assert.equal(stub.calls.length, 0);
  });
});
