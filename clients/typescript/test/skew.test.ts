// Version skew against a stub of each kind of stack: a waiting acquire tries
// first, then sends its waiting rounds to the waiting route (…/wait), and
// tries go to the try route; a stack from before
// the waiting routes (API Gateway's 404 on …/wait) gets the old request, the
// try route with wait_seconds, for the client's life; a service that refuses
// wait_seconds (422 naming it) is polled. Locks and semaphores alike.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client, HeldError, NotFoundError } from "../dist/esm/index.js";
import { json, lockDoc, problem, stubFetch, type StubRequest } from "./helpers.js";

const BASE = "http://locks.test";
const fast = { baseMs: 10, maxMs: 50 };

/** A stack: "new" (today's), "old" (before the waiting routes), "oldest" (no routes, no waiting), "off" (today's, waiting turned off). */
type Stack = "new" | "old" | "oldest" | "off";

/** One acquire request as the wire saw it. */
interface Wire {
  route: "try" | "wait";
  wait: unknown;
  ticket: unknown;
}

const kinds = [
  {
    name: "lock",
    base: "/locks/r",
    held: { acquired: false, resource: "r" },
    granted: (owner: string) => json(200, { acquired: true, lock: lockDoc("r", owner, 42) }),
    acquire: (c: Client, waitMs: number) => c.acquire("r", { owner: "w", ttlSeconds: 60, waitMs, keepAlive: false }),
    tryAcquire: (c: Client) => c.tryAcquire("r", { owner: "w", ttlSeconds: 60, keepAlive: false }),
  },
  {
    name: "semaphore",
    base: "/semaphores/r",
    held: { acquired: false, name: "r" },
    granted: (owner: string) => {
      const now = Date.now();
      const permit = { name: "r", slot: 0, owner, fencing_token: 42, acquired_at: new Date(now).toISOString(), expires_at: new Date(now + 60_000).toISOString() };
      return json(200, { acquired: true, permit });
    },
    acquire: (c: Client, waitMs: number) => c.acquireSemaphore("r", 1, { owner: "w", ttlSeconds: 60, waitMs, keepAlive: false }),
    tryAcquire: (c: Client) => c.tryAcquireSemaphore("r", 1, { owner: "w", ttlSeconds: 60, keepAlive: false }),
  },
];

/**
 * A stub of `stack` for one kind: the lock (semaphore) is held for the first
 * `heldFor` acquires that reach it (again for `n` more after `holdFor(n)`),
 * then granted. A waiting round that ends
 * held answers a queue ticket. It refuses what the stack refuses before
 * looking at the lock.
 */
function stub(stack: Stack, kind: (typeof kinds)[number], heldFor: number) {
  let reached = 0;
  const holdFor = (n: number) => {
    reached = 0;
    heldFor = n;
  };
  const s = stubFetch((req) => {
    if (req.method === "DELETE") return new Response(null, { status: 204 });
    const waitRoute = req.url.pathname.endsWith("/wait");
    const wait = req.body?.wait_seconds;
    if (waitRoute && (stack === "old" || stack === "oldest")) return json(404, { message: "Not Found" });
    const bad: { field: string; detail: string }[] = [];
    if (wait !== undefined && (stack === "oldest" || stack === "off")) bad.push({ field: "wait_seconds", detail: "is not a known member" });
    else if (!waitRoute && stack !== "old" && wait !== undefined) bad.push({ field: "wait_seconds", detail: "this route does not wait: send waiting acquires to the waiting route" });
    if (!waitRoute && stack !== "old" && req.body?.queue_ticket !== undefined) bad.push({ field: "queue_ticket", detail: "only waiting acquires queue" });
    if (bad.length > 0) return problem(422, "validation-failed", { errors: bad });
    if (reached++ < heldFor) {
      return json(200, wait === undefined ? kind.held : { ...kind.held, queue_ticket: "tk1" });
    }
    return kind.granted(String(req.body?.owner));
  });
  const wire = (from = 0): Wire[] =>
    s.calls
      .slice(from)
      .filter((r: StubRequest) => r.method === "POST")
      .map((r) => {
        assert.ok(r.url.pathname === kind.base || r.url.pathname === `${kind.base}/wait`, r.url.pathname);
        return { route: r.url.pathname.endsWith("/wait") ? "wait" : "try", wait: r.body?.wait_seconds, ticket: r.body?.queue_ticket };
      });
  return { fetch: s.fetch, calls: s.calls, wire, holdFor };
}

