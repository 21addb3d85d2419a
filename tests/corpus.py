"""The real third-party sample files the tests read, and where to get them.

Beside the team's checkout they are in ../shared/formats. In any other clone they are fetched
once from their public repositories at pinned commits (raw.githubusercontent.com, with pooch)
into a cache folder outside the repository, each checked against its sha256; a file kept as a
documented cut of its upstream (the first N lines, or the scrape block of a Markdown page) is
downloaded whole, checked, cut, and checked again. The sources, commits, cuts and checksums are
those of ../shared/formats/README.md, "Pinned sources and checksums".

    python -m tests.corpus          # fetch what is missing and say where the files are

MLCOST_CORPUS_DIR names the cache folder (default: ~/.cache/mlcost/corpus on Linux);
MLCOST_CORPUS_MIRROR replaces https://raw.githubusercontent.com (a proxy or a local copy).
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared" / "formats"
GITHUB_RAW = "https://raw.githubusercontent.com"
KOKU = ("project-koku/koku", "768be82535f8e75523d966b4797e954ad054b52f")
CODECARBON = ("mlco2/codecarbon", "6db1f8beaa5e2d6b1dc7adfe1da31c14043cebd2")
CONFORMANCE = ("cncf/k8s-ai-conformance", "83cdb76aa420efb6dc45e1d35f20ba75dd222776")


@dataclass(frozen=True)
class CorpusFile:
    """One sample file: its name under formats/, where it comes from and its checksums."""

    name: str
    sha256: str  # of the file as the tests read it (after the cut)
    repo: str | None = None  # None: not fetchable (copied from a web page)
    commit: str | None = None
    path: str | None = None
    lines: tuple[int, int] | None = None  # the cut: upstream lines first..last (1-based, inclusive)
    upstream_sha256: str | None = None  # of the whole upstream file, where it differs (a cut)
    note: str = ""

    @property
    def fetchable(self) -> bool:
        return self.repo is not None

    def url(self, mirror: str | None = None) -> str:
        base = (mirror or os.environ.get("MLCOST_CORPUS_MIRROR") or GITHUB_RAW).rstrip("/")
        return f"{base}/{self.repo}/{self.commit}/{self.path}"


MANIFEST: tuple[CorpusFile, ...] = (
    CorpusFile("aws_cur/focusconverters_sample-anonymous-aws-export-dataset_first200KB.csv",
               "76e216052ef3c15ee690b4cd8b21ffb8df94de839a39f6bcc5b3b58f09105f5f",
               "finopsfoundation/focus_converters", "c799bf96dea67c8dc8569eebbcd720e7562088fa",
               "focus_converter_base/tests/provider_config_tests/aws/sample-anonymous-aws-export-dataset.csv",
               lines=(1, 255), upstream_sha256="31e59976423fa7fb041ff39e7148f3e4e548d55661fe81482847fa885efdd51b"),
    CorpusFile("aws_cur/koku_2022-07-01-alt-columns_snake.csv",
               "08a78a98f058440532d85c46b626074e34d20ef1b3036cdc8efb6df08117ead2",
               *KOKU, "koku/masu/test/data/aws/2022-07-01-alt-columns.csv"),
    CorpusFile("aws_cur/koku_test_cur.csv", "431c54ab0403b6a224b51dc83facf936eaab6c3b1db588cab1af261c0432f912",
               *KOKU, "koku/masu/test/data/test_cur.csv"),
    CorpusFile("azure/finopstoolkit_EA_ActualCost_Small.csv",
               "4d71dc329e4a83df4b62476b59026aed168e745339ed735214d5cab4765929fc",
               "microsoft/finops-toolkit", "62f3d5f852cf4113e80ce7bbf67d04e735311290",
               "src/powershell/Tests/assets/EA_ActualCost_Small.csv"),
    CorpusFile("azure/koku_azure_version_2.csv", "270b04e120d02a917f2e51a9dc0d8ff1068b67eed5c8685426c0a7c9e18dc954",
               *KOKU, "koku/masu/test/data/azure/azure_version_2.csv"),
    CorpusFile("azure/koku_costreport_a243c6f2-199f-4074-9a2c-40e671cf1584.csv",
               "5301fe87513f98d06748e5c8a912675e40176c9b30e69c03f9fcff656e5cd212",
               *KOKU, "koku/masu/test/data/azure/costreport_a243c6f2-199f-4074-9a2c-40e671cf1584.csv"),
    CorpusFile("codecarbon/codecarbon_examples_emissions.csv",
               "2b8b24ec1669710815a1e4213b7545d8b1bd645da606ab1b8da0b8d9c0233776",
               *CODECARBON, "examples/emissions.csv"),
    CorpusFile("codecarbon/codecarbon_tests_emissions_invalid_headers_oldschema.csv",
               "36cf659683a1cec5c9e20007acefbaa960139b5102812f9f8b77abea6aad6c5f",
               *CODECARBON, "tests/test_data/emissions_invalid_headers.csv"),
    CorpusFile("codecarbon/greenmlbench_emissions_RTX4070_cc3.2.3_first200KB.csv",
               "7d87fc8d2efc81a24c9766881d881534502203c6fa4eb617658622feba8ed0d2",
               "EronQorri/green-ml-bench", "217d38025f34992ff480a4c61500602cc60ffaf7", "emissions/emissions.csv",
               lines=(1, 384), upstream_sha256="a78d391fc4b5538cc6e5a422eac0348bbfcfdaf7e46d7f7389c6217f86f1823c"),
    CorpusFile("focus/focusfoundation_FOCUS-1.0_focus_sample.csv",
               "e91e5ac7edf01ed2c9d926f37ef7dc1ae2aae97956fea8da6c9ee488b1c2839e",
               "FinOps-Open-Cost-and-Usage-Spec/FOCUS-Sample-Data", "adbdd17a132984d6e8583c149c236d2199c3f5bc",
               "FOCUS-1.0/focus_sample.csv"),
    CorpusFile("focus/focusspec_saas_spend_agreements_b2.csv",
               "6bca59dcc8ce0140477bdfd72f52d711834c74c7b03169b46386ab151f2f83cd",
               "FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec", "52ab3d307ab5e025a1ffd5069a9bd23859cccbbc",
               "specification/data/saas_examples/spend_agreements/saas_spend_agreements_b2.csv"),
    CorpusFile("gcp_billing/koku_gcp_202011_2020-11-08_2020-11-11.csv",
               "4b25a0d19c3836605e10f110feb32471fa6fd05620cd03a4b43c082441a7d98c",
               *KOKU, "koku/masu/test/data/gcp/202011_30c31bca571d9b7f3b2c8459dd8bc34a_2020-11-08:2020-11-11.csv"),
    CorpusFile("gcp_billing/koku_gcp_2022-08-01_5.csv",
               "15289e560cded3c5e862bfd1a1ca3931c2579e070410950434ecfad90464f7d8",
               *KOKU, "koku/masu/test/data/gcp/2022-08-01_5.csv"),
    CorpusFile("nvidia_gpu/dcgm_exporter_scrape_L4_kops.prom",
               "12aca6d5931d21be7d72a4d1f2bd6755c4385ff2eba2a2cf33ab873cf2846dd7", *CONFORMANCE,
               "v1.35/kops/tests/TestObservability_AcceleratorMetrics_ViaDCGM/output.md",
               lines=(52, 120), upstream_sha256="01ffc068f2725dd5e25371c5a42b753e014a8852c69ff97bcdcf8580632d4228"),
    # The upstream repository is over 2 GB; its whole-file checksum was not taken, so the
    # download is checked after the cut only.
    CorpusFile("nvidia_gpu/powertracesim_burn_nvidia-smi_8gpu_first137lines.csv",
               "e35d549e35b6288fac359d58a7c6ec93c9cea4c0396669003686e3b02b0c56a6",
               "grantwilkins/powertrace-sim", "352b1e20e404b112bb6f46c7207cb51d5c36eb83", "burn.csv", lines=(1, 137)),
    CorpusFile("serving_metrics/triton_2.24_metrics_after_traffic_P100.prom",
               "586f65ef2d5373b8a57a4a685fef307f524573f7ee73e4f052d1f16d49c00037",
               note="copied from a Triton tutorial README, not from a pinned repository: not fetchable"),
    CorpusFile("serving_metrics/vllm_metrics_scrape_kops.prom",
               "38f0772f07196f9f8b370a4b542fc61ff00f82924e1a12dcf7ebb915dac2709d", *CONFORMANCE,
               "v1.35/kops/tests/Test_SchedulingOrchestration_PodAutoscaling/output.md",
               lines=(115, 675), upstream_sha256="fcc942d91ca8dce465ca0f18a4fadff84c9f70815abda025e27d164a8b61cb5c"),
)
BY_NAME = {entry.name: entry for entry in MANIFEST}


class CorpusUnavailable(RuntimeError):
    """The corpus is neither beside the checkout nor fetchable now; the message says how to get it."""


class ChecksumMismatch(RuntimeError):
    """A downloaded (or cut) file is not the pinned one."""


def cache_dir() -> Path:
    """Where fetched files are kept: $MLCOST_CORPUS_DIR, else the OS cache folder (…/mlcost/corpus)."""
    import pooch

    named = os.environ.get("MLCOST_CORPUS_DIR")
    return Path(named).expanduser() if named else Path(pooch.os_cache("mlcost")) / "corpus"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cut(entry: CorpusFile, upstream: Path, target: Path) -> Path:
    """Write entry's cut of the upstream file to target and check it; returns target."""
    data = upstream.read_bytes()
    what = "the download"
    if entry.lines:
        first, last = entry.lines
        data = b"".join(data.splitlines(keepends=True)[first - 1:last])
        what = f"lines {first}-{last} of the download"
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise ChecksumMismatch(f"{entry.name}: {what} have sha256 {digest}, not the pinned {entry.sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def fetch(entry: CorpusFile, folder: Path, mirror: str | None = None,
          timeout_s: tuple[float, float] = (5, 60)) -> Path:
    """Download one file (pooch, checked against its pinned sha256; a cut file checked whole,
    then cut and checked again) into folder/formats/<name>; returns that path. timeout_s is
    (connect, read) seconds, so that a machine without network gives up quickly."""
    import pooch
    import requests

    if not entry.fetchable:
        raise CorpusUnavailable(f"{entry.name}: {entry.note}")
    target = folder / "formats" / entry.name
    if target.is_file() and sha256_of(target) == entry.sha256:
        return target
    whole = entry.upstream_sha256 if entry.lines else entry.sha256
    try:
        upstream = pooch.retrieve(
            entry.url(mirror), known_hash=f"sha256:{whole}" if whole else None,
            fname=Path(entry.name).name, path=folder / "upstream" / Path(entry.name).parent,
            downloader=pooch.HTTPDownloader(timeout=timeout_s, progressbar=False),
        )
    except ValueError as error:  # pooch: "SHA256 hash of downloaded file (...) does not match"
        raise ChecksumMismatch(f"{entry.name}: {entry.url(mirror)} is not the pinned file: {error}") from None
    except requests.RequestException as error:
        raise CorpusUnavailable(f"{entry.name}: {entry.url(mirror)} could not be downloaded "
                                f"({type(error).__name__})") from None
    return cut(entry, Path(upstream), target)


