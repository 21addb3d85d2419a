"""A span's hours and the amounts worked out from them, in SQL, as the reader works them out.

The run steps' SQL: Hours (start, end and hours, one found from the other two), HourlyCost (price
x hours in exact decimals), FromRate (a rate x hours); and CatalogCost's prices looked up in the
catalog and multiplied out in whole HUGEINT arithmetic (`price_from_catalog`, run by
batch_sql.py on the typed batch). batch_typed.py puts these in the row, batch_checks.py checks
them.
"""
from __future__ import annotations

from ingest.engine import values
from ingest.settings import config
from ingest.engine.definition import CatalogCost, Definition
from ingest.engine.run_rules import FromRate, HourlyCost, Hours

US_PER_HOUR = 3_600_000_000


def _measured_hours_sql(hours: Hours) -> str:
    """SQL: the hours between start and end as Python's (end - start).total_seconds() / 3600, else
    the hours given."""
    return (f"CASE WHEN {hours.start} IS NOT NULL AND {hours.end} IS NOT NULL "
            f"THEN (epoch_us({hours.end}) - epoch_us({hours.start})) / 1e6 / 3600 ELSE {hours.hours} END")


def hours_sql(hours: Hours) -> tuple[str, str, str]:
    """SQL for the span's (start, end, hours) over the typed values (Hours): a missing start or
    end from the other and timedelta(hours=h) (whole hours exact, the fraction's microseconds
    rounded half to even, as Python's)."""
    h = f"(CASE WHEN abs({hours.hours}) < 1e9 THEN {hours.hours} END)"  # NaN, inf or huge (a line not loaded): no overflow
    length = (f"to_microseconds(CAST(trunc({h}) AS BIGINT) * {US_PER_HOUR} "
              f"+ CAST(round_even(({h} - trunc({h})) * {US_PER_HOUR}.0, 0) AS BIGINT))")
    return (f"coalesce({hours.start}, {hours.end} - {length})", f"coalesce({hours.end}, {hours.start} + {length})",
            f"{hours.hours}_measured")


def hours_of(definition: Definition, column: str) -> str:
    """The column (of hours_cte) holding the measured hours of the Hours rule whose hours column is `column`."""
    return f"{column}_measured"


def hours_cte(definition: Definition, source: str = "typed") -> str:
    """A CTE `hourly` over `source` (when the definition has Hours): each span's measured hours
    once, and each HourlyCost's price x hours (worked out once, used by the row and the checks)."""
    if not definition.rules(Hours):
        return ""
    columns = [f"{_measured_hours_sql(h)} AS {hours_of(definition, h.hours)}" for h in definition.rules(Hours)]
    costs = [f"{_expected_cost_sql(definition, cost)} AS {cost.column}_expected" for cost in definition.rules(HourlyCost)]
    hourly = f"""
        , hourly_0 AS (
            SELECT *, {", ".join(columns)}
            FROM {source}
        ), hourly AS (
            SELECT *{"".join(", " + c for c in costs)}
            FROM hourly_0
        )"""
    return hourly


def _expected_cost_sql(definition: Definition, cost: HourlyCost) -> str:
    """SQL: price x hours in USD as the reader works it out (Decimal(repr(hours)), 28 digits,
    rounded half to even to 12 then 6 places); NULL where that cannot be exact here (more than 28
    significant digits, hours tiny or huge, a price beyond 6 decimals): the reader's."""
    hours = hours_of(definition, cost.hours)
    price, price_text, hours_text = cost.price, f"CAST({cost.price} AS VARCHAR)", f"CAST({hours} AS VARCHAR)"
    digits = "length(trim(replace(@, '.', ''), '0'))"  # significant digits (no sign or exponent in these ranges)
    return (f"CASE WHEN {price} IS NOT NULL AND {hours} IS NOT NULL AND ({hours} = 0 OR {hours} >= 1e-4) "
            f"AND {hours} < 1e5 AND {price} < 1e9 AND {price} = round({price}, 6) AND CAST({price} AS DOUBLE) * {hours} < 1e10 "
            f"AND NOT contains({hours_text}, 'e') "
            # a price under 1e5 has at most 11 digits (6 decimals), an hours' repr at most 17 (a
            # double's shortest repr): the digits are counted (two texts cut: ~0.04 CPU s per 100k
            # runs) only for a larger price
            f"AND ({price} < 1e5 OR {digits.replace('@', price_text)} + {digits.replace('@', hours_text)} <= 28) "
            f"THEN round_even(round_even(CAST({price} AS DECIMAL(15, 6)) * TRY_CAST({hours_text} AS DECIMAL(26, 21)), 12), 6) END")


def from_rate_sql(definition: Definition, rate: FromRate) -> str:
    """SQL: the rate x hours (FromRate) where both are known, NULL where a whole number would not
    fit (the reader refuses it)."""
    hours = hours_of(definition, rate.hours)
    value = f"{rate.rate} * ({hours}) * {rate.multiply!r} / {rate.divide!r}"
    if rate.whole:
        return f"CASE WHEN abs({value}) < 9e18 THEN CAST(round_even({value}, 0) AS BIGINT) END"
    return value


