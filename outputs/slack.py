"""Slack delivery through incoming webhooks, and where each channel's webhook URL comes from.

A webhook URL is a secret: it is read from the environment or a secrets file, handed to
slack_sdk, and never returned, printed or stored; errors are scrubbed of it.

Where a channel's URL comes from, first match wins:
- the default channel: $MLCOST_SLACK_WEBHOOK_URL, else `webhook_url` under [slack] in the secrets file;
- a named channel NAME: $MLCOST_SLACK_WEBHOOK_URL_<NAME> (upper case, - as _), else
  NAME under [slack.channels] in the secrets file.
The secrets file is $MLCOST_SECRETS, else ./.streamlit/secrets.toml, else ~/.streamlit/secrets.toml.
"""
from __future__ import annotations

import logging
import os
import re
import tomllib
from dataclasses import dataclass
from http.client import InvalidURL
from pathlib import Path
from urllib.error import URLError
from urllib.parse import quote, quote_plus, unquote, urlsplit

from slack_sdk.errors import SlackRequestError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler, ServerErrorRetryHandler
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.webhook import WebhookClient

ENV_DEFAULT = "MLCOST_SLACK_WEBHOOK_URL"
TIMEOUT_S = 10.0
REDACTED = "<webhook URL>"

# slack_sdk logs the URL (debug, info on retries) and failing requests' errors, which can quote
# the URL's path (error level, so Python's last-resort handler prints it on stderr). Its logger
# is off: every post's outcome is recorded, scrubbed, by the caller.
_SDK_LOGGER = logging.getLogger("mlcost.slack_sdk")
_SDK_LOGGER.disabled = True
_SDK_LOGGER.propagate = False


class SecretsError(ValueError):
    """A secrets file that cannot be read; the message names the file, never its content."""


@dataclass(frozen=True)
class Outcome:
    """What Slack said to one post: ok, the HTTP status (None without an answer), an error without
    the URL, and whether Slack may have the message all the same (the request went out and no
    answer came back: a timeout or a dropped connection)."""

    ok: bool
    status: int | None = None
    error: str | None = None
    maybe_delivered: bool = False


def secrets_path() -> Path | None:
    """The secrets file in use, if any."""
    named = os.environ.get("MLCOST_SECRETS")
    if named:
        return Path(named).expanduser()
    for candidate in (Path(".streamlit/secrets.toml"), Path.home() / ".streamlit" / "secrets.toml"):
        if candidate.is_file():
            return candidate
    return None


def webhook_url(channel: str | None) -> str | None:
    """The webhook URL of `channel` (None: the default channel), or None when none is set."""
    env = ENV_DEFAULT if channel is None else f"{ENV_DEFAULT}_{channel.upper().replace('-', '_')}"
    if os.environ.get(env):
        return os.environ[env]
    slack = _secrets().get("slack", {})
    url = slack.get("webhook_url") if channel is None else slack.get("channels", {}).get(channel)
    return url if isinstance(url, str) and url else None


def where_to_set(channel: str | None) -> str:
    """One sentence telling the user how to give `channel` a webhook (no URL in it)."""
    if channel is None:
        return f"set {ENV_DEFAULT} or webhook_url under [slack] in .streamlit/secrets.toml"
    env = f"{ENV_DEFAULT}_{channel.upper().replace('-', '_')}"
    return f"set {env} or {channel} under [slack.channels] in .streamlit/secrets.toml"


