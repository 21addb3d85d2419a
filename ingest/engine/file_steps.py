"""A definition's whole-file step (file_rules.IndexByOrder), in SQL once every line is staged.

With such a step, a batch's rows do not go straight to the definition's table: the SQL pass
(`hold`) and the generic reader (`held_row`, for the rows it refuses) put every record, loaded or
refused for a value, in the held table with its reason (if any), because a row's value may depend
on rows anywhere in the file (the order in which uuids appear, the commonest size of a sample
group). `finish` then gives each row its value, refuses what cannot be told, loads the rest and
stages the rejects (a row refused only now has its text read again from the file).
"""
from __future__ import annotations

import pyarrow as pa

from ingest.engine import line_sql, staging
from ingest.engine.batch_csv import CSV_QUIRK
from ingest.engine.batch_spellings import quote
from ingest.engine.contract import BadValue, ParseContext
from ingest.engine.definition import SQL_TYPE, Definition
from ingest.engine.reader_values import read_value, used_name



def held(definition: Definition) -> str:
    return f"{definition.table}_held"


def create(definition: Definition, con) -> None:
    """The held table: each Field's column, the record's line, reason and text (kept for refused rows)."""
    columns = ", ".join(f"{f.column} {SQL_TYPE[f.type]}" for f in definition.fields)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {held(definition)} (source_line BIGINT, {columns}, "
                "reason VARCHAR, raw VARCHAR)")


def hold(definition: Definition, con, source: str, width: int, path: str) -> None:
    """The typed batch's rows into the held table: those SQL loads, and those it refuses for a value
    (an unquoted line of another width than the header is no record: refused at once)."""
    columns = ", ".join(f.column for f in definition.fields)
    con.execute(f"INSERT INTO {held(definition)} BY NAME SELECT line AS source_line, {columns} FROM typed WHERE ok")
    if not con.execute("SELECT EXISTS (SELECT 1 FROM typed WHERE reason IS NOT NULL)").fetchall()[0][0]:
        return  # none refused (the usual batch): no join with the batch's text
    misfit = f"NOT regexp_matches(raw, {quote(CSV_QUIRK)}) AND len(string_split(raw, ',')) <> {width}"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE held_refused AS SELECT typed.*, raw, {misfit} AS misfit
                    FROM typed JOIN {source} USING (line) WHERE reason IS NOT NULL""")
    con.execute(f"INSERT INTO {held(definition)} BY NAME SELECT line AS source_line, {columns}, reason, raw "
                "FROM held_refused WHERE NOT misfit")
    con.execute("INSERT INTO rejects (path, line, reason, raw) SELECT $path, line, reason, left(raw, 500) "
                "FROM held_refused WHERE misfit", {"path": path})
    con.execute("DROP TABLE held_refused")


def held_row(definition: Definition, record: dict, line: int, ctx: ParseContext, reason: str, raw: str) -> dict:
    """A record the reader refuses, for the held table: each Field read on its own (a value that
    cannot be read is NULL), so the row still counts in the file's order."""
    row = {"source_line": line, "reason": reason, "raw": raw}
    for f in definition.fields:
        try:
            row[f.column] = read_value(f, record, used_name(record, f), ctx)
        except BadValue:
            row[f.column] = None
    return row


def finish(definition: Definition, con, src: staging.Source, header: list[str]) -> tuple[int, list[str]]:
    """Give every held row its value (IndexByOrder), load the rows without a reason into the
    definition's table and stage the others as rejects; returns the rows loaded and the warnings."""
    rule, table = definition.identity, held(definition)
    named = {f.column for f in definition.fields if set(f.spellings) & set(header)}
    group_reason = "NULL"
    if rule.column in named:
        index_sql, source = rule.column, table
    elif rule.first_seen in named:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE held_order AS
                        SELECT {rule.first_seen}, row_number() OVER (ORDER BY min(source_line)) - 1 AS found
                        FROM {table} WHERE {rule.first_seen} IS NOT NULL GROUP BY ALL""")
        index_sql, source = "o.found", f"{table} r LEFT JOIN held_order o USING ({rule.first_seen})"
    else:
        count = _group_rows(con, table, rule)
        index_sql = f"CASE WHEN d.grp IS NULL THEN g.pos % {count} WHEN d.start_at IS NOT NULL THEN d.start_at + g.pos END"
        short = quote(rule.short.replace("{count}", str(count)).replace("{rows}", "\x00")).replace("\x00", "' || d.pending || '")
        group_reason = f"CASE WHEN d.pending IS NOT NULL THEN {short} END"
        source = f"{table} r LEFT JOIN held_groups g USING (source_line) LEFT JOIN held_decided d USING (grp)"
    others = ", ".join(f.column for f in definition.fields if f.column != rule.column)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE held_final AS
        SELECT *, coalesce(reason, group_reason, CASE WHEN {rule.column} IS NULL THEN {quote(rule.missing)} END) AS why
        FROM (SELECT source_line, {others}, reason, raw, CAST({index_sql} AS BIGINT) AS {rule.column},
                     {group_reason} AS group_reason FROM {source})""")
    warnings = _one_row_per_id(con, rule, named)
    kept = {name for name, *_ in con.execute(f"DESCRIBE {definition.table}").fetchall()}
    stored = ", ".join(f.column for f in definition.fields if f.column in kept)  # the others were read for the step
    loaded = con.execute(f"""INSERT INTO {definition.table} BY NAME
        SELECT {stored}, '{definition.kind}' AS source_kind, source_line FROM held_final WHERE why IS NULL""").fetchall()[0][0]
    con.execute("INSERT INTO rejects (path, line, reason, raw) SELECT ?, source_line, why, left(raw, 500) "
                "FROM held_final WHERE why IS NOT NULL AND raw IS NOT NULL", [src.name])
    # a row SQL loaded but refused only now (its sample group is short): its text is read again
    line_sql.add_rejects_reading_raw(con, src, "SELECT source_line, why FROM held_final WHERE why IS NOT NULL AND raw IS NULL")
    con.execute(f"DROP TABLE held_final; DROP TABLE {table}; DROP TABLE IF EXISTS held_order; "
                "DROP TABLE IF EXISTS held_groups; DROP TABLE IF EXISTS held_sizes; DROP TABLE IF EXISTS held_decided")
    return loaded, warnings


