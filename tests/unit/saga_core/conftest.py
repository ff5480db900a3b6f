"""Makes ``core_harness`` (the pure-core test harness beside this file) importable from the
test modules in the sub-directories that mirror ``saga_core``'s sub-packages."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
