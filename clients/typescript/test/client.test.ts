// Against a stub fetch: server-side waiting (the service may not have it
// yet), the fallback to polling, late answers, retries, problem mapping, and
// the lease's clock.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  ForbiddenError,
  HeldError,
  InternalError,
  InvalidJsonError,
  InvalidRequestError,
  LeaseExpiredError,
  LeaseLostError,
  Client,
  NotFoundError,
  PayloadTooLargeError,
  ProblemError,
  RequestFailedError,
  UnavailableError,
  StaleTokenError,
  ValidationError,
} from "../dist/esm/index.js";
import { aborted, delay, json, lockDoc, problem, stubFetch } from "./helpers.js";

const BASE = "http://locks.test";
const fast = { baseMs: 10, maxMs: 100 };

/** A stub service of one lock: grants when `free()`, else acquired:false; renews and releases succeed. */
function granting(free: (n: number) => boolean, extra: (req: { body: Record<string, unknown> | undefined; method: string; url: URL }) => Response | undefined = () => undefined) {
  let token = 100;
  return stubFetch((req, n) => {
    const r = extra(req);
    if (r) return r;
    const owner = String(req.body?.owner ?? "");
    if (req.method === "DELETE") return new Response(null, { status: 204 });
    if (req.url.pathname.endsWith("/renew")) return json(200, { renewed: true, lock: lockDoc("r", owner, token) });
    if (free(n)) return json(200, { acquired: true, lock: lockDoc("r", owner, ++token) });
    return json(200, { acquired: false, resource: "r" });
  });
}

