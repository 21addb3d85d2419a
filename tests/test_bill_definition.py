"""The bill definitions (ingest/formats/billing/bill_definition.py): which lines of a FOCUS bill the
SQL plan reads and which go to the per-record reader of the same definition, with each line's
values and reasons written out here by hand (not computed by the code under test)."""
from __future__ import annotations

import dataclasses
import json
from datetime import timezone
from decimal import Decimal

from ingest.engine.contract import ParseContext
from ingest.engine.staging import Source, open_stage
from ingest.formats.billing import bill_stage, billing_focus
from tests.bill_equivalence import parsed

UTC = timezone.utc
HEADER = ("BilledCost,BillingCurrency,ChargePeriodStart,ChargeCategory,ProviderName,PricingCategory,Tags,"
          "ChargeDescription,x_LineItemId")
# (line's fields after the header's first five, expected path, expected tags, pricing, instance type / reason)
LINES = [
    ('Standard,"{""team"": ""a""}",g5.xlarge hour', "sql", {"team": "a"}, "on-demand", "g5.xlarge"),
    ("Dynamic,,no type here", "sql", None, "spot", None),
    ('Committed,"{}",', "sql", None, "commitment", None),
    ('Other,"{\'team\': \'b\'}",p4d.24xlarge', "record", {"team": "b"}, None, "p4d.24xlarge"),  # Python literal
    ('Standard,"{""n"": 1, ""ok"": true}",', "record", {"n": "1", "ok": "true"}, "on-demand", None),  # not text
    (',"[{""key"": ""k"", ""value"": ""v""}]",', "sql", {"k": "v"}, None, None),  # a list of key/value (GCP)
    (',"{"""": ""x""}",', "record", "Tags has a tag without a name", None, None),
    (",not tags,", "record", "Tags is neither JSON nor a Python literal: 'not tags'", None, None),
]


def test_each_line_takes_its_path_with_its_values(tmp_path):
    path = tmp_path / "paths.csv"
    path.write_text(HEADER + "\n" + "\n".join(f"{n}.5,USD,2026-08-01,Usage,AWS,{fields},id-{n}"
                                               for n, (fields, *_) in enumerate(LINES)) + "\n")
    by_record: list[int] = []

    def spy(record, columns):
        by_record.append(record.line)
        return billing_focus.FOCUS.build(record, columns)

    family = dataclasses.replace(billing_focus.FOCUS.family, build=spy)
    con = open_stage()
    try:
        src = Source.of(path, "paths.csv")
        bill_stage.stage(src, con, ParseContext("paths.csv", UTC), family, billing_focus.FOCUS.plan)
        rows = {r[0]: r[1:] for r in con.execute(
            "SELECT source_line_id, billed_cost, tags, pricing_category, instance_type FROM billing_lines").fetchall()}
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    assert by_record == [n + 2 for n, (_, way, *_) in enumerate(LINES) if way == "record"]
    expected_rows = {f"id-{n}": (Decimal(f"{n}.5"), tags, pricing, kind)
                     for n, (_, _, tags, pricing, kind) in enumerate(LINES) if not isinstance(tags, str)}
    assert {k: (v[0], dict(v[1]) if v[1] else None, v[2], v[3]) for k, v in rows.items()} == expected_rows
    assert rejects == [(n + 2, tags) for n, (_, _, tags, *_) in enumerate(LINES) if isinstance(tags, str)]
    # the per-record reader alone (parse(), as for JSON lines) gives the same rows and reasons
    alone = parsed(billing_focus, path, "paths.csv")
    assert [(line, reason) for line, reason, _ in alone["rejects"]] == rejects
    assert {r["source_line_id"]: r["tags"] for r in alone["rows"]} == {k: v[1] for k, v in expected_rows.items()}


