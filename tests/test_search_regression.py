"""Decoding keeps its results: every strategy and scorer combination on the AN4 dev set gives the
hypotheses and scores stored in tests/data/search/outputs.json, written by the search code as it
was before it was rebuilt around scorers (commit 078c20f). The model there is small but trained
(0.56M parameters, 25 epochs, greedy dev CER 55%), so its choices are not ties that rounding
could flip; its training state is left out. It and the LM came from:
    las train --out runs/small --epochs 25 --set model.listener_hidden=64 --set model.key_dim=64 \
        --set model.value_dim=64 --set model.embedding_dim=32 --set model.speller_hidden=128 \
        --set model.location_channels=4 --set model.location_kernel=9 --set model.ctc_weight=0.3 \
        --set train.speed_perturbation=0 --set train.augment.noise=0 --set train.augment.telephone=0 \
        --set train.augment.reverberation=0 --set train.augment.gain_db=0 --set train.average_best=0
    las pretrain --out tests/data/search/lm.pt --epochs 15 --set model.embedding_dim=32 \
        --set model.speller_hidden=96 --set model.key_dim=32 --set model.value_dim=32

Rewrite the stored outputs (only when a change of results is intended, and say why in the commit):
    python -m tests.test_search_regression
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parent / "data" / "search"
DEV = Path(__file__).resolve().parent.parent / "data" / "an4" / "dev.tsv"
LANGUAGE_MODEL = DATA / "lm.pt"
# decode.* settings of each case. ctc_weight is set everywhere: the code these outputs come from
# ignored it outside beam search.
CASES: dict[str, dict[str, object]] = {
    "greedy": {"strategy": "greedy", "ctc_weight": 0.0},
    "sample": {"strategy": "sample", "ctc_weight": 0.0, "samples": 8, "nbest": 3, "seed": 7},
    "beam": {"strategy": "beam", "ctc_weight": 0.0, "nbest": 4},
    "beam_ctc": {"strategy": "beam", "ctc_weight": 0.5, "nbest": 4},
    "beam_lm": {"strategy": "beam", "ctc_weight": 0.0, "lm": LANGUAGE_MODEL, "lm_weight": 0.3, "nbest": 4},
    "beam_ctc_lm": {"strategy": "beam", "ctc_weight": 0.5, "lm": LANGUAGE_MODEL, "lm_weight": 0.3, "nbest": 4},
}


def decode_dev(case: str, cache: Path) -> dict[str, list[list[object]]]:
    """Per dev utterance, its n-best list as [text, score] pairs."""
    from las.export.runtime import load_model
    from las.recognition.recognizer import Recognizer

    settings = [f"decode.{key}={value}" for key, value in CASES[case].items()] + [f"data.cache_dir={cache}"]
    settings.append("features.trim_surroundings=false")  # the outputs were decoded from whole utterances
    settings += ["decode.speed=1", "decode.other_speed=0"]  # ... as they were said, in one pass
    recognizer = Recognizer(load_model(DATA / "model.pt"), "cpu", settings)
    return {result.id: [[text, score] for text, score in result.nbest] for result in recognizer.transcribe(DEV)}


@pytest.fixture(scope="module")
def expected() -> dict[str, dict[str, list[list[object]]]]:
    return json.loads((DATA / "outputs.json").read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_search_gives_the_stored_hypotheses_and_scores(case: str, expected: dict, tmp_path_factory) -> None:
    found = decode_dev(case, tmp_path_factory.getbasetemp() / "search-cache")
    assert found.keys() == expected[case].keys()
    for identifier, nbest in expected[case].items():
        assert [text for text, _ in found[identifier]] == [text for text, _ in nbest], identifier
        for (_, score), (_, stored) in zip(found[identifier], nbest, strict=True):
            # float32 sums over a whole search in another order (a fused speller): 2e-5 of the score
            assert score == pytest.approx(stored, rel=2e-5, abs=1e-4), identifier


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        outputs = {case: decode_dev(case, Path(directory)) for case in CASES}
    (DATA / "outputs.json").write_text(json.dumps(outputs, indent=1) + "\n")
    print(f"wrote {DATA / 'outputs.json'}", file=sys.stderr)
