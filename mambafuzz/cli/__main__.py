"""``python -m mambafuzz.cli``: the same command line as ``mambafuzz``."""
from mambafuzz.cli import main

raise SystemExit(main())
