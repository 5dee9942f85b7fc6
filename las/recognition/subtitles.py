"""Subtitles of a recording: SubRip (.srt) and WebVTT (.vtt), one cue per decoded segment.

A cue is its number (SubRip), its time line and its text, and a blank line ends it: a cue whose
text is empty or blank would end early and shift how players read every cue after it, so pieces
without text get no cue. Text is written so that no format rule can misread it: whitespace of any
kind (a newline, a tab) becomes one space, `-->` (which marks a time line) becomes `->`, WebVTT's
`&`, `<` and `>` are escaped, and long texts are wrapped into lines of at most LINE_CHARACTERS.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import Protocol, TextIO

SUBTITLE_FORMATS = ("srt", "vtt")
LINE_CHARACTERS = 42  # the common limit of a subtitle line (BBC, Netflix)
WEBVTT_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


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


def cue_lines(text: str, subtitle_format: str) -> list[str]:
    """The lines of a cue's text, safe in `subtitle_format`; none for a text without words."""
    words = " ".join(text.split()).replace("-->", "->")
    if subtitle_format == "vtt":
        words = "".join(WEBVTT_ESCAPES.get(character, character) for character in words)
    return textwrap.wrap(words, LINE_CHARACTERS, break_long_words=True, break_on_hyphens=False)


def write_subtitles(cues: Iterable[Cue], subtitle_format: str, stream: TextIO) -> None:
    """Cues with text in time order, numbered from 1 (SubRip), under a WEBVTT header (WebVTT);
    each lasts at least a millisecond."""
    separator = "," if subtitle_format == "srt" else "."
    if subtitle_format == "vtt":
        stream.write("WEBVTT\n\n")
    number = 0
    for cue in cues:
        lines = cue_lines(cue.text, subtitle_format)
        if not lines:
            continue
        number += 1
        if subtitle_format == "srt":
            stream.write(f"{number}\n")
        start, end = timestamp(cue.start, separator), timestamp(max(cue.end, cue.start + 0.001), separator)
        stream.write(f"{start} --> {end}\n" + "\n".join(lines) + "\n\n")
