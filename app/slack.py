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

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from slack_sdk.http_retry.builtin_handlers import (ConnectionErrorRetryHandler, RateLimitErrorRetryHandler,
                                                   ServerErrorRetryHandler)
from slack_sdk.webhook import WebhookClient

ENV_DEFAULT = "MLCOST_SLACK_WEBHOOK_URL"


class SecretsError(ValueError):
    """A secrets file that cannot be read; the message names the file, never its content."""
TIMEOUT_S = 10


@dataclass(frozen=True)
class Outcome:
    """What Slack said to one post: ok, the HTTP status (None without an answer), an error without the URL."""

    ok: bool
    status: int | None = None
    error: str | None = None


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


def send(url: str, text: str, blocks: list[dict] | None = None, retry_after_max_s: float = 60.0) -> Outcome:
    """Post one message (Block Kit with `text` as the plain-text fallback), retrying once on a
    connection error, a 5xx, or a 429 whose Retry-After is at most retry_after_max_s."""
    client = WebhookClient(url, timeout=TIMEOUT_S, retry_handlers=[
        ConnectionErrorRetryHandler(max_retry_count=1),
        _BoundedRateLimitRetry(retry_after_max_s),
        ServerErrorRetryHandler(max_retry_count=1),
    ])
    try:
        response = client.send(text=text, blocks=blocks)
    except Exception as error:  # urllib raises many kinds; none may escape with the URL in it
        return Outcome(False, None, _scrub(f"{type(error).__name__}: {error}", url))
    if response.status_code == 200:
        return Outcome(True, 200)
    return Outcome(False, response.status_code, _scrub(f"HTTP {response.status_code}: {response.body}"[:300], url))


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


def _scrub(message: str, url: str) -> str:
    return message.replace(url, "<webhook URL>")
