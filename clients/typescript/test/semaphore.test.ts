// Semaphores against a stub fetch: the permit and its errors, waiting in
// rounds with the queue ticket (as the service will wait for permits), the
// fallback to polling, renew and release by slot, loss, late grants.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  Client,
  FullError,
  HeldError,
  LeaseLostError,
  Permit,
  PermitsMismatchError,
  StaleTokenError,
} from "../dist/esm/index.js";
import { aborted, delay, json, problem, stubFetch, until } from "./helpers.js";

const BASE = "http://locks.test";
const fast = { baseMs: 10, maxMs: 100 };

function permitDoc(name: string, slot: number, owner: string, token: number, ttlSeconds = 30): Record<string, unknown> {
  const now = Date.now();
  return {
    name, slot, owner, fencing_token: token,
    acquired_at: new Date(now).toISOString(), expires_at: new Date(now + ttlSeconds * 1000).toISOString(),
  };
}

const fullDoc = (name: string, extra: Record<string, unknown> = {}) =>
  json(200, { acquired: false, name, free_at: new Date(Date.now() + 5000).toISOString(), ...extra }, { "retry-after": "5" });

describe("semaphores against a stub", { concurrency: true }, () => {
  test("a waiting round's 503 with a queue_ticket is retried with that ticket, as a full round's", async () => {
    const stub = stubFetch((req, n) => {
      if (n === 0) return fullDoc("s"); // the try finds it full
      if (n === 1) return problem(503, "service-unavailable", { queue_ticket: "ghost-1", instance: "/semaphores/s/wait" }, { "retry-after": "0" });
      if (n === 2) return fullDoc("s", { queue_ticket: String(req.body?.queue_ticket ?? "st-new") });
      return json(200, { acquired: true, permit: permitDoc("s", 0, String(req.body?.owner), 9) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    await c.acquireSemaphore("s", 1, { owner: "w", ttlSeconds: 30, waitMs: 10_000, keepAlive: false });
    assert.deepEqual(stub.calls.map((r) => r.body?.queue_ticket), [undefined, undefined, "ghost-1", "ghost-1"]);
  });

  test("a permit, full, and permits mismatch are told apart", async () => {
    const stub = stubFetch((req, n) => {
      if (n === 0) return json(200, { acquired: true, permit: permitDoc("s", 1, String(req.body?.owner), 7) });
      if (n === 1) return fullDoc("s");
      return problem(409, "permits-mismatch", { permits: 2 });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const p = await c.tryAcquireSemaphore("s", 2, { keepAlive: false });
    assert.ok(p instanceof Permit);
    assert.deepEqual([p.name, p.resource, p.slot, p.permits, p.fencingToken], ["s", "s", 1, 2, 7]);
    assert.equal(p.info.slot, 1);
    assert.equal(stub.calls[0]!.url.pathname, "/semaphores/s");
    assert.equal(stub.calls[0]!.body?.permits, 2);
    assert.equal(stub.calls[0]!.body?.wait_seconds, undefined);

    const full = await c.tryAcquireSemaphore("s", 2).catch((e: unknown) => e);
    assert.ok(full instanceof FullError && full instanceof HeldError, String(full));
    assert.ok(full.freeAt && full.retryAfterMs === 5000 && full.resource === "s");
    const mismatch = await c.tryAcquireSemaphore("s", 3).catch((e: unknown) => e);
    assert.ok(mismatch instanceof PermitsMismatchError && !(mismatch instanceof HeldError), String(mismatch));
    assert.equal(mismatch.permits, 2);
    await assert.rejects(c.tryAcquireSemaphore("s", 0), RangeError);
    assert.equal(stub.calls.length, 3, "0 permits is refused before sending");
    p.release().catch(() => {});
  });

  test("tries, then waits in rounds at the service, sending back the queue ticket", async () => {
    const stub = stubFetch(async (req, n) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      if (n === 0) return fullDoc("s"); // the try
      if (n < 3) {
        await delay(1100); // the service held the round
        return fullDoc("s", { queue_ticket: "tk1" });
      }
      return json(200, { acquired: true, permit: permitDoc("s", 0, String(req.body?.owner), 9) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const p = await c.acquireSemaphore("s", 1, { waitMs: 10_000, keepAlive: false });
    assert.equal(stub.calls.length, 4);
    const [tried, a, b, d] = stub.calls.map((r) => r.body);
    assert.equal(stub.calls[0]!.url.pathname, "/semaphores/s");
    assert.ok(tried?.wait_seconds === undefined && tried?.queue_ticket === undefined, JSON.stringify(tried));
    assert.equal(stub.calls[1]!.url.pathname, "/semaphores/s/wait");
    assert.ok(typeof a?.wait_seconds === "number" && a.wait_seconds >= 1, JSON.stringify(a));
    assert.equal(a?.queue_ticket, undefined);
    assert.equal(b?.queue_ticket, "tk1");
    assert.equal(d?.queue_ticket, "tk1");
    assert.ok(stub.calls[1]!.at - stub.calls[0]!.at < 300, "the first round goes at once after the try");
    assert.ok(stub.calls[2]!.at - stub.calls[1]!.at < 1500, "the next round goes at once");
    await p.release();
  });

  test("polls a service that refuses wait_seconds for permits, and still waits at the service for locks", async () => {
    let semaphoreAcquires = 0;
    let lockTries = 0;
    const stub = stubFetch((req) => {
      if (req.url.pathname === "/locks/l" && req.method === "POST" && lockTries++ === 0) return json(200, { acquired: false, resource: "l" });
      if (req.url.pathname.startsWith("/locks/")) {
        return json(200, { acquired: true, lock: { resource: "l", owner: String(req.body?.owner), fencing_token: 3, acquired_at: new Date().toISOString(), expires_at: new Date(Date.now() + 30_000).toISOString() } });
      }
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      if (req.body?.wait_seconds !== undefined) {
        return problem(422, "validation-failed", { errors: [{ field: "wait_seconds", detail: "must be 0" }] });
      }
      return ++semaphoreAcquires < 4 ? fullDoc("s", { free_at: undefined }) : json(200, { acquired: true, permit: permitDoc("s", 0, String(req.body?.owner), 4) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const p = await c.acquireSemaphore("s", 1, { waitMs: 5000, keepAlive: false });
    const sem = stub.calls.filter((r) => r.url.pathname.startsWith("/semaphores/s") && r.method === "POST");
    assert.deepEqual(
      sem.map((r) => [r.url.pathname, r.body?.wait_seconds !== undefined]),
      [["/semaphores/s", false], ["/semaphores/s/wait", true], ["/semaphores/s", false], ["/semaphores/s", false], ["/semaphores/s", false]],
      "the try, the refused round on the waiting route, the polls on the try route",
    );
    semaphoreAcquires = 0; // full at the try and a poll once more
    await c.acquireSemaphore("s", 1, { waitMs: 5000, keepAlive: false }).then((q) => q.release());
    assert.equal(stub.calls.filter((r) => r.url.pathname.startsWith("/semaphores/s") && r.body?.wait_seconds !== undefined).length, 1, "remembered");
    const lease = await c.acquire("l", { waitMs: 5000, keepAlive: false });
    const lockRound = stub.calls.filter((r) => r.url.pathname.startsWith("/locks/l"))[1];
    assert.equal(lockRound?.url.pathname, "/locks/l/wait", "the lock's try was held: a round at the service");
    assert.ok(typeof lockRound?.body?.wait_seconds === "number");
    await Promise.all([p.release(), lease.release()]);
  });

  test("renews and releases by slot and token; a refused renewal loses the permit with its slot", async () => {
    let renewals = 0;
    const stub = stubFetch((req) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      if (req.url.pathname.endsWith("/renew")) {
        if (++renewals > 2) return problem(404, "not-found", { force_released: true });
        return json(200, { renewed: true, permit: permitDoc("s", 3, String(req.body?.owner), 11, 3) });
      }
      return json(200, { acquired: true, permit: permitDoc("s", 3, String(req.body?.owner), 11, 3) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const p = await c.tryAcquireSemaphore("s", 4, { ttlSeconds: 3 });
    const reason = await aborted(p.signal, 5000);
    assert.ok(reason instanceof LeaseLostError && reason.slot === 3 && reason.forceReleased, String(reason));
    assert.match(reason.message, /permit in slot 3 of semaphore "s"/);
    const renews = stub.calls.filter((r) => r.url.pathname === "/semaphores/s/renew");
    assert.ok(renews.every((r) => r.body?.slot === 3 && r.body?.fencing_token === 11 && r.body?.ttl_seconds === 3));

    const q = await c.tryAcquireSemaphore("s", 4, { keepAlive: false });
    await q.release();
    const rel = stub.calls.at(-1)!;
    assert.equal(rel.method, "DELETE");
    assert.deepEqual(rel.body, { owner: q.owner, slot: 3, fencing_token: 11 });
  });

  test("a grant that comes after the caller gave up is released by slot and token", async () => {
    const stub = stubFetch(async (req) => {
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      await delay(300);
      return json(200, { acquired: true, permit: permitDoc("s", 2, String(req.body?.owner), 21) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("stop")), 50);
    await assert.rejects(c.acquireSemaphore("s", 3, { signal: ac.signal }), /stop/);
    await c.drain();
    await until(() => stub.calls.some((r) => r.method === "DELETE"));
    const rel = stub.calls.find((r) => r.method === "DELETE")!;
    assert.deepEqual({ slot: rel.body?.slot, token: rel.body?.fencing_token }, { slot: 2, token: 21 });
  });

  test("withSemaphore runs under a permit and releases it; admin calls decode", async () => {
    const stub = stubFetch((req) => {
      const p = req.url.pathname;
      if (p === "/admin/semaphores") return json(200, { holders: [{ ...permitDoc("s", 0, "a", 5), permits: 2 }] });
      if (p === "/admin/semaphores/s") return problem(409, "stale-token", { current: { ...permitDoc("s", 0, "a", 5), permits: 2 } });
      if (req.method === "GET") return json(200, { name: "s", permits: 2, holders: [permitDoc("s", 0, "a", 5)] });
      if (req.method === "DELETE") return new Response(null, { status: 204 });
      return json(200, { acquired: true, permit: permitDoc("s", 1, String(req.body?.owner), 6) });
    });
    const c = new Client(BASE, { fetch: stub.fetch, backoff: fast });
    const got = await c.withSemaphore("s", 2, (signal, token, permit) => {
      assert.ok(!signal.aborted);
      return [token, permit.slot];
    });
    assert.deepEqual(got, [6, 1]);
    assert.equal(stub.calls.at(-1)!.method, "DELETE");
    const st = await c.semaphoreStatus("s");
    assert.deepEqual([st.permits, st.holders.length, st.holders[0]!.slot], [2, 1, 0]);
    const all = await c.listAllSemaphores("s");
    assert.deepEqual([all.length, all[0]!.permits, all[0]!.principal], [1, 2, ""]);
    const e = await c.forceReleasePermit("s", 0, "test", { fencingToken: 4 }).catch((err: unknown) => err);
    assert.ok(e instanceof StaleTokenError && e.currentPermit?.fencingToken === 5 && e.current === undefined, String(e));
    assert.deepEqual(stub.calls.at(-1)!.body, { slot: 0, reason: "test", fencing_token: 4 });
  });
});
