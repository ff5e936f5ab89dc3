"""``python -m prism.cli``."""

import sys

from prism.cli.app import main

sys.exit(main())
