"""The figures the product shows, each defined once: pages, commands, the report and alerts read them here. No Streamlit."""
