"""The tables pages read many times and loads change: per-run GPU time and energy, bill lines'
runs, the allocation of the bill per day.

SQL only, run inside a transaction of a connection ingest/engine/warehouse.py hands in, with the
warehouse as its current database (this module never opens the warehouse).

Two ways to store them, with the same result:
- refresh_*: everything again (ingest/derived/run_minutes.py's steps over every run, the live
  view billing_run_lines_live in ingest/schema.sql): a warehouse from before they were stored,
  `mlcost rollup`, a load whose GPU settings changed.
- update_*(): only what a load or an unload changed, from temp tables the caller fills:
  changed_runs(run_id) - runs added, replaced or removed; changed_lines(line_key) - bill lines
  added, replaced or removed; and for GPU samples, touched_gpus(host, gpu_index, since) (their
  per-minute rollups from `since` on were rewritten, ingest/derived/gpu_rollups.py) with the traced
  GPUs noted by note_traced() before the rewrite.

What a changed input reaches:
- run_gpu_time (every minute a run held each traced GPU) depends on the run's own row and on
  which GPUs are traced at all (run_gpus): it is redone for the changed runs and for the runs
  that hold a GPU (host, index, uuid) which appeared in or vanished from gpu_minutes.
- gpu_minutes_allocated (seconds held per GPU and minute, over all runs) is redone for every
  (GPU, minute) those runs held before or hold now.
- run_gpu_days (per run, GPU and UTC day: utilization while held) is redone for the runs whose
  run_gpu_time was redone and, on a touched GPU, for every run's days from the day of `since` on.
- gpu_days (per GPU and UTC day: idle, allocated, busy, energy) is redone for the days of those
  (GPU, minute)s and of a touched GPU's minutes from the day of `since` on.
- run_gpu_energy (per run) is redone for those runs, for every run sharing one of those
  (GPU, minute)s with them (their share of its energy moved), and for every run that held a
  touched GPU in a minute that was rewritten (its energy figures may have moved).
- billing_line_runs (each usage line's run) is redone for the changed lines, the lines stored
  as a changed run's, and the lines that name a changed run in their run tag or carry its
  resource id (the only lines a run can take: billing_run_lines_live).
- bill_allocation_days (the allocation of each calendar month, per UTC day and line group) is
  redone a month at a time (a month is allocated on its own, so it is the unit): the months of
  added or removed bill lines; the months where a changed run had or has pieces or matched lines;
  in months with lines naming a traced host (the node rule, the only one that reads GPU minutes
  and runs' GPU time), those a changed run, a run whose GPU time was redone or the rewritten GPU
  minutes reach (every such month when a traced GPU appeared or
  vanished); in months with service-tagged lines, those a changed serving window reaches.
  note_allocation_inputs() records the spans of the rows a load or unload is about to replace
  or remove, before they go.
"""
from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Iterable

import duckdb

from ingest.derived import run_minutes, run_trace_costs

# Tables whose rows decide the stored per-run energy (run_gpu_time, gpu_minutes_allocated,
# run_gpu_energy): a load that writes one of them updates it.
RUN_ENERGY_SOURCES = frozenset({"runs", "gpu_samples"})
# Tables whose rows decide which run each bill line belongs to (billing_line_runs).
BILLING_RUNS_SOURCES = frozenset({"runs", "billing_lines"})

# The traced GPUs (host, gpu_index, gpu_uuid) of the touched GPUs' stored minutes, flagged by
# whether the minute lies in the part a load rewrites (`since` on) or before it.
_TRACED = """
CREATE OR REPLACE TEMP TABLE traced_before AS
SELECT DISTINCT m.host, m.gpu_index, m.gpu_uuid, m.minute >= t.since AS rewritten
FROM {db}.gpu_minutes m JOIN touched_gpus t USING (host, gpu_index)
"""


def refresh_run_energy(con: duckdb.DuckDBPyConnection, tables: Iterable[str] | None = None) -> None:
    """Store every run's run_gpu_time, gpu_minutes_allocated, run_gpu_days and run_gpu_energy
    (run_minutes.store_all) and gpu_days again, inside the caller's transaction; with `tables`
    (those a load wrote), only when one of them is in RUN_ENERGY_SOURCES."""
    if tables is not None and not RUN_ENERGY_SOURCES.intersection(tables):
        return
    for table in ("run_gpu_time", "gpu_minutes_allocated", "run_gpu_energy", "run_gpu_days", "gpu_days"):
        con.execute(f"DELETE FROM {table}")
    # the run-minutes worked out and joined to gpu_minutes once, over numbered GPUs and runs
    # (fleet at scale 1, 8.5M run-minutes: ~5 CPU s with gpu_days)
    run_minutes.store_all(con)
    con.execute("INSERT INTO gpu_days SELECT * FROM gpu_days_of('gpu_minutes')")
    run_trace_costs.refresh(con)  # imported runs without a cost: priced from their traced GPU-hours


