// Against a stub fetch: the names and defaults the three clients share
// (docs/clients.md), the old names kept as deprecated aliases, the
// environment, and the admin calls.
import assert from "node:assert/strict";
import { describe, mock, test } from "node:test";
import {
  Client,
  DEFAULT_ACQUIRE_WAIT_MS,
  DEFAULT_ENDPOINT,
  DEFAULT_TTL_SECONDS,
  HeldError,
  LockClient,
  NotFoundError,
  ServiceUnavailableError,
  StaleTokenError,
  UnavailableError,
  UnexpectedAnswerError,
  fromEnv,
  withLock,
} from "../dist/esm/index.js";
import { json, lockDoc, problem, stubFetch, type StubRequest } from "./helpers.js";

const BASE = "http://locks.test";

/** Answers a lock's first try held, then leaves the rest to the stub: the acquire that follows waits at the service. */
function firstTryHeld(): (req: StubRequest) => Response | undefined {
  let tries = 0;
  return (req) =>
    req.method === "POST" && req.url.pathname === "/locks/r" && tries++ === 0 ? json(200, { acquired: false, resource: "r" }) : undefined;
}

/** A stub that grants every acquire, renews, and releases. */
function granting(answer?: (req: StubRequest) => Response | undefined) {
  let token = 100;
  return stubFetch((req) => {
    const a = answer?.(req);
    if (a) return a;
    if (req.method === "DELETE") return new Response(null, { status: 204 });
    const owner = String(req.body?.owner ?? "");
    if (req.url.pathname.endsWith("/renew")) return json(200, { renewed: true, lock: lockDoc("r", owner, token) });
    return json(200, { acquired: true, lock: lockDoc("r", owner, ++token) });
  });
}

// One at a time: a test here moves performance.now.
describe("defaults", () => {
  test("a lease lasts 30 s unless ttlSeconds says otherwise; options may be left out, but not replaced by a number", async () => {
    assert.equal(DEFAULT_TTL_SECONDS, 30);
    const stub = granting();
    const c = new Client({ endpoint: BASE, fetch: stub.fetch });
    const a = await c.tryAcquire("r");
    const b = await c.acquire("r");
    assert.deepEqual([stub.calls[0]!.body?.ttl_seconds, stub.calls[1]!.body?.ttl_seconds], [30, 30]);
    assert.equal(a.ttlSeconds, 30);
    assert.equal(b.ttlSeconds, 30);
    await Promise.all([a.release(), b.release()]);
    const n = stub.calls.length;
    // Plain JavaScript: tryAcquire("r", 60) must not be read as "no options" (a 30 s lease).
    await assert.rejects(c.tryAcquire("r", 60 as never), /options must be an object/);
    await assert.rejects(c.acquire("r", null as never), TypeError);
    assert.equal(stub.calls.length, n, "nothing sent");
  });

  test("acquire waits 30 s by default: the round that starts 25 s in asks the service for 4 s, not 20", async () => {
    assert.equal(DEFAULT_ACQUIRE_WAIT_MS, 30_000);
    // The try is held; the service holds the first round; by the fake clock it answers 25 s later.
    const real = performance.now.bind(performance);
    let skew = 0;
    const now = mock.method(performance, "now", () => real() + skew);
    try {
      const rounds = async (options: { waitMs?: number }) => {
        skew = 0;
        let n = 0;
        const stub = stubFetch((req) => {
          if (n === 0) {
            n++;
            return json(200, { acquired: false, resource: "r" });
          }
          if (n++ === 1) {
            skew = 25_000;
            return json(200, { acquired: false, resource: "r" });
          }
          return json(200, { acquired: true, lock: lockDoc("r", String(req.body?.owner), 7, 300) });
        });
        const lease = await new Client(BASE, { fetch: stub.fetch }).acquire("r", { ttlSeconds: 300, keepAlive: false, ...options });
        await lease.release().catch(() => {});
        return stub.calls.filter((r) => r.method === "POST").map((r) => r.body?.wait_seconds);
      };
      assert.deepEqual(await rounds({}), [undefined, 20, 4], "a try, then rounds");
      assert.deepEqual(await rounds({ waitMs: Infinity }), [undefined, 20, 20], "Infinity: until the lock is free");
    } finally {
      now.mock.restore();
    }
  });

  test("withLock waits as acquire does; waitMs: 0 tries once", async () => {
    const held = stubFetch(() => json(200, { acquired: false, resource: "r" }, { "retry-after": "1" }));
    const c = new Client(BASE, { fetch: held.fetch });
    await assert.rejects(c.withLock("r", () => assert.fail("ran"), { waitMs: 0 }), HeldError);
    assert.equal(held.calls.length, 1);
    assert.equal("wait_seconds" in held.calls[0]!.body!, false);
    const stub = granting(firstTryHeld());
    const out = await new Client(BASE, { fetch: stub.fetch }).withLock("r", (_signal, token) => token);
    assert.equal(out, 101);
    assert.equal("wait_seconds" in stub.calls[0]!.body!, false, "a try first");
    assert.equal(stub.calls[1]!.body?.wait_seconds, 19, "then a waiting round: ⅔ × (30 s − 1 s) of a default lease");
    assert.equal(stub.calls[1]!.body?.ttl_seconds, 30);
  });
});

