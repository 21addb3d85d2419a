"""ingest/engine/values.py: the strict single-field readers every parser relies on."""
from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import values
from ingest.engine.contract import BadValue

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


# --- timestamps -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "tz", "expected"),
    [
        # ISO with an offset: the zone argument is irrelevant
        ("2025-05-05T20:58:44Z", BERLIN, utc(2025, 5, 5, 20, 58, 44)),
        ("2025-05-05T20:58:44z", BERLIN, utc(2025, 5, 5, 20, 58, 44)),
        ("2025-05-05T20:58:44.250Z", UTC, utc(2025, 5, 5, 20, 58, 44, 250000)),
        ("2025-05-05T20:58:44+02:00", UTC, utc(2025, 5, 5, 18, 58, 44)),
        ("2025-01-15T08:00:00-05:00", BERLIN, utc(2025, 1, 15, 13, 0, 0)),
        ("  2025-05-05T20:58:44Z  ", UTC, utc(2025, 5, 5, 20, 58, 44)),
        # naive text is read in the given zone (summer +02:00, winter +01:00, New York -04:00)
        ("2025-05-05T20:58:44", BERLIN, utc(2025, 5, 5, 18, 58, 44)),
        ("2025-01-05 20:58:44", BERLIN, utc(2025, 1, 5, 19, 58, 44)),
        ("2025-07-01 12:00:00", NEW_YORK, utc(2025, 7, 1, 16, 0, 0)),
        ("2025-05-05T20:58:44", UTC, utc(2025, 5, 5, 20, 58, 44)),
        # nvidia-smi's slash dates with milliseconds
        ("2025/05/05 20:58:44.813", UTC, utc(2025, 5, 5, 20, 58, 44, 813000)),
        ("2025/05/05 20:58:44.813", BERLIN, utc(2025, 5, 5, 18, 58, 44, 813000)),
        # epoch seconds: int, float, numeric text; never shifted by the zone
        (1746478724, BERLIN, utc(2025, 5, 5, 20, 58, 44)),
        (1746478724.5, BERLIN, utc(2025, 5, 5, 20, 58, 44, 500000)),
        (Decimal("1746478724.25"), UTC, utc(2025, 5, 5, 20, 58, 44, 250000)),
        ("1746478724", BERLIN, utc(2025, 5, 5, 20, 58, 44)),
        (" 1746478724.5 ", UTC, utc(2025, 5, 5, 20, 58, 44, 500000)),
    ],
)
def test_timestamp_reads_to_utc(raw, tz, expected):
    result = values.timestamp(raw, "start_time", tz)
    assert result == expected
    assert result.utcoffset().total_seconds() == 0


def test_epoch_literal_matches_calendar_time():
    # the epoch used above, checked by a second method: seconds since 1970-01-01 by hand
    assert (utc(2025, 5, 5, 20, 58, 44) - utc(1970, 1, 1)).total_seconds() == 1746478724


@pytest.mark.parametrize(
    ("raw", "reason_part"),
    [
        (1746478724813, "milliseconds"),
        (1746478724813.0, "milliseconds"),
        ("1746478724813", "milliseconds"),
        ("yesterday", "ISO-8601"),
        ("2025-13-01T00:00:00", "ISO-8601"),
        ("05/05/2025 20:58", "ISO-8601"),
        ("nan", "start_time"),
        (True, "start_time"),
        ([1746478724], "start_time"),
        ({"t": 1}, "start_time"),
        (-5, "1990-2099"),
        ("1899-12-31T00:00:00Z", "1990-2099"),
        ("2150-01-01T00:00:00Z", "1990-2099"),
    ],
)
def test_timestamp_rejects_with_the_field_name(raw, reason_part):
    with pytest.raises(BadValue) as error:
        values.timestamp(raw, "start_time", UTC)
    assert "start_time" in str(error.value)
    assert reason_part in str(error.value)


# --- numbers, integers, money -----------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "expected"),
    [(3, 3.0), (2.5, 2.5), ("2.5", 2.5), ("1e3", 1000.0), (Decimal("0.25"), 0.25), (-4, -4.0)],
)
def test_number_accepts_numbers_and_numeric_text(raw, expected):
    result = values.number(raw, "val_metric")
    assert result == expected
    assert type(result) is float


