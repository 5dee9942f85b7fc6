"""Every measurement program in scripts/ says what it does and how it is called (`--help`)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
MODULES = ("harness.py", "reference_beam.py")  # imported by the others and by the tests, not run


def help_of(script: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "COLUMNS": "120"}
    return subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, env=environment, timeout=300
    )


def test_every_script_prints_its_help() -> None:
    scripts = sorted(path for path in SCRIPTS.glob("*.py") if path.name not in MODULES)
    with ThreadPoolExecutor(max_workers=4) as pool:  # each start imports torch: side by side
        results = dict(zip(scripts, pool.map(help_of, scripts), strict=True))
    failed = {
        script.name: result.stderr[-500:]
        for script, result in results.items()
        if result.returncode != 0 or "Usage" not in result.stdout
    }
    assert not failed, failed
    assert len(results) >= 15
