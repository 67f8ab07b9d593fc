// `await using lease = await client.acquire(...)`: Node.js 20 has no such
// syntax, so this file is compiled by TypeScript with target ES2022 (see
// tsconfig.json), which downlevels it; the run proves the emitted helpers
// find Symbol.asyncDispose on a Lease. Against a stub fetch.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, test } from "node:test";
import { Client, Lease, LeaseLostError, LeaseReleasedError, NotFoundError } from "../dist/esm/index.js";
import { json, lockDoc, problem, stubFetch, type StubRequest } from "./helpers.js";

const BASE = "http://locks.test";

/** A stub that grants, renews, and answers releases with `release` (default 204). */
function service(release: (req: StubRequest) => Response = () => new Response(null, { status: 204 })) {
  let token = 100;
  const stub = stubFetch((req) => {
    if (req.method === "DELETE") return release(req);
    const owner = String(req.body?.owner ?? "");
    if (req.url.pathname.endsWith("/renew")) return json(200, { renewed: true, lock: lockDoc("r", owner, token) });
    return json(200, { acquired: true, lock: lockDoc("r", owner, ++token) });
  });
  return { ...stub, client: new Client(BASE, { fetch: stub.fetch }), deletes: () => stub.calls.filter((r) => r.method === "DELETE") };
}

describe("await using", { concurrency: true }, () => {
  test("this file's await using is downlevelled, and Lease has Symbol.asyncDispose", async () => {
    const emitted = await readFile(new URL(import.meta.url), "utf8");
    assert.match(emitted, /__addDisposableResource/);
    assert.equal(typeof Symbol.asyncDispose, "symbol");
    assert.equal(typeof Lease.prototype[Symbol.asyncDispose], "function");
  });

  test("the lease is released when the block ends, and when it throws", async () => {
    const s = service();
    let seen: Lease | undefined;
    {
      await using lease = await s.client.acquire("r");
      seen = lease;
      assert.ok(lease.held);
      assert.equal(s.deletes().length, 0);
    }
    assert.equal(seen.held, false);
    assert.ok(seen.signal.reason instanceof LeaseReleasedError);
    assert.deepEqual(s.deletes().map((r) => r.body), [{ owner: seen.owner, fencing_token: 101 }]);

    const boom = new Error("boom");
    await assert.rejects(async () => {
      await using lease = await s.client.tryAcquire("r");
      assert.ok(lease.held);
      throw boom;
    }, (e: unknown) => e === boom);
    assert.equal(s.deletes().length, 2);
  });

  test("after release() the block's end does nothing; a lease that ended at the service is reported lost", async () => {
    const s = service();
    {
      await using lease = await s.client.tryAcquire("r");
      await lease.release();
    }
    assert.equal(s.deletes().length, 1, "released once");

    const gone = service(() => problem(404, "not-found", { force_released: true }));
    const err = await (async () => {
      await using lease = await gone.client.tryAcquire("r");
      return lease.fencingToken;
    })().catch((e: unknown) => e);
    assert.ok(err instanceof LeaseLostError && err.forceReleased && err.reason instanceof NotFoundError, String(err));
  });
});