def test_a_json_lines_bill_is_read_by_the_definition_line_by_line(tmp_path):
    path = tmp_path / "focus.jsonl"
    lines = [{"BilledCost": "3.25", "BillingCurrency": "EUR", "ChargePeriodStart": "2026-08-01T00:00:00Z",
              "ChargeCategory": "Usage", "ProviderName": "GCP", "Tags": {"team": "c"}},
             {"BilledCost": "1", "BillingCurrency": "EUR", "ChargePeriodStart": "2026-08-01",
              "ChargeCategory": "Usage"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    by_record: list[int] = []

    def spy(record, columns):
        by_record.append(record.line)
        return billing_focus.FOCUS.build(record, columns)

    con = open_stage()
    try:
        src = Source.of(path, "focus.jsonl")
        staged = bill_stage.stage(src, con, ParseContext("focus.jsonl", UTC),
                                  dataclasses.replace(billing_focus.FOCUS.family, build=spy), billing_focus.FOCUS.plan)
        rejects = con.execute("SELECT line, reason FROM rejects").fetchall()
    finally:
        con.close()
    assert by_record == [1, 2]
    assert (staged.accepted, staged.totals["billed_cost_total"]) == (1, {"EUR": "3.25"})
    assert rejects == [(2, "no ProviderName")]


AZURE_HEADER = "Date,MeterCategory,Cost,BillingCurrency,AdditionalInfo,Tags,SubscriptionId"
# (AdditionalInfo and Tags cells, expected path, expected instance type and tags or the reason)
AZURE_LINES = [
    ('"{""ServiceType"": ""Standard_NC6s_v3""}","""env"": ""prod"""', "sql", ("standard_nc6s_v3", {"env": "prod"})),
    ('"{""VMSize"": ""Standard_D4""}",', "sql", ("standard_d4", None)),
    ('"{\'VMSize\': \'Standard_D2s_v3\'}",', "record", ("standard_d2s_v3", None)),  # a Python literal
    (',"{""n"": 1}"', "record", (None, {"n": "1"})),  # a tag value that is not text
    ("not json,", "record", "AdditionalInfo is neither JSON nor a Python literal: 'not json'"),
]


def test_azure_lines_take_their_paths_with_their_values(tmp_path):
    from ingest.formats.billing import billing_azure

    path = tmp_path / "azure.csv"
    path.write_text(AZURE_HEADER + "\n" + "\n".join(f"2024-02-0{n + 1},Virtual Machines,{n}.25,USD,{cells},sub-{n}"
                                                     for n, (cells, *_) in enumerate(AZURE_LINES)) + "\n")
    by_record: list[int] = []

    def spy(record, columns):
        by_record.append(record.line)
        return billing_azure.AZURE.build(record, columns)

    con = open_stage()
    try:
        bill_stage.stage(Source.of(path, "azure.csv"), con, ParseContext("azure.csv", UTC),
                         dataclasses.replace(billing_azure.AZURE.family, build=spy), billing_azure.AZURE.plan)
        rows = {r[0]: (r[1], r[2], dict(r[3]) if r[3] else None, r[4].day) for r in con.execute(
            "SELECT sub_account_id, billed_cost, instance_type, tags, charge_period_end FROM billing_lines").fetchall()}
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    assert by_record == [n + 2 for n, (_, way, _) in enumerate(AZURE_LINES) if way == "record"]
    assert rows == {f"sub-{n}": (Decimal(f"{n}.25"), *expected, n + 2)  # the day after the charge's date
                    for n, (_, _, expected) in enumerate(AZURE_LINES) if not isinstance(expected, str)}
    assert rejects == [(n + 2, why) for n, (_, _, why) in enumerate(AZURE_LINES) if isinstance(why, str)]


CUR_HEADER = "identity/LineItemId,lineItem/LineItemType,lineItem/UsageStartDate,lineItem/CurrencyCode,"\
             "lineItem/UnblendedCost,resourceTags/user:team,product,resource_tags"
# (product and tag cells, expected path, expected tags and instance type, or the reason)
CUR_LINES = [
    ('genai,"{""instance_type"": ""p5.48xlarge""}",', "sql", ({"team": "genai"}, "p5.48xlarge")),
    (',,"{""user_team"": ""vision"", ""user_run"": ""r1""}"', "sql", ({"team": "vision", "run": "r1"}, None)),
    ('genai,"{\'instance_type\': \'g5.xlarge\'}",', "record", ({"team": "genai"}, "g5.xlarge")),  # a literal
    ('genai,,"{""user_team"": ""vision""}"', "record", ({"team": "vision"}, None)),  # team twice: the map wins
    (",not json,", "record", "product is neither JSON nor a Python literal: 'not json'"),
]


def test_cur_lines_take_their_paths_with_their_values(tmp_path):
    from ingest.formats.billing import billing_aws

    path = tmp_path / "cur.csv"
    path.write_text(CUR_HEADER + "\n" + "\n".join(f"id-{n},Usage,2026-08-01T00:00:00Z,USD,{n}.5,{cells}"
                                                   for n, (cells, *_) in enumerate(CUR_LINES)) + "\n")
    by_record: list[int] = []

    def spy(record, columns):
        by_record.append(record.line)
        return billing_aws.CUR.build(record, columns)

    con = open_stage()
    try:
        bill_stage.stage(Source.of(path, "cur.csv"), con, ParseContext("cur.csv", UTC),
                         dataclasses.replace(billing_aws.CUR.family, build=spy), billing_aws.CUR.plan)
        rows = {r[0]: (r[1], dict(r[2]) if r[2] else None, r[3]) for r in con.execute(
            "SELECT source_line_id, billed_cost, tags, instance_type FROM billing_lines").fetchall()}
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    assert by_record == [n + 2 for n, (_, way, _) in enumerate(CUR_LINES) if way == "record"]
    assert rows == {f"id-{n}": (Decimal(f"{n}.5"), *expected)
                    for n, (_, _, expected) in enumerate(CUR_LINES) if not isinstance(expected, str)}
    assert rejects == [(n + 2, why) for n, (_, _, why) in enumerate(CUR_LINES) if isinstance(why, str)]


GCP_HEADER = "service.description,sku.description,usage_start_time,cost,currency,credits"
# (credits cell, expected path, expected billed costs of the line and its credits, or the reason)
GCP_LINES = [
    ('"[{""name"": ""SUD"", ""amount"": -0.07}, {""full_name"": ""Promo"", ""amount"": -0.28}]"', "sql",
     [Decimal("-0.28"), Decimal("-0.07")]),
    ("[]", "sql", []),
    ("\"[{'name': 'FreeTrial', 'amount': -0.01}]\"", "record", [Decimal("-0.01")]),  # a Python literal
    ('"[{""name"": ""x"", ""amount"": ""abc""}]"', "record", "credit 1 amount must be an amount, got 'abc'"),
]


def test_gcp_credit_lines_take_their_paths_with_their_values(tmp_path):
    from ingest.formats.billing import billing_gcp

    path = tmp_path / "gcp.csv"
    path.write_text(GCP_HEADER + "\n" + "\n".join(f"Compute Engine,N1 core,2026-08-01 00:00:00 UTC,{n}.5,USD,{cell}"
                                                   for n, (cell, *_) in enumerate(GCP_LINES)) + "\n")
    by_record: list[int] = []

    def spy(record, columns):
        by_record.append(record.line)
        return billing_gcp.EXPORT.build(record, columns)

    con = open_stage()
    try:
        bill_stage.stage(Source.of(path, "gcp.csv"), con, ParseContext("gcp.csv", UTC),
                         dataclasses.replace(billing_gcp.EXPORT.family, build=spy), billing_gcp.EXPORT.plan)
        rows = con.execute("SELECT source_line, charge_category, billed_cost FROM billing_lines").fetchall()
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    assert by_record == [n + 2 for n, (_, way, _) in enumerate(GCP_LINES) if way == "record"]
    expected = {n + 2: (Decimal(f"{n}.5"), credits) for n, (_, _, credits) in enumerate(GCP_LINES)
                if not isinstance(credits, str)}
    assert {line: (next(c for got, k, c in rows if got == line and k == "usage"),
                   sorted(c for got, k, c in rows if got == line and k == "credit")) for line in expected} == expected
    assert len(rows) == sum(1 + len(credits) for _, credits in expected.values())
    assert rejects == [(n + 2, why) for n, (_, _, why) in enumerate(GCP_LINES) if isinstance(why, str)]


def test_each_bill_module_binds_the_parser_contract_of_its_own_definition():
    """A format module binds the contract with one line (`... = BILL.contract()`, by position):
    each name is its own Bill's method of that name, and totals is billing.totals."""
    from ingest.formats.billing import billing, billing_aws, billing_aws_dbr, billing_azure, billing_gcp
    from ingest.formats.billing.bill_definition import Bill

    bills = [(billing_focus, billing_focus.FOCUS), (billing_aws, billing_aws.CUR),
             (billing_azure, billing_azure.AZURE), (billing_aws_dbr, billing_aws_dbr.DBR)]
    for module, bill in bills:
        for name in ("sniff", "sniff_bytes", "parse", "parse_bytes", "stage"):
            bound = getattr(module, name)
            assert (bound.__self__, bound.__func__) == (bill, getattr(Bill, name)), (module.__name__, name)
        assert module.totals is billing.totals
    # GCP picks one of two definitions by the header for text; Parquet is always the BigQuery export's
    for name in ("sniff_bytes", "parse_bytes"):
        bound = getattr(billing_gcp, name)
        assert (bound.__self__, bound.__func__) == (billing_gcp.EXPORT, getattr(Bill, name))
    assert billing_gcp.totals is billing.totals
    assert billing_gcp.EXPORT.json_lines is not None and billing_gcp.FILE_EXPORT.json_lines is None
