// Against a stub fetch: watch (the query, the answer, its checks), and the
// election built on it: observe's order, skipped leases, reconnects and end,
// leader, campaign and resign.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  Client,
  Election,
  HeldError,
  LocksError,
  ProblemError,
  UnavailableError,
  UnexpectedAnswerError,
  type Observation,
} from "../dist/esm/index.js";
import { skippedLeases } from "../dist/esm/election.js";
import { delay, json, lockDoc, problem, stubFetch, type StubRequest } from "./helpers.js";

const BASE = "http://locks.test";
const fast = { baseMs: 10, maxMs: 100 };

/** A watch answer: the lease of `token` live (`live`), ended, or a lock never taken (token 0). */
function watchAnswer(resource: string, index: number, token: number, live: boolean, changed = true): Response {
  const body: Record<string, unknown> = { resource, index, changed };
  if (token > 0) body.fencing_token = token;
  if (live) body.lock = lockDoc(resource, `owner-${token}`, token);
  return json(200, body);
}

/** The index and wait_seconds a watch request asked with. */
const query = (req: StubRequest): [number, number] => [Number(req.url.searchParams.get("index")), Number(req.url.searchParams.get("wait_seconds"))];

/** Never answers; rejects when the request is aborted (stubFetch does that). */
const hang = () => new Promise<Response>(() => {});

describe("watch", { concurrency: true }, () => {
  test("asks with index and wait_seconds (defaults 0 and 20), gives the wait on top of the timeout, and decodes the answer", async () => {
    const stub = stubFetch((req, n) =>
      n === 0 ? watchAnswer("job", 0, 0, false, false) : n === 1 ? watchAnswer("job", 2 * 41, 41, true) : watchAnswer("job", 2 * 41 + 1, 41, false),
    );
    const c = new Client(BASE, { fetch: stub.fetch, timeoutMs: 1000 });
    const never = await c.watch("job", { waitSeconds: 0 });
    assert.deepEqual(never, { resource: "job", index: 0, changed: false, fencingToken: undefined, lock: undefined });
    const held = await c.watch("job");
    assert.equal(held.index, 82);
    assert.equal(held.fencingToken, 41);
    assert.equal(held.lock?.owner, "owner-41");
    assert.ok(held.lock?.expiresAt instanceof Date);
    const ended = await c.watch("job", { index: 82, waitSeconds: 7 });
    assert.deepEqual([ended.index, ended.changed, ended.fencingToken, ended.lock], [83, true, 41, undefined]);
    assert.deepEqual(stub.calls.map((r) => `${r.method} ${r.url.pathname}${r.url.search}`), [
      "GET /locks/job/watch?index=0&wait_seconds=0",
      "GET /locks/job/watch?index=0&wait_seconds=20",
      "GET /locks/job/watch?index=82&wait_seconds=7",
    ]);
  });

  test("refuses bad arguments before sending, malformed answers after, and does not retry", async () => {
    let answer: () => Response = () => json(200, { resource: "job", index: -1, changed: true });
    const stub = stubFetch(() => answer());
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    for (const o of [{ index: -1 }, { index: 1.5 }, { waitSeconds: 21 }, { waitSeconds: -1 }, { waitSeconds: 0.5 }]) {
      await assert.rejects(c.watch("job", o), RangeError, JSON.stringify(o));
    }
    await assert.rejects(c.watch("a/b"), TypeError);
    assert.equal(stub.calls.length, 0);
    await assert.rejects(c.watch("job", { waitSeconds: 0 }), UnexpectedAnswerError);
    answer = () => json(200, { resource: "other", index: 2, changed: true, fencing_token: 1 });
    await assert.rejects(c.watch("job", { waitSeconds: 0 }), UnexpectedAnswerError, "another resource");
    answer = () => json(200, { resource: "job", index: 2, changed: true, fencing_token: 1, lock: { owner: "x" } });
    await assert.rejects(c.watch("job", { waitSeconds: 0 }), UnexpectedAnswerError, "a malformed lock");
    answer = () => problem(503, "service-unavailable");
    await assert.rejects(c.watch("job", { waitSeconds: 0 }), UnavailableError);
    assert.equal(stub.calls.length, 4, "one request each");

    answer = hang as unknown as () => Response;
    const ac = new AbortController();
    const p = c.watch("job", { signal: ac.signal });
    ac.abort(new Error("stop"));
    await assert.rejects(p, /stop/);
  });
});

