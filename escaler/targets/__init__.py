"""escaler.targets (see ARCHITECTURE.md)."""
