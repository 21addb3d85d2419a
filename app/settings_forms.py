"""Forms that change the settings file from the dashboard: a budget (Budgets page) and the idle rule
(Idle GPUs page). They write through ingest/settings/settings_file.py, which checks the result with the same
code as a hand-edited mlcost.toml; the CLI and `mlcost alerts check` read the same file."""
from __future__ import annotations

from decimal import Decimal

import streamlit as st

from app import access, cache
from ingest.engine import warehouse
from ingest.settings import config, settings_file

NEW = "New budget"


def _numbers(text: str) -> list:
    """'50, 80, 100' -> [50, 80, 100]; a word that is not a number is kept, for the check to name."""
    found: list = []
    for word in text.replace(";", ",").split(","):
        word = word.strip().rstrip("%").strip()
        if not word:
            continue
        try:
            found.append(int(word))
        except ValueError:
            try:
                found.append(float(word))
            except ValueError:
                found.append(word)
    return found


def budget_form(settings: config.Config) -> None:
    """Create, edit or delete a budget; on success the page reruns with the new settings (hidden
    in read-only mode)."""
    if access.read_only():
        return
    if "budget_saved" in st.session_state:
        st.success(st.session_state.pop("budget_saved"))
    names = [b.name for b in settings.budgets]
    if "budget_pick_next" in st.session_state:  # the budget just saved (set before its widget exists)
        picked_next = st.session_state.pop("budget_pick_next")
        st.session_state["budget_edit_pick"] = picked_next if picked_next in names else NEW
    with st.expander("Add or edit a budget", expanded=not names):
        st.caption(f"Saved to `{settings_file.target()}`, the settings file `mlcost alerts check` and every "
                   "command read; checked like a hand-written `[[budgets]]` table.")
        picked = st.selectbox("Budget", [NEW, *names], key="budget_edit_pick")
        old = None if picked == NEW else settings.budgets[names.index(picked)]
        suffix = picked  # fresh widgets (and defaults) for each budget picked
        with st.form(f"budget_form_{suffix}"):
            left, right = st.columns(2)
            name = left.text_input("Name (unique)", value=old.name if old else "", key=f"b_name_{suffix}")
            amount = right.number_input("Amount per period", min_value=0.0, step=100.0, format="%.2f",
                                        value=float(old.amount) if old else 1000.0, key=f"b_amount_{suffix}")
            scopes = list(config.SCOPES)
            scope = left.selectbox("Scope", scopes, index=scopes.index(old.scope) if old else 0,
                                   key=f"b_scope_{suffix}",
                                   help="all: every cost; project/team: by the bill's project or team tag (runs' "
                                        "project or team without a bill); tag: KEY=VALUE; provider: aws, gcp, azure; "
                                        "bucket: training, serving, idle_gpu, shared or unallocated; model: a model "
                                        "version; service: a service (these three count the allocation's effective cost)")
            scope_value = right.text_input("Scope value (project, team, KEY=VALUE, provider, bucket, model version or service)",
                                           value=(old.scope_value or "") if old else "", key=f"b_value_{suffix}")
            period = left.selectbox("Period", config.PERIODS,
                                    index=config.PERIODS.index(old.period) if old else 0, key=f"b_period_{suffix}")
            currency = right.text_input("Currency", value=old.currency if old else "USD", max_chars=3,
                                        key=f"b_currency_{suffix}")
            actual = left.text_input("Alert at % spent", key=f"b_actual_{suffix}",
                                     value=", ".join(f"{p:g}" for p in old.actual_thresholds_pct) if old else "50, 80, 100")
            forecast = right.text_input("Alert at % forecast", key=f"b_forecast_{suffix}",
                                        value=", ".join(f"{p:g}" for p in old.forecast_thresholds_pct) if old else "100")
            channel = left.text_input("Slack channel (empty: the default)", value=(old.channel or "") if old else "",
                                      key=f"b_channel_{suffix}")
            owner = right.text_input("Owner", value=(old.owner or "") if old else "", key=f"b_owner_{suffix}")
            save, delete = st.columns(2)
            saved = save.form_submit_button("Save budget", type="primary")
            deleted = old is not None and delete.form_submit_button("Delete this budget")
    if not (saved or deleted):
        return
    try:
        if deleted:
            settings_file.delete_budget(old.name)
            message = f"Deleted budget {old.name}."
        else:
            settings_file.save_budget({
                "name": name, "scope": scope if scope == "all" else f"{scope}:{scope_value.strip()}",
                "period": period, "amount": Decimal(str(round(amount, 2))), "currency": currency,
                "actual_thresholds_pct": _numbers(actual), "forecast_thresholds_pct": _numbers(forecast),
                "channel": channel, "owner": owner}, replaces=None if old is None else old.name)
            message = f"Saved budget {name.strip()} to {settings_file.target()}."
    except config.ConfigError as error:
        st.error(f"Not saved: {error}")
        return
    st.session_state["budget_saved"] = message
    st.session_state["budget_pick_next"] = NEW if deleted else name.strip()
    if deleted:
        st.session_state.pop("budget_name", None)
    else:
        st.session_state["budget_name"] = name.strip()
    st.rerun()


def idle_rule_form(gpu: config.Gpu) -> None:
    """Change [gpu] idle_util_max_pct, idle_min_s and idle_power_max_w; the rollups are recomputed
    (hidden in read-only mode)."""
    if access.read_only():
        return
    if "idle_rule_saved" in st.session_state:
        st.success(st.session_state.pop("idle_rule_saved"))
    with st.expander("Change the idle rule"):
        with st.form("idle_rule"):
            left, middle, right = st.columns(3)
            util = left.number_input("Idle at utilization ≤ (%)", min_value=0.0, max_value=100.0,
                                     value=float(gpu.idle_util_max_pct), step=1.0, key="idle_util")
            minutes = middle.number_input("for at least (minutes)", min_value=0.0,
                                          value=float(gpu.idle_min_s) / 60, step=1.0, key="idle_minutes")
            power = right.number_input("and power ≤ (W; 0: no condition)", min_value=0.0,
                                       value=float(gpu.idle_power_max_w or 0), step=10.0, key="idle_power")
            st.caption(f"Saved to `{settings_file.target()}` (`[gpu]`); every GPU's per-minute figures are "
                       "then recomputed, as `mlcost rollup` does.")
            saved = st.form_submit_button("Save and recompute", type="primary")
    if not saved:
        return
    try:
        settings_file.save_idle_rule(util, minutes * 60, power)
    except config.ConfigError as error:
        st.error(f"Not saved: {error}")
        return
    with st.spinner("Recomputing the per-minute GPU figures…"):
        gpus = warehouse.rebuild_gpu_rollups()
    cache.forget()
    st.session_state["idle_rule_saved"] = f"Saved the idle rule and recomputed the figures of {gpus} GPUs."
    st.rerun()
