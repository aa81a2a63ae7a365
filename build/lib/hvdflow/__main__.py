"""``python -m hvdflow``."""

import sys

from hvdflow.cli import main

sys.exit(main())
