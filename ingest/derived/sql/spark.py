"""ingest/derived/sql's SELECTs (DuckDB dialect) as Spark SQL, through sqlglot's DuckDB -> Spark
transpiler plus the few rewrites it does not know (docs/spark.md lists them):

- epoch_us(ts) -> unix_micros(ts); make_timestamptz(us) -> timestamp_micros(us);
- epoch(a - b) of two timestamps (an INTERVAL's seconds) -> (unix_micros(a) - unix_micros(b)) / 1e6;
- to_seconds(n) -> make_dt_interval(0, 0, 0, n); len(list) -> size(list);
- regexp_escape(s) -> regexp_replace(s, '([^A-Za-z0-9_ ])', '\\\\$1');
- a CTE's MATERIALIZED hint is dropped (Spark plans its own reuse);
- count(DISTINCT (a, b)) -> count(DISTINCT a, b).

The Spark session must run with spark.sql.session.timeZone=UTC, spark.sql.ansi.enabled=false (DuckDB
gives NULL for x / 0), spark.sql.legacy.sizeOfNull=false (size(NULL) is NULL, as DuckDB's len) and
spark.sql.decimalOperations.allowPrecisionLoss=false (DECIMAL products keep DuckDB's scale):
SESSION_CONF holds them.
"""
from __future__ import annotations

import sqlglot
from sqlglot import exp

SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "false",
    "spark.sql.legacy.sizeOfNull": "false",
    "spark.sql.decimalOperations.allowPrecisionLoss": "false",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

_RENAMED = {"EPOCH_US": "UNIX_MICROS", "MAKE_TIMESTAMPTZ": "TIMESTAMP_MICROS"}


def _micros(node: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="UNIX_MICROS", expressions=[node])


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Anonymous):
        name = str(node.this).upper()
        if name in _RENAMED:
            return exp.Anonymous(this=_RENAMED[name], expressions=node.expressions)
        if name == "TO_SECONDS":
            return exp.Anonymous(this="MAKE_DT_INTERVAL", expressions=[
                exp.Literal.number(0), exp.Literal.number(0), exp.Literal.number(0), node.expressions[0]])
        if name == "REGEXP_ESCAPE":
            return exp.Anonymous(this="REGEXP_REPLACE", expressions=[
                node.expressions[0], exp.Literal.string("([^A-Za-z0-9_ ])"), exp.Literal.string("\\\\$1")])
    if isinstance(node, exp.TimeToUnix):
        inner = node.this
        if isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Sub):
            diff = exp.Sub(this=_micros(inner.this), expression=_micros(inner.expression))
        else:
            diff = _micros(inner)
        return exp.Paren(this=exp.Div(this=exp.Paren(this=diff), expression=exp.Literal.number("1e6")))
    if isinstance(node, exp.Length):
        return exp.Anonymous(this="SIZE", expressions=[node.this])
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct):
        distinct = node.this
        if len(distinct.expressions) == 1 and isinstance(distinct.expressions[0], exp.Tuple):
            distinct.set("expressions", list(distinct.expressions[0].expressions))
    return node


def to_spark(sql: str) -> str:
    """One SELECT of ingest/derived/sql in Spark SQL."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    return tree.transform(_rewrite).sql(dialect="spark")


def staged(sql: str, prefix: str) -> list[tuple[str | None, str]]:
    """One SELECT of ingest/derived/sql as Spark SQL statements to run in order: each CTE the
    DuckDB text marks MATERIALIZED becomes its own statement, named `prefix` + its name, for the
    caller to compute once (e.g. localCheckpoint) and register as a temp view; the last statement
    (name None) is the query itself, reading those views. Spark inlines a CTE at each reference, and
    the allocation's CTEs refer to one another so often that the inlined plan takes minutes to
    optimize; the author's MATERIALIZED marks say which to compute once."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    stages: list[tuple[str | None, str]] = []
    for with_ in list(tree.find_all(exp.With)):
        kept: list[exp.CTE] = []
        for cte in list(with_.expressions):
            if not cte.args.get("materialized"):
                kept.append(cte)
                continue
            name = prefix + cte.alias
            text = cte.this.copy().transform(_rewrite).sql(dialect="spark")
            if kept:  # the plain CTEs before it, which it may read
                text = "WITH " + ", ".join(k.copy().transform(_rewrite).sql(dialect="spark") for k in kept) + " " + text
            stages.append((name, text))
            _rename(tree, cte.alias, name)
            _rename_in(kept, cte.alias, name)
            with_.set("expressions", [c for c in with_.expressions if c is not cte])
        if not with_.expressions:
            with_.pop()
    stages.append((None, tree.transform(_rewrite).sql(dialect="spark")))
    return stages


def _rename(tree: exp.Expression, old: str, new: str) -> None:
    for table in tree.find_all(exp.Table):
        if table.name == old and not table.args.get("db"):
            table.set("this", exp.to_identifier(new))
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier(old)))


def _rename_in(ctes: list[exp.CTE], old: str, new: str) -> None:
    for cte in ctes:
        _rename(cte, old, new)
