"""Every measurement program in scripts/ says what it does and how it is called (`--help`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import typer
from typer.testing import CliRunner

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
MODULES = ("harness.py", "reference_beam.py")  # imported by the others and by the tests, not run


def loaded(script: Path) -> ModuleType:
    """The script as a module of its own name, as `python scripts/X.py` would run it but for its
    `__main__` line (tests/conftest.py puts scripts/ on the path, for the harness it imports)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_every_script_prints_its_help() -> None:
    # In this process: each start of its own would import torch again (50 s for the lot on 2 cores).
    scripts = sorted(path for path in SCRIPTS.glob("*.py") if path.name not in MODULES)
    failed = {}
    for script in scripts:
        module = loaded(script)
        application = getattr(module, "app", None)
        if application is None:  # a single command run by typer.run(main)
            application = typer.Typer(add_completion=False)
            application.command()(module.main)
        result = CliRunner().invoke(application, ["--help"], terminal_width=120)
        if result.exit_code != 0 or "Usage" not in result.output:
            failed[script.name] = result.output[-500:]
    assert not failed, failed
    assert len(scripts) >= 15


def test_a_script_runs_as_its_own_program() -> None:
    environment = {**os.environ, "COLUMNS": "120"}
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "tuning.py"), "--help"], capture_output=True, text=True, env=environment
    )
    assert result.returncode == 0 and "Usage" in result.stdout, result.stderr[-500:]
