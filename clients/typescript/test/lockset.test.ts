// Lock sets against the real local runner (a granted set, all or nothing,
// waiting, renew and release in one request each, loss by the clock and by
// a refused renewal, withLockSet) and against a stub (the service that does
// not wait for sets, a late grant).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  DELIVERY_ALLOWANCE_MS,
  HeldError,
  LeaseExpiredError,
  LeaseLostError,
  LeaseReleasedError,
  LockSet,
  LockSetError,
  LockSetHeldError,
  NotFoundError,
} from "../dist/esm/index.js";
import { aborted, delay, json, problem, startRunner, stubFetch, uniqueName, until, type Runner } from "./helpers.js";

let runner: Runner;
let locks: Client;

const TRY = "POST /locksets/{prefix}";
const WAIT = "POST /locksets/{prefix}/wait";
const RENEW = "POST /locksets/{prefix}/renew";
const RELEASE = "DELETE /locksets/{prefix}";
const KEYS = [TRY, WAIT, RENEW, RELEASE];

before(async () => {
  runner = await startRunner();
  locks = new Client(runner.url);
});

after(async () => {
  await runner?.stop();
});

/** The lock-set requests run() sent, by route key (only those that changed). */
async function counted(run: () => Promise<unknown>): Promise<Record<string, number>> {
  const before = await runner.counts();
  await run();
  const after = await runner.counts();
  return Object.fromEntries(KEYS.map((k) => [k, (after.requests[k] ?? 0) - (before.requests[k] ?? 0)]).filter(([, d]) => d !== 0));
}

/** Whether anyone holds `name` now, by the service. */
async function heldNow(name: string): Promise<boolean> {
  return locks.status(name).then(
    () => true,
    (e: unknown) => {
      if (e instanceof NotFoundError) return false;
      throw e;
    },
  );
}

