"""Definition rules of a record's span, cost and tags (training runs: run_summary, CodeCarbon;
definition.py lists every rule): `Extras` (keys no Field reads, kept as tags), `Hours` (a span in
hours), `HourlyCost` (an amount given, or price x hours, or the catalog's price x hours), `FromRate`
(a value from a rate x hours), `Tags` (named columns kept as tags), `Prefer` (another value under a
condition). The SQL pass applies them in batch_costs.py and batch_checks.py, the reader in
reader_run_steps.py.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Extras:
    """The record's keys that no Field or Items reads, kept in the TEXT_MAP `column` (its tags):
    each of `measures` (key -> tag name, the name saying the unit) read as a number of at least 0
    and kept as its text (`:g`, 6 significant digits), also readable by later rules under the tag
    name; any other key kept as its text (JSON for a list or an object) and named in the load's
    warning. The record's own `column` wins a name both give. For each column of `agree`, its
    spellings given together must be the same number, else `disagree` ("{key} {value} and {name}
    {other} disagree"). A record in the vocabulary only reads as if this rule were absent."""

    column: str
    measures: tuple[tuple[str, str], ...] = ()
    agree: tuple[str, ...] = ()
    disagree: str = "{key} {value} and {name} {other} disagree"
    warning: str = "fields not recognised, kept as tags: {names}"


@dataclass(frozen=True)
class Hours:
    """A span in hours (`hours`, a NUMBER Field that is not stored): with `start` and `end` both
    given, the hours between them (an end before the start is refused; a given `hours` that
    differs by more than `tolerance` of them, and at least 0.01 h, is flagged with `differs`, a
    template over {hours}, {measured}); else the missing one of `start` / `end` from the other and
    `hours`. `seconds` is the hours x 3600 (NULL when neither end nor hours is known)."""

    start: str
    end: str
    hours: str
    seconds: str
    tolerance: float
    differs: str


@dataclass(frozen=True)
class HourlyCost:
    """The amount `column` in USD with `source`: the `given` amount ('given'; a `price` x hours
    that differs by more than a cent and 1 % is flagged with `differs`, over {given} and
    {expected}), else `price` x the span's `hours` to the micro-dollar ('derived'), else (no price
    given) the catalog's price x hours ('catalog', the price kept in `price`). `per` lists the
    catalog's prices in the order tried: (catalog "instance" or "gpu", name column, multiplier
    column or "" for one, list columns of which one must have items or () for always); a zero
    multiplier is no price. An amount that cannot be had is flagged: `open` when there are no
    hours, else `unpriced` over {names} (each of `named` the record gives, with its value as
    written, joined by " or "; `unnamed` when none)."""

    column: str
    source: str
    given: str
    price: str
    hours: str
    per: tuple[tuple[str, str, str, tuple[str, ...]], ...]
    differs: str
    open: str
    unpriced: str
    named: tuple[str, ...] = ()
    unnamed: str = ""
    too_large: str = "price x hours"          # names the amount in the reason when it cannot fit
    catalog_too_large: str = "catalog price x hours"


@dataclass(frozen=True)
class FromRate:
    """Where `column` is absent: `rate` x the span's `hours` x `multiply` / `divide` (a whole
    number, rounded half to even, when `whole`; more than a BIGINT holds is refused with
    `too_large`, over {rate}, {hours}); `source` (if any) says 'given' or 'derived', and `flag`
    (if any, over {rate}, {hours}) is noted on a row so derived."""

    column: str
    rate: str
    hours: str
    multiply: float = 1
    divide: float = 1
    whole: bool = False
    source: str = ""
    flag: str = ""
    too_large: str = ""


@dataclass(frozen=True)
class Tags:
    """Where the TEXT_MAP `column` is absent: the named values of `parts` ((tag name, a TEXT column
    read by a Field before), ...) the record gives, as written (not stripped), sorted by name; an
    empty map when it gives none (CodeCarbon's country, cpu_model, on_cloud ... kept as tags)."""

    column: str
    parts: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Prefer:
    """`column` (text) is the value of `of` when `of` is given and the text `when` is `equals`
    (blanks around it ignored, any case): CodeCarbon's cloud_region when on_cloud is 'Y'."""

    column: str
    of: str
    when: str
    equals: str
