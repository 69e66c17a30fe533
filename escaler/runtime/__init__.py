"""escaler.runtime (see ARCHITECTURE.md)."""