describe("version skew", { concurrency: true }, () => {
  for (const kind of kinds) {
    test(`${kind.name}: today's stack: a free one is one try, and nothing reaches …/wait`, async () => {
      const s = stub("new", kind, 0);
      const c = new Client(BASE, { fetch: s.fetch, backoff: fast });
      await kind.acquire(c, 10_000);
      assert.deepEqual(s.wire(), [{ route: "try", wait: undefined, ticket: undefined }]);
    });

    test(`${kind.name}: today's stack: a try, then rounds on …/wait with wait_seconds and the ticket; a try on the try route without either`, async () => {
      const s = stub("new", kind, 3);
      const c = new Client(BASE, { fetch: s.fetch, backoff: fast });
      await kind.acquire(c, 10_000);
      assert.deepEqual(s.wire(), [
        { route: "try", wait: undefined, ticket: undefined },
        { route: "wait", wait: 9, ticket: undefined },
        { route: "wait", wait: 9, ticket: "tk1" },
        { route: "wait", wait: 9, ticket: "tk1" },
      ]);
      const n = s.calls.length;
      await kind.tryAcquire(c);
      assert.deepEqual(s.wire(n), [{ route: "try", wait: undefined, ticket: undefined }]);
    });

    test(`${kind.name}: a stack without the waiting routes (API Gateway's 404) gets the old request, remembered`, async () => {
      const s = stub("old", kind, 3);
      const c = new Client(BASE, { fetch: s.fetch, backoff: fast });
      await kind.acquire(c, 10_000);
      assert.deepEqual(s.wire(), [
        { route: "try", wait: undefined, ticket: undefined },
        { route: "wait", wait: 9, ticket: undefined },
        { route: "try", wait: 9, ticket: undefined },
        { route: "try", wait: 9, ticket: "tk1" },
        { route: "try", wait: 9, ticket: "tk1" },
      ]);
      const n = s.calls.length;
      s.holdFor(1);
      await kind.acquire(c, 10_000);
      assert.deepEqual(
        s.wire(n),
        [
          { route: "try", wait: undefined, ticket: undefined },
          { route: "try", wait: 9, ticket: undefined },
        ],
        "no …/wait again",
      );
    });

    test(`${kind.name}: a stack without the waiting routes that refuses wait_seconds is polled, remembered`, async () => {
      const s = stub("oldest", kind, 3);
      const c = new Client(BASE, { fetch: s.fetch, backoff: fast });
      await kind.acquire(c, 10_000);
      assert.deepEqual(s.wire(), [
        { route: "try", wait: undefined, ticket: undefined },
        { route: "wait", wait: 9, ticket: undefined },
        { route: "try", wait: 9, ticket: undefined },
        { route: "try", wait: undefined, ticket: undefined },
        { route: "try", wait: undefined, ticket: undefined },
        { route: "try", wait: undefined, ticket: undefined },
      ]);
      const n = s.calls.length;
      s.holdFor(1);
      await kind.acquire(c, 10_000);
      assert.deepEqual(s.wire(n), [
        { route: "try", wait: undefined, ticket: undefined },
        { route: "try", wait: undefined, ticket: undefined },
      ]);
    });

    test(`${kind.name}: today's stack with waiting turned off (422 on …/wait) is polled on the try route`, async () => {
      const s = stub("off", kind, 2);
      const c = new Client(BASE, { fetch: s.fetch, backoff: fast });
      await kind.acquire(c, 10_000);
      assert.deepEqual(s.wire(), [
        { route: "try", wait: undefined, ticket: undefined },
        { route: "wait", wait: 9, ticket: undefined },
        { route: "try", wait: undefined, ticket: undefined },
        { route: "try", wait: undefined, ticket: undefined },
      ]);
    });
  }

  test("the service's own problem+json 404 on …/wait is not an old stack", async () => {
    const s = stubFetch((req) => (req.url.pathname.endsWith("/wait") ? problem(404, "not-found") : json(200, { acquired: false, resource: "r" })));
    const c = new Client(BASE, { fetch: s.fetch, backoff: fast });
    const err = await c.acquire("r", { owner: "w", ttlSeconds: 60, waitMs: 10_000, keepAlive: false }).catch((e: unknown) => e);
    assert.ok(err instanceof NotFoundError, String(err));
    assert.ok(!(err instanceof HeldError));
    assert.deepEqual(s.calls.map((r) => r.url.pathname), ["/locks/r", "/locks/r/wait"], "a try, then no fallback to the try route");
  });
});
