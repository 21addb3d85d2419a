"""What every alert rule shares: the Alert record and the money and text helpers of messages."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from present.format import money


@dataclass(frozen=True)
class Alert:
    rule: str
    subject: str          # the budget's name, "service version metric", or "GPUs"
    threshold: str        # "80%", "2x", "$200/week", the regression's metric
    period_start: date
    channel: str | None   # named channel, None for the default webhook
    title: str
    message: str
    level: float = 0.0    # among new alerts of one rule, subject and period only the highest level is posted

    @property
    def key(self) -> str:
        return f"{self.rule}|{self.subject}|{self.threshold}|{self.period_start:%Y-%m-%d}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _money(amount, currency: str) -> str:
    """'$1,234.56', '-$12.00', '1,234.56 EUR': the one money format of every surface (present.format)."""
    return money(amount, currency)


def _escape(text: str) -> str:
    """Slack mrkdwn treats &, < and > as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
