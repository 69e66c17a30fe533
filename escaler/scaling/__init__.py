"""escaler.scaling (see ARCHITECTURE.md)."""
