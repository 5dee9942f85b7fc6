"""Subtitles that the parsers their users have read back as written, whatever the text holds."""

from __future__ import annotations

import html
import io
from dataclasses import dataclass

import pytest

from las.recognition.subtitles import LINE_CHARACTERS, write_subtitles

srt = pytest.importorskip("srt")
webvtt = pytest.importorskip("webvtt")


@dataclass(frozen=True)
class Piece:
    start: float
    end: float
    text: str


HOSTILE = [
    Piece(0.0, 1.0, "GO TO TWO"),
    Piece(1.0, 1.5, ""),  # a piece that decoded to nothing
    Piece(1.5, 2.0, "   "),
    Piece(2.0, 3.0, "A --> B"),  # a time line's arrow
    Piece(3.0, 4.0, "LINE\nBREAK\tAND TAB"),
    Piece(4.0, 9.0, "SEVENTY " * 30),  # 240 characters
    Piece(9.0, 10.0, "ÉCOLE 日本語 <b>&amp; 1 < 2"),
    Piece(10.0, 10.0, "NO TIME"),  # a zero-length piece
    Piece(3725.5, 3726.25, "AN HOUR IN"),
]
SPOKEN = [piece for piece in HOSTILE if piece.text.strip()]


def written(subtitle_format: str) -> str:
    stream = io.StringIO()
    write_subtitles(HOSTILE, subtitle_format, stream)
    return stream.getvalue()


def words(text: str) -> str:
    return " ".join(text.split()).replace("-->", "->")


def test_srt_reads_back_one_cue_per_piece_with_text() -> None:
    cues = list(srt.parse(written("srt")))
    assert [cue.index for cue in cues] == list(range(1, len(SPOKEN) + 1))
    assert [words(cue.content) for cue in cues] == [words(piece.text) for piece in SPOKEN]
    assert [cue.start.total_seconds() for cue in cues] == [piece.start for piece in SPOKEN]
    assert all(cue.end > cue.start for cue in cues)
    assert all(len(line) <= LINE_CHARACTERS for cue in cues for line in cue.content.splitlines())


def test_webvtt_reads_back_one_cue_per_piece_with_text() -> None:
    captions = webvtt.from_buffer(io.StringIO(written("vtt"))).captions
    # webvtt-py gives the text as written, its character references not resolved.
    assert [words(html.unescape(caption.text)) for caption in captions] == [words(piece.text) for piece in SPOKEN]
    assert [caption.start_in_seconds for caption in captions] == [int(piece.start) for piece in SPOKEN]
    assert captions[-1].start == "01:02:05.500" and captions[-1].end == "01:02:06.250"
    assert all(caption.end_in_seconds >= caption.start_in_seconds for caption in captions)
    assert "&lt;b&gt;&amp;amp; 1 &lt; 2" in written("vtt")  # markup in the text is text, not markup


def test_a_recording_without_any_text_gives_subtitles_without_cues() -> None:
    stream = io.StringIO()
    write_subtitles([Piece(0.0, 2.0, ""), Piece(2.0, 3.0, " ")], "vtt", stream)
    assert stream.getvalue() == "WEBVTT\n\n" and webvtt.from_buffer(io.StringIO(stream.getvalue())).captions == []
    stream = io.StringIO()
    write_subtitles([Piece(0.0, 2.0, "")], "srt", stream)
    assert stream.getvalue() == "" and list(srt.parse("")) == []


@pytest.mark.parametrize("output_format", ["csv", "kaldi", "jsonl"])
def test_transcripts_read_back_as_written_whatever_the_text_holds(output_format: str, tmp_path) -> None:
    """Commas, quotes, `-->` and any script survive every format; whitespace is read back as
    transcripts are read (one space between words: `clean_transcript`), which Kaldi text also
    writes."""
    from las.recognition.transcripts import Transcript, read_transcripts, write_transcripts

    texts = {
        "a": 'COMMA, "QUOTES" AND -->',
        "b": "LINE\nBREAK\tTAB",
        "c": "ÉCOLE 日本語",
        "d": "",
        "e": "SEVENTY " * 200,
    }
    path = tmp_path / f"hypotheses.{output_format}"
    with open(path, "w", encoding="utf-8") as stream:
        write_transcripts([Transcript(key, text) for key, text in texts.items()], output_format, stream)
    assert read_transcripts(path) == {key: " ".join(text.split()) for key, text in texts.items()}
