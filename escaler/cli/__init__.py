"""escaler.cli (see docs/toolkit.md#the-packages)."""
