"""escaler.webhook (see ARCHITECTURE.md)."""
