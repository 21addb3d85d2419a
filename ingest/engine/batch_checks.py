"""A Definition's rules as SQL checks, in step order, for the typed batch.

`rule_checks` gives each rule as (SQL that holds on a line meeting it, SQL of its reason or None).
batch_typed.py turns them into one CASE: the first rule a line fails decides; a reason SQL spells
exactly as the reader does refuses the line here, any other failure sends the line to the reader.
"""
from __future__ import annotations

import re

from ingest.engine import values
from ingest.engine.definition import (COUNT, MONEY, NUMBER, PERCENT, TIME, Default, Definition, Field, HashedId,
                                      OneOf, Required, Span, SumAtMost, Within)
from ingest.engine.run_rules import Extras, FromRate, HourlyCost, Hours
from ingest.engine.batch_costs import from_rate_sql, hours_of, hours_sql
from ingest.engine.batch_spellings import EARLIEST, LATEST, LONG_NUMBER, SCALARS, quote


def rule_checks(definition: Definition, json_strict: bool) -> list[tuple[str, str | None]]:
    """The definition's rules in step order as (SQL that holds on a line meeting the rule, SQL of
    the reason when it does not, or None). The first rule a typed line fails decides: its reason
    is given here where SQL spells it exactly as the reader does (a required field, a sum, a
    negative count, a window without start or length), else the line goes to the reader, which
    words the reason (a number's repr, a time's ISO form). A rule SQL checks more strictly than
    the reader (a length SQL cannot add exactly) always sends the line to the reader."""
    checks: list[tuple[str, str | None]] = []
    for step in definition.steps:
        if isinstance(step, Field) and step.type in SCALARS:
            c, given = step.column, f"{step.column}_text IS NULL OR "
            if step.type == TIME:
                checks.append((f"({given}({c} >= {EARLIEST} AND {c} < {LATEST}))", None))
            elif step.type == COUNT:
                checks.append((f"({given}{c} BETWEEN -{step.maximum} AND {step.maximum})", None))
                if step.minimum is not None:  # as the reader: "too large" first, then "negative"
                    reason = f"'{step.spellings[0]} is negative (' || {c} || ')'" if len(step.spellings) == 1 else None
                    checks.append((f"({given}{c} >= {step.minimum})", reason))
            elif step.type == NUMBER:
                low = "" if step.minimum is None else f" AND {c} >= {step.minimum}"
                limit = values.NUMBER_LIMIT if step.divide_by == 1 else f"{min(step.limit, values.NUMBER_LIMIT)!r} / {step.divide_by!r}"
                checks.append((f"({given}(isfinite({c}) AND abs({c}) <= {limit}{low}))", None))
            elif step.type == PERCENT:
                checks.append((f"({given}{c} BETWEEN 0 AND 100)", None))
            elif step.type == MONEY:
                checks.append((f"({c} IS NOT NULL OR {c}_text IS NULL)", None))
                if json_strict:  # from 1,000 USD a JSON double's last digit is past 12 decimals: the reader's
                    checks.append((f"({c} IS NULL OR {c} < 1000 OR NOT regexp_matches(raw, '{LONG_NUMBER}'))", None))
        elif isinstance(step, Span):
            start, end, length = step.start, step.end, step.length
            checks += [(f"{start} IS NOT NULL", quote(f"no {start}")),
                       (f"({length} IS NULL OR {length} > 0)", None),
                       (f"({end} IS NULL OR {end} > {start})", None),
                       (f"({end} IS NULL OR {length} IS NULL OR abs({length} - epoch({end} - {start})) <= {step.tolerance_s})",
                        None),
                       (f"({end} IS NOT NULL OR {length} IS NOT NULL)", quote(step.missing)),
                       (f"({end} IS NOT NULL OR ({length} * 1e6 = round({length} * 1e6) AND {length} < 1e9))", None)]
        elif isinstance(step, Required) and any(h.start == step.column for h in definition.rules(Hours)):
            hours = next(h for h in definition.rules(Hours) if h.start == step.column)  # a start found from the end
            checks.append((f"({step.column} IS NOT NULL OR ({hours.end} IS NOT NULL AND {hours.hours} IS NOT NULL))",
                           quote(step.reason)))
        elif isinstance(step, Required):
            checks.append((f"{step.column} IS NOT NULL", None if step.refuses_file else quote(step.reason)))  # the reader raises
        elif isinstance(step, Within):  # the reader words it (a value's repr)
            checks.append((f"({step.column} IS NULL OR {step.column} BETWEEN {step.low!r} AND {step.high!r})", None))
        elif isinstance(step, (Extras, Hours, HourlyCost, FromRate)):
            checks += _run_checks(definition, step)
        elif isinstance(step, HashedId) and step.raw:  # an id made of raw values: the reader makes it
            stand_ins = "".join(f" AND {step.column} <> {quote(s)}" for s in step.stand_ins)
            checks.append((f"({step.column} IS NOT NULL{stand_ins})", None))
        elif isinstance(step, Default) and step.words:  # words of plain ASCII only: lower() and the split as Python's
            checks.append((f"({step.column} IS NOT NULL OR regexp_full_match(coalesce({step.of}, ''), '[\\x20-\\x7e]*'))", None))
        elif isinstance(step, OneOf):  # plain ASCII spellings only: lower() as Python's; another text, the reader's reason
            spelled = ", ".join(quote(k) for k, _ in step.spellings)
            checks.append((f"({step.column} IS NULL OR (regexp_full_match({step.column}, '[\\x20-\\x7e]*') "
                           f"AND lower({step.column}) IN ({spelled})))", None))
        elif isinstance(step, SumAtMost):
            pieces = re.split(r"\{(\w+)\}", step.reason)  # text, column, text, column, ...
            reason = " || ".join(quote(piece) if i % 2 == 0 else f"CAST(coalesce({piece}, 0) AS VARCHAR)"
                                 for i, piece in enumerate(pieces) if piece)
            checks.append((f"{' + '.join(f'coalesce({p}, 0)' for p in step.parts)} <= {step.whole}", reason))
    return checks


