"""AN4 dev at lower sample rates: how a model decodes audio written at 16, 8, 6 and 4 kHz, and
whether `las decode` warns about it.

    python scripts/sample_rates.py runs/an4/best.pt [CHECKPOINT ...]

Each dev recording is resampled from 16 kHz and written at the lower rate, as a recorder at that
rate would have (under runs/sample-rates/, once). Every checkpoint decodes each set with the
default decoding through `las decode`, in a process of its own as a user runs it; the table gives
the CER, WER, their ratio to 16 kHz and whether decoding warned.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import soundfile
import torch
import typer
from harness import header

from las.data.corpora.manifest import TSV_HEADER, read_utterances
from las.data.front_end.signal import resample

RATES = (16000, 8000, 6000, 4000)
ROOT = Path("runs/sample-rates")
LAS = [sys.executable, "-m", "las", "--threads", "2"]


def build(rate: int) -> Path:
    """AN4 dev written at `rate`: a TSV manifest beside its audio."""
    folder = ROOT / str(rate)
    manifest = folder / "dev.tsv"
    if manifest.exists():
        return manifest
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["\t".join(TSV_HEADER)]
    for utterance in read_utterances("data/an4/dev.tsv"):
        samples, original = soundfile.read(utterance.audio_location, dtype="float32")
        written = resample(torch.from_numpy(samples), original, rate).numpy()
        soundfile.write(folder / f"{utterance.id}.flac", written, rate)
        rows.append(f"{utterance.id}\t{utterance.id}.flac\t{len(written) / rate:.2f}\t{utterance.text}")
    manifest.write_text("\n".join(rows) + "\n")
    return manifest


def measure(checkpoint: str, manifest: Path) -> tuple[dict, bool]:
    """(`las eval --json`'s report, whether `las decode` warned) of `checkpoint` on `manifest`."""
    hypotheses = manifest.with_name(f"{Path(checkpoint).parent.name}-hypotheses.csv")
    decoded = subprocess.run(
        [*LAS, "decode", checkpoint, str(manifest), "--out", str(hypotheses)], capture_output=True, text=True
    )
    if decoded.returncode:
        sys.exit(decoded.stderr)
    report = subprocess.run(
        [*LAS, "eval", str(hypotheses), str(manifest), "--json"], capture_output=True, text=True, check=True
    )
    return json.loads(report.stdout), "warning:" in decoded.stderr


def main(checkpoints: list[Path] = typer.Argument(..., help="Checkpoints to decode each rate's set with.")) -> None:
    """Decode AN4 dev written at 16, 8, 6 and 4 kHz with each checkpoint; a row per rate."""
    manifests = {rate: build(rate) for rate in RATES}
    print(header("checkpoint", "written at", "CER", "x 16 kHz", "WER", "warning"))
    for checkpoint in checkpoints:
        reference = None
        for rate, manifest in manifests.items():
            report, warned = measure(checkpoint, manifest)
            reference = reference or report["cer"]
            ratio = report["cer"] / max(reference, 1e-9)
            print(
                f"| {checkpoint} | {rate / 1000:g} kHz | {report['cer']:.2f} | {ratio:.2f} | {report['wer']:.1f} "
                f"| {'yes' if warned else ''} |"
            )


if __name__ == "__main__":
    typer.run(main)
