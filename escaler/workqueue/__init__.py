"""escaler.workqueue (see ARCHITECTURE.md)."""
