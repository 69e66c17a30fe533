"""``python -m escaler``: see ``escaler.cli.main``."""

from escaler.cli.main import main

raise SystemExit(main())
