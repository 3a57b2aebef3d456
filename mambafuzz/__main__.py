"""``python -m mambafuzz``: the CLI, where the console script is not installed (a PYTHONPATH checkout)."""
import sys

from mambafuzz.cli import main

sys.exit(main())
