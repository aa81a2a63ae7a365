"""``python -m hvdflow``."""

import sys

from .cli import main

sys.exit(main())
