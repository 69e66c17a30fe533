"""escaler.api (see ARCHITECTURE.md)."""