def how_to_get() -> str:
    """What a user does to get the corpus, in a few sentences."""
    return (f"The real sample files live in {SHARED_DIR} beside the team's checkout; elsewhere they are "
            f"fetched from GitHub at pinned commits into {cache_dir() / 'formats'}: run "
            f"`python -m tests.corpus` once while online (or set MLCOST_CORPUS_MIRROR to a mirror of "
            f"raw.githubusercontent.com, or copy a formats folder to {cache_dir() / 'formats'}). "
            f"The list, commits and checksums are in tests/corpus.py.")


def locate(mirror: str | None = None, folder: Path | None = None, shared: Path = SHARED_DIR) -> Path:
    """The corpus folder: `shared` when present, else folder/formats with every fetchable file
    fetched and checked. Raises CorpusUnavailable (saying how to get them) when a download fails."""
    if shared.is_dir():
        return shared
    folder = folder or cache_dir()
    for entry in MANIFEST:
        if entry.fetchable:
            try:
                fetch(entry, folder, mirror)
            except CorpusUnavailable as error:  # offline: one failed download is enough to know
                raise CorpusUnavailable(f"The real sample files are not here and could not be fetched: "
                                        f"{error}. {how_to_get()}") from None
    return folder / "formats"


def require(formats: Path, name: str) -> Path:
    """formats/name, or pytest.skip saying why it is absent (a file that cannot be fetched); under
    CI=true an absent file fails instead: CI always has the corpus."""
    path = formats / name
    if not path.is_file():
        entry = BY_NAME.get(name)
        absent(f"{name} is not in {formats}: {entry.note if entry and entry.note else how_to_get()}")
    return path


