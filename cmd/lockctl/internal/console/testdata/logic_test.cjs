// Tests of assets/logic.js, the page's own logic; run by TestPageLogic
// (node --test).
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const ui = require("../assets/logic.js");

test("duration", () => {
  assert.equal(ui.duration(0), "0s");
  assert.equal(ui.duration(59999), "59s");
  assert.equal(ui.duration(65000), "1m 05s");
  assert.equal(ui.duration(2 * 3600e3 + 3 * 60e3), "2h 03m");
  assert.equal(ui.duration(-5), "0s");
});

test("countdown", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(ui.countdown("2026-01-01T00:00:12Z", now), "in 12s");
  assert.equal(ui.countdown("2025-12-31T23:59:57Z", now), "3s ago");
});

test("freeAt adds the lock-delay", () => {
  assert.equal(ui.freeAt({ expires_at: "2026-01-01T00:00:00Z", lock_delay_seconds: 10 }), Date.parse("2026-01-01T00:00:10Z"));
  assert.equal(ui.freeAt({ expires_at: "2026-01-01T00:00:00Z" }), Date.parse("2026-01-01T00:00:00Z"));
});

test("filterRows keeps a prefix, sorted by name then slot", () => {
  const rows = [{ name: "b", slot: 1 }, { name: "a:2", slot: 0 }, { name: "b", slot: 0 }, { name: "c" }];
  assert.deepEqual(ui.filterRows(rows, "b").map((r) => r.slot), [0, 1]);
  assert.deepEqual(ui.filterRows(rows, "").map((r) => r.name), ["a:2", "b", "b", "c"]);
  assert.deepEqual(ui.filterRows([{ resource: "x" }, { resource: "y" }], "y").map(ui.rowName), ["y"]);
});

test("page clamps and counts", () => {
  const rows = Array.from({ length: 120 }, (_, i) => i);
  const p = ui.page(rows, 2, 50);
  assert.deepEqual([p.n, p.pages, p.first, p.last, p.rows.length], [2, 3, 101, 120, 20]);
  assert.equal(ui.page(rows, 9, 50).n, 2);
  assert.equal(ui.page([], 0, 50).pages, 1);
});

test("timeline: one span per lease, closed when it is gone", () => {
  const h = (owner, t) => ({ owner, fencing_token: t });
  const spans = ui.timeline([
    { at: "t1", holders: [h("a", 5)] },
    { at: "t2", holders: [h("a", 5)] }, // a renewal is the same lease
    { at: "t3", holders: [], skipped: 2 },
    { at: "t4", problem: { status: 503 } },
    { at: "t5", holders: [h("b", 9)] },
  ]);
  assert.deepEqual(spans, [
    { owner: "a", token: 5, slot: undefined, from: "t1", to: "t3" },
    { owner: "b", token: 9, slot: undefined, from: "t5", to: null },
  ]);
  assert.equal(ui.skipped([{ skipped: 2 }, {}, { skipped: 1 }]), 3);
});

test("explain: 403 and 404 say what to do instead", () => {
  assert.match(ui.explain("locks", { status: 403, title: "not an administrator" }), /not an administrator.*look up a name/s);
  assert.match(ui.explain("locks", { status: 404, title: "Not Found" }), /no admin API/);
  assert.equal(ui.explain("locks", { status: 503, title: "Service Unavailable" }), "Listing locks failed: Service Unavailable (503)");
});

test("utf8Bytes counts bytes, not characters", () => {
  assert.equal(ui.utf8Bytes(""), 0);
  assert.equal(ui.utf8Bytes("abc"), 3);
  assert.equal(ui.utf8Bytes("€"), 3);
  assert.equal(ui.utf8Bytes("😀"), 4); // two UTF-16 units, which maxlength counts
  assert.equal(ui.utf8Bytes("€".repeat(167)), 501);
});

test("setMembers groups a lock set's names by set_id", () => {
  const rows = [{ resource: "acct:7", set_id: "set-1" }, { resource: "solo" }, { resource: "acct:42", set_id: "set-1" },
    { resource: "x", set_id: "set-2" }];
  assert.deepEqual(ui.setMembers(rows), { "set-1": ["acct:42", "acct:7"], "set-2": ["x"] });
  assert.deepEqual(ui.setMembers([{ resource: "a" }]), {});
});

test("rwCells: writer, readers by slot, queue kinds, earliest expiry", () => {
  const lease = (mode, owner, token, exp, slot) => ({ name: "cache", mode, owner, fencing_token: token, expires_at: exp, ...(slot === undefined ? {} : { slot }) });
  const c = ui.rwCells({
    name: "cache",
    readers: [lease("read", "r5", 12, "2026-01-01T00:00:30Z", 5), lease("read", "r0", 11, "2026-01-01T00:00:20Z")],
    queue: [{ mode: "write", owner: "w1" }, { mode: "read", owner: "r9" }],
    fencing_token: 12,
  });
  assert.equal(c.writer, "–");
  assert.equal(c.readers, "slot 0: r0 (token 11), slot 5: r5 (token 12)");
  assert.equal(c.waiting, "write w1, read r9");
  assert.equal(c.expires, "2026-01-01T00:00:20Z");
  const w = ui.rwCells({ name: "cache", writer: lease("write", "w1", 13, "2026-01-01T00:01:00Z"), readers: [], queue: [], fencing_token: 13 });
  assert.deepEqual(w, { writer: "w1 (token 13)", readers: "–", waiting: "–", expires: "2026-01-01T00:01:00Z" });
  assert.equal(ui.rwCells({ name: "cache", queue: [{ mode: "read", owner: "r1" }] }).expires, null);
});
