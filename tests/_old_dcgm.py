"""GPU traces from NVIDIA's dcgm-exporter: Prometheus text, one scrape or many.

Read: DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since boot; it
restarts at a reboot), DCGM_FI_DEV_GPU_UTIL (%) and DCGM_FI_DEV_FB_USED (MiB), with the labels
`gpu` (the index), `UUID`, `modelName`, `Hostname`, and `pod`/`namespace` when present; other
metrics are ignored. Each line is parsed with prometheus_client's parser (so a line it cannot
read is rejected with its number). A sample's time is its own timestamp (many scrapes in one
file need them), else --at for a file that is one scrape without timestamps. The host is
--host, else the `Hostname` label, else the file name up to its first `_`.
"""
from __future__ import annotations

from datetime import timezone

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from ingest.engine import line_sql, staging, values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.formats.gpu import traces
from ingest.settings import limits

KIND = "dcgm"
TABLES = (traces.TABLE,)
METRICS = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct",
    "DCGM_FI_DEV_FB_USED": "mem_used_mib",
}
LABELS = {"UUID": "gpu_uuid", "modelName": "gpu_name", "pod": "pod", "namespace": "namespace"}


class NoTime(BadValue):
    """A sample without a timestamp in a file loaded without --at: the whole file cannot be placed in time."""


def sniff(name: str, head: str) -> bool:
    """Prometheus text with DCGM_FI_ metrics."""
    return "DCGM_FI_" in head and any(metric in head for metric in METRICS)


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    samples: dict[tuple, dict] = {}
    rejects: list[Reject] = []
    for number, line in lines:
        text = line.strip()
        if not text or text.startswith("#") or text.split("{", 1)[0].split(" ", 1)[0] not in METRICS:
            continue
        try:
            key, column, value, labels = _sample(text, ctx)
        except NoTime:
            raise
        except BadValue as error:
            rejects.append(Reject(number, str(error), line))
            continue
        record = samples.setdefault(key, {"source_line": number, "raw": line})
        if column in record:
            rejects.append(Reject(number, f"a second {text.split('{', 1)[0]} for GPU {key[1]} at "
                                          f"{key[2].isoformat()}: many scrapes in one file need sample "
                                          "timestamps", line))
            continue
        record[column] = value
        for label, target in LABELS.items():
            if labels.get(label):
                record.setdefault(target, labels[label])
    records = list(samples.items())
    rows = traces.Rows([record["source_line"] for _, record in records], [record["raw"] for _, record in records])
    rows.rejects = rejects

    def column(name: str, kind: pa.DataType) -> pa.Array:
        return pa.array([record.get(name) for _, record in records], kind)

    found = {
        "host": pa.array([host for (host, _, _), _ in records], pa.string()),
        "gpu_index": traces.check_range(rows, pa.array([gpu for (_, gpu, _), _ in records], pa.int64()), "gpu_index"),
        "sampled_at": pa.array([at for (_, _, at), _ in records], traces.TIME),
        **{name: column(name, pa.string()) for name in LABELS.values()},
    }
    for name in METRICS.values():
        found[name] = traces.check_range(rows, column(name, traces.COLUMNS[name]), name)
    return traces.build(rows, found, KIND)


totals = traces.totals


def _sample(text: str, ctx: ParseContext) -> tuple[tuple, str, float | int, dict]:
    """(host, gpu, time), the column, the value and the labels of one sample line."""
    try:
        (family,) = list(text_string_to_metric_families(text))
        (sample,) = family.samples
    except ValueError as error:
        raise BadValue(f"not Prometheus text ({error})") from None
    labels = sample.labels
    column = METRICS[sample.name]
    gpu = values.integer(labels.get("gpu"), "the gpu label")
    if gpu is None:
        raise BadValue(f"{sample.name} has no gpu label")
    if sample.timestamp is not None:
        at = values.timestamp(float(sample.timestamp), "the sample timestamp", timezone.utc)
    elif ctx.at is not None:
        at = ctx.at.astimezone(timezone.utc)
    else:
        raise NoTime("its samples carry no timestamps: pass --at with the time of the scrape")
    value = values.number(sample.value, sample.name)
    if column == "energy_mj":
        value = values.integer(sample.value, sample.name)
    host = ctx.host or labels.get("Hostname") or traces.file_host(ctx.source)
    return (host, gpu, at), column, value, labels


