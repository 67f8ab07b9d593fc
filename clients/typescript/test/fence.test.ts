// @ft288/locks/fence: the fragments, their checks, and the row-count check.
// test/integration.test.ts runs the DynamoDB fragments against dynalite.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { FencedError as MainFencedError, LocksError } from "../dist/esm/index.js";
import { FencedError, dynamoFence, sqlFence } from "../dist/esm/fence.js";

const BAD_TOKENS: unknown[] = [0, -1, 1.5, Number.NaN, 2 ** 53, "5", undefined];

describe("fence", { concurrency: true }, () => {
  test("dynamoFence: the condition, the update, names and values in both clients' shapes", () => {
    assert.deepEqual(dynamoFence(1796217278318535), {
      attribute: "fence",
      token: 1796217278318535,
      conditionExpression: "(attribute_not_exists(#fence) OR #fence <= :fence)",
      updateExpression: "SET #fence = :fence",
      setAction: "#fence = :fence",
      names: { "#fence": "fence" },
      values: { ":fence": { N: "1796217278318535" } },
      item: { fence: { N: "1796217278318535" } },
      document: { values: { ":fence": 1796217278318535 }, item: { fence: 1796217278318535 } },
    });
    const custom = dynamoFence(7, { attribute: "lock token" });
    assert.deepEqual([custom.names, custom.item, custom.document.item], [{ "#fence": "lock token" }, { "lock token": { N: "7" } }, { "lock token": 7 }]);
    for (const t of BAD_TOKENS) assert.throws(() => dynamoFence(t as number), RangeError, String(t));
    assert.throws(() => dynamoFence(7, { attribute: "" }), TypeError);
  });

  test("sqlFence: SET and WHERE fragments for each placeholder style; only identifiers and placeholders go in the text", () => {
    const f = sqlFence(42);
    assert.deepEqual([f.column, f.token, f.set, f.where], ["fence", 42, "fence = $1", "(fence IS NULL OR fence <= $1)"]);
    for (const [placeholder, column, set, where] of [
      ["$3", "fence_token", "fence_token = $3", "(fence_token IS NULL OR fence_token <= $3)"],
      ["?", "`fence`", "`fence` = ?", "(`fence` IS NULL OR `fence` <= ?)"],
      [":fence", '"Fence"', '"Fence" = :fence', '("Fence" IS NULL OR "Fence" <= :fence)'],
      ["@fence", "fence", "fence = @fence", "(fence IS NULL OR fence <= @fence)"],
      ["$fence", "fence", "fence = $fence", "(fence IS NULL OR fence <= $fence)"],
    ]) {
      const g = sqlFence(42, { placeholder, column });
      assert.deepEqual([g.set, g.where], [set, where], placeholder);
    }
    for (const column of ["", "fence; DROP TABLE t", "a b", "t.fence", '"a"b"', "1fence"]) {
      assert.throws(() => sqlFence(1, { column }), TypeError, column);
    }
    for (const placeholder of ["", "$0", "42", "'1'", "?1 OR 1=1", ":"]) {
      assert.throws(() => sqlFence(1, { placeholder }), TypeError, placeholder);
    }
    for (const t of BAD_TOKENS) assert.throws(() => sqlFence(t as number), RangeError, String(t));
  });

  test("sqlFence's check: a changed row passes, none throws FencedError, anything else is not a count", () => {
    const f = sqlFence(42);
    f.check(1);
    f.check(3);
    f.check(1n);
    for (const rows of [0, 0n]) {
      assert.throws(() => f.check(rows), (err: unknown) => err instanceof FencedError && err.token === 42 && /fencing token 42/.test(err.message));
    }
    for (const rows of [null, undefined, -1, 1.5, "1"]) assert.throws(() => f.check(rows as number), TypeError, String(rows));
    assert.equal(FencedError, MainFencedError, "one class, from either entry point");
    assert.ok(new FencedError(1) instanceof LocksError);
    assert.equal(new FencedError(1).name, "FencedError");
  });
});
