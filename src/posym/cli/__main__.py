"""``python -m posym.cli``: the ``posym`` command."""

import sys

from posym.cli import main

sys.exit(main())
