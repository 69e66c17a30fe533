"""escaler.informers (see ARCHITECTURE.md)."""
