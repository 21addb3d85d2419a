"""Who may see and change the dashboard: the read-only mode, the OIDC login and where it listens.

- MLCOST_READ_ONLY=1 (or `mlcost dashboard --read-only`): pages show everything but change
  nothing: no uploads, snoozes, test messages, budget edits or decision-log entries.
- MLCOST_LOGIN=oidc (or `mlcost dashboard --login oidc`): every page asks the visitor to sign in
  with the OpenID Connect provider of `[auth]` in .streamlit/secrets.toml (Streamlit's st.login,
  which needs Authlib) before it shows anything. Without the five settings of AUTH_KEYS the
  dashboard shows one sentence naming the missing ones, and nothing else (`mlcost dashboard`
  refuses to start).
- A dashboard listening beyond this machine without the login says so in the sidebar and on the
  Data page (`mlcost dashboard` only starts one with `--no-login`).
"""
from __future__ import annotations

import ipaddress
import logging
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import streamlit as st

from present.format import md

READ_ONLY_ENV = "MLCOST_READ_ONLY"
LOGIN_ENV = "MLCOST_LOGIN"
READ_ONLY_NOTE = "This dashboard is read-only (MLCOST_READ_ONLY): changes are made from the command line."
# The settings Streamlit's st.login needs for its default provider, all in [auth] itself.
AUTH_KEYS = ("redirect_uri", "cookie_secret", "client_id", "client_secret", "server_metadata_url")
REDIRECT_PATH = "/oauth2callback"  # Streamlit serves the provider's answer there and nowhere else
AUTHLIB_MIN = (1, 3, 2)  # the version Streamlit's st.login asks for

_LOG = logging.getLogger(__name__)
_logged: set[str] = set()


def read_only() -> bool:
    """Whether the dashboard runs in read-only mode."""
    return os.environ.get(READ_ONLY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def login_required(environ: Mapping[str, str] | None = None) -> bool:
    """Whether visitors must sign in with OIDC first (from `environ`, default os.environ)."""
    return (os.environ if environ is None else environ).get(LOGIN_ENV, "").strip().lower() == "oidc"


def is_loopback(address: str | None) -> bool:
    """Whether a server listening on `address` is reachable from this machine only. An empty or
    unset address is every interface (Streamlit's default); a host name other than localhost is
    taken as reachable from elsewhere."""
    if not address or not address.strip():
        return False
    host = address.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# --- the [auth] settings ------------------------------------------------------------------------

def missing_auth_settings(auth: object) -> list[str]:
    """The AUTH_KEYS that the [auth] table `auth` lacks or leaves empty (all of them when there is
    no table), in AUTH_KEYS order."""
    if not isinstance(auth, Mapping):
        return list(AUTH_KEYS)
    return [key for key in AUTH_KEYS if not (isinstance(auth.get(key), str) and auth[key].strip())]


def _authlib_ok() -> bool:
    try:
        import authlib
    except ImportError:
        return False
    try:
        return tuple(int(part) for part in authlib.__version__.split(".")[:3]) >= AUTHLIB_MIN
    except ValueError:  # a development version string: let Streamlit judge
        return True


def login_problem(auth: object, where: str) -> str | None:
    """What the OIDC login lacks with the [auth] table `auth` (read from `where`), as the end of a
    sentence ("needs client_id and cookie_secret under [auth] in WHERE"), or None when it can work.
    Names settings, never their values."""
    missing = missing_auth_settings(auth)
    if missing:
        names = ", ".join(missing[:-1]) + (" and " if len(missing) > 1 else "") + missing[-1]
        return f"needs {names} under [auth] in {where}"
    assert isinstance(auth, Mapping)
    if not auth["redirect_uri"].strip().endswith(REDIRECT_PATH):
        return (f"needs redirect_uri under [auth] in {where} to be the dashboard's address followed by "
                f"{REDIRECT_PATH}, as registered with the provider")
    if not _authlib_ok():
        return f"needs Authlib {'.'.join(map(str, AUTHLIB_MIN))} or later (pip install Authlib)"
    return None


class SecretsUnreadable(ValueError):
    """A secrets file that is not valid TOML; the message names the file, never its content."""


def auth_settings_in(files: Sequence[Path]) -> Mapping | None:
    """The [auth] table Streamlit will use from the secrets `files` (read first to last, a later
    file's [auth] replacing an earlier one's, as Streamlit merges them), or None when none has one.
    A folder is read as Streamlit reads Kubernetes-style secrets (auth/KEY files). Raises
    SecretsUnreadable for a file that is not TOML (Streamlit would then read no secrets at all)."""
    auth = None
    for path in files:
        if path.is_dir():
            folder = path / "auth"
            if folder.is_dir():
                auth = {item.name: item.read_text(encoding="utf-8").strip()
                        for item in folder.iterdir() if item.is_file()}
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as error:
            raise SecretsUnreadable(f"cannot read the secrets file {path} ({type(error).__name__})") from None
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            raise SecretsUnreadable(f"the secrets file {path} is not valid TOML") from None
        if "auth" in parsed:
            auth = parsed["auth"]
    return auth


def _streamlit_auth() -> Mapping | None:
    """The [auth] table of the secrets this Streamlit server reads, or None."""
    try:
        if not st.secrets.load_if_toml_exists():
            return None
        auth = st.secrets.get("auth")
    except Exception:  # noqa: BLE001 (unreadable secrets: Streamlit reads none either)
        _LOG.exception("mlcost: the secrets could not be read")
        return None
    return auth if isinstance(auth, Mapping) else None


# --- the gate every page passes -------------------------------------------------------------------

def require_login() -> None:
    """With the OIDC login on, end this run with a sign-in button until the visitor signed in;
    once signed in, their name and a sign-out button in the sidebar. Without the settings the
    login needs, end every run with one sentence naming them (and log it for the administrator)."""
    if not login_required():
        return
    problem = login_problem(_streamlit_auth(), ".streamlit/secrets.toml")
    if problem is not None:
        if problem not in _logged:  # once per server, not once per page view
            _logged.add(problem)
            _LOG.error("mlcost: the OIDC login (MLCOST_LOGIN=oidc) %s; every page shows only this", problem)
        st.title("mlcost")
        st.error(md(f"The OIDC login (MLCOST_LOGIN=oidc) {problem}: until then this dashboard shows nothing "
                    "(docs/access.md)."), icon=":material/lock:")
        st.stop()
    if not st.user.is_logged_in:
        st.title("mlcost")
        st.info("Sign in to open the cost dashboard.")
        st.button("Sign in", type="primary", on_click=st.login)
        st.stop()
    who = st.user.get("email") or st.user.get("name") or st.user.get("sub") or "signed in"
    st.sidebar.caption(f"Signed in as {md(who)}")
    st.sidebar.button("Sign out", on_click=st.logout)


def exposure_note() -> str | None:
    """The warning for a dashboard without a login that listens beyond this machine, or None."""
    if login_required():
        return None
    address = st.get_option("server.address")
    if is_loopback(address):
        return None
    where = f"on {md(address)}" if address else "on every network interface"
    return (f"This dashboard is **unauthenticated** and reachable beyond this machine (it listens {where}): "
            "anyone who can reach its port sees every page"
            + ("." if read_only() else " and can load, unload and edit data.")
            + " To require a sign-in, restart it with `--login oidc` (docs/access.md).")


def warn_if_exposed(where=None) -> None:
    """The exposure note, if any, as a warning in `where` (default: the sidebar)."""
    note = exposure_note()
    if note is not None:
        (where or st.sidebar).warning(note, icon=":material/public:")