def refresh_billing_runs(con: duckdb.DuckDBPyConnection, tables: Iterable[str] | None = None) -> None:
    """Store billing_run_lines_live for the [reconciliation] settings in billing_line_runs (and
    the settings in billing_match_settings), inside the caller's transaction; with `tables`, only
    when one of them is in BILLING_RUNS_SOURCES. Settings that cannot be read store nothing."""
    if tables is not None and not BILLING_RUNS_SOURCES.intersection(tables):
        return
    con.execute("DELETE FROM billing_line_runs")
    con.execute("DELETE FROM billing_match_settings")
    rule = _match_rule()
    if rule is None:  # nothing stored: pages compute the matches with the settings they read
        return
    con.execute("INSERT INTO billing_line_runs SELECT * FROM billing_run_lines_live(?, ?)", list(rule))
    con.execute("INSERT INTO billing_match_settings VALUES (?, ?, ?)", [*rule, datetime.now(timezone.utc)])


def note_traced(con: duckdb.DuckDBPyConnection, db: str) -> None:
    """Temp table traced_before: the touched GPUs' traced (host, gpu_index, gpu_uuid) in database
    `db` as they are before a load rewrites their minutes from `since` on (update() compares)."""
    con.execute(_TRACED.format(db=db))


def update_run_energy(con: duckdb.DuckDBPyConnection, runs: bool, gpus: bool) -> None:
    """Store per-run GPU time and energy again where they changed, inside the caller's
    transaction: with `runs`, the runs in temp table changed_runs changed; with `gpus`, the
    minutes of touched_gpus from `since` on were rewritten (traced_before noted before). The
    same rows as refresh_run_energy(), in less time."""
    sources = []
    if runs:
        sources.append("SELECT run_id FROM changed_runs")
    if gpus:
        # traced GPUs that appeared or vanished: rewritten minutes now vs before, less those
        # the minutes before `since` still show
        con.execute("""
            CREATE OR REPLACE TEMP TABLE traced_changed AS
            WITH now AS (
                SELECT DISTINCT m.host, m.gpu_index, m.gpu_uuid FROM gpu_minutes m
                JOIN touched_gpus t USING (host, gpu_index) WHERE m.minute >= t.since
            ), before AS (
                SELECT host, gpu_index, gpu_uuid FROM traced_before WHERE rewritten
            ), kept AS (
                SELECT host, gpu_index, gpu_uuid FROM traced_before WHERE NOT rewritten
            )
            ((SELECT * FROM now EXCEPT SELECT * FROM before) UNION (SELECT * FROM before EXCEPT SELECT * FROM now))
            EXCEPT SELECT * FROM kept""")
        sources.append("SELECT r.run_id FROM runs r JOIN traced_changed g "
                       "ON run_holds_gpu(r.host, r.gpu_indices, r.gpu_uuids, g.host, g.gpu_index, g.gpu_uuid)")
        # a run with hosts only takes a share of every GPU its hosts show: any change there concerns it
        sources.append("SELECT run_id FROM runs WHERE len(list_intersect(run_hosts_only(source_kind, host, tags, "
                       "gpu_uuids, gpu_indices, gpu_count), (SELECT list(DISTINCT host) FROM touched_gpus))) > 0")
    con.execute("CREATE OR REPLACE TEMP TABLE time_runs AS " + " UNION ".join(sources))
    # everything again is faster than picking most of it (most runs, or most GPU minutes rewritten:
    # a load of many trace files, ingest/derived/pending.py)
    if _most_of(con, "time_runs", "runs") or (gpus and _most_minutes_rewritten(con)):
        refresh_run_energy(con)
        return
    # the (GPU, minute)s those runs held before and hold now: their held seconds change
    con.execute("CREATE OR REPLACE TEMP TABLE held_minutes AS SELECT DISTINCT host, gpu_index, minute "
                "FROM run_gpu_time WHERE run_id IN (SELECT run_id FROM time_runs)")
    con.execute("DELETE FROM run_gpu_time WHERE run_id IN (SELECT run_id FROM time_runs)")
    con.execute("CREATE OR REPLACE TEMP TABLE time_runs_rows AS "
                "SELECT * FROM runs WHERE run_id IN (SELECT run_id FROM time_runs)")
    run_minutes.number(con)
    run_minutes.store_minutes(con, "run_gpus_of('time_runs_rows')")
    con.execute("INSERT INTO held_minutes SELECT DISTINCT host, gpu_index, minute FROM run_gpu_time "
                "WHERE run_id IN (SELECT run_id FROM time_runs) "
                "EXCEPT SELECT host, gpu_index, minute FROM held_minutes")
    con.execute("DELETE FROM gpu_minutes_allocated a USING held_minutes h "
                "WHERE a.host = h.host AND a.gpu_index = h.gpu_index AND a.minute = h.minute")
    run_minutes.store_held(con, "SEMI JOIN held_minutes h "
                                "ON h.host = t.host AND h.gpu_index = t.gpu_index AND h.minute = t.minute")
    _update_gpu_days(con, gpus)
    _update_run_days_and_energy(con, gpus)
    run_trace_costs.refresh(con)


