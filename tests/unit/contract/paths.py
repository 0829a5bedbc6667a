"""Where the exported documents live."""

from pathlib import Path

SCHEMAS_DIR = Path(__file__).resolve().parents[3] / "docs" / "schemas"
