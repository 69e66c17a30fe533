"""escaler.sloapi (see ARCHITECTURE.md)."""
