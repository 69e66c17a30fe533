"""escaler.reconcilers (see docs/toolkit.md#the-packages)."""