def _update_run_days_and_energy(con: duckdb.DuckDBPyConnection, gpus: bool) -> None:
    """run_gpu_days and run_gpu_energy again, after run_gpu_time and gpu_minutes_allocated:
    run_gpu_days for the runs of time_runs (their run_gpu_time was redone) and, with `gpus`, for
    every run's days on a touched GPU from the UTC day of its `since` on (the minutes there were
    rewritten; a day is redone whole, its earlier minutes read as they are stored); run_gpu_energy
    for those runs, every run sharing a (GPU, minute) of held_minutes with them (their share of
    its energy moved) and, with `gpus`, every run that held a touched GPU in a minute that was
    rewritten (its energy figures may have moved)."""
    energy = ["SELECT run_id FROM time_runs",
              "SELECT t.run_id FROM run_gpu_time t SEMI JOIN held_minutes h USING (host, gpu_index, minute)"]
    if gpus:
        energy.append("SELECT t.run_id FROM run_gpu_time t JOIN touched_gpus g USING (host, gpu_index) "
                      "WHERE t.minute >= g.since")
    con.execute("CREATE OR REPLACE TEMP TABLE energy_runs AS " + " UNION ".join(energy))
    con.execute("DELETE FROM run_gpu_energy WHERE run_id IN (SELECT run_id FROM energy_runs)")
    con.execute("DELETE FROM run_gpu_days WHERE run_id IN (SELECT run_id FROM time_runs)")
    minutes, days = "WHERE t.run_id IN (SELECT run_id FROM energy_runs)", "WHERE t.run_id IN (SELECT run_id FROM time_runs)"
    if gpus:
        con.execute("DELETE FROM run_gpu_days d USING touched_gpus g "
                    "WHERE d.host = g.host AND d.gpu_index = g.gpu_index AND d.day >= utc_day(g.since)")
        touched = (" OR EXISTS (SELECT 1 FROM touched_gpus g WHERE g.host = t.host AND g.gpu_index = t.gpu_index "
                   "AND {day} >= utc_day(g.since))")
        minutes += touched.format(day="utc_day(t.minute)")
        days += touched.format(day="t.day")
    run_minutes.store_days(con, minutes, days, "WHERE k.run_id IN (SELECT run_id FROM energy_runs)")


def _update_gpu_days(con: duckdb.DuckDBPyConnection, gpus: bool) -> None:
    """gpu_days again for the (GPU, UTC day)s whose minutes' allocation changed (held_minutes)
    and, with `gpus`, for a touched GPU's days from the day of its `since` on (its minutes there
    were rewritten; a day is redone whole)."""
    con.execute("CREATE OR REPLACE TEMP TABLE days_redo AS "
                "SELECT DISTINCT host, gpu_index, utc_day(minute) AS day FROM held_minutes")
    if gpus:
        con.execute("INSERT INTO days_redo "
                    "SELECT d.host, d.gpu_index, d.day FROM gpu_days d JOIN touched_gpus g USING (host, gpu_index) "
                    "WHERE d.day >= utc_day(g.since) "
                    "UNION SELECT DISTINCT m.host, m.gpu_index, utc_day(m.minute) FROM gpu_minutes m "
                    "JOIN touched_gpus g USING (host, gpu_index) WHERE m.minute >= g.since "
                    "EXCEPT SELECT host, gpu_index, day FROM days_redo")
    con.execute("DELETE FROM gpu_days d USING days_redo r "
                "WHERE d.host = r.host AND d.gpu_index = r.gpu_index AND d.day = r.day")
    con.execute("CREATE OR REPLACE TEMP TABLE days_minutes AS SELECT m.* FROM gpu_minutes m "
                "SEMI JOIN days_redo r ON m.host = r.host AND m.gpu_index = r.gpu_index AND utc_day(m.minute) = r.day")
    con.execute("INSERT INTO gpu_days SELECT * FROM gpu_days_of('days_minutes')")


