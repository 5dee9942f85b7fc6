"""The corpus as columns (las.data.corpora.utterances): the same rows as a list of `Utterance`, read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from las.data.corpora.utterances import TextColumn, Utterance, Utterances
from las.data.front_end.audio import Segment


def test_a_text_column_gives_back_what_went_in() -> None:
    values = ["ONE", None, "", "naïve café 字", "TWO"]
    column = TextColumn(values)
    assert len(column) == 5
    assert list(column) == values
    assert [column[index] for index in range(5)] == values
    assert column[-1] == "TWO" and column[-4] is None
    assert column[1:4] == values[1:4]
    with pytest.raises(IndexError):
        column[5]


def test_utterances_as_columns_are_the_same_rows() -> None:
    features = np.ones((3, 2), dtype=np.float32)
    rows = [
        Utterance("a", Path("/audio/a.flac"), "HELLO"),
        Utterance("b", None, "WORLD", feature_file="/features/b.npy"),
        Utterance("c", "/audio/long.flac", None, segment=Segment(1.5, 2.0)),
        Utterance("d", None, "HI", features=features),
    ]
    columns = Utterances(rows)
    assert len(columns) == 4
    assert list(columns.ids) == ["a", "b", "c", "d"]
    assert list(columns.texts) == ["HELLO", "WORLD", None, "HI"]
    for row, read in zip(rows, columns, strict=True):
        for kept in Utterance.__slots__:
            assert getattr(read, kept) is getattr(row, kept) or getattr(read, kept) == getattr(row, kept)
    assert columns[-2].segment == Segment(1.5, 2.0) and columns[-2].audio == Path("/audio/long.flac")
    assert columns[3].features is features and columns[3].location is None
    assert columns[1].file_kind == "feature file" and columns[1].file == Path("/features/b.npy")
    assert [utterance.id for utterance in columns[1:3]] == ["b", "c"]
    assert Utterances.of(columns) is columns
