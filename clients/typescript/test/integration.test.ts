// Against the real local runner (local/cmd/locald over an in-memory
// dynalite), built and started here.
import assert from "node:assert/strict";
import { hostname } from "node:os";
import { after, before, describe, test } from "node:test";
import {
  DELIVERY_ALLOWANCE_MS,
  ForbiddenError,
  FullError,
  HeldError,
  PermitsMismatchError,
  InvalidRequestError,
  LeaseExpiredError,
  LeaseLostError,
  LeaseReleasedError,
  Client,
  NotFoundError,
  ProblemError,
  StaleTokenError,
  ValidationError,
  withLock,
  type Lease,
  type Observation,
} from "../dist/esm/index.js";
import { dynamoFence } from "../dist/esm/fence.js";
import {
  aborted,
  delay,
  delayingProxy,
  dynamoCall,
  oldStackProxy,
  releasedFetch,
  startRunner,
  uniqueName,
  until,
  type Runner,
} from "./helpers.js";

let runner: Runner;
let locks: Client;

before(async () => {
  runner = await startRunner();
  locks = new Client(runner.url);
  // The first requests to a fresh runner are slow; pay for them before the timed tests.
  await Promise.all(
    [1, 2, 3].map(async (i) => (await locks.tryAcquire(`ts-warm-up-${i}`, { ttlSeconds: 5, keepAlive: false })).release()),
  );
});

after(async () => {
  await runner?.stop();
});

