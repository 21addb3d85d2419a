"""How figures are shown, without Streamlit: money, labels, Markdown-safe text, CSV cells, colours, charts."""
