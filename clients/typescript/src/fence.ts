// @ft288/locks/fence: the fencing-token check for the protected resource's
// own writes, as expression fragments to merge into them. No dependency: the
// DynamoDB helpers return strings and plain objects in the shapes of the AWS
// SDK's DynamoDB client and its document client; the SQL helper returns
// fragments and checks the row count.
//
// Read/write locks: every grant, read or write, gets a token above all
// before it, so readers' tokens grow too. The writer fences its writes with
// dynamoFence(token) as a lock's holder does (one fence per lock: it refuses
// any writer granted before the last write). A reader never writes that
// fence: it reads it with the data and trusts the data only while
// `fence < reader's token` (a writer granted after the reader has a larger
// token); a larger fence means a writer wrote after the reader's lease ended.
// A reader's own output is fenced per reader slot, as a semaphore's permits
// (docs/fencing.md, Rules).
import { FencedError } from "./errors.js";

export { FencedError };

/** A fencing token as the helpers take it: a lease's `fencingToken`. */
function checkFenceToken(op: string, token: unknown): asserts token is number {
  if (typeof token !== "number" || !Number.isSafeInteger(token) || token < 1) {
    throw new RangeError(`${op}: token ${String(token)}: want a lease's fencing token, a positive integer`);
  }
}

/** {@link dynamoFence}'s options. */
export interface DynamoFenceOptions {
  /** The item's attribute that keeps the newest token written. Default "fence". */
  attribute?: string;
}

/**
 * The fencing check of one DynamoDB write, for `UpdateItem`, `PutItem`,
 * `DeleteItem` and the items of `TransactWriteItems`: the write succeeds
 * when the item has no fence yet or a fence ≤ the token, and records the
 * token. A refused write fails with `ConditionalCheckFailedException` (in
 * a transaction: `TransactionCanceledException` with that reason): a newer
 * holder has written.
 */
export interface DynamoFence {
  /** The attribute that keeps the newest token written. */
  attribute: string;
  /** The token the write carries. */
  token: number;
  /**
   * `(attribute_not_exists(#fence) OR #fence <= :fence)`: parenthesized, so
   * `${yours} AND ${conditionExpression}` keeps its meaning (put yours in
   * parentheses too when it has an OR).
   */
  conditionExpression: string;
  /** `SET #fence = :fence`: an `UpdateExpression` of its own. */
  updateExpression: string;
  /** `#fence = :fence`: to add to your own SET clause, `SET #a = :a, ${setAction}`. */
  setAction: string;
  /** `ExpressionAttributeNames`: `{ "#fence": attribute }`. */
  names: Record<"#fence", string>;
  /** `ExpressionAttributeValues` for `@aws-sdk/client-dynamodb` (DynamoDB JSON): `{ ":fence": { N: "42" } }`. */
  values: Record<":fence", { N: string }>;
  /** The attribute for a `PutItem`'s `Item` (DynamoDB JSON): `{ fence: { N: "42" } }`. */
  item: Record<string, { N: string }>;
  /** The same for `@aws-sdk/lib-dynamodb`'s document client: plain numbers. */
  document: {
    /** `{ ":fence": 42 }` */
    values: Record<":fence", number>;
    /** `{ fence: 42 }` */
    item: Record<string, number>;
  };
}

/**
 * The DynamoDB fragments that make a write carry `token` and be refused
 * when the item has seen a larger one: merge `conditionExpression` into the
 * write's `ConditionExpression`, `updateExpression` (or `setAction`) into its
 * `UpdateExpression` (a `PutItem` writes `item` instead), and `names` and
 * `values` (or `document.values`) into its expression attributes. The
 * placeholders are `#fence` and `:fence`: do not use them for anything else.
 */
export function dynamoFence(token: number, options: DynamoFenceOptions = {}): DynamoFence {
  const op = "dynamoFence";
  checkFenceToken(op, token);
  const { attribute = "fence" } = options;
  if (typeof attribute !== "string" || attribute === "") throw new TypeError(`${op}: attribute must be a non-empty string`);
  const n = String(token);
  return {
    attribute,
    token,
    conditionExpression: "(attribute_not_exists(#fence) OR #fence <= :fence)",
    updateExpression: "SET #fence = :fence",
    setAction: "#fence = :fence",
    names: { "#fence": attribute },
    values: { ":fence": { N: n } },
    item: { [attribute]: { N: n } },
    document: { values: { ":fence": token }, item: { [attribute]: token } },
  };
}

/** {@link sqlFence}'s options. */
export interface SqlFenceOptions {
  /** The column that keeps the newest token written: a plain identifier, or one quoted with "…" or `…`. Default "fence". */
  column?: string;
  /**
   * How the statement refers to the token: `$1`…`$n` (PostgreSQL), `?`
   * (MySQL, SQLite: then pass the token once for each `?`, twice), or a
   * named `:fence`, `@fence`, `$fence`. Default `$1`.
   */
  placeholder?: string;
}

/** The fencing check of one SQL write; see {@link sqlFence}. */
export interface SqlFence {
  /** The column that keeps the newest token written. */
  column: string;
  /** The token the write carries: the placeholder's value. */
  token: number;
  /** `fence = $1`: add it to the statement's SET list. */
  set: string;
  /** `(fence IS NULL OR fence <= $1)`: AND it to the statement's WHERE clause. */
  where: string;
  /**
   * Checks the statement's count of matched rows (node-postgres `rowCount`,
   * mysql2 `affectedRows`, SQLite `changes`): throws a {@link FencedError}
   * when it is 0, and a TypeError when it is not a count.
   */
  check(rows: number | bigint | null | undefined): void;
}

/**
 * The SQL fragments that make an UPDATE carry `token` and change nothing
 * when the row has seen a larger one:
 *
 * ```text
 * UPDATE accounts SET balance = $2, fence = $3 WHERE id = $1 AND (fence IS NULL OR fence <= $3)
 * ```
 *
 * then `check(rowCount)`: 0 rows means a newer holder has written (or no
 * row matched: create the row first, with an INSERT that sets the fence).
 * The column and placeholder are put in the text as given, after checking
 * that they are an identifier and a placeholder; the token goes in the
 * statement's parameters, never in its text.
 */
export function sqlFence(token: number, options: SqlFenceOptions = {}): SqlFence {
  const op = "sqlFence";
  checkFenceToken(op, token);
  const { column = "fence", placeholder = "$1" } = options;
  if (typeof column !== "string" || !/^(?:[A-Za-z_][A-Za-z0-9_$]*|"[^"]+"|`[^`]+`)$/.test(column)) {
    throw new TypeError(`${op}: column ${JSON.stringify(column)}: want an identifier such as fence, "Fence" or \`fence\``);
  }
  if (typeof placeholder !== "string" || !/^(?:\?|\$[1-9][0-9]*|[:@$][A-Za-z_][A-Za-z0-9_]*)$/.test(placeholder)) {
    throw new TypeError(`${op}: placeholder ${JSON.stringify(placeholder)}: want $1…$n, ? or a named :fence, @fence, $fence`);
  }
  return {
    column,
    token,
    set: `${column} = ${placeholder}`,
    where: `(${column} IS NULL OR ${column} <= ${placeholder})`,
    check(rows) {
      if (typeof rows === "bigint") rows = Number(rows);
      if (typeof rows !== "number" || !Number.isSafeInteger(rows) || rows < 0) {
        throw new TypeError(`${op}: check: ${String(rows)} is not a row count: pass the statement's rowCount, affectedRows or changes`);
      }
      if (rows === 0) throw new FencedError(token);
    },
  };
}