@pytest.mark.parametrize(
    "raw", [True, False, "abc", "1,5", float("nan"), float("inf"), float("-inf"), "nan", "inf",
            Decimal("NaN"), [1], {"v": 1}, " 12 ", "\u0661\u0662\u0663", "1_000", "0x10", "12\x10", 1e308],
)
def test_number_rejects(raw):
    with pytest.raises(BadValue, match="val_metric"):
        values.number(raw, "val_metric")


@pytest.mark.parametrize(("raw", "expected"), [(1, 1), (1.0, 1), ("1.0", 1), ("42", 42), (0, 0), (-3.0, -3)])
def test_integer_accepts_whole_numbers(raw, expected):
    result = values.integer(raw, "gpu_count")
    assert result == expected
    assert type(result) is int


@pytest.mark.parametrize("raw", [1.5, "1.5", "abc", True, float("nan"), "inf", [2]])
def test_integer_rejects(raw):
    with pytest.raises(BadValue, match="gpu_count"):
        values.integer(raw, "gpu_count")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("0.1", Decimal("0.1")), (Decimal("0.10"), Decimal("0.10")), (0.1, Decimal("0.1")),
     (4, Decimal(4)), ("1e3", Decimal(1000))],
)
def test_money_is_exact_decimal(raw, expected):
    result = values.money(raw, "price_per_hour_usd")
    assert isinstance(result, Decimal)
    assert result == expected


def test_money_adds_exactly():
    # 0.1 + 0.2 in float is 0.30000000000000004; read as money it is exactly 0.3
    total = values.money("0.1", "a") + values.money("0.2", "b")
    assert total == Decimal("0.3")
    assert 0.1 + 0.2 != 0.3  # the float path really is inexact, so the test above means something


@pytest.mark.parametrize("raw", ["abc", True, "NaN", "inf", "-Infinity", "sNaN", float("nan"), [1], {"usd": 1},
                                 " 12.50 ", "\u0661\u0662", "1_000", 6e25])
def test_money_rejects(raw):
    with pytest.raises(BadValue, match="price_per_hour_usd"):
        values.money(raw, "price_per_hour_usd")


# --- text ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [(" a100 ", "a100"), (5, "5"), (2.5, "2.5")])
def test_text_strips_and_writes_numbers(raw, expected):
    assert values.text(raw, "gpu_type") == expected


@pytest.mark.parametrize("raw", [{"a": 1}, ["a"]])
def test_text_rejects_structures(raw):
    with pytest.raises(BadValue, match="gpu_type"):
        values.text(raw, "gpu_type")


# --- absent values --------------------------------------------------------------------------

@pytest.mark.parametrize("raw", [None, "", "   ", "\t"])
@pytest.mark.parametrize(
    "reader",
    [
        lambda raw: values.text(raw, "f"),
        lambda raw: values.number(raw, "f"),
        lambda raw: values.integer(raw, "f"),
        lambda raw: values.money(raw, "f"),
        lambda raw: values.timestamp(raw, "f", UTC),
    ],
    ids=["text", "number", "integer", "money", "timestamp"],
)
def test_absent_values_are_none(reader, raw):
    assert reader(raw) is None


@pytest.mark.parametrize("raw", [0, 0.0, "0"])
def test_zero_is_a_value_not_absent(raw):
    assert values.number(raw, "f") == 0.0
    assert values.integer(raw, "f") == 0
    assert values.money(raw, "f") == Decimal(0)


def test_whole_numbers_beyond_float_precision_stay_exact():
    assert values.integer("9007199254740993", "examples") == 9007199254740993
    assert values.integer(9007199254740993, "examples") == 9007199254740993


@pytest.mark.parametrize("text", ["1_000", "inf", "nan"])
def test_python_only_spellings_are_not_numbers(text):
    with pytest.raises(BadValue, match="examples"):
        values.integer(text, "examples")


def test_infinite_epoch_is_not_a_time():
    with pytest.raises(BadValue, match="not an ISO-8601 timestamp or epoch seconds"):
        values.timestamp("inf", "start_time", timezone.utc)
