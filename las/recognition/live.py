"""`las decode CHECKPOINT - --stream`: 16-bit PCM from standard input, raw or a WAV stream
(las.data.front_end.pcm), or an audio file, played at its own pace with `--realtime`, else as fast as it
arrives or decodes, to JSON lines as the words come: partial results that may still grow, final
segments that will not, each with its times on the recording's clock and how long after its
audio arrived it was written."""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import numpy as np

from las.core.errors import LasError
from las.data.front_end.audio import AUDIO_SUFFIXES, load_audio
from las.data.front_end.pcm import pcm_pieces
from las.export.runtime import load_model
from las.recognition.recognizer import Recognizer
from las.recognition.stream import StreamResult
from las.recognition.timing import Word

PIECE_SECONDS = 0.1  # what is read (or played) at a time
ARRIVALS_KEPT = 600  # a minute of pieces: when each arrived, for the delays of what they decide


def stream_decode(
    checkpoint: Path, source: Path, out: Path | None, settings: Sequence[str], device: str, realtime: bool
) -> int:
    """Decode `source` (`-`: standard input) as a stream into `out` (stdout when None); the
    number of final segments written."""
    if str(source) != "-" and source.suffix.lower() not in AUDIO_SUFFIXES:
        raise LasError(
            f"--stream decodes one recording as it arrives: an audio file, or - for PCM on stdin (raw "
            f"16-bit, or a WAV stream); {source} is not an audio file"
        )
    stream = Recognizer(load_model(checkpoint), device, settings).stream()
    rate = stream.sample_rate
    size = round(rate * PIECE_SECONDS)
    pieces = pcm_pieces(sys.stdin.buffer, rate, size) if str(source) == "-" else file_pieces(source, rate, size)
    if realtime:
        pieces = paced(pieces, rate)
    arrivals: deque[tuple[int, float]] = deque(maxlen=ARRIVALS_KEPT)  # (samples pushed by then, wall clock)
    pushed, finals = 0, 0
    with lines_to(out) as writer:
        for piece in pieces:
            pushed += len(piece)
            arrivals.append((pushed, time.monotonic()))
            finals += write(writer, stream.push(piece), arrivals, rate)
        finals += write(writer, stream.finish(), arrivals, rate)
    return finals


@contextmanager
def lines_to(out: Path | None) -> Iterator[TextIO]:
    """`out` opened for lines as they come, or stdout."""
    if out is None:
        yield sys.stdout
        return
    try:
        with out.open("w") as writer:
            yield writer
    except OSError as error:
        raise LasError(f"--out {out}: cannot write there: {error.strerror or error}") from None


def write(writer: TextIO, results: list[StreamResult], arrivals: deque[tuple[int, float]], rate: int) -> int:
    """Each result as a JSON line, flushed (a reader waits on it); how many were final."""
    now = time.monotonic()
    for result in results:
        line = {
            "final": result.final,
            "text": result.text,
            "start": round(result.start, 3),
            "end": round(result.end, 3),
            "heard": round(result.heard, 3),
            "delay": round(now - arrived(arrivals, result.end * rate), 3),
            "words": [word_line(word) for word in result.words],
        }
        writer.write(json.dumps(line) + "\n")
    writer.flush()
    return sum(result.final for result in results)


def word_line(word: Word) -> dict[str, str | float]:
    """A word as a JSON line gives it: its confidence where it was measured."""
    line: dict[str, str | float] = {"word": word.word, "start": round(word.start, 3), "end": round(word.end, 3)}
    if word.confidence is not None:
        line["confidence"] = word.confidence
    return line


def arrived(arrivals: deque[tuple[int, float]], sample: float) -> float:
    """When the piece holding `sample` arrived (the oldest kept, for one older than them)."""
    for pushed, when in arrivals:
        if pushed >= sample:
            return when
    return arrivals[-1][1] if arrivals else time.monotonic()


def file_pieces(path: Path, rate: int, size: int) -> Iterator[np.ndarray]:
    """An audio file's samples at `rate`, `size` at a time."""
    waveform = load_audio(path, rate).numpy()
    for first in range(0, len(waveform), size):
        yield waveform[first : first + size]


def paced(pieces: Iterator[np.ndarray], rate: int) -> Iterator[np.ndarray]:
    """`pieces` of samples at `rate`, each once its end is due on the recording's clock from the
    first (`--realtime`: a file, or a recording piped in faster than it was spoken, played at its
    own pace; audio arriving live is due as it arrives, and waits for nothing)."""
    start, heard = time.monotonic(), 0
    for piece in pieces:
        heard += len(piece)
        time.sleep(max(0.0, start + heard / rate - time.monotonic()))
        yield piece


def check_stream_options(output_format: str, plot_attention: int) -> None:
    """The decode options a stream has no use for: one clear error rather than silence."""
    if output_format not in ("csv", "jsonl"):
        raise LasError(
            f"--stream writes JSON lines as the words come; --format {output_format} is for whole recordings"
        )
    if plot_attention:
        raise LasError("--plot-attention draws whole recordings' attention; --stream has none to draw")