describe("server-side waiting", { concurrency: true }, () => {
  test("tries first: a free lock is one try, without wait_seconds, on the try route", async () => {
    const free = granting(() => true);
    const lease = await new Client(BASE, { fetch: free.fetch }).acquire("r", { ttlSeconds: 30, keepAlive: false });
    assert.equal(lease.fencingToken, 101);
    assert.equal(free.calls.length, 1);
    assert.equal(free.calls[0]!.url.pathname, "/locks/r");
    assert.equal("wait_seconds" in free.calls[0]!.body!, false);
    assert.equal("queue_ticket" in free.calls[0]!.body!, false);
    const sem = stubFetch((req) =>
      json(200, { acquired: true, permit: { name: "s", slot: 0, owner: String(req.body?.owner), fencing_token: 7, acquired_at: new Date().toISOString(), expires_at: new Date(Date.now() + 30_000).toISOString() } }),
    );
    await new Client(BASE, { fetch: sem.fetch }).acquireSemaphore("s", 2, { ttlSeconds: 30, keepAlive: false });
    assert.equal(sem.calls.length, 1);
    assert.equal(sem.calls[0]!.url.pathname, "/semaphores/s");
    assert.equal("wait_seconds" in sem.calls[0]!.body!, false);
  });

  test("a try that fails (503) is tried again, not waited for", async () => {
    const stub = stubFetch((req, n) =>
      n < 2 ? problem(503, "service-unavailable") : json(200, { acquired: true, lock: lockDoc("r", String(req.body?.owner), 101) }),
    );
    await new Client(BASE, { fetch: stub.fetch, backoff: fast }).acquire("r", { ttlSeconds: 30, keepAlive: false });
    assert.equal(stub.calls.length, 3);
    assert.ok(stub.calls.every((r) => r.url.pathname === "/locks/r" && !("wait_seconds" in r.body!)), "three tries");
  });

  test("asks the service to wait once a try found the lock held, within the budget and two thirds of the lease, and asks again at once after a full wait", async () => {
    const slowFalse = stubFetch(async (_req, n) => {
      if (n === 0) return json(200, { acquired: false, resource: "r" }, { "retry-after": "2" }); // the try
      if (n === 1) {
        await delay(1000); // the service held the request, then said no
        return json(200, { acquired: false, resource: "r" }, { "retry-after": "2" });
      }
      return json(200, { acquired: true, lock: lockDoc("r", "w", 101) });
    });
    const c = new Client(BASE, { fetch: slowFalse.fetch, backoff: { baseMs: 1000, maxMs: 2000 } });
    const lease = await c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000, keepAlive: false });
    const [tried, first, second] = slowFalse.calls;
    assert.equal(slowFalse.calls.length, 3);
    assert.equal("wait_seconds" in tried!.body!, false, "a try first");
    assert.equal(tried!.url.pathname, "/locks/r");
    assert.equal(first!.url.pathname, "/locks/r/wait");
    assert.equal(first!.body?.wait_seconds, 9, "(10 s − slack) whole seconds");
    assert.equal(second!.body?.wait_seconds, 8);
    // No backoff after the try nor after the service did the waiting (polling would honour Retry-After: ≥ 2 s).
    assert.ok(first!.at - tried!.at < 300, `${first!.at - tried!.at} ms between the try and the first round`);
    assert.ok(second!.at - first!.at < 1300, `${second!.at - first!.at} ms between`);
    assert.equal(lease.fencingToken, 101);

    const short = granting((n) => n > 0);
    await new Client(BASE, { fetch: short.fetch }).acquire("r", { ttlSeconds: 3, waitMs: 60_000, keepAlive: false });
    assert.equal(short.calls[1]!.body?.wait_seconds, 1, "at most ⅔ × (ttl − margin): the lease's clock starts before the wait");
    const forever = granting((n) => n > 0);
    await new Client(BASE, { fetch: forever.fetch }).acquire("r", { ttlSeconds: 300, keepAlive: false });
    assert.equal(forever.calls[1]!.body?.wait_seconds, 20, "at most 20 s per request");
    const once = granting(() => true);
    await new Client(BASE, { fetch: once.fetch }).tryAcquire("r", { ttlSeconds: 300, keepAlive: false });
    assert.equal("wait_seconds" in once.calls[0]!.body!, false, "tryAcquire never waits");
  });

  test("sends back the queue_ticket of a held round with the next one, at once, and never with a plain attempt", async () => {
    const stub = stubFetch(async (req, n) => {
      if (n === 0) return json(200, { acquired: false, resource: "r" }); // the try: held, no place
      if (n < 4) {
        await delay(50); // the service held the round (a short one), then said no, with the waiter's place
        return json(200, { acquired: false, resource: "r", queue_ticket: n === 3 ? "tk2" : "tk1" });
      }
      if (n === 4) return json(200, { acquired: false, resource: "r" }); // no place (the queue was full)
      return json(200, { acquired: true, lock: lockDoc("r", String(req.body?.owner), 101) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    await c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000, keepAlive: false });
    const tickets = stub.calls.map((r) => r.body?.queue_ticket);
    assert.deepEqual(tickets, [undefined, undefined, "tk1", "tk1", "tk2", undefined], "each round sends the place the last one answered");
    assert.ok(stub.calls[2]!.at - stub.calls[1]!.at < 500, "the next round goes at once: the place lapses 2 s after the round");
    const once = stubFetch(() => json(200, { acquired: false, resource: "r", queue_ticket: "tk9" }));
    await assert.rejects(new Client(BASE, { fetch: once.fetch }).tryAcquire("r", { ttlSeconds: 30, keepAlive: false }), HeldError);
    assert.equal("queue_ticket" in once.calls[0]!.body!, false, "tryAcquire has no place to keep");
  });

  test("a waiting round's 503 with a queue_ticket is retried with that ticket, as a held round's", async () => {
    const stub = stubFetch((req, n) => {
      if (n === 0) return json(200, { acquired: false, resource: "r" }); // the try finds it held
      // The service may have joined the queue but could not learn its entry.
      if (n === 1) return problem(503, "service-unavailable", { queue_ticket: "ghost-1" }, { "retry-after": "0" });
      if (n === 2) return json(200, { acquired: false, resource: "r", queue_ticket: String(req.body?.queue_ticket ?? "tk-new") });
      return json(200, { acquired: true, lock: lockDoc("r", String(req.body?.owner), 101) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    await c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000, keepAlive: false });
    const tickets = stub.calls.map((r) => r.body?.queue_ticket);
    assert.deepEqual(tickets, [undefined, undefined, "ghost-1", "ghost-1"], "the try, the first round, then the retry reclaims the 503's place, and the rounds after keep it");
  });

  test("an older service's 422 on wait_seconds switches to polling with backoff, honouring Retry-After, and is remembered", async () => {
    let grantFrom = 3;
    const stub = granting(
      (n) => n >= grantFrom,
      (req) => {
        if (req.body && "wait_seconds" in req.body) {
          return problem(422, "validation-failed", { errors: [{ field: "wait_seconds", detail: "is not a known member; allowed: owner, ttl_seconds" }] });
        }
        return undefined;
      },
    );
    const held = stubFetch((req, n) => {
      const r = stub.fetch(req.url, { method: req.method, body: req.text });
      // The first refusal after the fallback carries Retry-After: 1 (capped at the backoff max, 100 ms).
      return n === 2 ? r.then(() => json(200, { acquired: false, resource: "r" }, { "retry-after": "1" })) : r;
    });
    const c = new Client(BASE, { fetch: held.fetch, backoff: fast });
    const lease = await c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000, keepAlive: false });
    assert.ok(lease.fencingToken > 0);
    const calls = held.calls.filter((r) => r.method === "POST");
    assert.ok(!("wait_seconds" in calls[0]!.body!), "a try first");
    assert.ok("wait_seconds" in calls[1]!.body!);
    assert.ok(calls.slice(2).every((r) => !("wait_seconds" in r.body!)), "no wait_seconds after the 422");
    assert.ok(calls[3]!.at - calls[2]!.at >= 95, `Retry-After honoured up to the cap: ${calls[3]!.at - calls[2]!.at} ms`);

    // Held at the try, then polled: the client remembers.
    const before = held.calls.length;
    grantFrom = before + 1;
    await c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000, keepAlive: false });
    assert.equal(held.calls.length, before + 2);
    assert.equal("wait_seconds" in held.calls[before + 1]!.body!, false, "the client remembers");
  });

  test("a 422 on another field is the caller's error, not an older service", async () => {
    // The try is held; the round is refused on another field.
    const stub = stubFetch((req) =>
      req.body && "wait_seconds" in req.body
        ? problem(422, "validation-failed", { errors: [{ field: "owner", detail: "must not contain invisible characters" }] })
        : json(200, { acquired: false, resource: "r" }),
    );
    const c = new Client(BASE, { fetch: stub.fetch });
    await assert.rejects(c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000 }), ValidationError);
    await assert.rejects(c.acquire("r", { owner: "w", ttlSeconds: 30, waitMs: 10_000 }), ValidationError);
    assert.equal(stub.calls.length, 4, "not retried: a try and a round each");
    assert.ok(stub.calls.every((r, i) => ("wait_seconds" in r.body!) === (i % 2 === 1)), "still asks the service to wait");
  });
});