describe("against the local runner", { concurrency: true }, () => {
  test("acquire, status, renew, release round trip", async () => {
    const res = uniqueName("roundtrip");
    const lease = await locks.tryAcquire(res, { ttlSeconds: 30, keepAlive: false });
    assert.equal(lease.resource, res);
    assert.ok(Number.isSafeInteger(lease.fencingToken) && lease.fencingToken > 0);
    assert.match(lease.owner, new RegExp(`^${hostname().replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:${process.pid}:[0-9a-f]{12}$`));
    assert.ok(lease.held);
    assert.ok(lease.remainingMs > 25_000 && lease.remainingMs <= 29_000, `remaining ${lease.remainingMs}`);

    const st = await locks.status(res);
    assert.equal(st.owner, lease.owner);
    assert.equal(st.fencingToken, lease.fencingToken);
    assert.equal(st.expiresAt.getTime(), lease.expiresAt.getTime());

    const before = lease.deadline;
    await delay(20);
    await lease.renew();
    assert.ok(lease.deadline > before, "renewal moves the local deadline");
    assert.ok(lease.expiresAt.getTime() > st.expiresAt.getTime(), "renewal moves the service's expiry");
    assert.equal((await locks.status(res)).fencingToken, lease.fencingToken, "renewal keeps the token");

    await lease.release();
    assert.equal(lease.held, false);
    assert.ok(lease.signal.reason instanceof LeaseReleasedError);
    await assert.rejects(locks.status(res), NotFoundError);
    await assert.rejects(lease.release(), NotFoundError, "a second release finds no lease");
    await assert.rejects(lease.renew(), LeaseReleasedError);

    const next = await locks.tryAcquire(res, { ttlSeconds: 5, keepAlive: false });
    assert.ok(next.fencingToken > lease.fencingToken, "the token grows across a release");
    await next.release();
  });

  test("contention: a second owner is told the lock is held, and gets it once it is released", async () => {
    const res = uniqueName("contention");
    const a = await locks.tryAcquire(res, { owner: "worker-a", ttlSeconds: 30 });
    const held = await locks.tryAcquire(res, { owner: "worker-b", ttlSeconds: 30 }).then(
      () => assert.fail("granted a held lock"),
      (e: unknown) => e,
    );
    assert.ok(held instanceof HeldError, String(held));
    assert.equal(held.resource, res);

    // Waiting runs out while the lock stays held: the answer is HeldError.
    let t = performance.now();
    await assert.rejects(locks.acquire(res, { owner: "worker-b", ttlSeconds: 30, waitMs: 300 }), HeldError);
    const waited = performance.now() - t;
    assert.ok(waited >= 290 && waited < 1500, `waited ${waited} ms`);

    // A waiter gets the lock soon after the holder lets go.
    t = performance.now();
    const waiter = locks.acquire(res, { owner: "worker-b", ttlSeconds: 30, waitMs: 10_000 });
    await delay(300);
    await a.release();
    const b = await waiter;
    const took = performance.now() - t;
    assert.ok(took >= 300 && took < 3000, `took ${took} ms`);
    assert.equal(b.owner, "worker-b");
    assert.ok(b.fencingToken > a.fencingToken);
    assert.equal((await locks.status(res)).owner, "worker-b");
    await b.release();
  });

  test("lease loss: the local deadline passes, another owner takes over after expiry, the old lease is refused", async () => {
    const res = uniqueName("expiry");
    const t = performance.now();
    const a = await locks.tryAcquire(res, { owner: "worker-a", ttlSeconds: 1, keepAlive: false });
    // t0 + ttl − margin (min(ttl/10, 1 s) = 100 ms) on the monotonic clock, t0 taken before the request.
    assert.ok(a.deadline - t >= 900 && a.deadline - t < 1000, `deadline ${a.deadline - t} ms after the call`);
    const reason = await aborted(a.signal, 3000);
    // The timer ends the lease DELIVERY_ALLOWANCE_MS early, so that the abort event comes before the deadline.
    assert.ok(performance.now() >= a.deadline - DELIVERY_ALLOWANCE_MS, "not before the deadline less the delivery allowance");
    assert.ok(reason instanceof LeaseLostError, String(reason));
    assert.ok(reason.reason instanceof LeaseExpiredError, String(reason.reason));
    assert.equal(reason.fencingToken, a.fencingToken);
    assert.equal(a.held, false);

    // The service still holds it for a moment; once it has expired there, another owner takes over.
    const b = await locks.acquire(res, { owner: "worker-b", ttlSeconds: 30, waitMs: 5000 });
    assert.ok(b.fencingToken > a.fencingToken);
    await assert.rejects(a.renew(), LeaseLostError, "a lost lease is not renewed");
    await assert.rejects(locks.renew(res, { owner: "worker-a", ttlSeconds: 1, fencingToken: a.fencingToken }), ForbiddenError);
    await assert.rejects(a.release(), ForbiddenError, "the service refuses the old owner");
    assert.equal((await locks.status(res)).owner, "worker-b", "and the new holder keeps the lock");
    await b.release();
  });

  test("lease loss: the keep-alive's renewal is refused after a takeover, and the signal fires with the refusal", async () => {
    const res = uniqueName("takeover");
    const a = await locks.tryAcquire(res, { owner: "worker-a", ttlSeconds: 6 }); // renews every 2 s
    // The lease ends behind the holder's back (an operator's release), and worker-b takes the lock.
    await locks.release(res, { owner: "worker-a" });
    const b = await locks.tryAcquire(res, { owner: "worker-b", ttlSeconds: 30, keepAlive: false });
    const t = performance.now();
    const reason = await aborted(a.signal, 3000);
    assert.ok(performance.now() - t < 3000, "noticed at the next renewal");
    assert.ok(reason instanceof LeaseLostError, String(reason));
    assert.ok(reason.reason instanceof ForbiddenError, String(reason.reason));
    assert.equal(reason.reason.status, 403);
    assert.equal((await locks.status(res)).owner, "worker-b");
    await b.release();
  });

  test("keep-alive holds a short lease well past its TTL", async () => {
    const res = uniqueName("keepalive");
    const lease = await locks.tryAcquire(res, { ttlSeconds: 2 }); // renewed every 667 ms
    const first = lease.expiresAt.getTime();
    await delay(2600);
    assert.ok(lease.held, String(lease.signal.reason));
    assert.equal((await locks.status(res)).fencingToken, lease.fencingToken);
    assert.ok(lease.expiresAt.getTime() > first + 500, "renewed");
    await lease.release();
    await assert.rejects(locks.status(res), NotFoundError);
  });

  test("a grant that arrives after the caller stopped waiting is released; a late refusal needs nothing", async () => {
    const proxy = await delayingProxy(runner.url, 700);
    try {
      const slow = new Client(proxy.url);
      const res = uniqueName("late");
      const err = await slow.tryAcquire(res, { owner: "late-worker", ttlSeconds: 30, signal: AbortSignal.timeout(150) }).then(
        () => assert.fail("resolved after the abort"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof DOMException && err.name === "TimeoutError", String(err));
      // The service did grant it: the answer is still on its way.
      await until(() => proxy.requests[0]?.upstream === 200);
      assert.equal((await locks.status(res)).owner, "late-worker");
      await slow.drain();
      await assert.rejects(locks.status(res), NotFoundError, "the late grant was released");
      const del = proxy.requests.filter((r) => r.method === "DELETE");
      assert.equal(del.length, 1);
      const body = JSON.parse(del[0]!.body) as { owner: string; fencing_token: number };
      assert.equal(body.owner, "late-worker");
      assert.ok(body.fencing_token > 0, "released with its token");

      // Held by someone else: the late answer is acquired:false, and nothing is released.
      const holder = await locks.tryAcquire(res, { owner: "holder", ttlSeconds: 30, keepAlive: false });
      const ac = new AbortController();
      const p = slow.acquire(res, { owner: "late-worker", ttlSeconds: 30, signal: ac.signal });
      setTimeout(() => ac.abort(new Error("caller gave up")), 150);
      await assert.rejects(p, /caller gave up/);
      await slow.drain();
      assert.equal(proxy.requests.filter((r) => r.method === "DELETE").length, 1, "no DELETE for a refusal");
      assert.equal((await locks.status(res)).owner, "holder");
      await holder.release();
    } finally {
      await proxy.close();
    }
  });

  test("withLock runs the work with the token and releases, also when the work throws", async () => {
    const res = uniqueName("withlock");
    const out = await locks.withLock(
      res,
      async (signal, token, lease) => {
        assert.equal(signal.aborted, false);
        const st = await locks.status(res);
        assert.equal(st.fencingToken, token);
        assert.equal(lease.fencingToken, token);
        // A second job on the same lock is skipped when it asks to try once.
        let ran = false;
        await assert.rejects(
          withLock(res, () => {
            ran = true;
          }, { waitMs: 0, client: locks }),
          HeldError,
        );
        assert.equal(ran, false);
        return token;
      },
      { ttlSeconds: 30 },
    );
    assert.ok(out > 0);
    await assert.rejects(locks.status(res), NotFoundError, "released after the work");

    const boom = new Error("boom");
    let seen: AbortSignal | undefined;
    await assert.rejects(
      locks.withLock(res, async (signal) => {
        seen = signal;
        throw boom;
      }, { ttlSeconds: 30 }),
      (e: unknown) => e === boom,
    );
    assert.ok(seen?.aborted, "the work's signal ends with the lease");
    await assert.rejects(locks.status(res), NotFoundError, "released after the throw");
  });

  test("problems map to typed errors: 422, 403, 409, 404", async () => {
    const res = uniqueName("problems");
    const v = await locks.tryAcquire(res, { owner: "bad\u200bowner", ttlSeconds: 30 }).then(
      () => assert.fail("accepted an invisible character"),
      (e: unknown) => e,
    );
    assert.ok(v instanceof ValidationError && v instanceof InvalidRequestError && v instanceof ProblemError, String(v));
    assert.equal(v.status, 422);
    assert.equal(v.slug, "validation-failed");
    assert.deepEqual(v.errors.map((f) => f.field), ["owner"]);
    assert.equal(v.instance, `/locks/${res}`);

    const big = await locks.tryAcquire(res, { owner: "w", ttlSeconds: 10 ** 9 }).catch((e: unknown) => e);
    assert.ok(big instanceof ValidationError);
    assert.deepEqual(big.errors.map((f) => f.field), ["ttl_seconds"]);

    const lease = await locks.tryAcquire(res, { owner: "w1", ttlSeconds: 30, keepAlive: false });
    const f = await locks.release(res, { owner: "w2" }).catch((e: unknown) => e);
    assert.ok(f instanceof ForbiddenError, String(f));
    assert.equal(f.status, 403);
    assert.equal(f.slug, "forbidden");

    const s = await locks.renew(res, { owner: "w1", ttlSeconds: 30, fencingToken: lease.fencingToken + 1 }).catch((e: unknown) => e);
    assert.ok(s instanceof StaleTokenError, String(s));
    assert.equal(s.status, 409);

    // The same owner takes the lock again: the old lease is now stale, and its renewal ends it.
    const again = await locks.tryAcquire(res, { owner: "w1", ttlSeconds: 30, keepAlive: false });
    assert.ok(again.fencingToken > lease.fencingToken);
    const lost = await lease.renew().catch((e: unknown) => e);
    assert.ok(lost instanceof LeaseLostError && lost.reason instanceof StaleTokenError, String(lost));
    assert.equal(lease.signal.reason, lost);
    await assert.rejects(lease.release(), StaleTokenError, "and its release leaves the new lease alone");
    await again.release();

    const n = await locks.status(res).catch((e: unknown) => e);
    assert.ok(n instanceof NotFoundError && n.status === 404, String(n));
  });

  test("admin: list shows the leases under a prefix, forceRelease ends one (keeping its lock-delay unless immediate)", async () => {
    const prefix = uniqueName("admin");
    const a = await locks.tryAcquire(`${prefix}-a`, { keepAlive: false });
    const b = await locks.tryAcquire(`${prefix}-b`, { keepAlive: false, lockDelaySeconds: 60 });
    const page = await locks.list(prefix, { limit: 1 });
    assert.ok(page.locks.length <= 1);
    const all = await locks.listAll(prefix);
    assert.deepEqual(all.map((l) => [l.resource, l.owner, l.fencingToken]).sort(), [
      [a.resource, a.owner, a.fencingToken],
      [b.resource, b.owner, b.fencingToken],
    ]);

    // A token the operator did not see: refused, with the lease that blocks the lock.
    const stale = await locks.forceRelease(b.resource, "test: wrong token", { fencingToken: b.fencingToken + 1 }).catch((e: unknown) => e);
    assert.ok(stale instanceof StaleTokenError, String(stale));
    assert.equal(stale.current?.owner, b.owner);
    assert.equal(stale.current?.fencingToken, b.fencingToken);

    const t = Date.now();
    const ended = await locks.forceRelease(b.resource, "test: holder is gone", { fencingToken: b.fencingToken });
    assert.equal(ended.owner, b.owner);
    assert.equal(ended.reason, "test: holder is gone");
    assert.equal(ended.immediate, false);
    assert.ok(ended.freeAt && ended.freeAt.getTime() >= t + 55_000, `free at ${ended.freeAt?.toISOString()}: after the lock-delay`);
    await assert.rejects(locks.tryAcquire(b.resource), HeldError, "the lock-delay keeps others out");
    const freed = await locks.forceRelease(b.resource, "test: free it now", { immediate: true });
    assert.equal(freed.immediate, true);
    const lost = await b.release().catch((e: unknown) => e);
    assert.ok(lost instanceof NotFoundError && lost.forceReleased, String(lost));
    const next = await locks.tryAcquire(b.resource, { keepAlive: false });
    assert.ok(next.fencingToken > b.fencingToken);
    await Promise.all([a.release(), next.release()]);
    assert.deepEqual(await locks.listAll(prefix), []);
  });

  test("await using releases at the end of the block", async () => {
    const res = uniqueName("using");
    {
      await using lease = await locks.acquire(res);
      assert.equal((await locks.status(res)).fencingToken, lease.fencingToken);
    }
    await assert.rejects(locks.status(res), NotFoundError);
  });

  test("odd resource names round-trip", async () => {
    for (const res of [uniqueName("a:b c!*'()"), `${uniqueName("u")}-ünïcødé-🔒`, `${uniqueName("q")}?x=1#frag%2F`]) {
      const lease = await locks.tryAcquire(res, { ttlSeconds: 5, keepAlive: false });
      assert.equal(lease.resource, res);
      assert.equal((await locks.status(res)).resource, res);
      await lease.release();
    }
    await assert.rejects(locks.tryAcquire("a/b", { ttlSeconds: 5 }), TypeError);
    await assert.rejects(locks.tryAcquire("..", { ttlSeconds: 5 }), TypeError);
  });

  test("election: one leader at a time between two campaigners, a takeover after a resign and after a loss, and an observer sees the leaders in order", async () => {
    const name = uniqueName("election");
    const a = locks.election(name);
    const b = locks.election(name);
    const stop = new AbortController();
    const seen: Observation[] = [];
    const observing = (async () => {
      for await (const o of locks.election(name).observe({ signal: stop.signal })) seen.push(o);
    })();
    const sees = (token: number) => until(() => seen.some((o) => o.leader?.fencingToken === token), 5000);
    await until(() => seen.length === 1);
    assert.deepEqual(seen[0], { leader: null, index: 0, skipped: 0 }, "nobody has led yet");

    const la = await a.campaign({ owner: "a", ttlSeconds: 3 });
    let lb: Lease | undefined;
    const campaigning = b.campaign({ owner: "b", ttlSeconds: 3 }).then((l) => (lb = l));
    await sees(la.fencingToken);
    await delay(300);
    assert.equal(lb, undefined, "b waits while a leads");
    assert.deepEqual(await b.leader(), { owner: "a", fencingToken: la.fencingToken, acquiredAt: la.lock.acquiredAt, expiresAt: la.lock.expiresAt });

    // a resigns: b takes over at once.
    const resigned = performance.now();
    await a.resign();
    await campaigning;
    assert.ok(performance.now() - resigned < 2000, `b took over ${performance.now() - resigned} ms after the resign`);
    assert.ok(lb!.fencingToken > la.fencingToken);
    assert.equal(la.held, false);
    await sees(lb!.fencingToken);

    // b loses its lease (an operator ends it): a, campaigning again, takes over, and b is told.
    const again = a.campaign({ owner: "a", ttlSeconds: 3 });
    await locks.forceRelease(name, "test: b loses", { fencingToken: lb!.fencingToken, immediate: true });
    const la2 = await again;
    assert.ok((await aborted(lb!.signal, 3000)) instanceof LeaseLostError, "b's signal says it lost leadership");
    assert.equal(b.lease, undefined);
    await sees(la2.fencingToken);
    await a.resign();
    await until(() => seen.at(-1)?.index === 2 * la2.fencingToken + 1, 5000);
    stop.abort();
    await observing;

    assert.deepEqual(
      seen.filter((o) => o.leader).map((o) => [o.leader!.owner, o.leader!.fencingToken]),
      [["a", la.fencingToken], ["b", lb!.fencingToken], ["a", la2.fencingToken]],
    );
    assert.ok(seen.every((o, i) => i === 0 || o.index > seen[i - 1]!.index), `indexes grow: ${seen.map((o) => o.index).join(" ")}`);
    assert.equal(seen.reduce((n, o) => n + o.skipped, 0), 0, "every leader was seen");
  });

  test("fence: DynamoDB (the runner's dynalite) refuses the writes of a holder whose lease was taken over; without the fence they land", async () => {
    const TableName = uniqueName("fence");
    const db = async (target: string, body: Record<string, unknown>) => dynamoCall(runner.dynamodb, target, { TableName, ...body });
    const ok = async (target: string, body: Record<string, unknown>) => {
      const r = await db(target, body);
      assert.equal(r.status, 200, `${target}: ${JSON.stringify(r.body)}`);
      return r.body;
    };
    const refused = async (target: string, body: Record<string, unknown>, type: string) => {
      const r = await db(target, body);
      assert.equal(String(r.body.__type).split("#").at(-1), type, `${target}: ${JSON.stringify(r.body)}`);
    };
    await ok("CreateTable", {
      AttributeDefinitions: [{ AttributeName: "pk", AttributeType: "S" }],
      KeySchema: [{ AttributeName: "pk", KeyType: "HASH" }],
      BillingMode: "PAY_PER_REQUEST",
    });
    try {
      // a holds the lock, pauses, and its lease ends (a force release stands in for the expiry); b takes over.
      const res = uniqueName("fenced");
      const a = await locks.tryAcquire(res, { owner: "a", keepAlive: false });
      await locks.forceRelease(res, "a paused", { immediate: true });
      const b = await locks.tryAcquire(res, { owner: "b", keepAlive: false });
      assert.ok(b.fencingToken > a.fencingToken);

      const update = (who: string, token: number, fenced: boolean) => {
        const f = dynamoFence(token);
        return {
          Key: { pk: { S: "report" } },
          UpdateExpression: fenced ? `SET #body = :body, ${f.setAction}` : "SET #body = :body",
          ...(fenced ? { ConditionExpression: `attribute_exists(pk) AND ${f.conditionExpression}` } : {}),
          ExpressionAttributeNames: { "#body": "body", ...(fenced ? f.names : {}) },
          ExpressionAttributeValues: { ":body": { S: who }, ...(fenced ? f.values : {}) },
        };
      };
      const put = (pk: string, who: string, token: number) => {
        const f = dynamoFence(token);
        return { Item: { pk: { S: pk }, body: { S: who }, ...f.item }, ConditionExpression: f.conditionExpression, ExpressionAttributeNames: f.names, ExpressionAttributeValues: f.values };
      };
      await ok("PutItem", put("report", "a, before its pause", a.fencingToken)); // no fence yet: accepted
      await ok("UpdateItem", update("b", b.fencingToken, true));
      await ok("UpdateItem", update("b, again", b.fencingToken, true)); // the same token may write again
      await refused("UpdateItem", update("a, after its pause", a.fencingToken, true), "ConditionalCheckFailedException");
      await refused("PutItem", put("report", "a, after its pause", a.fencingToken), "ConditionalCheckFailedException");
      const got = await ok("GetItem", { Key: { pk: { S: "report" } }, ConsistentRead: true });
      assert.deepEqual(got.Item, { pk: { S: "report" }, body: { S: "b, again" }, fence: { N: String(b.fencingToken) } });

      // The same late write without the fence: it overwrites b's.
      await ok("UpdateItem", update("a, after its pause", a.fencingToken, false));
      const lost = await ok("GetItem", { Key: { pk: { S: "report" } }, ConsistentRead: true });
      assert.deepEqual((lost.Item as Record<string, unknown>).body, { S: "a, after its pause" });
      await b.release();
    } finally {
      await db("DeleteTable", {});
    }
  });
});

describe("semaphores against the local runner", { concurrency: true }, () => {
  test("withSemaphore from six callers: never more than N at once, N reached, a token each", async () => {
    const name = uniqueName("sem-at-most-n");
    let running = 0;
    let most = 0;
    const tokens = new Set<number>();
    // N reached is an event, not a race against the clock: the first holder
    // keeps its permit until a second permit is held too. (Holding a fixed
    // 200 ms instead made the test depend on the service's speed: when
    // grants came 200 ms or more apart, as on a loaded machine, the holds
    // never overlapped and most stayed 1.) Every holder then keeps its
    // permit 200 ms, the window in which a third grant would show.
    let bothHeld!: () => void;
    const pair = new Promise<void>((resolve) => (bothHeld = resolve));
    await Promise.all(
      Array.from({ length: 6 }, () =>
        locks.withSemaphore(name, 2, async (signal, token) => {
          most = Math.max(most, ++running);
          tokens.add(token);
          if (running === 2) bothHeld();
          // A permit lost meanwhile ends the wait (and fails the test below).
          await Promise.race([pair, new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }))]);
          await delay(200);
          running--;
          signal.throwIfAborted();
        }, { ttlSeconds: 5, waitMs: 20_000 }),
      ),
    );
    assert.equal(most, 2);
    assert.equal(tokens.size, 6);
  });

  test("full and permits mismatch; renew and release by slot; the keep-alive; a force release ends the permit", async () => {
    const name = uniqueName("sem-slots");
    const a = await locks.tryAcquireSemaphore(name, 2, { ttlSeconds: 2 });
    const b = await locks.tryAcquireSemaphore(name, 2, { ttlSeconds: 30, keepAlive: false });
    assert.notEqual(a.slot, b.slot);
    assert.ok(b.fencingToken > a.fencingToken);
    const full = await locks.tryAcquireSemaphore(name, 2).catch((e: unknown) => e);
    assert.ok(full instanceof FullError && full instanceof HeldError, String(full));
    const mismatch = await locks.tryAcquireSemaphore(name, 3).catch((e: unknown) => e);
    assert.ok(mismatch instanceof PermitsMismatchError && mismatch.permits === 2, String(mismatch));

    await delay(2500); // past a's TTL: its keep-alive renewed it by slot
    const st = await locks.semaphoreStatus(name);
    assert.equal(st.permits, 2);
    assert.deepEqual(st.holders.map((h) => h.slot).sort(), [0, 1]);
    assert.ok(a.held);
    await b.renew();
    await assert.rejects(locks.releasePermit(name, { owner: b.owner, slot: a.slot }), ForbiddenError);
    await b.release();
    assert.deepEqual((await locks.semaphoreStatus(name)).holders.map((h) => h.owner), [a.owner]);

    const listed = await locks.listAllSemaphores(name);
    assert.deepEqual(listed.map((p) => [p.slot, p.fencingToken, p.permits]), [[a.slot, a.fencingToken, 2]]);
    await locks.forceReleasePermit(name, a.slot, "test: holder is gone", { immediate: true });
    const reason = await aborted(a.signal, 5000);
    assert.ok(reason instanceof LeaseLostError && reason.forceReleased && reason.slot === a.slot, String(reason));
  });
});

