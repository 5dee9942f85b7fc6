"""Subtitles of a recording: SubRip (.srt) and WebVTT (.vtt), one cue per decoded segment."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TextIO

SUBTITLE_FORMATS = ("srt", "vtt")


class Cue(Protocol):
    start: float  # seconds
    end: float
    text: str


def timestamp(seconds: float, separator: str) -> str:
    """`HH:MM:SS,mmm` (SubRip: separator ",") or `HH:MM:SS.mmm` (WebVTT: ".")."""
    milliseconds = max(0, round(seconds * 1000))
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    whole, milliseconds = divmod(milliseconds, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{separator}{milliseconds:03d}"


def write_subtitles(cues: Iterable[Cue], subtitle_format: str, stream: TextIO) -> None:
    """Cues in time order, numbered from 1 (SubRip), under a WEBVTT header (WebVTT)."""
    separator = "," if subtitle_format == "srt" else "."
    if subtitle_format == "vtt":
        stream.write("WEBVTT\n\n")
    for number, cue in enumerate(cues, start=1):
        if subtitle_format == "srt":
            stream.write(f"{number}\n")
        stream.write(f"{timestamp(cue.start, separator)} --> {timestamp(cue.end, separator)}\n{cue.text}\n\n")
