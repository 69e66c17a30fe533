"""escaler.reconcilers (see ARCHITECTURE.md)."""
