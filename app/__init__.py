"""The Streamlit dashboard: entrypoint, pages, queries, charts."""
