"""`las decode`: a shell over `Recognizer` that transcribes a manifest, an audio file or a folder
and writes transcripts (CSV, Kaldi text, JSONL with times) or subtitles (SRT, WebVTT)."""

from __future__ import annotations

import dataclasses
import io
import math
import re
import sys
from pathlib import Path

from las.core.errors import LasError
from las.core.files import check_writable, make_directory, write_text_atomically
from las.data.corpora.manifest import read_utterances
from las.export.runtime import load_model
from las.recognition.confidence import DIGITS, overall_confidence
from las.recognition.plots import plot_hypothesis
from las.recognition.recognizer import Recognizer, Result, Segment, Timing
from las.recognition.subtitles import SUBTITLE_FORMATS, write_subtitles
from las.recognition.transcripts import Transcript, write_transcripts


def decode(
    checkpoint_path: str | Path,
    input_path: str | Path,
    out: str | Path | None = None,
    output_format: str = "csv",
    assignments: list[str] | None = None,
    device_name: str = "auto",
    plot_attention: int = 0,
    plot_directory: str | Path | None = None,
    input_format: str = "auto",
) -> tuple[int, Timing]:
    """Transcribe `input_path` with the `decode.*` defaults and `assignments` on top of them:
    how many recordings, and the time their decoding took."""
    checkpoint = load_model(checkpoint_path)
    recognizer = Recognizer(checkpoint, device_name, assignments or [])
    if out is not None:
        for precious, what in ((checkpoint_path, "the checkpoint"), (input_path, "the input")):
            if Path(out).resolve() == Path(precious).resolve():
                raise LasError(f"--out {out} is {what}: decoding would overwrite it")
    # Beside the output by default: dev.csv -> dev_attention/
    directory = Path(plot_directory or (Path(out).with_name(f"{Path(out).stem}_attention") if out else "attention"))
    skip = recognizer.config.data.bad_utterances == "skip"
    utterances = read_utterances(input_path, require_text=False, input_format=input_format, skip_bad=skip)
    subtitles_per_file = output_format in SUBTITLE_FORMATS and len(utterances) > 1
    if subtitles_per_file and out is None:
        raise LasError(f"--format {output_format} of {len(utterances)} recordings needs --out FOLDER (one file each)")
    if subtitles_per_file:
        check_file_names([utterance.id for utterance in utterances], f".{output_format}", out)
    if out is not None:
        (make_directory if subtitles_per_file else check_writable)(out, "--out")
    if plot_attention:
        make_directory(directory, "--plot-dir")
    utterances, features = recognizer.utterance_features(utterances, input_path)
    identifiers = [utterance.id for utterance in utterances]
    from_audio = [utterance.audio_location is not None for utterance in utterances]
    results = recognizer.recognize(identifiers, features, from_audio, recognizer.other_features(utterances))
    write_output(results, output_format, out, subtitles_per_file, recognizer.config.decode.subtitle_confidence)
    for result in results[:plot_attention]:
        for number, segment in enumerate(result.segments):
            suffix = f"_{number}.png" if len(result.segments) > 1 else ".png"
            plot_hypothesis(
                result.id, segment.hypothesis, recognizer.vocabulary, directory / file_name(result.id, suffix)
            )
    return len(results), recognizer.timing


def file_name(identifier: str, suffix: str) -> str:
    """A file name for an utterance id that stays inside its folder whatever the id holds ("../x", "a/b")."""
    safe = re.sub(r"[^\w.-]", "_", identifier).lstrip(".")
    return (safe or "_") + suffix


def check_file_names(identifiers: list[str], suffix: str, folder: str | Path | None) -> None:
    """Refuse, before decoding, ids that would write one file twice ("a/b" and "a_b": a_b.srt)."""
    first: dict[str, str] = {}
    for identifier in identifiers:
        name = file_name(identifier, suffix)
        if name in first:
            raise LasError(
                f"ids {first[name]!r} and {identifier!r} would both be written to {folder}/{name}: rename one"
            )
        first[name] = identifier


def transcript(result: Result) -> Transcript:
    """A result as text; JSONL also gets its score, confidence, n-best list, segments, and word
    times with their confidences."""
    extra = {
        "score": json_score(result.score),
        "nbest": [{"text": text, "score": json_score(score)} for text, score in result.nbest],
        "segments": [
            {"start": round(item.start, 3), "end": round(item.end, 3), "text": item.text} for item in result.segments
        ],
        "confidence": rounded(result.confidence),
        "words": [
            {
                "start": round(item.start, 3),
                "end": round(item.end, 3),
                "word": item.word,
                "confidence": rounded(item.confidence),
            }
            for item in result.words
        ],
    }
    return Transcript(result.id, result.text, extra)


def rated(segment: Segment) -> Segment:
    """A segment whose text ends with its confidence, the mean of its words' (`[0.83]`)."""
    confidence = overall_confidence([word.confidence for word in segment.words])
    return segment if confidence is None else dataclasses.replace(segment, text=f"{segment.text} [{confidence:.2f}]")


def rounded(confidence: float | None) -> float | None:
    return None if confidence is None else round(confidence, DIGITS)


def json_score(score: float) -> float | None:
    """A score as JSON can hold it: rounded, and null rather than NaN or infinity (not JSON)."""
    return round(score, 4) if math.isfinite(score) else None


def write_output(
    results: list[Result],
    output_format: str,
    out: str | Path | None,
    per_file: bool = False,
    confidence: bool = False,
) -> None:
    """To stdout, or to `out` through a temporary file, so an interrupted run leaves no half
    file; subtitles of several recordings go to one file each in the folder `out`, with each
    cue's `confidence` after its text where asked."""
    if per_file:
        for result in results:
            write_text_atomically(
                Path(out) / file_name(result.id, f".{output_format}"), formatted([result], output_format, confidence)
            )
    elif out is None:
        sys.stdout.write(formatted(results, output_format, confidence))
    else:
        write_text_atomically(out, formatted(results, output_format, confidence))


def formatted(results: list[Result], output_format: str, confidence: bool = False) -> str:
    text = io.StringIO()
    if output_format in SUBTITLE_FORMATS:
        segments = [segment for result in results for segment in result.segments]
        cues = [rated(segment) for segment in segments] if confidence else segments
        write_subtitles(cues, output_format, text)
    else:
        write_transcripts([transcript(result) for result in results], output_format, text)
    return text.getvalue()
