"""Utterance records, and a corpus of them held as columns.

A corpus of a million utterances as a list of `Utterance` objects holds three strings and an
object per row (about 0.3 KB: 0.3 GB at a million rows) from the manifest's reading until
training ends. `Utterances` keeps the same rows as columns of UTF-8 text with offsets (about 0.15
KB a row) and makes an `Utterance` only when one is asked for.
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np

from las.data.front_end.audio import Segment


class Utterance:
    """One utterance of a manifest. The path of its file is held as text and made a `Path` when
    asked for: a `Path` object with its parts costs about 300 bytes, 300 MB at a million rows.
    `audio_location` and `feature_location` are that text (None where there is no such file)."""

    __slots__ = ("id", "text", "features", "segment", "audio_location", "feature_location")

    def __init__(
        self,
        id: str,
        audio: Path | str | None,  # None for precomputed features
        text: str | None = None,  # None when transcripts are unknown (decoding raw audio)
        features: np.ndarray | None = None,  # (frames, dim) precomputed (CMU 11-785 HW4 style); skips extraction
        segment: Segment | None = None,  # the part of `audio` this utterance is (None: all of it)
        # A `.npy` of (frames, dim) precomputed features (HW4P2's per-utterance files), copied into
        # the feature cache on first use and memory-mapped from there: a corpus of them is never in memory.
        feature_file: Path | str | None = None,
    ) -> None:
        self.id, self.text, self.features, self.segment = id, text, features, segment
        self.audio_location = None if audio is None else str(audio)
        self.feature_location = None if feature_file is None else str(feature_file)

    @property
    def audio(self) -> Path | None:
        return None if self.audio_location is None else Path(self.audio_location)

    @property
    def feature_file(self) -> Path | None:
        return None if self.feature_location is None else Path(self.feature_location)

    @property
    def file(self) -> Path:
        """The file this utterance is read from: its audio, or its precomputed features."""
        return Path(self.location)

    @property
    def location(self) -> str:
        """`file` as its text."""
        return self.audio_location if self.audio_location is not None else self.feature_location  # type: ignore[return-value]

    @property
    def file_kind(self) -> str:
        """What `file` is, as errors name it."""
        return "audio file" if self.audio_location is not None else "feature file"

    def with_text(self, text: str) -> Utterance:
        """The same utterance with another transcript."""
        return Utterance(self.id, self.audio_location, text, self.features, self.segment, self.feature_location)


class TextColumn(Sequence[str | None]):
    """Strings end to end in one UTF-8 buffer, with the offset where each ends; None kept as a
    flag. A `str` object costs 49 bytes before its characters, and a list 8 more per item."""

    def __init__(self, values: Iterable[str | None] = ()) -> None:
        self.buffer = bytearray()
        self.ends = array.array("q")
        self.missing = bytearray()  # 1 where the value is None
        for value in values:
            self.append(value)

    def append(self, value: str | None) -> None:
        if value is not None:
            self.buffer += value.encode()
        self.ends.append(len(self.buffer))
        self.missing.append(value is None)

    def __len__(self) -> int:
        return len(self.ends)

    @overload
    def __getitem__(self, index: int) -> str | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[str | None]: ...
    def __getitem__(self, index: int | slice) -> str | None | list[str | None]:
        if isinstance(index, slice):
            return [self[position] for position in range(len(self))[index]]
        index = range(len(self))[index]  # negative indices as a list's; IndexError past the end
        if self.missing[index]:
            return None
        start = self.ends[index - 1] if index else 0
        return self.buffer[start : self.ends[index]].decode()

    def __iter__(self) -> Iterator[str | None]:
        start = 0
        for end, missing in zip(self.ends, self.missing, strict=True):
            yield None if missing else self.buffer[start:end].decode()
            start = end


class Utterances(Sequence[Utterance]):
    """Utterances as columns: ids, transcripts and file locations as text columns; the rare
    segments and in-memory feature matrices by row. An `Utterance` is made per item read."""

    def __init__(self, utterances: Iterable[Utterance] = ()) -> None:
        self.ids = TextColumn()
        self.texts = TextColumn()
        self.locations = TextColumn()  # the audio file, else the feature file, else None
        self.is_audio = bytearray()  # 1 where `locations` names audio
        self.segments: dict[int, Segment] = {}
        self.features: dict[int, np.ndarray] = {}
        for utterance in utterances:
            self.append(utterance)

    @classmethod
    def of(cls, utterances: Iterable[Utterance]) -> Utterances:
        """`utterances` as columns (itself if it already is)."""
        return utterances if isinstance(utterances, Utterances) else cls(utterances)

    def append(self, utterance: Utterance) -> None:
        index = len(self)
        self.ids.append(utterance.id)
        self.texts.append(utterance.text)
        self.locations.append(utterance.location)
        self.is_audio.append(utterance.audio_location is not None)
        if utterance.segment is not None:
            self.segments[index] = utterance.segment
        if utterance.features is not None:
            self.features[index] = utterance.features

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> Utterance: ...
    @overload
    def __getitem__(self, index: slice) -> Utterances: ...
    def __getitem__(self, index: int | slice) -> Utterance | Utterances:
        if isinstance(index, slice):
            return Utterances(self[position] for position in range(len(self))[index])
        index = range(len(self))[index]
        return self.made(index, self.ids[index], self.texts[index], self.locations[index])  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Utterance]:
        rows = zip(self.ids, self.texts, self.locations, strict=True)
        return (self.made(index, *row) for index, row in enumerate(rows))  # type: ignore[arg-type]

    def made(self, index: int, id: str, text: str | None, location: str | None) -> Utterance:
        """The `Utterance` of row `index`, whose text columns hold `id`, `text` and `location`."""
        audio = self.is_audio[index]
        return Utterance(
            id,
            location if audio else None,
            text,
            self.features.get(index),
            self.segments.get(index),
            None if audio else location,
        )
