"""What leaves the product: the monthly report (Markdown, HTML) and Slack alerts with their state."""
