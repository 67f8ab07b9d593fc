"""Fences: make the resource a lock protects refuse a write that carries an
older fencing token than one it has already accepted.

A lease only promises that the lock was yours until a moment by the
service's clock. A holder that pauses (a long GC, a suspended VM, a
partition) can wake after its lease ended and write anyway, over the work
of the next holder. Tokens grow with every grant, so the protected resource
can tell: it stores the largest token that wrote (the fence) and refuses a
write with a smaller one. These helpers add that check to your own writes;
they use no library (the statement runs on your DB-API cursor, the
DynamoDB fragments go into your own boto3/botocore call).

- dynamo_fence(token): a condition and an update fragment, with their names
  and values, to merge into an UpdateItem, PutItem or a transaction's item;
  a refused write fails with ConditionalCheckFailedException.
- sql_fence(cursor, token, table, set=..., where=...): ``UPDATE table SET
  ..., fence = token WHERE ... AND (fence IS NULL OR fence <= token)``, and
  FencedError when no row changed; sql_fence_statement() builds it,
  check_fenced() checks the row count of your own statement.

A write with the same token passes (one holder writes many times).

Read/write locks: every grant, read or write, gets a token above all before
it, so readers' tokens grow too. The writer fences its writes with
dynamo_fence(token) as a lock's holder does (one fence per lock: it refuses
any writer granted before the last write). A reader never writes that fence:
it reads it with the data and trusts the data only while ``fence < reader's
token`` (a writer granted after the reader has a larger token); a larger
fence means a writer wrote after the reader's lease ended. A reader's own
output is fenced per reader slot, as a semaphore's permits (docs/fencing.md,
Rules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from .errors import FencedError, InvalidRequest

__all__ = [
    "DynamoFence",
    "FencedError",
    "check_fenced",
    "dynamo_fence",
    "sql_fence",
    "sql_fence_statement",
]

NAME = "#fence"
"""The expression attribute name placeholder of the fence attribute."""

VALUE = ":fence"
"""The expression attribute value placeholder of the token."""


def _check_token(token: Any) -> int:
    if type(token) is not int or token <= 0:
        raise InvalidRequest(f"fencing token {token!r}: want a positive integer (lease.fencing_token)")
    return token


# -- DynamoDB ------------------------------------------------------------------


@dataclass(frozen=True)
class DynamoFence:
    """The fence of one write to DynamoDB, for ``token`` in ``attribute``.

    The fragments, to use as they are or to merge by hand:

    - ``condition``: ``attribute_not_exists(#fence) OR #fence <= :fence``
      (AND it with your own ConditionExpression);
    - ``update``: ``SET #fence = :fence``, and ``set_action``, ``#fence =
      :fence``, to add to your own SET clause;
    - ``names``: ``{"#fence": attribute}``;
    - ``values``: ``{":fence": {"N": "<token>"}}``, DynamoDB JSON for the
      low-level client (boto3.client("dynamodb"), the Go SDK, the CLI), and
      ``document_values``: ``{":fence": token}`` for boto3's resource
      (``Table.update_item``).

    merge_update() and merge_put() do the merging into the parameters of
    your UpdateItem or PutItem call, or of an ``Update`` or ``Put`` of
    TransactWriteItems. A refused write fails with
    ConditionalCheckFailedException (in a transaction,
    TransactionCanceledException with reason ConditionalCheckFailed): a newer
    holder wrote first, so stop.
    """

    token: int
    attribute: str = "fence"

    condition = f"attribute_not_exists({NAME}) OR {NAME} <= {VALUE}"
    set_action = f"{NAME} = {VALUE}"
    update = f"SET {NAME} = {VALUE}"

    def __post_init__(self) -> None:
        _check_token(self.token)
        if not isinstance(self.attribute, str) or not self.attribute:
            raise InvalidRequest(f"attribute {self.attribute!r}: want the fence attribute's name")

    @property
    def names(self) -> Dict[str, str]:
        return {NAME: self.attribute}

    @property
    def values(self) -> Dict[str, Dict[str, str]]:
        return {VALUE: {"N": str(self.token)}}

    @property
    def document_values(self) -> Dict[str, int]:
        return {VALUE: self.token}

    def merge_update(self, params: Mapping[str, Any], *, document: bool = False) -> Dict[str, Any]:
        """A copy of UpdateItem parameters (TableName, Key, UpdateExpression,
        ConditionExpression, ExpressionAttributeNames/Values, ...) with the
        fence added: ``#fence = :fence`` in the SET clause (one is added when
        there is none), the fence condition ANDed with yours, its name and
        value. ``document=True`` for boto3's resource API (plain values)."""
        out = self._merge_common(params, document)
        out["UpdateExpression"] = _add_set_action(str(params.get("UpdateExpression") or ""), self.set_action)
        return out

    def merge_put(self, params: Mapping[str, Any], *, document: bool = False) -> Dict[str, Any]:
        """A copy of PutItem parameters (TableName, Item, ...) with the fence
        added: the token stored in the item's fence attribute, the fence
        condition ANDed with yours, its name and value."""
        out = self._merge_common(params, document)
        item = dict(params.get("Item") or {})
        item[self.attribute] = self.token if document else {"N": str(self.token)}
        out["Item"] = item
        return out

    def _merge_common(self, params: Mapping[str, Any], document: bool) -> Dict[str, Any]:
        out = dict(params)
        names = dict(params.get("ExpressionAttributeNames") or {})
        values = dict(params.get("ExpressionAttributeValues") or {})
        if names.get(NAME, self.attribute) != self.attribute:
            raise InvalidRequest(f"ExpressionAttributeNames already uses {NAME} for {names[NAME]!r}")
        if VALUE in values:
            raise InvalidRequest(f"ExpressionAttributeValues already uses {VALUE}")
        names.update(self.names)
        values.update(self.document_values if document else self.values)
        out["ExpressionAttributeNames"] = names
        out["ExpressionAttributeValues"] = values
        theirs = str(params.get("ConditionExpression") or "").strip()
        out["ConditionExpression"] = f"({theirs}) AND ({self.condition})" if theirs else self.condition
        return out