def absent(reason: str) -> None:
    """Skip the test for a corpus that cannot be had here, saying why; fail it under CI=true."""
    import pytest

    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@functools.cache
def collected() -> Path | None:
    """The corpus folder for parametrizing tests at collection (locate(): beside the checkout, else
    fetched once into the cache); None when it cannot be had, and the tests built from it get one
    `ABSENT` case that skips (fails under CI=true) instead of a shorter parameter list."""
    try:
        return locate()
    except CorpusUnavailable:
        return None


ABSENT = Path("corpus-unavailable")  # the one case of a corpus parameter list that cannot be had


def files(folder: str, pattern: str = "*") -> list[Path]:
    """The corpus files of `folder` matching `pattern`, sorted; [ABSENT] when the corpus cannot be
    had (see `collected`). Call `present(path)` first in the test."""
    root = collected()
    if root is None:
        return [ABSENT]
    return sorted(path for path in (root / folder).glob(pattern) if path.is_file())


def present(path: Path) -> Path:
    """`path`, unless it is ABSENT: then the test is skipped (failed under CI=true), saying how to get it."""
    if path == ABSENT:
        absent(f"The real sample files could not be had. {how_to_get()}")
    return path


def main() -> int:
    try:
        where = locate()
    except (CorpusUnavailable, ChecksumMismatch) as error:
        print(error, file=sys.stderr)
        return 1
    missing = [entry.name for entry in MANIFEST if not (where / entry.name).is_file()]
    print(f"the real sample files are in {where}"
          + (f" (not fetchable, so absent: {', '.join(missing)})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