/** A lock, and a semaphore of one permit, for the version-skew tests that must hold for both. */
const skewKinds = [
  {
    name: "lock",
    path: (r: string) => `/locks/${r}`,
    hold: async (r: string) => {
      const l = await locks.tryAcquire(r, { owner: "holder", ttlSeconds: 30, keepAlive: false });
      return () => l.release();
    },
    wait: async (c: Client, r: string) => (await c.acquire(r, { ttlSeconds: 30, waitMs: 20_000, keepAlive: false })).release(),
  },
  {
    name: "semaphore",
    path: (r: string) => `/semaphores/${r}`,
    hold: async (r: string) => {
      const p = await locks.tryAcquireSemaphore(r, 1, { owner: "holder", ttlSeconds: 30, keepAlive: false });
      return () => p.release();
    },
    wait: async (c: Client, r: string) => (await c.acquireSemaphore(r, 1, { ttlSeconds: 30, waitMs: 20_000, keepAlive: false })).release(),
  },
];

/** The try-acquires with wait_seconds the released-wire tests sent on purpose: the only ones the runner may count. */
let releasedTryWaits = 0;

describe("version skew against the local runner", { concurrency: true }, () => {
  for (const k of skewKinds) {
    test(`${k.name}: the released wire (try route + wait_seconds) gets 422 naming wait_seconds; the client reads it as an older service and polls`, async () => {
      const res = uniqueName(`released-${k.name}`);
      const release = await k.hold(res);
      const wire = releasedFetch();
      const c = new Client(runner.url, { fetch: wire.fetch, backoff: { baseMs: 10, maxMs: 200 } });
      const waited = k.wait(c, res);
      await until(() => wire.acquires.length >= 3, 10_000); // the try, the refusal, then a poll answered "full"/"held"
      await release();
      await waited;
      releasedTryWaits += wire.acquires.filter((a) => a.waits).length;
      const [tried, first, ...polls] = wire.acquires;
      assert.deepEqual(tried, { path: k.path(res), waits: false, status: 200, fields: [] }, "a try first (released clients sent none)");
      assert.deepEqual(first, { path: k.path(res), waits: true, status: 422, fields: ["wait_seconds"] });
      assert.ok(polls.length >= 2, JSON.stringify(wire.acquires));
      for (const p of polls) assert.deepEqual(p, { path: k.path(res), waits: false, status: 200, fields: [] });
    });

    test(`${k.name}: a new client against a stack without the waiting routes waits on the try route and does not ask …/wait again`, async () => {
      const old = await oldStackProxy(runner.url);
      try {
        const res = uniqueName(`old-stack-${k.name}`);
        const release = await k.hold(res);
        const c = new Client(old.url, { backoff: { baseMs: 10, maxMs: 200 } });
        const waited = k.wait(c, res);
        const acquires = () => old.requests.filter((r) => r.method === "POST" && !r.path.endsWith("/renew"));
        await until(() => acquires().length === 3, 10_000);
        const inFlight = acquires()[2]!.upstream === undefined; // held at the runner: it waits there
        await release();
        await waited;
        assert.ok(inFlight, "the round on the try route waited at the service");
        const waits = (r: { body: string }) => typeof (JSON.parse(r.body) as { wait_seconds?: unknown }).wait_seconds === "number";
        assert.deepEqual(acquires().map((r) => [r.path, waits(r), r.upstream]), [
          [k.path(res), false, 200],
          [`${k.path(res)}/wait`, true, 404],
          [k.path(res), true, 200],
        ]);
        // Remembered: the next held one's round goes to the try route at once.
        const res2 = uniqueName(`old-stack-${k.name}`);
        const release2 = await k.hold(res2);
        const waited2 = k.wait(c, res2);
        await until(() => acquires().length === 5, 10_000);
        await release2();
        await waited2;
        assert.deepEqual(
          acquires().slice(3).map((r) => [r.path, waits(r)]),
          [
            [k.path(res2), false],
            [k.path(res2), true],
          ],
          "remembered: a try, then no …/wait",
        );
      } finally {
        await old.close();
      }
    });
  }
});

