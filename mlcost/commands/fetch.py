"""`mlcost fetch s3://BUCKET/PREFIX`: pull bills from S3 (following CUR manifests), then ingest them."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ingest.engine.report import summary_lines
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

FETCH_DIR = "mlcost-bills"


def register(commands) -> None:
    fetch = commands.add_parser(
        "fetch", help="pull cloud bills from S3 (following CUR manifests), then ingest them",
        description="Pull new or changed cloud bill files from S3 (following CUR manifests), then ingest "
                    "them. Credentials come from the standard AWS chain.")
    fetch.add_argument("location", metavar="s3://BUCKET/PREFIX", help="the bucket and prefix to pull")
    fetch.add_argument("--profile", help="AWS profile to use (default: the standard credential chain)")
    fetch.add_argument("--endpoint-url", help="an S3-compatible endpoint instead of AWS (MinIO, a test server)")
    fetch.add_argument("--dest", default=FETCH_DIR, help=f"download folder (default ./{FETCH_DIR})")
    fetch.add_argument("--json", action="store_true", help="print a JSON array with one summary per ingested file")
    fetch.set_defaults(run=run_fetch)


def run_fetch(args: argparse.Namespace) -> int:
    """Fetch new or changed bill files from S3, then ingest every fetched file not yet ingested."""
    import boto3
    import botocore.exceptions

    from ingest.pipeline import loader, s3_fetch

    try:
        bucket, prefix = s3_fetch.parse_uri(args.location)
    except ValueError as error:
        say(str(error))
        return EXIT_USAGE
    dest = Path(args.dest)
    try:
        client = boto3.Session(profile_name=args.profile).client("s3", endpoint_url=args.endpoint_url)
        fetched = s3_fetch.fetch(client, bucket, prefix, dest)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        say(f"cannot fetch {args.location}: {error}")
        return EXIT_PROBLEMS
    say(f"{len(fetched.downloaded)} files fetched ({fetched.bytes_downloaded / 1e6:.1f} MB), "
        f"{len(fetched.unchanged)} unchanged, into {dest}")
    if fetched.not_in_manifest:
        say(f"{len(fetched.not_in_manifest)} files under the prefix are in no manifest "
            "(superseded deliveries) and were left alone")
    for uri, reason in fetched.refused:
        say(f"{uri}: {reason}")
    if fetched.failed_before:
        say(f"{len(fetched.failed_before)} files that could not be loaded before are unchanged and were not tried "
            f"again (the first: {fetched.failed_before[0][0]}); a new version of a file is fetched and tried")
    summaries = []
    for uri, path in fetched.pending:
        try:
            summary = loader.ingest_file(path, display_name=uri)
        except Exception as error:  # noqa: BLE001 (one bad bill must not stop the others, nor later runs)
            summary = loader.FileSummary(uri, error=f"{uri}: not loaded, the file could not be read "
                                                    f"({type(error).__name__}: {str(error)[:200]}); the "
                                                    "other bills load, and a new version of it is tried again")
        summaries.append(summary)
        if not args.json:
            print("\n".join(summary_lines(summary)), flush=True)
        if summary.status != "failed":
            s3_fetch.mark_ingested(dest, [uri])
        else:  # reported once: not tried again until the object changes
            s3_fetch.mark_failed(dest, uri, summary.error or "could not be read")
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
    return 0 if all(s.ok for s in summaries) and not fetched.refused else EXIT_PROBLEMS
