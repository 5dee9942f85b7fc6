"""las beside the torch a user already has (issue 68): for each torch release, a fresh virtual
environment with that torch installed first, then `pip install .` (which must keep it), the test
suite's fast part, one epoch of the default recipe on AN4, a decoding of dev, its word times
(`las align`) and an ONNX export (`las export`); then the features, transcripts and weights of
every release compared with the first's.

    python scripts/torch_matrix.py run 2.11.0 2.13.0 2.14.1    # runs/matrix/torch-VERSION/
    python scripts/torch_matrix.py table 2.11.0 2.13.0 2.14.1  # the table of docs/archive/experiments.md

Not in the per-commit CI: each environment installs a torch of several GB. Each step's outcome
is kept in runs/matrix/torch-VERSION/result.json, so `table` reads them without running again.

What is compared, release against release:
- the log-mel features of AN4 dev as `las decode` computes them (played at speed 0.9, so
  through the resampler): the largest difference from the first release's, or "equal";
- the transcripts of a fixed checkpoint (tests/data/search/model.pt) by the default decoding;
- the weights after one epoch of the default recipe trained in that environment (seed 1), and
  its transcripts of dev: each release's kernels may sum in another order, and where they do,
  the weights differ by rounding, and the transcripts may.
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

from las.recognition.transcripts import read_transcripts

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
from las.model.checkpoint import load_checkpoint
from las.recognition.recognizer import Recognizer
from tests.test_front_end_regression import decode_dev
from las.data.front_end.audio import load_audio
from las.data.front_end.features import FilterbankExtractor, log_mel_features
from las.data.corpora.manifest import read_utterances
from las.core.config import Config

checkpoint = load_checkpoint("tests/data/search/model.pt")
extractor = FilterbankExtractor(checkpoint.config.features)
speed = 0.9  # through the resampler
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
            "tests",
            [python, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", *FAST_TESTS],
            log,
            environment,
        )
        train = [las, "--threads", str(threads), "train", "--epochs", "1", "--seed", "1", "--out", str(run_directory)]
        steps["train"] = run_step("train", [*train, "--set", f"data.cache_dir={folder / 'cache'}"], log, environment)
        decoded = folder / "dev.csv"
        decode = [las, "decode", str(run_directory / "last.pt"), "data/an4/dev.tsv", "--out", str(decoded)]
        steps["decode"] = run_step("decode", [*decode, "--set", f"data.cache_dir={folder / 'cache'}"], log, environment)
        align = [las, "align", str(run_directory / "last.pt"), "data/an4/dev.tsv", "--out", str(folder / "dev.ctm")]
        steps["align"] = run_step("align", align, log, environment)
        export = [las, "export", str(run_directory / "last.pt"), str(folder / "export")]
        steps["export"] = run_step("export", export, log, environment)
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


@app.command()
def table(versions: list[str]) -> None:
    """The results of `run` as a Markdown table, each release against the first's features,
    transcripts and trained weights."""
    import torch

    folders = [MATRIX / f"torch-{version}" for version in versions]
    results = [json.loads((folder / "result.json").read_text()) for folder in folders]
    features = [torch.load(folder / "features.pt") for folder in folders]
    weights = [torch.load(folder / "run" / "last.pt", weights_only=False)["model"] for folder in folders]
    decoded = [read_transcripts(folder / "dev.csv") for folder in folders]
    word_times = [(folder / "dev.ctm").read_text() if (folder / "dev.ctm").exists() else None for folder in folders]
    print(
        "| torch asked | torch after `pip install .` | fast tests | 1 epoch: train, decode, align, export | dev CER |"
        " features vs the first (max abs) | fixed checkpoint's transcripts vs the first |"
        " 1 epoch's weights vs the first (max abs) | its transcripts, word times vs the first |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    first = results[0]["probe"]["transcripts"]
    for result, found, trained, transcripts, times in zip(results, features, weights, decoded, word_times, strict=True):
        steps, evaluation = result["steps"], result["evaluation"]
        train, decode, align, export = (steps[name] for name in ("train", "decode", "align", "export"))
        cer = f"{evaluation['cer']:.2f}%" if isinstance(evaluation, dict) else "failed"
        same = sum(first[key] == text for key, text in result["probe"]["transcripts"].items())
        equal = sum(decoded[0][key] == text for key, text in transcripts.items())
        print(
            f"| {result['version']} | {result['torch_after_install']} | {steps['tests']['last']} | "
            f"exit {train['exit']} ({train['seconds']:.0f} s), {decode['exit']}, {align['exit']}, "
            f"{export['exit']} | {cer} | "
            f"{difference(found, features[0])} | {same}/{len(first)} equal | "
            f"{difference(trained, weights[0])} | {equal}/{len(transcripts)} equal, "
            f"{'none' if times is None else 'equal' if times == word_times[0] else 'different'} |"
        )


def difference(tensors: dict, reference: dict) -> str:
    """The largest absolute difference between tensors of the same names, or "equal"."""
    largest = max(float((tensors[key].double() - reference[key].double()).abs().max()) for key in reference)
    return "equal" if largest == 0 else f"{largest:.2e}"


if __name__ == "__main__":
    app()