describe("from the environment", { concurrency: true }, () => {
  test("LOCKS_ENDPOINT, default http://127.0.0.1:8080; LOCKS_SIGV4 needs a region, from the endpoint or AWS_REGION", async () => {
    assert.equal(DEFAULT_ENDPOINT, "http://127.0.0.1:8080");
    assert.equal(Client.fromEnv({ env: {} }).endpoint, DEFAULT_ENDPOINT);
    assert.equal(fromEnv({ env: { LOCKS_ENDPOINT: "https://locks.example/prod/" } }).endpoint, "https://locks.example/prod");
    assert.throws(() => Client.fromEnv({ env: { LOCKS_SIGV4: "1" } }), /AWS_REGION/);
    assert.ok(Client.fromEnv({ env: { LOCKS_SIGV4: "true", LOCKS_ENDPOINT: "https://abc.execute-api.eu-west-1.amazonaws.com" } }));

    const stub = granting();
    const credentials = { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret" };
    const signed = Client.fromEnv({ env: { LOCKS_SIGV4: "1", AWS_REGION: "eu-west-3" }, sigv4: { credentials }, fetch: stub.fetch });
    await (await signed.tryAcquire("r", { keepAlive: false })).release();
    assert.match(stub.calls[0]!.headers.authorization ?? "", /\/eu-west-3\/execute-api\/aws4_request/);
    const off = Client.fromEnv({ env: { LOCKS_SIGV4: "1" }, sigv4: false, fetch: stub.fetch });
    await (await off.tryAcquire("r", { keepAlive: false })).release();
    assert.equal(stub.calls.at(-2)!.headers.authorization, undefined, "an explicit sigv4: false wins");
  });
});

describe("deprecated names", { concurrency: true }, () => {
  test("LockClient, ServiceUnavailableError, flush, waitSeconds and fromEnv(env, options) still work", async () => {
    assert.equal(LockClient, Client);
    assert.equal(ServiceUnavailableError, UnavailableError);
    const held = firstTryHeld();
    const stub = granting((req) => (req.url.pathname === "/locks/down" ? problem(503, "service-unavailable") : held(req)));
    const c: LockClient = LockClient.fromEnv({ LOCKS_ENDPOINT: BASE }, { fetch: stub.fetch, backoff: { baseMs: 5, maxMs: 10 } });
    assert.ok(c instanceof Client);
    assert.equal(c.endpoint, BASE);
    const lease = await c.acquire("r", { waitSeconds: 5, keepAlive: false });
    assert.equal(stub.calls[1]!.body?.wait_seconds, 4, "a try, then 5 s less the slack");
    await lease.release();
    await assert.rejects(c.acquire("r", { waitMs: 1000, waitSeconds: 1 }), /both given/);
    const err = await c.tryAcquire("down").catch((e: unknown) => e);
    assert.ok(err instanceof ServiceUnavailableError && err.name === "UnavailableError", String(err));
    await c.flush();
    assert.equal(new Client(BASE).endpoint, new Client({ endpoint: BASE }).endpoint);
    assert.throws(() => new Client({} as never), /no endpoint/);
    assert.equal(typeof withLock, "function");
  });
});

describe("admin", { concurrency: true }, () => {
  const admin = (page: (req: StubRequest) => Response) => stubFetch(page);

  test("list sends prefix, limit and cursor encoded as SigV4 expects; listAll follows the cursor", async () => {
    const doc = (r: string) => ({ ...lockDoc(r, "w", 3), principal: "arn:aws:iam::1:role/x" });
    const stub = admin((req) => {
      const cursor = req.url.searchParams.get("cursor");
      if (!cursor) return json(200, { locks: [doc("job a(1)")], cursor: "c 1" });
      if (cursor === "c 1") return json(200, { locks: [], cursor: "c2" });
      return json(200, { locks: [doc("job b")] });
    });
    const c = new Client(BASE, { fetch: stub.fetch });
    const page = await c.list("job ", { limit: 2 });
    assert.equal(stub.calls[0]!.url.search, "?prefix=job%20&limit=2");
    assert.equal(page.cursor, "c 1");
    assert.equal(page.locks[0]!.principal, "arn:aws:iam::1:role/x");
    assert.ok(page.locks[0]!.expiresAt instanceof Date);
    const all = await c.listAll("job");
    assert.deepEqual(all.map((l) => l.resource), ["job a(1)", "job b"]);
    assert.equal(stub.calls[2]!.url.search, "?prefix=job&limit=1000&cursor=c%201");
    await assert.rejects(c.list("a/b"), TypeError);
    await assert.rejects(c.list("", { limit: 1001 }), RangeError);
  });

  test("list, listSemaphores and listRWLocks refuse a malformed page: a row outside the prefix or malformed, rows that are no array", async () => {
    const { resource, ...rest } = lockDoc("job-1", "w", 3);
    const permit = { ...rest, name: resource, slot: 0, permits: 2 };
    const listings = [
      { call: (c: Client, prefix: string) => c.list(prefix), field: "locks", row: lockDoc("job-1", "w", 3), rows: (p: object) => (p as { locks: unknown[] }).locks },
      { call: (c: Client, prefix: string) => c.listSemaphores(prefix), field: "holders", row: permit, rows: (p: object) => (p as { holders: unknown[] }).holders },
      {
        call: (c: Client, prefix: string) => c.listRWLocks(prefix),
        field: "rwlocks",
        row: { name: resource, readers: [{ ...rest, name: resource, mode: "read", slot: 3 }], queue: [{ mode: "write", owner: "w2", until: rest.expires_at }], fencing_token: 3 },
        rows: (p: object) => (p as { rwlocks: unknown[] }).rwlocks,
      },
    ];
    for (const { call, field, row, rows } of listings) {
      for (const [what, body, prefix] of [
        ["a row outside the prefix", { [field]: [row] }, "other-"],
        ["a malformed row", { [field]: [{ ...row, fencing_token: "3" }] }, "job-"],
        ["rows that are no array", { [field]: { 0: row } }, "job-"],
      ] as const) {
        const c = new Client(BASE, { fetch: admin(() => json(200, body)).fetch });
        await assert.rejects(call(c, prefix), UnexpectedAnswerError, `${field}: ${what}`);
      }
      // The same row under its own prefix is a page.
      const c = new Client(BASE, { fetch: admin(() => json(200, { [field]: [row], cursor: "c" })).fetch });
      const page = await call(c, "job-");
      assert.deepEqual([rows(page).length, page.cursor], [1, "c"], field);
    }
  });

  test("forceRelease sends reason, immediate and the token; a 409 carries the current lease", async () => {
    const freeAt = new Date(Date.now() + 60_000).toISOString();
    const stub = admin((req) => {
      if (req.body?.fencing_token === 9) return problem(409, "stale-token", { current: { ...lockDoc("r", "other", 10), principal: "" } });
      return json(200, { ended: { ...lockDoc("r", "w", 8), lock_delay_seconds: 60, principal: "" }, reason: req.body?.reason, immediate: false, free_at: freeAt });
    });
    const c = new Client(BASE, { fetch: stub.fetch });
    const done = await c.forceRelease("r", "holder is dead");
    assert.equal(stub.calls[0]!.method, "DELETE");
    assert.equal(stub.calls[0]!.url.pathname, "/admin/locks/r");
    assert.deepEqual(stub.calls[0]!.body, { reason: "holder is dead" });
    assert.deepEqual(
      { owner: done.owner, token: done.fencingToken, reason: done.reason, immediate: done.immediate, freeAt: done.freeAt?.toISOString(), delay: done.lockDelaySeconds },
      { owner: "w", token: 8, reason: "holder is dead", immediate: false, freeAt, delay: 60 },
    );
    const stale = await c.forceRelease("r", "saw 9", { immediate: true, fencingToken: 9 }).catch((e: unknown) => e);
    assert.deepEqual(stub.calls[1]!.body, { reason: "saw 9", immediate: true, fencing_token: 9 });
    assert.ok(stale instanceof StaleTokenError, String(stale));
    assert.equal(stale.current?.owner, "other");
    assert.equal(stale.current?.fencingToken, 10);
    await assert.rejects(c.forceRelease("r", " "), TypeError);
    const none = await new Client(BASE, { fetch: stubFetch(() => problem(404, "not-found")).fetch }).forceRelease("r", "x").catch((e: unknown) => e);
    assert.ok(none instanceof NotFoundError && none.current === undefined);
  });
});