describe("giving up", { concurrency: true }, () => {
  test("a grant in flight when the signal aborts is released with its owner and token", async () => {
    const stub = granting(() => true);
    const slow = stubFetch(async (req) => {
      if (req.method === "POST") await delay(200);
      return stub.fetch(req.url, { method: req.method, body: req.text });
    });
    const c = new Client(BASE, { fetch: slow.fetch });
    await assert.rejects(c.acquire("r", { owner: "w", ttlSeconds: 30, signal: AbortSignal.timeout(50) }), { name: "TimeoutError" });
    await c.drain();
    const del = slow.calls.filter((r) => r.method === "DELETE");
    assert.equal(del.length, 1);
    assert.deepEqual(del[0]!.body, { owner: "w", fencing_token: 101 });
  });

  test("a late acquired:false needs no release", async () => {
    const stub = stubFetch(async (req) => {
      if (req.method === "POST") await delay(150);
      return req.method === "DELETE" ? new Response(null, { status: 204 }) : json(200, { acquired: false, resource: "r" });
    });
    const c = new Client(BASE, { fetch: stub.fetch });
    await assert.rejects(c.tryAcquire("r", { ttlSeconds: 30, signal: AbortSignal.timeout(30) }), { name: "TimeoutError" });
    await delay(200);
    await c.drain();
    assert.deepEqual(stub.calls.map((r) => r.method), ["POST"]);
  });

  test("an unknown outcome is released by owner only when the owner is the client's own", async () => {
    for (const [answer, generated] of [
      [() => problem(503, "service-unavailable"), true],
      [() => Promise.reject(new TypeError("fetch failed")), true],
      [() => problem(503, "service-unavailable"), false],
    ] as const) {
      const stub = stubFetch((req) => (req.method === "DELETE" ? new Response(null, { status: 204 }) : answer()));
      const c = new Client(BASE, { fetch: stub.fetch });
      const err = await c.tryAcquire("r", { ttlSeconds: 30, ...(generated ? {} : { owner: "mine" }) }).catch((e: unknown) => e);
      assert.ok(err instanceof UnavailableError || err instanceof RequestFailedError, String(err));
      await c.drain();
      const del = stub.calls.filter((r) => r.method === "DELETE");
      if (generated) {
        assert.equal(del.length, 1);
        assert.deepEqual(del[0]!.body, { owner: stub.calls[0]!.body!.owner }, "owner only: the token is unknown");
      } else {
        assert.equal(del.length, 0, "an explicit owner may be shared: never released blind");
      }
    }
  });

  test("acquire retries temporary failures, then gives up with the last error when the budget runs out", async () => {
    const stub = stubFetch((_req, n) => (n < 2 ? problem(503, "service-unavailable") : json(200, { acquired: true, lock: lockDoc("r", "w", 7) })));
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const lease = await c.acquire("r", { owner: "w", ttlSeconds: 2, waitMs: 5000, keepAlive: false });
    assert.equal(stub.calls.length, 3);
    assert.ok(lease.held);

    const down = stubFetch(() => json(502, { message: "Internal server error" }));
    const d = new Client(BASE, { fetch: down.fetch, backoff: fast });
    const t = performance.now();
    const err = await d.acquire("r", { owner: "w", ttlSeconds: 2, waitMs: 300 }).catch((e: unknown) => e);
    assert.ok(err instanceof UnavailableError, String(err));
    assert.ok(performance.now() - t < 600);
    assert.ok(down.calls.length >= 3, `${down.calls.length} attempts`);
  });

  test("an already aborted signal sends nothing", async () => {
    const stub = granting(() => true);
    const c = new Client(BASE, { fetch: stub.fetch });
    const ac = new AbortController();
    ac.abort(new Error("no"));
    await assert.rejects(c.acquire("r", { ttlSeconds: 5, signal: ac.signal }), /no/);
    assert.equal(stub.calls.length, 0);
  });
});

