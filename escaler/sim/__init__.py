"""escaler.sim (see docs/toolkit.md#the-packages)."""
