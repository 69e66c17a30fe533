"""escaler.sim (see ARCHITECTURE.md)."""
