"""escaler.cli (see ARCHITECTURE.md)."""
