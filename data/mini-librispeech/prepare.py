"""Mini LibriSpeech's train-clean-5 (OpenSLR 31) as three speaker-disjoint manifests.

    python data/mini-librispeech/prepare.py                     # download from OpenSLR, then split
    python data/mini-librispeech/prepare.py --source FOLDER     # a LibriSpeech folder you have

FOLDER is `LibriSpeech/` or its `train-clean-5/`. The audio stays where it is; the manifests
(`train.tsv`, `choose.tsv`, `report.tsv`: `id  path  duration_s  text`, paths relative to the
manifest) are written to `--out` (git-ignored `data/mini-librispeech/corpus/` by default). Which
speaker goes where is `speakers.tsv` beside this file: settings are chosen on `choose`, results
reported on `report`, and neither is trained on. dev-clean-2 is not used at all.
"""

from __future__ import annotations

import csv
import os
import shutil
import tarfile
import tempfile
import urllib.request
from collections import Counter
from pathlib import Path

import soundfile
import typer

HERE = Path(__file__).resolve().parent
URL = "https://www.openslr.org/resources/31/train-clean-5.tar.gz"
SUBSET = "train-clean-5"
SPLITS = ("train", "choose", "report")

app = typer.Typer(add_completion=False)


def read_speakers(path: Path = HERE / "speakers.tsv") -> dict[str, str]:
    """speaker id -> the split it belongs to."""
    with path.open(newline="") as file:
        return {row["speaker"]: row["split"] for row in csv.DictReader(file, delimiter="\t")}


def find_subset(source: Path) -> Path:
    """The train-clean-5 folder in or at `source`."""
    for candidate in (source, source / SUBSET, source / "LibriSpeech" / SUBSET):
        if candidate.name == SUBSET and candidate.is_dir():
            return candidate
    raise typer.BadParameter(f"{source}: no {SUBSET} folder there (expected LibriSpeech/{SUBSET})")


def download(into: Path) -> Path:
    """OpenSLR's train-clean-5 archive (346 MB), unpacked into `into`; one clear error where it
    cannot be had or is damaged."""
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into) as scratch:
        archive = Path(scratch) / "train-clean-5.tar.gz"
        print(f"downloading {URL}")
        try:
            with urllib.request.urlopen(URL, timeout=60) as response, archive.open("wb") as file:
                shutil.copyfileobj(response, file)
            with tarfile.open(archive) as tar:
                tar.extractall(into, filter="data")
        except (OSError, EOFError, tarfile.TarError) as error:  # URLError is an OSError; EOFError: a cut gzip
            raise typer.BadParameter(
                f"cannot download and unpack {URL} ({error}); download it yourself and pass --source"
            ) from None
    return find_subset(into)


def utterances(subset: Path) -> list[tuple[str, Path, str]]:
    """(id, flac path, transcript) of every utterance, in id order."""
    found = []
    for transcripts in sorted(subset.glob("*/*/*.trans.txt")):
        for line in transcripts.read_text().splitlines():
            identifier, _, text = line.partition(" ")
            if identifier:
                found.append((identifier, transcripts.parent / f"{identifier}.flac", text.strip()))
    return sorted(found)


def write_manifests(subset: Path, out: Path, speakers: dict[str, str]) -> Counter[str]:
    """One TSV per split; returns the utterances in each."""
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[list[str]]] = {split: [] for split in SPLITS}
    for identifier, audio, text in utterances(subset):
        speaker = identifier.split("-")[0]
        if speaker not in speakers:
            raise typer.BadParameter(f"{audio}: speaker {speaker} is not in speakers.tsv")
        duration = soundfile.info(str(audio)).duration
        path = os.path.relpath(audio.resolve(), out.resolve())
        rows[speakers[speaker]].append([identifier, path, f"{duration:.4f}", text])
    for split, lines in rows.items():
        with (out / f"{split}.tsv").open("w", newline="") as file:
            writer = csv.writer(file, delimiter="\t", lineterminator="\n")
            writer.writerow(["id", "path", "duration_s", "text"])
            writer.writerows(lines)
    return Counter({split: len(lines) for split, lines in rows.items()})


@app.command()
def main(
    source: Path | None = typer.Option(None, help="a LibriSpeech folder holding train-clean-5 (else: download)"),
    out: Path = typer.Option(HERE / "corpus", help="where the manifests (and a download) go"),
) -> None:
    subset = find_subset(source) if source else download(out)
    counts = write_manifests(subset, out, read_speakers())
    for split in SPLITS:
        print(f"{out / split}.tsv: {counts[split]} utterances")


if __name__ == "__main__":
    app()
