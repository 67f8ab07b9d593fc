// Against a stub fetch: round lengths that leave room for the first renewal,
// release retries, API Gateway's throttle answers, lock-delay, and leases an
// operator force released.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  InternalError,
  LeaseLostError,
  Client,
  NotFoundError,
  ProblemError,
  UnavailableError,
} from "../dist/esm/index.js";
import { aborted, delay, json, lockDoc, problem, stubFetch, type StubRequest } from "./helpers.js";

const BASE = "http://locks.test";
const fast = { baseMs: 10, maxMs: 100 };

const isRenew = (req: StubRequest) => req.url.pathname.endsWith("/renew");
const isAcquire = (req: StubRequest) => req.method === "POST" && !isRenew(req);
const grant = (req: StubRequest, token = 101) =>
  json(200, { acquired: true, lock: { ...lockDoc("r", String(req.body?.owner), token), ...(req.body?.lock_delay_seconds ? { lock_delay_seconds: req.body.lock_delay_seconds } : {}) } });
const renewed = (req: StubRequest) => json(200, { renewed: true, lock: lockDoc("r", String(req.body?.owner), 101) });
const routeThrottle = () => json(429, { message: "Too Many Requests" });
const lambdaThrottle = () => json(500, { message: "Internal Server Error" });
const forceReleased = () => problem(404, "not-found", { force_released: true });
const held = () => json(200, { acquired: false, resource: "r" });

/** A stub service that grants, renews and releases, but answers the n-th request of a kind (0-based) from `script` first. */
function scripted(kind: (req: StubRequest) => boolean, script: Array<(req: StubRequest) => Response | Promise<Response>>) {
  let n = 0;
  return stubFetch((req) => {
    if (kind(req) && n < script.length) return script[n++]!(req);
    if (req.method === "DELETE") return new Response(null, { status: 204 });
    if (isRenew(req)) return renewed(req);
    return grant(req);
  });
}

describe("round length", { concurrency: true }, () => {
  test("a round asks for at most ⅔ × (ttl − margin) whole seconds, and none under a second", async () => {
    const cases: Array<{ ttlSeconds: number; leaseMarginMs?: number; want: number | undefined }> = [
      { ttlSeconds: 10, leaseMarginMs: 5000, want: 3 }, // lockctl run's largest margin: ttl/2
      { ttlSeconds: 10, want: 6 },
      { ttlSeconds: 120, want: 20 },
      { ttlSeconds: 2, want: 1 },
      { ttlSeconds: 1, want: undefined }, // ⅔ × 0.9 s: polls
    ];
    for (const { ttlSeconds, leaseMarginMs, want } of cases) {
      const stub = scripted(isAcquire, [held]); // the try finds it held
      const c = new Client(BASE, { fetch: stub.fetch, leaseMarginMs });
      const lease = await c.acquire("r", { ttlSeconds, waitMs: 60_000, keepAlive: false });
      assert.equal(stub.calls[0]!.body?.wait_seconds, undefined, "a try first");
      assert.equal(stub.calls[1]!.body?.wait_seconds, want, `ttl ${ttlSeconds} s, margin ${leaseMarginMs ?? "default"}`);
      await lease.release();
    }
  });

  test("a grant 0.6 s before the end of a round survives a first renewal that takes 700 ms (issue 14)", async () => {
    // lockctl run --ttl 10 has a margin of up to 5 s: rounds of ttl/2 = 5 s
    // left 0.6 s after such a grant; rounds of 3 s leave 2.6 s, and the first
    // renewal is due 3.33 s after the granting request was sent.
    let firstRenewal!: () => void;
    const renewedOnce = new Promise<void>((r) => (firstRenewal = r));
    let renewals = 0;
    const stub = stubFetch(async (req) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      if (isRenew(req)) {
        if (renewals++ === 0) {
          await delay(700);
          setImmediate(firstRenewal);
        }
        return renewed(req);
      }
      if (req.body?.wait_seconds === undefined) return held(); // the try
      await delay(Number(req.body.wait_seconds) * 1000 - 600);
      return grant(req);
    });
    const c = new Client(BASE, { fetch: stub.fetch, leaseMarginMs: 5000 });
    const lease = await c.acquire("r", { ttlSeconds: 10, waitMs: 30_000 });
    await Promise.race([renewedOnce, aborted(lease.signal, 10_000)]);
    assert.ok(lease.held, `lease lost: ${String(lease.signal.reason)}`);
    await lease.release();
  });
});

