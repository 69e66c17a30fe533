"""escaler.kube (see ARCHITECTURE.md)."""
