"""escaler.signals (see ARCHITECTURE.md)."""