# --- columnar path: each batch of lines typed and checked in SQL -----------------------------
# A plain sample line (`NAME{label="value",...} VALUE[ TIMESTAMP_MS]`, labels without escapes,
# nothing around it) is read in SQL; every other line naming one of METRICS is read by `_sample`
# above, which names the exact reason. Samples wait in `dcgm_lines` until the file is read, then
# become one row per (host, gpu, time) in SQL as `parse` builds them.
LINES_TABLE = "dcgm_lines"
_NAMES = "|".join(METRICS)
# A label of a plain line: no escapes, and no comma in its value, so that `,name="` only ever
# starts a label (each label is then found by its own pattern).
_BARE_LABEL = r'(?:[a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*="[^",\\\x00-\x1f]*"'
_LABEL_NAMES = r'(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="'
_VALUE = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?"
# Captures: the metric, the labels, the value, the timestamp (ms).
_PLAIN = f"^({_NAMES})\\{{((?:{_BARE_LABEL}(?:,{_BARE_LABEL})*)?)\\}} ({_VALUE})(?: ([0-9]{{1,15}}))?$"
# A line `parse` reads: after Python's strip(), a metric of ours before `{`, a space or the end.
_OURS = f"^[{line_sql.PY_SPACE}]*({_NAMES})([{{ ]|[{line_sql.PY_SPACE}]*$)"
_LABEL_COLUMNS = {"gpu": "gpu_t", "Hostname": "hostname", **LABELS}


def stage(src: staging.Source, con, ctx: ParseContext) -> staging.Staged:
    """Stage the file's samples and rejects in `con` (see the columnar path above)."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {LINES_TABLE} (
        line BIGINT, written VARCHAR, host VARCHAR, gpu BIGINT, sampled_at TIMESTAMPTZ, metric VARCHAR,
        reading DOUBLE, energy BIGINT, gpu_uuid VARCHAR, gpu_name VARCHAR, pod VARCHAR, namespace VARCHAR)""")
    for batch in staging.line_batches(src):
        con.register("batch", batch)
        try:
            _stage_batch(con, src, ctx)
        finally:
            con.unregister("batch")
    accepted = _records(con, src)
    con.execute(f"DROP TABLE {LINES_TABLE}")
    return traces.stage_totals(con, accepted)


