"""``python -m sagafleet`` runs the console command."""

import sys

from sagafleet.cli import main

sys.exit(main())