// Last in the file, alone (top-level suites run one after another): the
// runner's counts move only by what this test sends.
describe("counted at the local runner", () => {
  test("a waiting acquire tries first: a free one is one try, a held one a try and a round on …/wait; no wait_seconds reached a try route in this whole file but the released wire's", async () => {
    const keys = ["POST /locks/{resource}", "POST /locks/{resource}/wait", "POST /semaphores/{name}", "POST /semaphores/{name}/wait"] as const;
    const [lockTry, lockWait, semTry, semWait] = keys;
    const n = 10; // uncontended acquires of each kind
    /** The requests run(res) sent, by acquire route key; with hold, res is held first (not counted) and let go once run's round reached …/wait. */
    const counted = async (run: (res: string) => Promise<unknown>, hold?: (typeof skewKinds)[number], waitKey?: string) => {
      const res = uniqueName("count");
      const release = hold ? await hold.hold(res) : undefined;
      const before = await runner.counts();
      const done = run(res);
      if (release && waitKey) {
        const end = performance.now() + 10_000;
        while (((await runner.counts()).requests[waitKey] ?? 0) <= (before.requests[waitKey] ?? 0)) {
          if (performance.now() > end) throw new Error(`no request to ${waitKey} within 10 s`);
          await delay(10);
        }
        await release();
      }
      await done;
      const after = await runner.counts();
      return Object.fromEntries(keys.map((k) => [k, (after.requests[k] ?? 0) - (before.requests[k] ?? 0)]).filter(([, d]) => d !== 0));
    };
    const cases: Array<[string, () => Promise<Record<string, unknown>>, Record<string, number>]> = [
      [`${n} free acquires`, () => counted(async () => {
        for (let i = 0; i < n; i++) await (await locks.acquire(uniqueName("count-acquire"), { ttlSeconds: 30, keepAlive: false })).release();
      }), { [lockTry]: n }],
      [`${n} free semaphore acquires`, () => counted(async () => {
        for (let i = 0; i < n; i++) await (await locks.acquireSemaphore(uniqueName("count-sem"), 2, { ttlSeconds: 30, keepAlive: false })).release();
      }), { [semTry]: n }],
      ["withLock, free", () => counted((r) => locks.withLock(r, async () => {}, { ttlSeconds: 30 })), { [lockTry]: 1 }],
      ["withSemaphore, free", () => counted((r) => locks.withSemaphore(r, 2, async () => {}, { ttlSeconds: 30 })), { [semTry]: 1 }],
      ["campaign, free", () => counted(async (r) => {
        const election = locks.election(r);
        await election.campaign({ ttlSeconds: 30 });
        await election.resign();
      }), { [lockTry]: 1 }],
      ["tryAcquire", () => counted(async (r) => (await locks.tryAcquire(r, { ttlSeconds: 30, keepAlive: false })).release()), { [lockTry]: 1 }],
      ["tryAcquireSemaphore", () => counted(async (r) => (await locks.tryAcquireSemaphore(r, 2, { ttlSeconds: 30, keepAlive: false })).release()), { [semTry]: 1 }],
      ["acquire, held", () => counted((r) => skewKinds[0]!.wait(locks, r), skewKinds[0], lockWait), { [lockTry]: 1, [lockWait]: 1 }],
      ["acquireSemaphore, full", () => counted((r) => skewKinds[1]!.wait(locks, r), skewKinds[1], semWait), { [semTry]: 1, [semWait]: 1 }],
      ["campaign, held", () => counted(async (r) => {
        const election = locks.election(r);
        await election.campaign({ ttlSeconds: 30 });
        await election.resign();
      }, skewKinds[0], lockWait), { [lockTry]: 1, [lockWait]: 1 }],
    ];
    for (const [name, run, want] of cases) assert.deepEqual(await run(), want, name);
    const after = await runner.counts();
    console.log(`runner counts of the whole file: ${JSON.stringify(after.requests)}; try-acquires with wait_seconds: ${after.try_wait_seconds}`);
    assert.ok(releasedTryWaits >= 2, "the released-wire tests ran first");
    assert.equal(after.try_wait_seconds, releasedTryWaits, "no wait_seconds reached a try route but the released wire's");
  });
});