def send(url: str, text: str, blocks: list[dict] | None = None, retry_after_max_s: float = 60.0,
         timeout_s: float = TIMEOUT_S) -> Outcome:
    """Post one message (Block Kit with `text` as the plain-text fallback), retrying once on a
    refused connection, a 5xx, or a 429 whose Retry-After is at most retry_after_max_s: answers
    that say Slack did not post it. A timeout or a connection dropped after the request went out
    is not retried (Slack may have posted it): the Outcome says maybe_delivered."""
    try:
        client = WebhookClient(url, timeout=timeout_s, logger=_SDK_LOGGER, retry_handlers=[
            _RefusedConnectionRetry(max_retry_count=1),
            _BoundedRateLimitRetry(retry_after_max_s),
            ServerErrorRetryHandler(max_retry_count=1),
        ])
        response = client.send(text=text, blocks=blocks)
    except Exception as error:  # urllib raises many kinds; none may escape with the URL in it
        reason, maybe = _failure(error)
        return Outcome(False, None, scrub(reason, url), maybe_delivered=maybe)
    if response.status_code == 200:
        return Outcome(True, 200)
    body = " ".join(str(response.body).split())
    return Outcome(False, response.status_code, scrub(f"HTTP {response.status_code}: {body[:200]}", url))


def _failure(error: Exception) -> tuple[str, bool]:
    """(a reason without the URL, whether the request may have reached Slack) for a post that raised."""
    if isinstance(error, (InvalidURL, SlackRequestError, ValueError)):
        return ("the webhook URL is not a valid URL (a space, a control character or a missing "
                "https://?): correct it where it is set", False)
    if isinstance(error, URLError):  # raised before the request was sent whole
        reason = error.reason
        if isinstance(reason, ConnectionRefusedError):
            return "connection refused", False
        if isinstance(reason, TimeoutError):
            return "timed out connecting", False
        if isinstance(reason, OSError) and reason.strerror:
            return f"no connection ({reason.strerror})", False
        return f"no connection ({type(reason).__name__})", False
    if isinstance(error, TimeoutError):
        return "no answer within the timeout; Slack may have posted it", True
    return f"{type(error).__name__} after the request was sent; Slack may have posted it", True


def scrub(message: str, url: str) -> str:
    """`message` with the webhook URL, its path, each of its path segments and query, in any
    form an error may quote them (raw, URL-encoded either way, decoded, JSON-escaped), replaced."""
    parts = urlsplit(url.strip()) if url else None
    pieces = {url, url.strip()} if url else set()
    if parts is not None:
        pieces |= {parts.path, parts.query, parts.netloc + parts.path}
        pieces |= {segment for segment in re.split(r"[/?&=#\s]+", parts.path + "?" + parts.query)
                   if len(segment) >= 4 and segment.lower() not in {"services", "hooks", "http", "https"}}
    forms = set()
    for piece in pieces:
        if not piece:
            continue
        for form in (piece, unquote(piece), quote(piece), quote(piece, safe=""), quote_plus(piece),
                     quote(unquote(piece), safe=""), piece.replace("/", "\\/"), repr(piece)[1:-1]):
            if form:
                forms.add(form)
    for form in sorted(forms, key=len, reverse=True):  # longest first: a path before its segments
        message = re.sub(re.escape(form), REDACTED, message, flags=re.IGNORECASE)
    return message


class _RefusedConnectionRetry(RetryHandler):
    """Retries a connection that was refused: the request never reached Slack."""

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return isinstance(error, URLError) and isinstance(error.reason, ConnectionRefusedError)


class _BoundedRateLimitRetry(RateLimitErrorRetryHandler):
    """Honours Retry-After, but only up to a bound: a longer wait is left to the next check."""

    def __init__(self, max_wait_s: float) -> None:
        super().__init__(max_retry_count=1)
        self.max_wait_s = max_wait_s

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        if not super()._can_retry(state=state, request=request, response=response, error=error):
            return False
        header = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), ["1"])
        try:
            return float(header[0]) <= self.max_wait_s
        except ValueError:
            return False


def _secrets() -> dict:
    path = secrets_path()
    if path is None or not path.is_file():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SecretsError(f"{path}: cannot be read ({error.strerror or error})") from None
    except tomllib.TOMLDecodeError as error:
        raise SecretsError(f"{path}: is not valid TOML ({error})") from None