def update_billing_runs(con: duckdb.DuckDBPyConnection, runs: bool, lines: bool) -> None:
    """Store the bill lines' runs again where they changed, inside the caller's transaction: with
    `runs`, the runs in temp table changed_runs changed; with `lines`, the lines in changed_lines.
    The same rows as refresh_billing_runs() (all of them again when the [reconciliation]
    settings differ from those stored)."""
    rule = _match_rule()
    stored = con.execute("SELECT run_id_tag, match_slack_s FROM billing_match_settings").fetchall()
    if rule is None or stored != [rule]:  # stored for other settings (or none): all again
        refresh_billing_runs(con)
        return
    sources = ["SELECT line_key FROM changed_lines"] if lines else []
    if runs:
        sources += [
            "SELECT line_key FROM billing_line_runs WHERE run_id IN (SELECT run_id FROM changed_runs)",
            "SELECT b.line_key FROM billing_lines b JOIN changed_runs c ON b.tags[$run_tag] = c.run_id",
            "SELECT b.line_key FROM billing_lines b JOIN runs r ON b.resource_id = r.tags['resource_id'] "
            "WHERE r.run_id IN (SELECT run_id FROM changed_runs)",
        ]
    con.execute("CREATE OR REPLACE TEMP TABLE lines_to_match AS " + " UNION ".join(sources),
                {"run_tag": rule[0]} if runs else {})
    if _most_of(con, "lines_to_match", "billing_lines"):
        refresh_billing_runs(con)
        return
    con.execute("DELETE FROM billing_line_runs WHERE line_key IN (SELECT line_key FROM lines_to_match)")
    con.execute("CREATE OR REPLACE TEMP TABLE lines_to_match_rows AS "
                "SELECT * FROM billing_lines WHERE line_key IN (SELECT line_key FROM lines_to_match)")
    con.execute("INSERT INTO billing_line_runs SELECT * FROM billing_run_lines_of('lines_to_match_rows', ?, ?)",
                list(rule))


# Tables whose rows decide the allocation of the bill (bill_allocation_days).
ALLOCATION_SOURCES = frozenset({"runs", "billing_lines", "serving_windows", "gpu_samples"})

# The allocation's settings as bill_allocation_settings holds them, for one row's comparison.
_ALLOCATION_SETTINGS = ("SELECT run_id_tag, match_slack_s, service_tag, gpu_families, gpu_words "
                        "FROM bill_allocation_settings")


def refresh_allocation(con: duckdb.DuckDBPyConnection, tables: Iterable[str] | None = None) -> None:
    """Store bill_allocation_days_of every calendar month with bill lines in bill_allocation_days
    (and the settings in bill_allocation_settings), inside the caller's transaction, after
    billing_line_runs is current; with `tables`, only when one is in ALLOCATION_SOURCES. Settings
    that cannot be read store nothing (pages then compute the allocation)."""
    if tables is not None and not ALLOCATION_SOURCES.intersection(tables):
        return
    con.execute("DELETE FROM bill_allocation_days")
    con.execute("DELETE FROM bill_allocation_settings")
    rule = _allocation_rule()
    if rule is None:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE allocation_redo AS SELECT DISTINCT month FROM billing_costs "
                "WHERE effective_cost IS NOT NULL")
    _store_months(con, rule)
    con.execute("INSERT INTO bill_allocation_settings VALUES (?, ?, ?, ?, ?, ?)",
                [*rule, datetime.now(timezone.utc)])


_TOUCHED = ("CREATE TEMP TABLE IF NOT EXISTS allocation_touched "
            "(start_at TIMESTAMPTZ, end_at TIMESTAMPTZ, kind VARCHAR)")


def note_allocation_inputs(con: duckdb.DuckDBPyConnection, parts: list[str]) -> None:
    """Add to temp table allocation_touched (start_at, end_at, kind) what a load or an unload is
    about to change, before it changes it: each of `parts` (touched_rows()) is a SELECT of those
    columns over the rows that go or come. GPU samples are read from touched_gpus by
    update_allocation()."""
    con.execute(_TOUCHED)
    for part in parts:
        con.execute("INSERT INTO allocation_touched " + part)


