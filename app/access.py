"""Who may see and change the dashboard: the read-only mode and the OIDC login.

- MLCOST_READ_ONLY=1 (or `mlcost dashboard --read-only`): pages show everything but change
  nothing: no uploads, snoozes, test messages, budget edits or decision-log entries.
- MLCOST_LOGIN=oidc (or `mlcost dashboard --login oidc`): every page asks the visitor to sign in
  with the OpenID Connect provider of `[auth]` in .streamlit/secrets.toml (Streamlit's st.login,
  which needs Authlib) before it shows anything. Use it whenever the dashboard listens on an
  address other than 127.0.0.1.
"""
from __future__ import annotations

import os

import streamlit as st

from present.format import md

READ_ONLY_ENV = "MLCOST_READ_ONLY"
LOGIN_ENV = "MLCOST_LOGIN"
READ_ONLY_NOTE = "This dashboard is read-only (MLCOST_READ_ONLY): changes are made from the command line."


def read_only() -> bool:
    """Whether the dashboard runs in read-only mode."""
    return os.environ.get(READ_ONLY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def login_required() -> bool:
    """Whether visitors must sign in with OIDC first."""
    return os.environ.get(LOGIN_ENV, "").strip().lower() == "oidc"


def require_login() -> None:
    """With the OIDC login on, end this run with a sign-in button until the visitor signed in;
    once signed in, their name and a sign-out button in the sidebar."""
    if not login_required():
        return
    if not st.user.is_logged_in:
        st.title("mlcost")
        st.info("Sign in to open the cost dashboard.")
        st.button("Sign in", type="primary", on_click=st.login)
        st.stop()
    who = st.user.get("email") or st.user.get("name") or st.user.get("sub") or "signed in"
    st.sidebar.caption(f"Signed in as {md(who)}")
    st.sidebar.button("Sign out", on_click=st.logout)