describe("problems", { concurrency: true }, () => {
  test("every slug has its class; gateway answers get none of the lock classes", async () => {
    const cases: Array<[Response, new (...a: never[]) => ProblemError, string]> = [
      [problem(404, "not-found"), NotFoundError, "not-found"],
      [problem(403, "forbidden"), ForbiddenError, "forbidden"],
      [problem(409, "stale-token"), StaleTokenError, "stale-token"],
      [problem(422, "validation-failed", { errors: [{ field: "ttl_seconds", detail: "must be at least 1" }] }), ValidationError, "validation-failed"],
      [problem(400, "invalid-json"), InvalidJsonError, "invalid-json"],
      [problem(413, "payload-too-large"), PayloadTooLargeError, "payload-too-large"],
      [problem(503, "service-unavailable"), UnavailableError, "service-unavailable"],
      [problem(500, "internal"), InternalError, "internal"],
    ];
    for (const [answer, cls, slug] of cases) {
      const c = new Client(BASE, { fetch: stubFetch(() => answer.clone()).fetch });
      const err = await c.status("r").catch((e: unknown) => e);
      assert.ok(err instanceof cls, `${slug}: ${String(err)}`);
      assert.equal(err.slug, slug);
      assert.equal(err.status, answer.status);
      assert.equal(err.detail, `a ${slug} problem`);
    }
    const v = await new Client(BASE, { fetch: stubFetch(() => cases[3]![0].clone()).fetch }).status("r").catch((e: unknown) => e);
    assert.ok(v instanceof InvalidRequestError);
    assert.match(v.message, /^status "r": 422 validation-failed: a validation-failed problem \(ttl_seconds: must be at least 1\)$/);

    // API Gateway's own answers: a bad signature, a wrong URL.
    for (const [status, message] of [[403, "Forbidden"], [404, "Not Found"], [401, "Unauthorized"]] as const) {
      const c = new Client(BASE, { fetch: stubFetch(() => json(status, { message })).fetch });
      const err = await c.status("r").catch((e: unknown) => e);
      assert.ok(err instanceof ProblemError, String(err));
      assert.ok(!(err instanceof ForbiddenError) && !(err instanceof NotFoundError), `${status} from the gateway is not a lock outcome`);
      assert.equal(err.title, message);
      assert.equal(err.slug, "");
    }
    const gw = await new Client(BASE, { fetch: stubFetch(() => new Response("<html>bad gateway</html>", { status: 504 })).fetch })
      .status("r")
      .catch((e: unknown) => e);
    assert.ok(gw instanceof UnavailableError && gw.title === "Gateway Timeout", String(gw));
  });

  test("Retry-After and HeldError's expiry are read", async () => {
    const until = new Date(Date.now() + 5000).toISOString();
    const c = new Client(BASE, {
      fetch: stubFetch((req) =>
        req.method === "GET"
          ? problem(503, "service-unavailable", {}, { "retry-after": "1" })
          : json(200, { acquired: false, resource: "r", expires_at: until }, { "retry-after": "5" }),
      ).fetch,
    });
    const u = await c.status("r").catch((e: unknown) => e);
    assert.ok(u instanceof UnavailableError && u.retryAfterMs === 1000, String(u));
    const h = await c.tryAcquire("r", { ttlSeconds: 5 }).catch((e: unknown) => e);
    assert.ok(h instanceof HeldError, String(h));
    assert.equal(h.expiresAt?.toISOString(), until);
    assert.equal(h.retryAfterMs, 5000);
  });

  test("bad arguments are refused before anything is sent", async () => {
    const stub = stubFetch(() => json(200, {}));
    const c = new Client(BASE, { fetch: stub.fetch });
    await assert.rejects(c.tryAcquire("a/b", { ttlSeconds: 5 }), TypeError);
    await assert.rejects(c.tryAcquire("", { ttlSeconds: 5 }), TypeError);
    await assert.rejects(c.tryAcquire("r", { ttlSeconds: 1.5 }), RangeError);
    await assert.rejects(c.tryAcquire("r", { ttlSeconds: 0 }), RangeError);
    await assert.rejects(c.tryAcquire("r", { ttlSeconds: 5, owner: "  " }), TypeError);
    await assert.rejects(c.acquire("r", { ttlSeconds: 5, waitMs: -1000 }), RangeError);
    await assert.rejects(c.release("r", { owner: "w", fencingToken: 0 }), RangeError);
    assert.equal(stub.calls.length, 0);
    assert.throws(() => new Client("ftp://x"), TypeError);
    assert.throws(() => new Client("http://x/?a=1"), TypeError);
    assert.equal(new Client("https://x.example/prod/").endpoint, "https://x.example/prod");
  });
});