describe("release retries", { concurrency: true }, () => {
  const cases: Array<{ name: string; script: Array<(req: StubRequest) => Response | Promise<Response>>; want?: (err: unknown) => boolean; deletes: number }> = [
    { name: "503 then 204", script: [() => problem(503, "service-unavailable")], deletes: 2 },
    { name: "503 then 404: the first attempt may have released it", script: [() => problem(503, "service-unavailable"), () => problem(404, "not-found")], deletes: 2 },
    { name: "no answer then 404", script: [() => Promise.reject(new TypeError("fetch failed")), () => problem(404, "not-found")], deletes: 2 },
    { name: "route throttle then 204", script: [routeThrottle, routeThrottle], deletes: 3 },
    { name: "Lambda throttle then 204", script: [lambdaThrottle], deletes: 2 },
    {
      name: "route throttle then 404: a throttled request never reached the service",
      script: [routeThrottle, () => problem(404, "not-found")], want: (e) => e instanceof NotFoundError, deletes: 2,
    },
    { name: "internal is not retried", script: [() => problem(500, "internal")], want: (e) => e instanceof InternalError, deletes: 1 },
    {
      name: "503 then force released",
      script: [() => problem(503, "service-unavailable"), forceReleased], want: (e) => e instanceof NotFoundError && e.forceReleased, deletes: 2,
    },
  ];
  for (const { name, script, want, deletes } of cases) {
    test(`Lease.release: ${name}`, async () => {
      const stub = scripted((req) => req.method === "DELETE", script);
      const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
      const lease = await c.tryAcquire("r", { ttlSeconds: 30, keepAlive: false });
      const err = await lease.release().then(() => undefined, (e: unknown) => e);
      if (want) assert.ok(want(err), String(err));
      else assert.equal(err, undefined);
      assert.equal(stub.calls.filter((r) => r.method === "DELETE").length, deletes);
    });
  }

  test("Lease.release gives up when its signal aborts", async () => {
    const stub = stubFetch((req) => (isAcquire(req) ? grant(req) : problem(503, "service-unavailable")));
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const lease = await c.tryAcquire("r", { ttlSeconds: 30, keepAlive: false });
    const err = await lease.release({ signal: AbortSignal.timeout(300) }).catch((e: unknown) => e);
    assert.ok(err instanceof UnavailableError || (err instanceof DOMException && err.name === "TimeoutError"), String(err));
    assert.ok(stub.calls.filter((r) => r.method === "DELETE").length >= 3, "retried until the signal aborted");
  });

  test("the clean-up release of an unheard grant retries throttles", async () => {
    let acquires = 0;
    let deletes = 0;
    const stub = stubFetch((req) => {
      if (isAcquire(req)) return acquires++ === 0 ? problem(503, "service-unavailable") : grant(req);
      if (req.method === "DELETE") return [routeThrottle, lambdaThrottle][deletes++]?.() ?? new Response(null, { status: 204 });
      return renewed(req);
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    await assert.rejects(c.tryAcquire("r", { ttlSeconds: 30 }), UnavailableError);
    await c.drain();
    assert.equal(stub.calls.filter((r) => r.method === "DELETE").length, 3);
  });
});

describe("API Gateway's throttle answers", { concurrency: true }, () => {
  test("are UnavailableErrors; the service's internal problem is not temporary", async () => {
    for (const [answer, cls, temporary] of [
      [routeThrottle, UnavailableError, true],
      [lambdaThrottle, UnavailableError, true],
      [() => problem(500, "internal"), InternalError, false],
    ] as const) {
      const err = await new Client(BASE, { fetch: stubFetch(answer).fetch }).status("r").catch((e: unknown) => e);
      assert.ok(err instanceof cls, String(err));
      assert.equal((err as ProblemError).temporary, temporary);
    }
  });

  test("acquire retries them and stops on internal", async () => {
    const stub = scripted(isAcquire, [routeThrottle, lambdaThrottle]);
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const lease = await c.acquire("r", { ttlSeconds: 30, waitMs: 5000, keepAlive: false });
    assert.equal(stub.calls.filter(isAcquire).length, 3);
    await lease.release();

    const broken = scripted(isAcquire, [() => problem(500, "internal"), () => problem(500, "internal")]);
    const b = new Client(BASE, { fetch: broken.fetch, backoff: fast });
    await assert.rejects(b.acquire("r", { ttlSeconds: 30, waitMs: 5000 }), InternalError);
    assert.equal(broken.calls.filter(isAcquire).length, 1);
  });

  test("the keep-alive retries them, and loses the lease on internal", async () => {
    for (const [script, lost] of [
      [[routeThrottle, lambdaThrottle], false],
      [[() => problem(500, "internal")], true],
    ] as const) {
      let renewedOK!: () => void;
      const success = new Promise<void>((r) => (renewedOK = r));
      const stub = scripted(isRenew, [...script]);
      const watched = stubFetch(async (req) => {
        const res = await stub.fetch(req.url, { method: req.method, body: req.text });
        if (isRenew(req) && res.ok) setImmediate(renewedOK);
        return res;
      });
      const c = new Client(BASE, { fetch: watched.fetch, backoff: fast });
      const lease = await c.tryAcquire("r", { ttlSeconds: 3 });
      // The first renewal is due after 1 s.
      await Promise.race([success, aborted(lease.signal, 3000)]);
      if (lost) {
        const reason = lease.signal.reason;
        assert.ok(reason instanceof LeaseLostError && reason.reason instanceof InternalError, String(reason));
        assert.equal(watched.calls.filter(isRenew).length, 1, "not retried");
      } else {
        assert.ok(lease.held, `lease lost: ${String(lease.signal.reason)}`);
        assert.equal(watched.calls.filter(isRenew).length, script.length + 1);
      }
      await lease.release().catch(() => {});
    }
  });
});

describe("lock-delay", { concurrency: true }, () => {
  test("the request carries lock_delay_seconds and the lease reports it", async () => {
    for (const [lockDelaySeconds, sent] of [[60, 60], [0, undefined], [undefined, undefined]] as const) {
      const stub = scripted(() => false, []);
      const c = new Client(BASE, { fetch: stub.fetch });
      const lease = await c.tryAcquire("r", { ttlSeconds: 30, lockDelaySeconds, keepAlive: false });
      assert.equal(stub.calls[0]!.body?.lock_delay_seconds, sent);
      assert.equal(lease.lock.lockDelaySeconds, sent ?? 0);
      await lease.release();
    }
    const stub = scripted(() => false, []);
    const c = new Client(BASE, { fetch: stub.fetch });
    await assert.rejects(c.acquire("r", { ttlSeconds: 30, lockDelaySeconds: 1.5 }), RangeError);
    await assert.rejects(c.tryAcquire("r", { ttlSeconds: 30, lockDelaySeconds: -1 }), RangeError);
    assert.equal(stub.calls.length, 0);
  });
});

describe("force released", { concurrency: true }, () => {
  test("a renewal's 404 with force_released loses the lease saying so", async () => {
    const stub = scripted(isRenew, [forceReleased]);
    const c = new Client(BASE, { fetch: stub.fetch });
    const lease = await c.tryAcquire("r", { ttlSeconds: 3 });
    const reason = await aborted(lease.signal, 3000);
    assert.ok(reason instanceof LeaseLostError && reason.forceReleased, String(reason));
    assert.match(reason.message, /force released by an operator/);
    assert.ok(reason.reason instanceof NotFoundError && reason.reason.forceReleased);
  });

  test("withLock reports a lease force released before its release", async () => {
    const stub = scripted((req) => req.method === "DELETE", [forceReleased]);
    const c = new Client(BASE, { fetch: stub.fetch });
    const err = await c.withLock("r", () => "done", { ttlSeconds: 30 }).catch((e: unknown) => e);
    assert.ok(err instanceof LeaseLostError && err.forceReleased, String(err));
  });
});