// One at a time: the request counts are the runner's, for the whole process.
describe("lock sets against the local runner", () => {
  test("a granted set: a lease per name in name order, each with its own token, in one request", async () => {
    const p = uniqueName("set");
    const names = [`${p}:b`, `${p}:a`, `${p}:c`];
    let set: LockSet | undefined;
    assert.deepEqual(await counted(async () => (set = await locks.tryAcquireSet(names, { ttlSeconds: 30, keepAlive: false }))), { [TRY]: 1 });
    assert.ok(set && set.id !== "" && set.prefix === `${p}:`, `id ${set?.id}, prefix ${set?.prefix}`);
    assert.deepEqual(set.names, [`${p}:a`, `${p}:b`, `${p}:c`], "byte order");
    assert.equal(new Set(set.leases.map((l) => l.fencingToken)).size, 3, "a token each");
    for (const l of set.leases) {
      assert.equal(l.owner, set.owner);
      const st = await locks.status(l.resource);
      assert.deepEqual([st.owner, st.fencingToken], [set.owner, l.fencingToken], l.resource);
    }
    assert.equal(set.lease(`${p}:b`)?.resource, `${p}:b`);
    assert.ok(set.held);
    set.check();
    await set.release();
  });

  test("all or nothing: one name held by another owner refuses the set, names the blocker, and leaves nothing held", async () => {
    const p = uniqueName("refuse");
    const holder = await locks.tryAcquire(`${p}:b`, { owner: "holder", ttlSeconds: 30, keepAlive: false });
    const err = await locks.tryAcquireSet([`${p}:a`, `${p}:b`, `${p}:c`], { owner: "setter", ttlSeconds: 30 }).catch((e: unknown) => e);
    assert.ok(err instanceof LockSetHeldError && err instanceof HeldError, String(err));
    assert.equal(err.blockedBy, `${p}:b`);
    assert.equal(err.resource, `${p}:b`);
    assert.deepEqual(err.unreleased, []);
    assert.match(err.message, /is held by another owner/);
    assert.equal(await heldNow(`${p}:a`), false, "the name taken before the blocker was given back");
    assert.equal(await heldNow(`${p}:c`), false, "the name after the blocker was never taken");
    assert.equal((await locks.status(`${p}:b`)).owner, "holder");
    // A wait that runs out while the blocker stays held: the same refusal.
    const t = performance.now();
    await assert.rejects(locks.acquireSet([`${p}:a`, `${p}:b`], { waitMs: 1500 }), LockSetHeldError);
    assert.ok(performance.now() - t >= 1400, "waited");
    await holder.release();
  });

  test("a waiting set tries first, queues at the service holding the names before the held one, and is granted when the holder lets go", async () => {
    const p = uniqueName("wait");
    const holder = await locks.tryAcquire(`${p}:y`, { owner: "holder", ttlSeconds: 30, keepAlive: false });
    const before = await runner.counts();
    const waiter = locks.acquireSet([`${p}:x`, `${p}:y`], { ttlSeconds: 30, waitMs: 15_000, keepAlive: false });
    waiter.catch(() => {}); // awaited below; a failed assertion before then must not leave it unhandled
    // Let go once the waiter's round has reached …/wait (an event, not a sleep).
    const end = performance.now() + 10_000;
    while (((await runner.counts()).requests[WAIT] ?? 0) <= (before.requests[WAIT] ?? 0)) {
      if (performance.now() > end) throw new Error(`no request to ${WAIT} within 10 s`);
      await delay(10);
    }
    // A waiting round takes the names in byte order and queues for the held
    // one holding those before it (docs/design.md, Lock sets): x, once the
    // round has taken it (its try, on the quick route, held nothing).
    let heldX = false;
    for (const stop = performance.now() + 2000; !heldX && performance.now() < stop; ) heldX = await heldNow(`${p}:x`);
    assert.ok(heldX, "the waiting set holds x, the name before the held y");
    const t = performance.now();
    await holder.release();
    const set = await waiter;
    const after = await runner.counts();
    assert.ok(performance.now() - t < 3000, `granted ${performance.now() - t} ms after the release`);
    assert.equal(set.leases.find((l) => l.resource === `${p}:y`)!.fencingToken > holder.fencingToken, true);
    assert.equal((after.requests[TRY] ?? 0) - (before.requests[TRY] ?? 0), 1, "one try");
    assert.ok((after.requests[WAIT] ?? 0) - (before.requests[WAIT] ?? 0) >= 1, "then rounds on …/wait");
    await set.release();
  });

  test("renew and release: every name in one request each; the release ends the set's signal", async () => {
    const p = uniqueName("renew");
    const set = await locks.tryAcquireSet([`${p}:1`, `${p}:2`, `${p}:3`], { ttlSeconds: 30, keepAlive: false });
    const first = set.leases.map((l) => l.expiresAt.getTime());
    const deadlines = set.leases.map((l) => l.deadline);
    await delay(50);
    assert.deepEqual(await counted(() => set.renew()), { [RENEW]: 1 });
    set.leases.forEach((l, i) => {
      assert.ok(l.expiresAt.getTime() > first[i]!, `${l.resource} renewed at the service`);
      assert.ok(l.deadline > deadlines[i]!, `${l.resource}'s local deadline moved`);
    });
    assert.deepEqual(await counted(() => set.release()), { [RELEASE]: 1 });
    for (const l of set.leases) assert.equal(await heldNow(l.resource), false, l.resource);
    assert.ok(set.signal.aborted && set.signal.reason instanceof LeaseReleasedError, String(set.signal.reason));
    assert.throws(() => set.check(), LeaseReleasedError);
  });

  test("the keep-alive holds a short set well past its TTL with one request per renewal", async () => {
    const p = uniqueName("keepalive");
    const set = await locks.tryAcquireSet([`${p}:a`, `${p}:b`], { ttlSeconds: 2 }); // renewed every 667 ms
    const first = set.leases[0]!.expiresAt.getTime();
    const c = await counted(() => delay(2600));
    assert.ok(set.held, String(set.signal.reason));
    assert.ok((c[RENEW] ?? 0) >= 3 && Object.keys(c).length === 1, JSON.stringify(c));
    assert.ok(set.leases.every((l) => l.expiresAt.getTime() > first + 500), "renewed");
    await set.release();
  });

  test("loss by the clock: the earliest local deadline ends the set, and a check after a pause says so before any timer ran", async () => {
    const p = uniqueName("clock");
    const t = performance.now();
    const set = await locks.tryAcquireSet([`${p}:a`, `${p}:b`], { ttlSeconds: 1, keepAlive: false });
    assert.ok(set.deadline - t >= 900 && set.deadline - t < 1000, `deadline ${set.deadline - t} ms after the call`);
    const reason = await aborted(set.signal, 3000);
    assert.ok(performance.now() >= set.deadline - DELIVERY_ALLOWANCE_MS, "not before the deadline less the delivery allowance");
    assert.ok(reason instanceof LeaseLostError && reason.reason instanceof LeaseExpiredError, String(reason));
    assert.equal(set.held, false);
    assert.throws(() => set.check(), LeaseLostError);
    await assert.rejects(set.renew(), LeaseLostError, "a lost set is not renewed");

    // A pause: the event loop blocked past the deadline, so no timer can run.
    // The first question after it reads the clock and says lost.
    const q = uniqueName("pause");
    const s2 = await locks.tryAcquireSet([`${q}:a`, `${q}:b`], { ttlSeconds: 1, keepAlive: false });
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.ceil(s2.deadline - performance.now()) + 5);
    assert.equal(s2.signal.aborted, true, "the signal's aborted reads the clock");
    assert.throws(() => s2.check(), LeaseLostError);
  });

  test("the listing names each lease's set; a name force released behind the set's back: the renewal is refused for it, and the set is lost", async () => {
    const p = uniqueName("forced");
    const set = await locks.tryAcquireSet([`${p}:a`, `${p}:b`], { ttlSeconds: 30, keepAlive: false });
    // The listing shows which set each lease belongs to; a lock of its own belongs to none.
    const single = await locks.tryAcquire(`${p}:c`, { ttlSeconds: 30, keepAlive: false });
    assert.deepEqual((await locks.listAll(p)).map((l) => [l.resource, l.setId]).sort(), [[`${p}:a`, set.id], [`${p}:b`, set.id], [`${p}:c`, undefined]]);
    await single.release();
    await locks.forceRelease(`${p}:b`, "test: one name of a set", { immediate: true });
    const err = await set.renew().catch((e: unknown) => e);
    assert.ok(err instanceof LockSetError && err.failed.has(`${p}:b`) && !err.failed.has(`${p}:a`), String(err));
    assert.equal(set.held, false);
    const reason = set.signal.reason;
    assert.ok(reason instanceof LeaseLostError && reason.resource === `${p}:b` && reason.forceReleased, String(reason));
    assert.ok(set.lease(`${p}:a`)!.held, "the other name's lease was renewed");
    const rel = await set.release().catch((e: unknown) => e);
    assert.ok(rel instanceof LockSetError && rel.failed.has(`${p}:b`) && rel.failed.size === 1, String(rel));
    assert.equal(await heldNow(`${p}:a`), false);
  });

  test("withLockSet runs the work under the set and releases it, also when the work throws", async () => {
    const p = uniqueName("with");
    const names = [`${p}:from`, `${p}:to`];
    const tokens = await locks.withLockSet(names, (signal, set) => {
      signal.throwIfAborted();
      set.check();
      return set.leases.map((l) => l.fencingToken);
    }, { ttlSeconds: 10 });
    assert.equal(tokens.length, 2);
    for (const n of names) assert.equal(await heldNow(n), false, n);
    await assert.rejects(locks.withLockSet(names, () => {
      throw new Error("boom");
    }), /boom/);
    for (const n of names) assert.equal(await heldNow(n), false, n);
  });

  test("names are checked before anything is sent", async () => {
    await assert.rejects(locks.tryAcquireSet(["a:1", "b:1"]), /share no prefix/);
    await assert.rejects(locks.tryAcquireSet(["t:1", "t:1"]), /twice/);
    await assert.rejects(locks.tryAcquireSet(["t:1", "u:1"], { prefix: "t:" }), /does not begin with/);
    await assert.rejects(locks.tryAcquireSet([]), RangeError);
    await assert.rejects(locks.tryAcquireSet(Array.from({ length: 26 }, (_, i) => `t:${i}`)), RangeError);
  });
});

