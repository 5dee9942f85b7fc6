"""Every measurement program in scripts/ says what it does and how it is called (`--help`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
MODULES = ("harness.py", "reference_beam.py")  # imported by the others and by the tests, not run


@pytest.mark.parametrize("script", sorted(path.name for path in SCRIPTS.glob("*.py") if path.name not in MODULES))
def test_every_script_prints_its_help(script: str) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Usage" in result.stdout