def price_from_catalog(definition: Definition, cost: CatalogCost, con, prices: config.Prices) -> None:
    """Price the plain rows without an amount from the catalog as the reader does (the first of
    `cost.per` whose price and multiplier are known), to 12 places, x Decimal(repr(seconds)) /
    3600 rounded half to even to 12 places, in whole HUGEINT arithmetic. Each distinct name is
    looked up once in Python; a row this cannot price exactly goes to the reader."""
    names = [name for _, name, _ in cost.per]
    found_names = con.execute(f"SELECT DISTINCT {', '.join(names)} FROM typed WHERE ok AND {cost.column} IS NULL").fetchall()
    if not found_names:
        return
    tables = []
    for index, (catalog, name, _) in enumerate(cost.per):
        found = {n: prices.of(catalog, n) for n in {row[index] for row in found_names} if n is not None}
        found = {n: price for n, price in found.items() if price is not None}
        table = f"catalog_{index}"
        # bound lists unnested side by side (pa.array of a list would import pandas: ~0.3 CPU s of a load);
        # the price as its fixed-point text, cast to DECIMAL(38, 12) exactly (it has 12 places)
        quantized = [price.quantize(values.MONEY_PLACES) for price in found.values()]
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT unnest(CAST($names AS VARCHAR[])) AS name, "
                    "CAST(unnest(CAST($prices AS VARCHAR[])) AS DECIMAL(38, 12)) AS price, "
                    "unnest(CAST($exact AS BOOLEAN[])) AS exact",
                    {"names": list(found), "prices": [format(price, "f") for price in quantized],
                     "exact": [price == exact for price, exact in zip(found.values(), quantized)]})
        tables.append(table)
    joins = " ".join(f"LEFT JOIN catalog_{i} c{i} ON c{i}.name = t.{name}" for i, (_, name, _) in enumerate(cost.per))
    exact = " AND ".join(f"coalesce(c{i}.exact, true)" for i in range(len(cost.per)))
    price = "CASE " + " ".join(f"WHEN c{i}.price IS NOT NULL AND t.{multiplier} IS NOT NULL THEN c{i}.price * t.{multiplier}"
                               for i, (_, _, multiplier) in enumerate(cost.per)) + " END"
    seconds = f"t.{definition.span.length}"
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE catalog_cost AS
            WITH priced AS (
                SELECT t.line, {seconds} AS seconds, {exact} AS exact, {price} AS price,
                       CAST({seconds} AS VARCHAR) AS seconds_text
                FROM typed t {joins}
                WHERE t.ok AND t.{cost.column} IS NULL
            ), whole AS (  -- price in 1e-12 USD and seconds as digits x 10^-places, from repr(seconds)
                SELECT *, exact AND price < {values.MONEY_LIMIT} AND places <= 20
                          AND CAST(price AS DOUBLE) * seconds * pow(10, 12 + places) < 1e36 AS fits
                FROM (SELECT line, price, exact, seconds, seconds_text,
                             CASE WHEN contains(seconds_text, 'e') OR strpos(seconds_text, '.') = 0 THEN 99
                                  ELSE length(seconds_text) - strpos(seconds_text, '.') END AS places
                      FROM priced WHERE price IS NOT NULL)
            ), divided AS (
                SELECT line, price, fits,
                       CASE WHEN fits THEN CAST(replace(CAST(price AS VARCHAR), '.', '') AS HUGEINT)
                                           * CAST(replace(seconds_text, '.', '') AS HUGEINT) END AS numerator,
                       CASE WHEN fits THEN CAST(3600 AS HUGEINT) * CAST(pow(10, places) AS HUGEINT) END AS denominator
                FROM whole
            ), rounded AS (
                SELECT line, price, fits, numerator // denominator AS q, numerator % denominator AS r, denominator
                FROM divided
            )
            SELECT line, price, CASE WHEN fits THEN CAST(q + CASE WHEN 2 * r > denominator OR (2 * r = denominator AND q % 2 = 1)
                                                                THEN 1 ELSE 0 END AS DECIMAL(38, 0))
                                                   * CAST('0.000000000001' AS DECIMAL(13, 12)) END AS cost
            FROM rounded""")
    finally:
        for table in tables:
            con.execute(f"DROP TABLE {table}")
    con.execute(f"UPDATE typed SET {cost.price} = c.price, {cost.column} = c.cost, {cost.source} = 'derived' "
                f"FROM catalog_cost c WHERE typed.line = c.line AND c.cost IS NOT NULL AND c.cost < {values.MONEY_LIMIT}")
    con.execute("UPDATE typed SET ok = false FROM catalog_cost c WHERE typed.line = c.line "
                f"AND (c.cost IS NULL OR c.cost >= {values.MONEY_LIMIT})")  # not exact here: the reader prices it


def catalog_to_reader(cost: HourlyCost, con, prices) -> None:
    """An HourlyCost that flags nothing leaves a run without a cost or price in SQL (batch_checks):
    the runs whose names the price catalog knows go to the reader, which prices them (Decimal)."""
    if cost.open or cost.unpriced or prices is None:
        return
    for catalog, name, multiplier, _ in cost.per:
        counted = f" AND {multiplier} <> 0" if multiplier else ""  # no multiplier (or 0): no price (the reader's rule)
        names = con.execute(f"SELECT DISTINCT {name} FROM typed WHERE ok AND {cost.column} IS NULL AND {cost.price} IS NULL "
                            f"AND {cost.hours} IS NOT NULL AND {name} IS NOT NULL{counted}").fetchall()
        priced = [n for (n,) in names if prices.of(catalog, n) is not None]
        if priced:
            con.execute(f"UPDATE typed SET ok = false WHERE ok AND {cost.column} IS NULL{counted} AND list_contains(?, {name})",
                        [priced])