def _one_row_per_id(con, rule, named: set[str]) -> list[str]:
    """Rows of one `within` and time that share their value: from the first alternate that tells
    them apart, else refused (IndexByOrder)."""
    keys = f"{rule.within}, {rule.time}"
    clash = f"SELECT {keys} FROM held_final WHERE why IS NULL GROUP BY {keys}, {{id}} HAVING count(*) > 1"
    if not con.execute(f"SELECT EXISTS ({clash.format(id=rule.column)})").fetchall()[0][0]:
        return []
    for column, label in rule.alternates:
        if column not in named:
            continue
        usable = con.execute(f"""SELECT count({column}) = count(*) AND NOT EXISTS ({clash.format(id=column)})
                                 FROM held_final WHERE why IS NULL""").fetchall()[0][0]
        if not usable:
            continue
        numbered = con.execute(f"SELECT bool_and(regexp_full_match({column}, '\\d{{1,5}}')) FROM held_final "
                               "WHERE why IS NULL").fetchall()[0][0]
        if numbered:
            con.execute(f"UPDATE held_final SET {rule.column} = CAST({column} AS BIGINT) WHERE why IS NULL")
        else:
            con.execute(f"""UPDATE held_final SET {rule.column} = o.found FROM (
                                SELECT {column} AS id, row_number() OVER (ORDER BY min(source_line)) - 1 AS found
                                FROM held_final WHERE why IS NULL GROUP BY {column}) o
                            WHERE held_final.{column} = o.id AND why IS NULL""")
        how = "its number" if numbered else "its order of first appearance"
        return [rule.told.format(label=label, how=how)]
    reason = quote(rule.clash.replace("{rows}", "\x00").replace("{index}", "\x01")) \
        .replace("\x00", "' || c.rows || '").replace("\x01", f"' || held_final.{rule.column} || '")
    con.execute(f"""UPDATE held_final SET why = {reason}
                    FROM (SELECT {keys}, {rule.column}, count(*) AS rows FROM held_final WHERE why IS NULL
                          GROUP BY ALL HAVING count(*) > 1) c
                    WHERE held_final.{rule.within} = c.{rule.within} AND held_final.{rule.time} = c.{rule.time}
                      AND held_final.{rule.column} = c.{rule.column} AND held_final.why IS NULL""")
    return []


def _group_rows(con, table: str, rule) -> int:
    """Sample groups of the timed rows (held_groups: source_line, grp, pos) and how the short ones
    are settled (held_decided: grp, start_at or pending); returns the count (the commonest size)."""
    # One ordering for every window: a row's group is the count of group starts so far, its place
    # the rows since the last start (running sums, no sort per group).
    con.execute(f"""CREATE OR REPLACE TEMP TABLE held_groups AS
        WITH timed AS (
            SELECT source_line, row_number() OVER by_line AS n,
                   coalesce(epoch_us({rule.time}) - lag(epoch_us({rule.time})) OVER by_line
                            NOT BETWEEN 0 AND {rule.gap_s * 1e6}, true) AS starts
            FROM {table} WHERE {rule.time} IS NOT NULL
            WINDOW by_line AS (ORDER BY source_line)
        )
        SELECT source_line, sum(starts::INTEGER) OVER running AS grp,
               n - max(CASE WHEN starts THEN n END) OVER running AS pos
        FROM timed WINDOW running AS (ORDER BY source_line ROWS UNBOUNDED PRECEDING)""")
    con.execute("CREATE OR REPLACE TEMP TABLE held_sizes AS SELECT grp, count(*) AS size FROM held_groups GROUP BY grp")
    con.execute("CREATE OR REPLACE TEMP TABLE held_decided (grp BIGINT, start_at BIGINT, pending BIGINT)")
    found = con.execute("SELECT size FROM held_sizes GROUP BY size ORDER BY count(*) DESC, size DESC LIMIT 1").fetchall()
    if not found:
        return 1
    count = found[0][0]
    short = con.execute("SELECT grp, size FROM held_sizes WHERE size % ? <> 0 ORDER BY grp", [count]).fetchall()
    decided: list[tuple[int, int | None, int | None]] = []
    pending: list[tuple[int, int]] = []

    def incomplete() -> None:
        total = sum(size for _, size in pending)
        decided.extend((grp, None, total) for grp, _ in pending)
        pending.clear()

    for grp, size in short:  # a whole group between two short ones ends what is pending
        if pending and (grp != pending[-1][0] + 1 or sum(s for _, s in pending) + size > count):
            incomplete()
        pending.append((grp, size))
        if sum(s for _, s in pending) == count:  # a loop stamped far apart: one each, in order
            start = 0
            for member, member_size in pending:
                decided.append((member, start, None))
                start += member_size
            pending.clear()
    incomplete()
    if decided:
        con.from_arrow(pa.table({"grp": pa.array([d[0] for d in decided], pa.int64()),
                                 "start_at": pa.array([d[1] for d in decided], pa.int64()),
                                 "pending": pa.array([d[2] for d in decided], pa.int64())})).insert_into("held_decided")
    return count
