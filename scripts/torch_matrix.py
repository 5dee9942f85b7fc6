"""las beside the torch a user already has (issue 68): for each torch release, a fresh virtual
environment with that torch installed first, then `pip install .` (which must keep it), the test
suite's fast part, one epoch of the default recipe on AN4 and a decoding of dev; then the
features and transcripts of every release compared with the first's.

    python scripts/torch_matrix.py run 2.11.0 2.13.0 2.14.1    # runs/matrix/torch-VERSION/
    python scripts/torch_matrix.py table 2.11.0 2.13.0 2.14.1  # the table of docs/BENCHMARKS.md

Not in the per-commit CI: each environment installs a torch of several GB. Each step's outcome
is kept in runs/matrix/torch-VERSION/result.json, so `table` reads them without running again.

What is compared, release against release:
- the log-mel features of AN4 dev as `las decode` computes them (played at decode.speed, so
  through the resampler): the largest difference from the first release's, and whether equal;
- the transcripts of a fixed checkpoint (tests/data/search/model.pt) by the default decoding;
- the dev CER of one epoch of the default recipe trained in that environment (seed 1): training
  sums in whatever order each release's kernels sum, so its weights, and with them its
  transcripts, may differ by rounding; the CER says by how much that matters after one epoch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import typer

app = typer.Typer(add_completion=False)

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "runs" / "matrix"
FAST_TESTS = [
    "tests/test_signal.py",
    "tests/test_front_end_regression.py",
    "tests/test_search_regression.py",
    "tests/test_data.py",
    "tests/test_model.py",
    "tests/test_listener.py",
    "tests/test_export.py",
    "tests/test_text.py",
    "tests/test_config.py",
]
# Run inside each environment: dev's features as `las decode` computes them, and the fixed
# checkpoint's default transcripts.
PROBE = """
import json, sys, torch
from las.checkpoint import load_checkpoint
from las.recognizer import Recognizer
from tests.test_front_end_regression import decode_dev
from las.data.audio import load_audio
from las.data.features import FilterbankExtractor, log_mel_features
from las.data.manifest import read_utterances
from las.config import Config

checkpoint = load_checkpoint("tests/data/search/model.pt")
extractor = FilterbankExtractor(checkpoint.config.features)
speed = Config().decode.speed
features = {
    row.id: log_mel_features(extractor, load_audio(row.audio, 16000), row.id, speed)
    for row in read_utterances("data/an4/dev.tsv")
}
torch.save(features, sys.argv[1])
import pathlib, tempfile
with tempfile.TemporaryDirectory() as cache:
    transcripts = decode_dev("beam_ctc", pathlib.Path(cache))
print(json.dumps({"torch": torch.__version__, "transcripts": transcripts}))
"""


def run_step(name: str, command: list[str], log: Path, environment: dict[str, str]) -> dict[str, object]:
    """`command` run from the repository root, its output appended to `log`: exit code and seconds."""
    started = time.perf_counter()
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=environment)
    seconds = time.perf_counter() - started
    with log.open("a") as output:
        output.write(f"$ {' '.join(command)}\n{finished.stdout}{finished.stderr}")
    lines = [line for line in (finished.stdout + finished.stderr).splitlines() if line.strip()]
    print(f"  {name}: exit {finished.returncode} in {seconds:.0f} s", flush=True)
    return {"exit": finished.returncode, "seconds": round(seconds, 1), "last": lines[-1] if lines else ""}


@app.command()
def run(versions: list[str], threads: int = 2) -> None:
    """Build an environment per torch VERSION and run the checks in it."""
    for version in versions:
        folder = MATRIX / f"torch-{version}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        log, venv = folder / "log.txt", folder / "venv"
        python, las = str(venv / "bin" / "python"), str(venv / "bin" / "las")
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "CI": "true"}
        print(f"torch {version}", flush=True)
        steps = {"venv": run_step("venv", [sys.executable, "-m", "venv", str(venv)], log, environment)}
        steps["torch"] = run_step("torch", [python, "-m", "pip", "install", f"torch=={version}"], log, environment)
        steps["las"] = run_step("las", [python, "-m", "pip", "install", ".[dev,export]"], log, environment)
        kept = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        run_directory = folder / "run"
        steps["tests"] = run_step(
            "tests", [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FAST_TESTS], log, environment
        )
        train = [las, "--threads", str(threads), "train", "--epochs", "1", "--seed", "1", "--out", str(run_directory)]
        steps["train"] = run_step("train", [*train, "--set", f"data.cache_dir={folder / 'cache'}"], log, environment)
        decoded = folder / "dev.csv"
        decode = [las, "decode", str(run_directory / "last.pt"), "data/an4/dev.tsv", "--out", str(decoded)]
        steps["decode"] = run_step("decode", [*decode, "--set", f"data.cache_dir={folder / 'cache'}"], log, environment)
        evaluation = subprocess.run(
            [las, "eval", str(decoded), "data/an4/dev.tsv", "--json"], cwd=ROOT, capture_output=True, text=True
        )
        probe = subprocess.run(
            [python, "-c", PROBE, str(folder / "features.pt")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=environment,
        )
        result = {
            "version": version,
            "torch_after_install": kept.stdout.strip(),
            "steps": steps,
            "evaluation": json.loads(evaluation.stdout) if evaluation.returncode == 0 else evaluation.stderr[-500:],
            "probe": json.loads(probe.stdout.splitlines()[-1]) if probe.returncode == 0 else probe.stderr[-2000:],
        }
        (folder / "result.json").write_text(json.dumps(result, indent=1) + "\n")


def largest_difference(features: dict, reference: dict) -> float:
    return max(float((features[key] - reference[key]).abs().max()) for key in reference)


@app.command()
def table(versions: list[str]) -> None:
    """The results of `run` as a Markdown table, each release against the first's features and transcripts."""
    import torch

    results = [json.loads((MATRIX / f"torch-{version}" / "result.json").read_text()) for version in versions]
    features = [torch.load(MATRIX / f"torch-{version}" / "features.pt") for version in versions]
    print(
        "| torch asked | torch after `pip install .` | fast tests | 1 epoch: train, decode | dev CER, 1 epoch |"
        " features vs the first (max abs) | fixed checkpoint's transcripts vs the first |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    first = results[0]["probe"]["transcripts"]
    for result, found in zip(results, features, strict=True):
        steps = result["steps"]
        evaluation = result["evaluation"]
        cer = f"{evaluation['cer']:.2f}%" if isinstance(evaluation, dict) else "failed"
        same = sum(first[key] == text for key, text in result["probe"]["transcripts"].items())
        difference = largest_difference(found, features[0])
        train, decode = steps["train"], steps["decode"]
        print(
            f"| {result['version']} | {result['torch_after_install']} | {steps['tests']['last']} | "
            f"exit {train['exit']} ({train['seconds']:.0f} s), exit {decode['exit']} | {cer} | "
            f"{'equal' if difference == 0 else f'{difference:.2e}'} | {same}/{len(first)} equal |"
        )


if __name__ == "__main__":
    app()