def _run_checks(definition: Definition, step) -> list[tuple[str, None]]:
    """What SQL leaves to the reader under Extras, Hours, HourlyCost and FromRate: a line whose
    row the reader would note (flag) or read otherwise, so each holds on the lines SQL loads."""
    if isinstance(step, Extras):  # spellings given together: the reader compares them
        # The other spelling (rare) looked for first, without its opening quote (a search for a
        # text starting with a quote stops at every quote: 3x slower), so the line is read again
        # only where it may be given (NOT (a AND b) read every line twice: ~0.1 CPU s per 100k runs).
        return [(f"CASE WHEN contains(raw, '{name}\"') THEN NOT (contains(raw, '\"{name}\"') "
                 f"AND contains(raw, '\"{f.spellings[0]}\"')) ELSE true END", None)
                for f in definition.fields if f.column in step.agree for name in f.spellings[1:]]
    if isinstance(step, Hours):
        start, end, h = step.start, step.end, step.hours
        measured = hours_of(definition, h)
        found_start, found_end, _ = hours_sql(step)
        return [(f"({start} IS NULL OR {end} IS NULL OR {end} >= {start})", None),
                (f"({start} IS NULL OR {end} IS NULL OR {h} IS NULL OR abs({h} - {measured}) <= greatest({step.tolerance!r} * {measured}, 0.01))",
                 None),
                (f"(({start} IS NOT NULL AND {end} IS NOT NULL) OR {h} IS NULL "
                 f"OR ({found_start} >= {EARLIEST} AND {found_end} < {LATEST}))", None)]
    if isinstance(step, HourlyCost):  # a cost to flag, to price from the catalog, or not exact here
        expected = f"{step.column}_expected"
        hours = hours_of(definition, step.hours)
        found = f"({step.given} IS NOT NULL OR ({expected}) IS NOT NULL)"
        if not (step.open or step.unpriced):  # no cost is no flag: the catalog's names go to the reader (catalog_to_reader)
            found = f"({step.given} IS NOT NULL OR ({expected}) IS NOT NULL OR ({hours}) IS NULL OR {step.price} IS NULL)"
        return [(f"(({step.price} IS NULL OR ({hours}) IS NULL) OR (({expected}) IS NOT NULL AND ({step.given} IS NULL "
                 f"OR abs({step.given} - ({expected})) <= 0.01 OR abs({step.given} - ({expected})) * 100 <= ({expected}))))", None),
                (found, None)]
    if isinstance(step, FromRate) and step.rate in {f.column for f in definition.fields}:
        value, hours = from_rate_sql(definition, step), hours_of(definition, step.hours)
        derives = f"{step.column} IS NULL AND {step.rate} IS NOT NULL AND ({hours}) IS NOT NULL"
        return [(f"NOT ({derives} AND ({value}) IS NULL)", None)] + ([(f"NOT ({derives})", None)] if step.flag else [])
    return []