def touched_rows(table: str, where: str) -> str | None:
    """The SELECT for note_allocation_inputs() of the rows of `table` (a table name, with its
    database if need be) WHERE `where`: per UTC day they start in, the span of the bill lines
    (kind 'line'), runs ('run') or serving windows ('window'); None for another table."""
    name = table.rsplit(".", 1)[-1]
    spans = {"billing_lines": ("charge_period_start", "coalesce(charge_period_end, charge_period_start)", "line"),
             "runs": ("started_at", "coalesce(ended_at, started_at)", "run"),
             "serving_windows": ("window_start", "window_end", "window")}.get(name)
    if spans is None:
        return None
    start, end, kind = spans  # a few rows, whatever was loaded
    return (f"SELECT min({start}), max({end}), '{kind}' FROM {table} WHERE {where} "
            f"GROUP BY floor(epoch({start}) / 86400)")


# Per month with bill lines: the span its allocation reads (the month and its lines' charge
# periods), whether a usage line names a traced host (`nodes`: the node rule reads GPU minutes
# and runs' GPU time) and whether one carries the service tag (`serving`: serving windows).
_MONTHS = """
CREATE OR REPLACE TEMP TABLE allocation_months AS
WITH hosts AS (SELECT DISTINCT host FROM gpu_days {touched})
SELECT month, min(month)::TIMESTAMP AT TIME ZONE 'UTC' AS span_start,
       greatest(max(month + INTERVAL 1 MONTH)::TIMESTAMP AT TIME ZONE 'UTC',
                max(coalesce(charge_period_end, charge_period_start))) AS span_end,
       bool_or(charge_category = 'usage' AND (resource_name IN (SELECT host FROM hosts)
                                              OR resource_id IN (SELECT host FROM hosts))) AS nodes,
       bool_or(charge_category = 'usage' AND tags[$service_tag] IS NOT NULL) AS serving
FROM billing_costs WHERE effective_cost IS NOT NULL GROUP BY month
"""


def update_allocation(con: duckdb.DuckDBPyConnection, runs: bool, gpus: bool) -> None:
    """Store the allocation again for the months a load or an unload changed, inside the caller's
    transaction, after billing_line_runs and the per-run GPU time are current. The months of the
    bill lines in allocation_touched; with `runs`, the months where a run of changed_runs had or
    has pieces or matched lines; and the months whose span meets what changed there: with node
    lines (the only lines whose allocation reads GPU data), the span of a run of changed_runs or
    time_runs (its GPU time was redone), the GPU minutes from
    touched_gpus' first `since` on (all of them when a traced GPU appeared or vanished: a run's
    share of its host counts its GPUs); with serving lines, a touched window's span. The same rows
    as refresh_allocation() (all again when the settings differ from those stored)."""
    rule = _allocation_rule()
    stored = con.execute(_ALLOCATION_SETTINGS).fetchall()
    if rule is None or [tuple(row) for row in stored] != [rule]:
        refresh_allocation(con)
        return
    con.execute(_TOUCHED)
    if gpus:
        con.execute("INSERT INTO allocation_touched SELECT min(since), TIMESTAMPTZ 'infinity', 'gpu' "
                    "FROM touched_gpus")
        if (not has_temp(con, "traced_changed")
                or con.execute("SELECT count(*) FROM traced_changed").fetchone()[0]):
            con.execute("INSERT INTO allocation_touched VALUES ('-infinity', 'infinity', 'gpu')")
    con.execute(_MONTHS.format(touched="UNION SELECT host FROM touched_gpus" if gpus else ""),
                {"service_tag": rule[2]})
    months = ["SELECT date_trunc('month', utc_day(start_at))::DATE FROM allocation_touched WHERE kind = 'line'",
              "SELECT s.month FROM allocation_months s JOIN allocation_touched t "
              "ON t.start_at <= s.span_end AND t.end_at >= s.span_start "
              "WHERE (t.kind IN ('run', 'gpu') AND s.nodes) OR (t.kind = 'window' AND s.serving)"]
    own = ["SELECT run_id FROM changed_runs"] if runs else []
    timed = ["SELECT run_id FROM time_runs"] if (runs or gpus) and has_temp(con, "time_runs") else []
    if own:  # a run's own row decides its matched lines and pieces anywhere
        months += ["SELECT DISTINCT month FROM bill_allocation_days "
                   "WHERE run_id IN (SELECT run_id FROM changed_runs)",
                   "SELECT DISTINCT b.month FROM billing_line_runs m JOIN billing_costs b USING (line_key) "
                   "WHERE m.run_id IN (SELECT run_id FROM changed_runs)"]
    if own or timed:
        # its GPU time only the node rule reads: months with node lines that its span meets (a
        # fleet's trace files, with no bill line naming a traced host, redo no month)
        con.execute("CREATE OR REPLACE TEMP TABLE allocation_runs AS " + " UNION ".join(own + timed))
        months.append("SELECT s.month FROM allocation_months s JOIN runs r "
                      "ON r.started_at <= s.span_end AND coalesce(r.ended_at, r.started_at) >= s.span_start "
                      "WHERE s.nodes AND r.run_id IN (SELECT run_id FROM allocation_runs)")
    con.execute("CREATE OR REPLACE TEMP TABLE allocation_redo AS SELECT DISTINCT * FROM ("
                + " UNION ALL ".join(months) + ") t(month) WHERE month IS NOT NULL")
    con.execute("DELETE FROM bill_allocation_days WHERE month IN (SELECT month FROM allocation_redo)")
    # only the months that still have lines are allocated again (the others have gone)
    con.execute("DELETE FROM allocation_redo WHERE month NOT IN (SELECT month FROM allocation_months)")
    _store_months(con, rule)
    con.execute("DELETE FROM allocation_touched")


