"""A checkpoint decodes as it did before the front end left torchaudio: tests/data/search/model.pt
decodes AN4 dev (played at speed 0.9, so through the resampler, the surroundings trimmed, greedy
and beam + CTC) to the transcripts stored in
tests/data/search/front_end.json, written by the front end of commit 4cec7af, which took its
resampling and mel spectrum from torchaudio 2.11.0.

Rewrite them (only when a change of features is intended, and say why in the commit):
    python -m tests.test_front_end_regression
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data" / "search"
DEV = Path(__file__).resolve().parent.parent / "data" / "an4" / "dev.tsv"
STORED = DATA / "front_end.json"
DECODINGS = {"greedy": ["decode.strategy=greedy"], "beam_ctc": ["decode.strategy=beam", "decode.beam_size=4"]}


def decode_dev(decoding: str, cache: Path) -> dict[str, str]:
    from las.export.runtime import load_model
    from las.recognition.recognizer import Recognizer

    settings = [*DECODINGS[decoding], "decode.ctc_weight=0.5", "decode.speed=0.9", "decode.other_speed=0"]
    settings.append(f"data.cache_dir={cache}")
    recognizer = Recognizer(load_model(DATA / "model.pt"), "cpu", settings)
    return {result.id: result.text for result in recognizer.transcribe(DEV)}


@pytest.mark.parametrize("decoding", sorted(DECODINGS))
def test_a_checkpoint_decodes_to_the_transcripts_of_the_torchaudio_front_end(decoding: str, tmp_path: Path) -> None:
    expected = json.loads(STORED.read_text())[decoding]
    assert decode_dev(decoding, tmp_path) == expected


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        outputs = {decoding: decode_dev(decoding, Path(directory)) for decoding in DECODINGS}
    STORED.write_text(json.dumps(outputs, indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORED}", file=sys.stderr)