describe("election", { concurrency: true }, () => {
  test("skipped leases follow from the indexes", () => {
    assert.equal(skippedLeases(200, 201, false), 0, "the leader's lease ended");
    assert.equal(skippedLeases(200, 202, true), 0, "the next leader");
    assert.equal(skippedLeases(200, 206, true), 2, "tokens 101 and 102 unseen");
    assert.equal(skippedLeases(201, 203, false), 1, "token 101 began and ended unseen");
    assert.equal(skippedLeases(200, 205, false), 2);
    assert.equal(skippedLeases(0, 200, true), 0, "from a lock never taken: nothing to count from");
    assert.equal(skippedLeases(0, 201, false), 1);
    assert.equal(skippedLeases(201, 0, false), 0, "garbage collected");
  });

  test("observe: the state now, then each change in order with what it skipped; reconnects from the last index; ends on abort", async () => {
    const stub = stubFetch((req, n) => {
      switch (n) {
        case 0: return watchAnswer("lead", 200, 100, true);
        case 1: return problem(503, "service-unavailable");
        case 2: return json(429, { message: "Too Many Requests" });
        case 3: throw new TypeError("fetch failed"); // no answer
        case 4: return watchAnswer("lead", 201, 100, false); // the leader resigned
        case 5: return watchAnswer("lead", 201, 100, false, false); // the wait ran out
        case 6: return watchAnswer("lead", 206, 103, true); // 101 and 102 came and went unseen
        case 7: return watchAnswer("lead", 211, 105, false); // 104 unseen, 105 seen ended
        default: return hang();
      }
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const election = c.election("lead");
    assert.ok(election instanceof Election);
    assert.equal(election.name, "lead");
    const ac = new AbortController();
    const seen: Observation[] = [];
    for await (const o of election.observe({ signal: ac.signal })) {
      seen.push(o);
      if (seen.length === 4) setTimeout(() => ac.abort(), 50); // ends the loop during the next wait
    }
    assert.deepEqual(
      seen.map((o) => [o.leader?.owner ?? null, o.leader?.fencingToken ?? null, o.index, o.skipped]),
      [
        ["owner-100", 100, 200, 0],
        [null, null, 201, 0],
        ["owner-103", 103, 206, 2],
        [null, null, 211, 2],
      ],
    );
    assert.deepEqual(Object.keys(seen[0]!.leader!).sort(), ["acquiredAt", "expiresAt", "fencingToken", "owner"]);
    assert.deepEqual(stub.calls.map(query), [[0, 0], [200, 20], [200, 20], [200, 20], [200, 20], [201, 20], [201, 20], [206, 20], [211, 20]]);
  });

  test("observe: a lower MAX_WAIT_SECONDS halves the wait; return() abandons the wait in flight; a final error is thrown", async () => {
    const stub = stubFetch((req) => {
      const [index, wait] = query(req);
      if (index === 0 && wait === 0) return watchAnswer("lead", 0, 0, false, false);
      if (wait > 5) return problem(422, "validation-failed", { errors: [{ field: "wait_seconds", detail: "must be at most 5" }] });
      if (index === 0) return watchAnswer("lead", 14, 7, true);
      return hang(); // until the request is aborted
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const seen: Observation[] = [];
    for await (const o of c.election("lead").observe()) {
      seen.push(o);
      if (seen.length === 2) break;
    }
    assert.deepEqual(seen.map((o) => [o.leader?.owner ?? null, o.index, o.skipped]), [[null, 0, 0], ["owner-7", 14, 0]]);
    assert.deepEqual(stub.calls.map(query), [[0, 0], [0, 20], [0, 10], [0, 5]]);

    // return() while a wait is in flight (the next() below) aborts it at once.
    const it = c.election("lead").observe();
    await it.next();
    await it.next();
    const pending = it.next();
    await delay(20);
    assert.deepEqual(await it.return!(), { done: true, value: undefined });
    assert.deepEqual(await pending, { done: true, value: undefined });

    const forbidden = stubFetch(() => json(403, { message: "Forbidden" }));
    const f = new Client(BASE, { fetch: forbidden.fetch, backoff: fast });
    await assert.rejects(async () => {
      for await (const _ of f.election("lead").observe()) assert.fail("nothing to observe");
    }, (err: unknown) => err instanceof ProblemError && err.status === 403 && err.slug === "");
    assert.equal(forbidden.calls.length, 1, "not retried");
  });

  test("observe does not spin on a service that answers 'no change' at once", async () => {
    const stub = stubFetch((req) => (query(req)[1] === 0 ? watchAnswer("lead", 10, 5, true) : watchAnswer("lead", 10, 5, true, false)));
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 400);
    let n = 0;
    for await (const _ of c.election("lead").observe({ signal: ac.signal })) n++;
    assert.equal(n, 1);
    assert.ok(stub.calls.length >= 3 && stub.calls.length < 30, `${stub.calls.length} requests in 400 ms`);
  });

  test("leader: the live lease, or null", async () => {
    let answer = () => json(200, lockDoc("lead", "host-a", 9));
    const stub = stubFetch(() => answer());
    const e = new Client(BASE, { fetch: stub.fetch }).election("lead");
    const l = await e.leader();
    assert.deepEqual(Object.keys(l!).sort(), ["acquiredAt", "expiresAt", "fencingToken", "owner"]);
    assert.deepEqual([l!.owner, l!.fencingToken], ["host-a", 9]);
    answer = () => problem(404, "not-found");
    assert.equal(await e.leader(), null);
    answer = () => problem(503, "service-unavailable");
    await assert.rejects(e.leader(), UnavailableError);
    assert.deepEqual(stub.calls.map((r) => `${r.method} ${r.url.pathname}`), Array(3).fill("GET /locks/lead"));
  });

  test("campaign waits until elected and holds the lease; one at a time; resign releases it, and is quiet when nothing is held", async () => {
    let free = false;
    let token = 50;
    let release = () => new Response(null, { status: 204 });
    const stub = stubFetch((req) => {
      if (req.method === "DELETE") return release();
      const owner = String(req.body?.owner);
      if (req.url.pathname.endsWith("/renew")) return json(200, { renewed: true, lock: lockDoc("lead", owner, token) });
      return free ? json(200, { acquired: true, lock: lockDoc("lead", owner, ++token, 6) }) : json(200, { acquired: false, resource: "lead" });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const e = c.election("lead");
    await e.resign(); // nothing to give up
    assert.equal(stub.calls.length, 0);

    setTimeout(() => (free = true), 150);
    const p = e.campaign({ owner: "host-a", ttlSeconds: 6 });
    await assert.rejects(e.campaign(), (err: unknown) => err instanceof LocksError && /campaigning already/.test(err.message));
    const lease = await p;
    assert.equal(lease.fencingToken, 51);
    assert.equal(lease.owner, "host-a");
    assert.equal(e.lease, lease);
    const asks = stub.calls.filter((r) => r.method === "POST");
    assert.ok(asks.length >= 2, "it waited");
    assert.deepEqual(asks.map((r) => [r.body?.owner, r.body?.ttl_seconds, r.body?.wait_seconds]).at(-1), ["host-a", 6, 3]);
    await assert.rejects(e.campaign(), (err: unknown) => err instanceof LocksError && /leads already \(fencing token 51\)/.test(err.message));

    await e.resign();
    assert.equal(lease.held, false);
    assert.equal(e.lease, undefined);
    const del = stub.calls.at(-1)!;
    assert.deepEqual([del.method, del.body], ["DELETE", { owner: "host-a", fencing_token: 51 }]);
    const n = stub.calls.length;
    await e.resign();
    assert.equal(stub.calls.length, n, "resigned already");

    // A lease that had ended at the service: nothing to give up.
    const again = await e.campaign({ ttlSeconds: 6 });
    release = () => problem(404, "not-found");
    await e.resign();
    assert.equal(again.held, false);

    // waitMs bounds a campaign; its signal stops it, and another may start.
    free = false;
    await assert.rejects(e.campaign({ waitMs: 100 }), HeldError);
    const ac = new AbortController();
    const stopped = e.campaign({ signal: ac.signal });
    setTimeout(() => ac.abort(new Error("shutting down")), 50);
    await assert.rejects(stopped, /shutting down/);
    free = true;
    const third = await e.campaign({ ttlSeconds: 6 });
    release = () => new Response(null, { status: 204 });
    await e.resign();
    assert.equal(third.held, false);
  });
});
