"""`mlcost fetch` against a real HTTP S3 endpoint: `moto_server` on 127.0.0.1 (moto[server]).

The bucket holds a CUR-style prefix: a legacy CUR delivery (manifest + gzipped CSV, plus a
superseded delivery no manifest lists) and a CUR 2.0 export (manifest + Parquet file).
"""
from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.pipeline import s3_fetch
from mlcost import cli
from ingest.engine import warehouse as wh
from tests.moto import moto_server

CASES = Path(__file__).parent / "cases" / "billing"
BUCKET = "bills"
LEGACY_DIR = "cur/mlcost/20260801-20260901"
LEGACY_CSV = f"{LEGACY_DIR}/7f3a/mlcost-00001.csv.gz"
STALE_CSV = f"{LEGACY_DIR}/1b2c/mlcost-00001.csv.gz"  # an older delivery: no manifest lists it
CUR2_PARQUET = "cur/exports/data/BILLING_PERIOD=2026-08/mlcost2-00001.snappy.parquet"


@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto_server subprocess on a free local port; its URL."""
    with moto_server(tmp_path_factory.mktemp("moto")) as url:
        yield url


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials through the standard chain (environment); no user AWS config leaks in."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def s3(moto_endpoint: str, aws_env: None) -> Iterator[object]:
    """A client on a fresh bucket holding the CUR-style prefix."""
    client = boto3.client("s3", endpoint_url=moto_endpoint)
    client.create_bucket(Bucket=BUCKET)
    legacy = gzip.compress((CASES / "aws_cur_legacy.csv").read_bytes())
    client.put_object(Bucket=BUCKET, Key=LEGACY_CSV, Body=legacy)
    client.put_object(Bucket=BUCKET, Key=STALE_CSV, Body=legacy)
    client.put_object(Bucket=BUCKET, Key=f"{LEGACY_DIR}/mlcost-Manifest.json", Body=json.dumps({
        "assemblyId": "7f3a", "bucket": BUCKET, "reportKeys": [LEGACY_CSV],
        "billingPeriod": {"start": "20260801T000000.000Z", "end": "20260901T000000.000Z"}}).encode())
    client.put_object(Bucket=BUCKET, Key=CUR2_PARQUET, Body=cur2_parquet_bytes())
    client.put_object(Bucket=BUCKET, Key="cur/exports/metadata/BILLING_PERIOD=2026-08/mlcost2-Manifest.json",
                      Body=json.dumps({"dataFiles": [f"s3://{BUCKET}/{CUR2_PARQUET}"]}).encode())
    yield client
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def cur2_parquet_bytes() -> bytes:
    text_map = pa.map_(pa.string(), pa.string())
    table = pa.table({
        "identity_line_item_id": ["pq-1"],
        "identity_time_interval": ["2026-08-03T00:00:00Z/2026-08-03T01:00:00Z"],
        "line_item_line_item_type": ["Usage"],
        "line_item_usage_start_date": ["2026-08-03T00:00:00Z"],
        "line_item_usage_end_date": ["2026-08-03T01:00:00Z"],
        "line_item_currency_code": ["USD"],
        "line_item_unblended_cost": pa.array([Decimal("4.6016")], pa.decimal128(18, 8)),
        "product": pa.array([[("instance_type", "g6.12xlarge")]], text_map),
        "resource_tags": pa.array([[("user_run_id", "run-pq")]], text_map),
    })
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def run_fetch(endpoint: str, dest: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, list[dict], str]:
    code = cli.main(["fetch", f"s3://{BUCKET}/cur/", "--endpoint-url", endpoint, "--dest", str(dest),
                     "--json", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_fetch_follows_manifests_ingests_and_a_second_fetch_transfers_nothing(
        s3, moto_endpoint, warehouse, tmp_path, capsys):
    dest = tmp_path / "bills"
    code, summaries, err = run_fetch(moto_endpoint, dest, capsys)
    assert code == 1, err  # the legacy CUR case has one ragged row: partly loaded
    assert {s["path"]: (s["kind"], s["status"], s["rows_loaded"], s["rows_rejected"]) for s in summaries} == {
        f"s3://{BUCKET}/{LEGACY_CSV}": ("billing_aws", "loaded", 4, 1),
        f"s3://{BUCKET}/{CUR2_PARQUET}": ("billing_aws", "loaded", 1, 0),
    }
    assert "4 files fetched" in err and "1 files under the prefix are in no manifest" in err
    assert s3_fetch.local_path(dest, BUCKET, LEGACY_CSV).is_file()
    assert s3_fetch.local_path(dest, BUCKET, CUR2_PARQUET).is_file()
    assert not s3_fetch.local_path(dest, BUCKET, STALE_CSV).exists()
    assert not list(dest.rglob("*.part"))
    with wh.connect() as con:
        assert con.execute("SELECT billing_currency, billed_cost, lines FROM billing_currency_totals").fetchall() == [
            ("USD", Decimal("23.8244") + Decimal("4.6016"), 5)]
        assert con.execute("SELECT source_file FROM billing_lines WHERE source_line_id = 'pq-1'").fetchall() == [
            (f"s3://{BUCKET}/{CUR2_PARQUET}",)]

    mtimes = {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.is_file() and p.name != s3_fetch.STATE_FILE}
    code, summaries, err = run_fetch(moto_endpoint, dest, capsys)
    assert (code, summaries) == (0, [])
    assert "0 files fetched (0.0 MB), 4 unchanged" in err
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    again = s3_fetch.fetch(s3, BUCKET, "cur/", dest)
    assert again.downloaded == [] and again.pending == [] and len(again.unchanged) == 4


def test_a_changed_object_is_fetched_again(s3, moto_endpoint, warehouse, tmp_path, capsys):
    dest = tmp_path / "bills"
    run_fetch(moto_endpoint, dest, capsys)
    s3.put_object(Bucket=BUCKET, Key=LEGACY_CSV, Body=gzip.compress(
        (CASES / "aws_cur_legacy.csv").read_bytes().replace(b"32.7726,", b"30.0000,", 1)))
    result = s3_fetch.fetch(s3, BUCKET, "cur/", dest)
    assert result.downloaded == [f"s3://{BUCKET}/{LEGACY_CSV}"]
    assert [uri for uri, _ in result.pending] == [f"s3://{BUCKET}/{LEGACY_CSV}"]


def test_any_legal_keys_map_to_distinct_files_inside_the_folder(s3, moto_endpoint, warehouse, tmp_path, capsys):
    """Keys that collide or escape as plain paths: a file and a folder of the same name, a
    300-character key, `..` parts, a backslash, Unicode. Each lands in its own file under dest."""
    focus = (CASES / "focus.csv").read_bytes()
    keys = ["plain/a.csv", "plain/a.csv/b.csv", "plain/" + "k" * 300 + ".csv", "plain/../../escape.csv",
            "plain/x\\..\\y.csv", "plain/日本語/ü.csv", "plain/A.csv"]
    for key in keys:  # the same bill each time: the ledger loads it once
        s3.put_object(Bucket=BUCKET, Key=key, Body=focus)
    dest = tmp_path / "inside" / "bills"
    code = cli.main(["fetch", f"s3://{BUCKET}/plain/", "--endpoint-url", moto_endpoint, "--dest", str(dest)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and f"{len(keys)} files fetched" in err
    paths = [s3_fetch.local_path(dest, BUCKET, key) for key in keys]
    assert len(set(paths)) == len(keys) and all(p.is_file() and p.read_bytes() == focus for p in paths)
    assert all(p.parent == dest.resolve() / BUCKET and len(p.name.encode()) <= 255 for p in paths)
    files = [p for p in (tmp_path / "inside").rglob("*") if p.is_file()]
    assert sorted(files) == sorted(paths + [dest.resolve() / s3_fetch.STATE_FILE])  # nothing anywhere else
    assert out.count("[billing_focus]") + out.count("SKIPPED") == len(keys)  # the same bill: loaded once
    assert "FAILED" not in out + err and code in (0, 1)  # 1 when the case file has rejected lines


def test_a_manifest_is_followed_only_inside_the_bucket_and_prefix(s3, moto_endpoint, tmp_path):
    s3.create_bucket(Bucket="elsewhere")
    s3.put_object(Bucket="elsewhere", Key="cur/other.csv", Body=(CASES / "focus.csv").read_bytes())
    s3.put_object(Bucket=BUCKET, Key="outside/other.csv", Body=(CASES / "focus.csv").read_bytes())
    s3.put_object(Bucket=BUCKET, Key="evil/r-Manifest.json", Body=json.dumps(
        {"bucket": BUCKET, "reportKeys": ["../../outside.csv", "/etc/passwd", "outside/other.csv"],
         "dataFiles": ["s3://elsewhere/cur/other.csv", f"s3://{BUCKET}/outside/other.csv"]}).encode())
    try:
        result = s3_fetch.fetch(s3, BUCKET, "evil/", tmp_path / "bills")
    finally:
        s3.delete_object(Bucket="elsewhere", Key="cur/other.csv")
        s3.delete_bucket(Bucket="elsewhere")
    assert sorted(uri for uri, _ in result.refused) == sorted([
        f"s3://{BUCKET}/../../outside.csv", f"s3://{BUCKET}//etc/passwd", f"s3://{BUCKET}/outside/other.csv",
        "s3://elsewhere/cur/other.csv", f"s3://{BUCKET}/outside/other.csv"])
    assert all("outside s3://bills/evil/, the location asked for" in reason for _, reason in result.refused)
    assert result.pending == [] and result.downloaded == [f"s3://{BUCKET}/evil/r-Manifest.json"]


def test_a_bill_that_cannot_be_read_does_not_stop_the_others(s3, moto_endpoint, warehouse, tmp_path, capsys):
    """A file the loader cannot read (JSON nested 100k deep) among good bills: the good ones load,
    the bad one is reported FAILED once; later fetches run without a traceback, say it stands and do
    not try it again, until the object changes, when it is fetched and tried afresh."""
    bad_uri = f"s3://{BUCKET}/mixed/0-bad.json"
    s3.put_object(Bucket=BUCKET, Key="mixed/0-bad.json", Body=b'{"run_id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    s3.put_object(Bucket=BUCKET, Key="mixed/1-focus.csv", Body=(CASES / "focus.csv").read_bytes())
    dest = tmp_path / "bills"

    def fetch() -> tuple[int, dict, str]:
        code = cli.main(["fetch", f"s3://{BUCKET}/mixed/", "--endpoint-url", moto_endpoint, "--dest", str(dest),
                         "--json"])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, {s["path"]: s for s in json.loads(out)}, err

    code, summaries, _ = fetch()
    assert code == 1 and summaries[bad_uri]["status"] == "failed"
    assert summaries[f"s3://{BUCKET}/mixed/1-focus.csv"]["status"] == "loaded"
    with wh.connect() as con:
        lines = con.execute("SELECT count(*) FROM billing_lines").fetchone()[0]
    assert lines > 0
    for _ in range(2):  # reported once: the unchanged bad file is not tried again
        code, summaries, err = fetch()
        assert (code, summaries) == (0, {})
        assert f"1 files that could not be loaded before are unchanged and were not tried again (the first: {bad_uri})" in err
    # a new version of the object is fetched and tried: here a readable bill
    s3.put_object(Bucket=BUCKET, Key="mixed/0-bad.json", Body=(CASES / "focus.csv").read_bytes().replace(b"\n", b"\r\n"))
    code, summaries, err = fetch()
    assert list(summaries) == [bad_uri] and summaries[bad_uri]["status"] in ("loaded", "already_loaded")
    assert "not tried again" not in err
    assert code == (1 if summaries[bad_uri]["rows_rejected"] else 0)  # the case file holds rejected lines


@pytest.mark.parametrize("key", ["a/../b", "/abs", "a//b", "./a", "a\\b", "..", "a/b/../../.."])
def test_local_path_stays_inside_dest(tmp_path, key):
    path = s3_fetch.local_path(tmp_path, BUCKET, key)
    assert path.parent == tmp_path.resolve() / BUCKET and path.name not in ("", ".", "..")


def test_local_path_refuses_an_empty_key_or_a_bad_bucket(tmp_path):
    with pytest.raises(s3_fetch.UnsafeKey):
        s3_fetch.local_path(tmp_path, BUCKET, "")
    with pytest.raises(s3_fetch.UnsafeKey):
        s3_fetch.local_path(tmp_path, "../up", "a.csv")


def test_an_interrupted_fetch_resumes(s3, moto_endpoint, warehouse, tmp_path, capsys):
    dest = tmp_path / "bills"

    class Interrupted(Exception):
        pass

    class FailingClient:
        """The real client, but the connection drops in the middle of the second download."""

        def __init__(self, client):
            self.client, self.downloads = client, 0

        def __getattr__(self, name):
            return getattr(self.client, name)

        def get_object(self, **kwargs):
            self.downloads += 1
            answer = self.client.get_object(**kwargs)
            if self.downloads == 2:
                first = next(answer["Body"].iter_chunks(4))

                class Broken:
                    def iter_chunks(self, size):
                        yield first
                        raise Interrupted()
                return {**answer, "Body": Broken()}
            return answer

    with pytest.raises(Interrupted):
        s3_fetch.fetch(FailingClient(s3), BUCKET, "cur/", dest)
    complete = [p for p in dest.rglob("*") if p.is_file() and not p.name.endswith(".part")
                and p.name != s3_fetch.STATE_FILE]
    assert len(complete) == 1 and len(list(dest.rglob("*.part"))) == 1  # no half file under a real name
    code, summaries, err = run_fetch(moto_endpoint, dest, capsys)
    assert code == 1  # the legacy CUR case's ragged row
    assert "3 files fetched" in err and "1 unchanged" in err
    assert sorted(s["rows_loaded"] for s in summaries) == [1, 4]
    assert not list(dest.rglob("*.part"))


def test_unknown_locations_and_profiles_are_reported(aws_env, tmp_path, capsys):
    assert cli.main(["fetch", "bills/cur", "--dest", str(tmp_path)]) == 2
    assert "is not an S3 location" in capsys.readouterr().err
    assert cli.main(["fetch", "s3://bills/cur", "--profile", "nobody", "--dest", str(tmp_path)]) == 1
    assert "cannot fetch s3://bills/cur" in capsys.readouterr().err
