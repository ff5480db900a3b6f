"""Write (or check) the settings table of docs/operations.md from the Settings fields.

    python scripts/settings_table.py          # rewrite the table in docs/operations.md
    python scripts/settings_table.py --check  # exit 1 when the table is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from sagafleet.sandbox.settings import SandboxSettings
from sagafleet.settings import Settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
BEGIN = "<!-- settings-table:"
END = "<!-- /settings-table -->"


def page_with_table(text: str) -> str:
    """``text`` (docs/operations.md) with the block between the markers replaced by the table."""
    start = text.index(BEGIN)
    head_end = text.index("\n", start) + 1
    stop = text.index(END, head_end)
    # The sandbox's variables follow the fleet's: same table, production never reads them.
    table = "\n".join([Settings.markdown_table(), *SandboxSettings.markdown_rows()])
    return text[:head_end] + table + "\n" + text[stop:]


def main(argv: list[str]) -> int:
    """Rewrite the table, or with --check report whether it is current."""
    text = PAGE.read_text(encoding="utf-8")
    fresh = page_with_table(text)
    if "--check" in argv:
        if fresh != text:
            print("docs/operations.md: the settings table is stale: "
                  "run python scripts/settings_table.py")
            return 1
        return 0
    PAGE.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
