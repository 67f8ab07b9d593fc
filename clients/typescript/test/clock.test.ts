// The lease is judged by the clock when it is asked (issue 22), against a stub
// fetch: every question (`held`, `check()`, the signal's `aborted`, `reason`
// and `throwIfAborted()`, withLock's and withSemaphore's combined signal, an
// election's `lease`, the end of an `await using` block) ends a lease whose
// local deadline has passed while the event loop was blocked, so no timer
// could run, as after a pause; and the timer ends it DELIVERY_ALLOWANCE_MS
// early, so the abort event normally comes before the deadline (the figures
// are printed).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client, DELIVERY_ALLOWANCE_MS, LeaseExpiredError, LeaseLostError, type Lease } from "../dist/esm/index.js";
import { json, lockDoc, stubFetch } from "./helpers.js";

const BASE = "http://locks.test";

/** A client whose every acquire is granted (a lock or a permit), renewal and release answered. */
function granting(leaseMarginMs?: number): Client {
  let token = 100;
  const stub = stubFetch((req) => {
    const owner = String(req.body?.owner ?? "");
    if (req.method === "DELETE") return new Response(null, { status: 204 });
    if (req.url.pathname.startsWith("/semaphores/")) {
      const { resource: name, ...doc } = lockDoc("s", owner, ++token);
      return json(200, { acquired: true, permit: { ...doc, name, slot: 0 } });
    }
    return json(200, { acquired: true, lock: lockDoc("r", owner, ++token) });
  });
  return new Client(BASE, { fetch: stub.fetch, leaseMarginMs });
}

/** Blocks the event loop until `ms` past the lease's deadline: no timer can run meanwhile, as in a pause. */
function pastDeadline(lease: Lease, ms = 1): void {
  while (performance.now() < lease.deadline + ms);
}

/** A 1 s lease whose local deadline is 100 ms away, without keep-alive. */
const shortLease = (c = granting(900)) => c.tryAcquire("r", { ttlSeconds: 1, keepAlive: false });

function assertLost(lease: Lease): void {
  assert.equal(lease.held, false);
  assert.ok(lease.signal.reason instanceof LeaseLostError && lease.signal.reason.reason instanceof LeaseExpiredError, String(lease.signal.reason));
  assert.throws(() => lease.check(), LeaseLostError);
}

// One at a time: a test that blocks the event loop would push the others' leases past their deadlines.
describe("every question reads the clock", { concurrency: false }, () => {
  const questions: [string, (lease: Lease) => boolean][] = [
    ["held", (l) => !l.held],
    ["check()", (l) => {
      try {
        l.check();
        return false;
      } catch (err) {
        assert.ok(err instanceof LeaseLostError && err.reason instanceof LeaseExpiredError, String(err));
        return true;
      }
    }],
    ["signal.aborted", (l) => l.signal.aborted],
    ["signal.throwIfAborted()", (l) => {
      try {
        l.signal.throwIfAborted();
        return false;
      } catch (err) {
        assert.ok(err instanceof LeaseLostError, String(err));
        return true;
      }
    }],
    ["signal.reason", (l) => l.signal.reason instanceof LeaseLostError],
    ["remainingMs", (l) => l.remainingMs === 0],
  ];
  for (const [name, lost] of questions) {
    test(name, async () => {
      const lease = await shortLease();
      let events = 0;
      lease.signal.addEventListener("abort", () => events++);
      assert.equal(lost(lease), false, "lost before the deadline");
      pastDeadline(lease);
      assert.equal(lost(lease), true, `${name} did not read the clock`);
      assert.equal(events, 1, "the abort event fired with the question, once");
      assertLost(lease);
    });
  }

  test("withLock's and withSemaphore's signal, combined with the caller's: aborted, throwIfAborted()", async () => {
    const caller = new AbortController();
    for (const run of [
      (fn: (s: AbortSignal, l: Lease) => void) => granting(900).withLock("r", (s, _t, l) => fn(s, l), { ttlSeconds: 1, keepAlive: false, signal: caller.signal }),
      (fn: (s: AbortSignal, l: Lease) => void) => granting(900).withSemaphore("s", 2, (s, _t, p) => fn(s, p), { ttlSeconds: 1, keepAlive: false, signal: caller.signal }),
    ]) {
      const err = await run((signal, lease) => {
        assert.notEqual(signal, lease.signal, "a signal of its own: the caller's is combined");
        assert.equal(signal.aborted, false);
        pastDeadline(lease);
        assert.equal(signal.aborted, true, "the combined signal did not read the clock");
        signal.throwIfAborted();
      }).catch((e: unknown) => e);
      assert.ok(err instanceof LeaseLostError && err.reason instanceof LeaseExpiredError, String(err));
    }
    assert.equal(caller.signal.aborted, false, "the caller's signal is left alone");
  });

  test("an election's lease: the old leader's first question after the deadline says it does not lead", async () => {
    const e = granting(900).election("e");
    const lease = await e.campaign({ ttlSeconds: 1 });
    assert.equal(e.lease, lease);
    pastDeadline(lease);
    assert.equal(e.lease, undefined);
    assertLost(lease);
  });

  test("the end of an await using block that ran past the deadline reports the loss", async () => {
    const err = await (async () => {
      await using lease = await shortLease();
      pastDeadline(lease);
    })().catch((e: unknown) => e);
    assert.ok(err instanceof LeaseLostError && err.reason instanceof LeaseExpiredError, String(err));
  });
});

describe("delivery", () => {
  test("the abort event comes no sooner than DELIVERY_ALLOWANCE_MS before the deadline; a check right after the deadline refuses", async (t) => {
    // 200 leases with deadlines 100 ms to 1 s away (ttl 1 s, margins 900 to 0 ms), each
    // listened to as soon as it is granted.
    const n = 200;
    const pending: Promise<number>[] = [];
    for (let i = 0; i < n; i++) {
      const lease = await shortLease(granting(900 - (900 * i) / n));
      assert.equal(lease.held, true, `lease ${i} ended before it could be listened to`);
      pending.push(new Promise<number>((resolve) => {
        lease.signal.addEventListener("abort", () => resolve(performance.now() - lease.deadline), { once: true });
      }));
    }
    // The lease's timers are unref'd: keep the process alive while they run.
    const alive = setInterval(() => {}, 1000);
    const late = await Promise.all(pending).finally(() => clearInterval(alive));
    const sorted = [...late].sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(n - 1, Math.floor(q * n))]!.toFixed(2);
    t.diagnostic(`abort event: ${at(0)} / ${at(0.5)} / ${at(0.95)} / ${at(0.99)} / ${sorted.at(-1)!.toFixed(2)} ms ` +
      `(min / median / p95 / p99 / max) after the deadline, DELIVERY_ALLOWANCE_MS ${DELIVERY_ALLOWANCE_MS}; ` +
      `${sorted.filter((x) => x > 0).length} of ${n} after it`);
    late.forEach((x, i) => assert.ok(x >= -DELIVERY_ALLOWANCE_MS, `lease ${i}: aborted ${x} ms after the deadline`));

    for (let i = 0; i < 20; i++) {
      const lease = await shortLease();
      pastDeadline(lease, 0);
      assert.throws(() => lease.check(), LeaseLostError, `lease ${i}`);
    }
  });
});