describe("the lease's clock", { concurrency: true }, () => {
  test("the deadline counts from before the granting request, and passes when no renewal gets through", async () => {
    // The grant's answer takes 300 ms; renewals all fail temporarily.
    const stub = granting(() => true, (req) => (req.url.pathname.endsWith("/renew") ? problem(503, "service-unavailable") : undefined));
    const slow = stubFetch(async (req) => {
      if (req.method === "POST" && !req.url.pathname.endsWith("/renew")) await delay(300);
      return stub.fetch(req.url, { method: req.method, body: req.text });
    });
    const c = new Client(BASE, { fetch: slow.fetch, backoff: fast });
    const t = performance.now();
    const lease = await c.tryAcquire("r", { owner: "w", ttlSeconds: 2 });
    const granted = performance.now();
    assert.ok(granted - t >= 295);
    // ttl − margin = 1800 ms from before the request; counted from the answer it would be ≥ 2100.
    assert.ok(lease.deadline - t >= 1799 && lease.deadline - t < 1900, `deadline ${lease.deadline - t} ms after the call`);
    const reason = await aborted(lease.signal, 4000);
    const lostAt = performance.now() - t;
    assert.ok(reason instanceof LeaseLostError && reason.reason instanceof LeaseExpiredError, String(reason));
    assert.ok(lostAt >= 1795 && lostAt < 2600, `lost ${lostAt} ms after the call, ${performance.now() - granted} ms after the grant arrived`);
    assert.ok(slow.calls.filter((r) => r.url.pathname.endsWith("/renew")).length >= 2, "renewals were retried");
  });

  test("keep-alive renews every ttl/3 from the grant and moves the deadline", async () => {
    const stub = granting(() => true);
    const c = new Client(BASE, { fetch: stub.fetch });
    const lease = await c.tryAcquire("r", { owner: "w", ttlSeconds: 3 });
    const grantAt = stub.calls[0]!.at;
    const d0 = lease.deadline;
    await delay(1150);
    const renewals = stub.calls.filter((r) => r.url.pathname.endsWith("/renew"));
    assert.equal(renewals.length, 1);
    const gap = renewals[0]!.at - grantAt;
    assert.ok(gap >= 995 && gap < 1600, `first renewal ${gap} ms after the grant`);
    assert.deepEqual(renewals[0]!.body, { owner: "w", ttl_seconds: 3, fencing_token: 101 });
    assert.ok(lease.deadline > d0 + 900);
    await lease.release();
    const last = stub.calls.at(-1)!;
    assert.equal(last.method, "DELETE");
    assert.deepEqual(last.body, { owner: "w", fencing_token: 101 });
    const n = stub.calls.length;
    await delay(1100);
    assert.equal(stub.calls.length, n, "no renewal after release");
  });

  test("a grant that arrives after its own deadline is given back and tried again", async () => {
    let n = 0;
    const stub = granting(() => true);
    const slow = stubFetch(async (req) => {
      if (req.method === "POST" && n++ === 0) await delay(1000); // longer than ttl − margin
      return stub.fetch(req.url, { method: req.method, body: req.text });
    });
    const c = new Client(BASE, { fetch: slow.fetch, backoff: fast });
    const lease = await c.acquire("r", { owner: "w", ttlSeconds: 1, waitMs: 5000, keepAlive: false });
    await c.drain();
    assert.ok(lease.held);
    assert.equal(lease.fencingToken, 102);
    const del = slow.calls.filter((r) => r.method === "DELETE");
    assert.deepEqual(del.map((r) => r.body), [{ owner: "w", fencing_token: 101 }]);
  });

  test("withLock reports work that outlived its lease", async () => {
    const stub = granting(() => true, (req) => (req.url.pathname.endsWith("/renew") ? problem(409, "stale-token") : undefined));
    const c = new Client(BASE, { fetch: stub.fetch });
    const err = await c
      .withLock("r", async (signal) => {
        await aborted(signal, 2000); // ignores the loss and returns
        return "done";
      }, { ttlSeconds: 3 })
      .catch((e: unknown) => e);
    assert.ok(err instanceof LeaseLostError && err.reason instanceof StaleTokenError, String(err));

    const gone = granting(() => true, (req) => (req.method === "DELETE" ? problem(404, "not-found") : undefined));
    const g = new Client(BASE, { fetch: gone.fetch });
    const e2 = await g.withLock("r", () => "done", { ttlSeconds: 3 }).catch((e: unknown) => e);
    assert.ok(e2 instanceof LeaseLostError && e2.reason instanceof NotFoundError, "a release that finds no lease: the work ran unprotected");
  });
});