def _store_months(con: duckdb.DuckDBPyConnection, rule: tuple) -> None:
    """Insert bill_allocation_days_of each month of temp table allocation_redo (the run matches
    from billing_line_runs when it holds these settings' matches)."""
    matches = con.execute("SELECT count(*) FROM billing_match_settings WHERE run_id_tag = ? AND match_slack_s = ?",
                          list(rule[:2])).fetchone()[0] > 0
    for (month,) in con.execute("SELECT month FROM allocation_redo ORDER BY month").fetchall():
        end = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
        con.execute("INSERT INTO bill_allocation_days SELECT ?::DATE, * FROM bill_allocation_days_of("
                    "?, ?, ?, ?, ?, ?::VARCHAR[], ?::VARCHAR[], stored := ?)",
                    [month, _utc(month), _utc(end), *rule, matches])


def _utc(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc)


def has_temp(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether temp table `name` is there (on a staging or warehouse connection)."""
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?",
                            [name]).fetchone()[0])


def _allocation_rule() -> tuple | None:
    """(run tag, slack s, service tag, GPU instance families, GPU words) of the settings, or None
    when they cannot be read."""
    from ingest.settings import config

    try:
        settings = config.load()
    except config.ConfigError:
        return None
    rec, bill = settings.reconciliation, settings.billing
    return (rec.run_id_tag, float(rec.match_slack_minutes * 60), rec.service_tag,
            list(bill.gpu_instance_families), list(bill.gpu_sku_words))


# Past this share of a table's rows changed, a full refresh is the faster way to the same rows.
FULL_REFRESH_SHARE = 0.25


def _most_of(con: duckdb.DuckDBPyConnection, changed: str, table: str) -> bool:
    """Whether temp table `changed` names at least FULL_REFRESH_SHARE of `table`'s rows."""
    changed_rows, rows = con.execute(f"SELECT (SELECT count(*) FROM {changed}), (SELECT count(*) FROM {table})"
                                     ).fetchall()[0]
    return changed_rows > 0 and changed_rows >= FULL_REFRESH_SHARE * rows


def _most_minutes_rewritten(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the minutes of touched_gpus from their `since` on are at least FULL_REFRESH_SHARE
    of all stored GPU minutes."""
    rewritten, minutes = con.execute("SELECT count(*) FILTER (WHERE m.minute >= t.since), count(*) "
                                     "FROM gpu_minutes m LEFT JOIN touched_gpus t USING (host, gpu_index)"
                                     ).fetchall()[0]
    return rewritten > 0 and rewritten >= FULL_REFRESH_SHARE * minutes


def _match_rule() -> tuple[str, float] | None:
    """The [reconciliation] run tag and slack (seconds), or None when the settings cannot be read."""
    from ingest.settings import config

    try:
        rule = config.load().reconciliation
    except config.ConfigError:
        return None
    return rule.run_id_tag, float(rule.match_slack_minutes * 60)