describe("lock sets against a stub", { concurrency: true }, () => {
  const BASE = "http://locks.test";
  const lockDoc = (resource: string, owner: string, token: number) => ({
    resource, owner, fencing_token: token, acquired_at: new Date().toISOString(), expires_at: new Date(Date.now() + 30_000).toISOString(),
  });

  test("a service that answers …/wait 422 naming wait_seconds is polled with tries, remembered", async () => {
    const stub = stubFetch((req, n) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      if (req.url.pathname.endsWith("/wait")) return problem(422, "validation-failed", { errors: [{ field: "wait_seconds", detail: "too large" }] });
      if (n < 4 || n > 5) return json(200, { acquired: false, blocked_by: "s:b" });
      const names = req.body?.names as string[];
      return json(200, { acquired: true, set_id: "set-1", locks: names.map((r, i) => lockDoc(r, String(req.body?.owner), 10 + i)) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: { baseMs: 10, maxMs: 50 } });
    const set = await c.acquireSet(["s:a", "s:b"], { waitMs: 10_000, keepAlive: false });
    const paths = stub.calls.map((r) => r.url.pathname);
    assert.deepEqual(paths.slice(0, 5), ["/locksets/s%3A", "/locksets/s%3A/wait", "/locksets/s%3A", "/locksets/s%3A", "/locksets/s%3A"]);
    assert.ok(stub.calls.filter((r) => r.url.pathname === "/locksets/s%3A").every((r) => r.body?.wait_seconds === undefined), "a try never carries wait_seconds");
    await set.release();
    // Remembered: the next refused set polls without asking …/wait again.
    await assert.rejects(c.acquireSet(["s:a", "s:b"], { waitMs: 200 }), HeldError);
    assert.equal(stub.calls.filter((r) => r.url.pathname.endsWith("/wait")).length, 1);
  });

  test("waiting rounds bring back the last round's queue_ticket (its place), kept over a 503 and cleared by a refusal without one; the try sends none", async () => {
    let rounds = 0;
    const stub = stubFetch((req) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      if (!req.url.pathname.endsWith("/wait")) return json(200, { acquired: false, blocked_by: "s:b" });
      rounds++;
      if (rounds === 1 || rounds === 4) return json(200, { acquired: false, blocked_by: "s:b", queue_ticket: `t${rounds}` });
      if (rounds === 2) return problem(503, "service-unavailable", {}, { "retry-after": "0" });
      if (rounds === 3) return json(200, { acquired: false, blocked_by: "s:b" });
      const names = req.body?.names as string[];
      return json(200, { acquired: true, set_id: "set-x1", locks: names.map((r, i) => lockDoc(r, String(req.body?.owner), 10 + i)) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: { baseMs: 10, maxMs: 50 } });
    const set = await c.acquireSet(["s:a", "s:b"], { waitMs: 10_000, keepAlive: false });
    const posts = stub.calls.filter((r) => r.method === "POST");
    assert.deepEqual(posts.map((r) => r.url.pathname), ["/locksets/s%3A", ...Array(5).fill("/locksets/s%3A/wait")]);
    assert.deepEqual(posts.map((r) => r.body?.queue_ticket), [undefined, undefined, "t1", "t1", undefined, "t4"]);
    await set.release();
  });

  test("a grant that arrives after the caller gave up is released with its tokens", async () => {
    const stub = stubFetch(async (req) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      await delay(300);
      const names = req.body?.names as string[];
      return json(200, { acquired: true, set_id: "set-2", locks: names.map((r, i) => lockDoc(r, String(req.body?.owner), 20 + i)) });
    });
    const c = new Client(BASE, { fetch: stub.fetch });
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("stop")), 50);
    await assert.rejects(c.acquireSet(["s:a", "s:b"], { signal: ac.signal }), /stop/);
    await c.drain();
    await until(() => stub.calls.some((r) => r.method === "DELETE"));
    const rel = stub.calls.find((r) => r.method === "DELETE")!;
    assert.deepEqual(rel.body?.locks, [{ resource: "s:a", fencing_token: 20 }, { resource: "s:b", fencing_token: 21 }]);
  });
});