def dynamo_fence(token: int, attribute: str = "fence") -> DynamoFence:
    """The fence of a DynamoDB write made under the lease whose fencing token
    is ``token``, kept in the item's ``attribute``: see DynamoFence."""
    return DynamoFence(token, attribute)


# An update expression's clause keywords. They are reserved words, so no bare
# attribute name can be one; placeholders (:add, #set) and nested names
# (a.add) are not keywords.
_CLAUSE = re.compile(r"(?<![\w:#.\[])(SET|REMOVE|ADD|DELETE)\b", re.IGNORECASE)


def _add_set_action(expr: str, action: str) -> str:
    """expr with action appended to its SET clause (a SET clause added first
    when it has none)."""
    if not expr.strip():
        return "SET " + action
    clauses = list(_CLAUSE.finditer(expr))
    for i, m in enumerate(clauses):
        if m.group(1).upper() == "SET":
            end = clauses[i + 1].start() if i + 1 < len(clauses) else len(expr)
            head, body, tail = expr[: m.end()], expr[m.end(): end].rstrip(), expr[end:]
            return f"{head}{body}, {action}" + (f" {tail}" if tail else "")
    return f"SET {action} {expr.strip()}"


# -- SQL -------------------------------------------------------------------------

_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?\Z")
_PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")


def sql_fence_statement(
    token: int,
    table: str,
    *,
    set: Mapping[str, Any],
    where: Mapping[str, Any],
    column: str = "fence",
    paramstyle: str = "qmark",
) -> Tuple[str, Union[Tuple[Any, ...], Dict[str, Any]]]:
    """The fenced UPDATE and its parameters::

        UPDATE table SET a = ?, b = ?, fence = ? WHERE id = ? AND (fence IS NULL OR fence <= ?)

    ``set`` and ``where`` map column names to values (a None in ``where`` is
    ``IS NULL``); names are plain SQL identifiers (``schema.table`` for the
    table), never quoted, anything else is refused. ``paramstyle`` is your
    driver module's (sqlite3: qmark; psycopg and MySQL drivers: format or
    pyformat; oracledb: named or numeric)."""
    token = _check_token(token)
    if not isinstance(table, str) or not _TABLE.match(table):
        raise InvalidRequest(f"table {table!r}: want a plain SQL identifier (schema.table at most)")
    if paramstyle not in _PARAMSTYLES:
        raise InvalidRequest(f"paramstyle {paramstyle!r}: want one of {', '.join(_PARAMSTYLES)}")
    if not where:
        raise InvalidRequest("where: name the row(s) to update (an empty WHERE would fence the whole table)")
    for name in (column, *set, *where):
        if not isinstance(name, str) or not _COLUMN.match(name):
            raise InvalidRequest(f"column {name!r}: want a plain SQL identifier")
    if column in set:
        raise InvalidRequest(f"set: {column!r} is the fence column; the token goes there")

    params: Any = {} if paramstyle in ("named", "pyformat") else []

    def p(value: Any) -> str:
        if isinstance(params, dict):
            key = f"p{len(params) + 1}"
            params[key] = value
            return f":{key}" if paramstyle == "named" else f"%({key})s"
        params.append(value)
        return {"qmark": "?", "format": "%s"}.get(paramstyle, f":{len(params)}")

    assignments = [f"{c} = {p(v)}" for c, v in set.items()] + [f"{column} = {p(token)}"]
    conditions = [f"{c} IS NULL" if v is None else f"{c} = {p(v)}" for c, v in where.items()]
    conditions.append(f"({column} IS NULL OR {column} <= {p(token)})")
    sql = f"UPDATE {table} SET {', '.join(assignments)} WHERE {' AND '.join(conditions)}"
    return sql, (params if isinstance(params, dict) else tuple(params))


def check_fenced(cursor: Any, token: int) -> int:
    """The row count of the fenced statement just run on ``cursor``;
    FencedError when it is 0: no row changed, because the row's fence holds
    a newer token (or because no row matched: create the row before its
    first fenced write)."""
    n: Optional[int] = getattr(cursor, "rowcount", None)
    if not isinstance(n, int) or n < 0:
        raise RuntimeError(f"the cursor reports no row count ({n!r}): the fence cannot be checked")
    if n == 0:
        raise FencedError(
            token,
            f"fenced off: no row changed; its fence holds a newer fencing token than {token} "
            "(a newer holder of the lock wrote first), or no row matched",
        )
    return n


def sql_fence(
    cursor: Any,
    token: int,
    table: str,
    *,
    set: Mapping[str, Any],
    where: Mapping[str, Any],
    column: str = "fence",
    paramstyle: str = "qmark",
) -> int:
    """Runs the fenced UPDATE of sql_fence_statement() on a DB-API cursor and
    returns how many rows changed; FencedError when none did (a newer holder
    wrote first: roll back and stop). The caller owns the transaction: commit
    after it as usual."""
    sql, params = sql_fence_statement(token, table, set=set, where=where, column=column, paramstyle=paramstyle)
    cursor.execute(sql, params)
    return check_fenced(cursor, token)