def _stage_batch(con, src: staging.Source, ctx: ParseContext) -> None:
    """Read one batch: plain sample lines in SQL into dcgm_lines, over-long lines refused, other
    lines naming one of METRICS through `_sample`; raises NoTime as `parse` does."""
    labels = ", ".join(f"CASE WHEN plain THEN regexp_extract(p.labels, '(?:^|,){label}=\"([^\"]*)\"', 1) END AS {column}"
                       for label, column in _LABEL_COLUMNS.items())
    at = "epoch_ms(TRY_CAST(ts AS BIGINT))" if ctx.at is None else \
        "CASE WHEN ts IS NULL THEN $at ELSE epoch_ms(TRY_CAST(ts AS BIGINT)) END"
    params = {"ours": _OURS, "plain": _PLAIN, "names": _LABEL_NAMES, "marker": limits.too_long_marker(0)[:-1]}
    if ctx.at is not None:
        params["at"] = ctx.at
    if ctx.host:
        params["host"] = ctx.host
    else:
        params["file_host"] = traces.file_host(ctx.source)
    host = "$host" if ctx.host else "coalesce(nullif(hostname, ''), $file_host)"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE dcgm_batch AS
        WITH ours AS (
            SELECT line, raw, starts_with(raw, $marker) AS too_long
            FROM batch WHERE regexp_matches(raw, $ours) OR starts_with(raw, $marker)
        ), parts AS (  -- one anchored match gives every part (all empty when the line is not plain)
            SELECT *, p.name <> '' AS plain
            FROM (SELECT *, regexp_extract(raw, $plain, ['name', 'labels', 'value', 'ts']) AS p FROM ours)
        ), labelled AS (
            SELECT *, regexp_extract_all(p.labels, $names, 1) AS label_names, nullif(p.ts, '') AS ts
            FROM parts
        ), typed AS (
            SELECT line, plain, too_long, p.name AS metric_name, {labels},
                   len(label_names) = len(list_distinct(label_names)) AS distinct_labels,
                   p.value AS value_t, TRY_CAST(p.value AS DOUBLE) AS reading, ts, {at} AS sampled_at
            FROM labelled
        )
        SELECT *, TRY_CAST(gpu_t AS BIGINT) AS gpu, {host} AS host,
               coalesce(plain AND distinct_labels AND regexp_full_match(gpu_t, '[0-9]{{1,18}}')
                        AND abs(reading) <= {values.NUMBER_LIMIT} AND {line_sql.in_years('sampled_at')}
                        AND (metric_name <> 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION'
                             OR regexp_full_match(value_t, '[0-9]{{1,15}}')), false) AS ok
        FROM typed""", params)
    if ctx.at is None and con.execute("SELECT count(*) FROM dcgm_batch WHERE plain AND ts IS NULL AND "
                                      "regexp_full_match(gpu_t, '[0-9]{1,18}')").fetchall()[0][0]:
        raise NoTime("its samples carry no timestamps: pass --at with the time of the scrape")
    cases = " ".join(f"WHEN '{name}' THEN '{column}'" for name, column in METRICS.items())
    con.execute(f"""INSERT INTO {LINES_TABLE} SELECT line, metric_name, host, gpu, sampled_at,
                    CASE metric_name {cases} END, reading,
                    CASE WHEN metric_name = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' THEN CAST(reading AS BIGINT) END,
                    gpu_uuid, gpu_name, pod, namespace FROM dcgm_batch WHERE ok""")
    con.execute("INSERT INTO rejects SELECT NULL, ?, line, 'too long', raw FROM dcgm_batch JOIN batch USING (line) "
                "WHERE too_long", [src.name])
    suspects = con.execute("SELECT line, raw FROM dcgm_batch JOIN batch USING (line) WHERE NOT ok AND NOT too_long "
                           "ORDER BY line").fetchall()
    if suspects:
        _stage_suspects(con, src, ctx, suspects)


def _stage_suspects(con, src: staging.Source, ctx: ParseContext, lines: Lines) -> None:
    """Lines SQL did not settle, read one by one by `_sample`: into dcgm_lines, or refused."""
    rows, rejects = [], []
    for number, line in lines:
        text = line.strip()
        try:
            (host, gpu, at), column, value, labels = _sample(text, ctx)
        except NoTime:
            raise
        except BadValue as error:
            rejects.append((number, str(error), line))
            continue
        rows.append({"line": number, "written": text.split("{", 1)[0], "host": host, "gpu": gpu,
                     "sampled_at": at, "metric": column, "reading": float(value),
                     "energy": value if column == "energy_mj" else None,
                     **{target: labels.get(label) for label, target in LABELS.items()}})
    staging.add_rejects(con, src.name, rejects)
    if rows:
        schema = staging.arrow_schema(con, LINES_TABLE)
        con.from_arrow(pa.Table.from_pylist(rows, schema=schema)).insert_into(LINES_TABLE)


def _records(con, src: staging.Source) -> int:
    """One sample per (host, gpu, time) from dcgm_lines, as `parse` builds them: a metric seen
    again for the same key refuses its line; a value out of range refuses the sample (at its
    first line). Returns the samples loaded."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE dcgm_numbered AS
        SELECT *, row_number() OVER (PARTITION BY host, gpu, sampled_at, metric ORDER BY line) AS nth FROM {LINES_TABLE}""")
    line_sql.add_rejects_reading_raw(con, src, """
        SELECT line, format('a second {} for GPU {} at {}: many scrapes in one file need sample timestamps', written, gpu,
                            strftime(sampled_at, '%Y-%m-%dT%H:%M:%S')
                            || CASE WHEN microsecond(sampled_at) <> 0 THEN '.' || lpad(microsecond(sampled_at)::VARCHAR, 6, '0')
                               ELSE '' END || '+00:00')
        FROM dcgm_numbered WHERE nth > 1""")
    label = ", ".join(f"arg_min({name}, line) FILTER (WHERE {name} <> '') AS {name}" for name in LABELS.values())
    value = ", ".join(f"max({'energy' if name == 'energy_mj' else 'reading'}) FILTER (WHERE metric = '{name}') AS {name}"
                      for name in METRICS.values())
    in_range = " AND ".join(f"coalesce({name} BETWEEN {low} AND {high}, true)"
                            for name, (low, high) in traces.LIMITS.items() if name in (*METRICS.values(), "gpu_index"))
    con.execute(f"""CREATE OR REPLACE TEMP TABLE dcgm_records AS
        SELECT *, {in_range} AS ok FROM (
            SELECT host, gpu AS gpu_index, sampled_at, min(line) AS source_line, {label}, {value}
            FROM dcgm_numbered WHERE nth = 1 GROUP BY host, gpu, sampled_at)""")
    loaded = con.execute(f"""INSERT INTO {traces.TABLE} (host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w,
                             energy_mj, gpu_util_pct, mem_used_mib, pod, namespace, source_kind, source_line)
                             SELECT host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, gpu_util_pct,
                                    mem_used_mib, pod, namespace, '{KIND}', source_line FROM dcgm_records WHERE ok""").fetchall()[0][0]
    refused = con.execute(f"SELECT source_line, gpu_index, {', '.join(METRICS.values())} FROM dcgm_records "
                          "WHERE NOT ok").fetchall()
    con.execute("CREATE OR REPLACE TEMP TABLE dcgm_refused (line BIGINT, reason VARCHAR)")
    if refused:
        con.executemany("INSERT INTO dcgm_refused VALUES (?, ?)",
                        [(line, _out_of_range(dict(zip(("gpu_index", *METRICS.values()), found)))) for line, *found in refused])
    line_sql.add_rejects_reading_raw(con, src, "SELECT line, reason FROM dcgm_refused")
    con.execute("DROP TABLE dcgm_numbered")
    con.execute("DROP TABLE dcgm_records")
    return loaded


def _out_of_range(found: dict) -> str:
    """The first value outside traces.LIMITS, in the words of traces.check_range."""
    for name, value in found.items():
        low, high = traces.LIMITS[name]
        if value is not None and not low <= value <= high:
            return f"{name} {value!r} is outside {low:g} to {high:g}"
    raise AssertionError("a refused sample has a value out of range")
