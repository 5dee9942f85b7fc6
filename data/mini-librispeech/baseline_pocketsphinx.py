"""Another recogniser on the same audio: PocketSphinx's general US English model (its bundled
acoustic model, CMUdict and 3-gram LM, trained on far more than train-clean-5).

    python data/mini-librispeech/baseline_pocketsphinx.py data/mini-librispeech/corpus/report.tsv \
        --out runs/mini-librispeech/pocketsphinx-report.txt
    las eval runs/mini-librispeech/pocketsphinx-report.txt data/mini-librispeech/corpus/report.tsv

Needs `pip install pocketsphinx` (the `benchmark` extra). Writes Kaldi text, upper case as
LibriSpeech's transcripts are, and the real-time factor on one thread to stderr.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import soundfile
import typer
from pocketsphinx import Decoder

from las.data.corpora.manifest import read_utterances

app = typer.Typer(add_completion=False)


def transcribe(decoder: Decoder, samples: np.ndarray) -> str:
    """One utterance of 16 kHz 16-bit samples, decoded whole; fillers (<sil>, [NOISE]) dropped."""
    decoder.start_utt()
    decoder.process_raw(samples.tobytes(), full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    words = [] if hypothesis is None else [segment.word for segment in decoder.seg()]
    return " ".join(word.split("(")[0].upper() for word in words if not word.startswith(("<", "[")))


@app.command()
def main(manifest: Path, out: Path = typer.Option(..., help="Kaldi text of the transcripts")) -> None:
    decoder = Decoder(samprate=16000)
    lines, audio_seconds, started = [], 0.0, time.perf_counter()
    for utterance in read_utterances(manifest):
        samples, rate = soundfile.read(str(utterance.audio), dtype="int16")
        if rate != 16000 or samples.ndim != 1:
            raise typer.BadParameter(f"{utterance.audio}: expected 16 kHz mono (LibriSpeech's)")
        lines.append(f"{utterance.id} {transcribe(decoder, samples)}\n")
        audio_seconds += len(samples) / rate
    elapsed = time.perf_counter() - started
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(lines))
    print(f"{len(lines)} utterances, {audio_seconds / 3600:.2f} h, RTF {elapsed / audio_seconds:.3f}", file=sys.stderr)


if __name__ == "__main__":
    app()
