"""Overview: what the filtered runs cost, used and produced, and where the money went."""
import streamlit as st

from app import cache, settings as settings_page
from metrics import queries
from present import charts
from app.tables import show
from present.format import count_of, kg_co2e, usd

st.title("Overview")
picked = st.session_state["filters"]
factors = settings_page.energy_or_defaults().query_factors()
totals = cache.fetch(queries.overview_totals, picked, *factors).iloc[0]

if totals["runs"] == 0:
    st.info("No training runs in this selection. Load some with `mlcost ingest PATH` or upload "
            "run logs on the **Data** page — or widen the filters in the sidebar.")
    st.stop()

runs = int(totals["runs"])
left, middle, right, last = st.columns(4)
left.metric("Training runs", f"{runs:,}")
middle.metric("Estimated training cost", usd(totals["cost_usd"]),
              help="Sum of each run's estimated cost (given, or hours × price per hour).")
middle.caption(count_of(totals["runs_with_cost"], runs, "priced"))
right.metric("Measured energy", "—" if totals["runs_with_energy"] == 0 else f"{totals['energy_kwh']:,.2f} kWh")
from_traces = int(totals["runs_energy_from_traces"])
right.caption(count_of(totals["runs_with_energy"], runs, "measured")
              + (f" ({from_traces:,} from GPU traces)" if from_traces else ""))
last.metric("Emissions", "—" if totals["runs_with_emissions"] == 0 else kg_co2e(totals["emissions_kg"]),
            help="A run's own emissions, else its measured GPU energy × PUE × the grid's g CO₂e/kWh "
                 "of its region (`[energy]` in mlcost.toml).")
last.caption(count_of(totals["runs_with_emissions"], runs, "measured")
             + (f" ({from_traces:,} from GPU traces)" if from_traces else ""))

st.subheader("Estimated cost by month")
by_month = cache.fetch(queries.spend_by_month, picked)
if by_month["cost_usd"].notna().any():
    st.plotly_chart(cache.chart("spend_by_month", (picked,), lambda: charts.spend_by_month(
        by_month, known=cache.fetch(queries.filter_choices)["projects"])), width="stretch")
else:
    st.caption("None of these runs has a price or a cost yet, so there is no spend to chart.")

st.subheader("Most expensive runs")
top = cache.fetch(queries.top_runs, picked)
show(top, first=("run_id", "project", "cost_usd"))
