"""Confidences of characters, words and recordings (las.recognition.confidence), in JSONL, and words below
`decode.min_confidence` left out."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from las.core.metrics import correct_words
from las.recognition.confidence import CharacterConfidence, confidences, overall_confidence, word_confidence

from .conftest import run


@pytest.mark.parametrize("measure", ["entropy", "probability"])
def test_a_certain_choice_is_trusted_and_a_uniform_one_is_not(measure: str) -> None:
    certain = torch.full((1, 30), -1e4).index_fill(1, torch.tensor([3]), 0.0)
    uniform = torch.full((1, 30), -math.log(30))
    peaked = torch.log_softmax(torch.tensor([[4.0] + [0.0] * 29]), -1)
    chosen = torch.tensor([3])
    assert float(confidences(certain, chosen, measure)[0]) == pytest.approx(1.0, abs=1e-4)
    expected_uniform = 0.0 if measure == "entropy" else 1 / 30
    assert float(confidences(uniform, chosen, measure)[0]) == pytest.approx(expected_uniform, abs=1e-4)
    middle = float(confidences(peaked, torch.tensor([0]), measure)[0])
    assert expected_uniform < middle < 1.0


def test_a_word_is_as_trusted_as_its_least_trusted_character() -> None:
    assert word_confidence([0.9, 0.4, 0.8]) == 0.4
    assert overall_confidence([0.5, None, 0.7]) == pytest.approx(0.6)
    assert overall_confidence([]) is None


def test_a_streamed_character_is_trusted_by_the_distributions_asked_for_that_spelt_it() -> None:
    speller, ctc = torch.tensor([0.5, 0.25, 0.25]).log(), torch.tensor([0.9, 0.05, 0.05]).log()
    assert CharacterConfidence("probability", "both")(0, speller, ctc) == pytest.approx(0.7)  # their mean
    assert CharacterConfidence("probability", "speller")(0, speller, ctc) == pytest.approx(0.5)
    assert CharacterConfidence("probability", "ctc")(0, None, ctc) == pytest.approx(0.9)
    assert CharacterConfidence("probability", "ctc")(0, speller, None) is None  # spelt without the CTC head
    assert CharacterConfidence("entropy", "both")(0, speller, ctc) == pytest.approx(
        float(confidences(torch.stack([speller, ctc]), torch.tensor([0, 0]), "entropy").mean())
    )


def test_words_are_right_where_the_cheapest_alignment_matches_them() -> None:
    assert correct_words("G TWO EIGHT NINE".split(), "G TWO EIGHTY NINE".split()) == [True, True, False, True]
    assert correct_words("A B C X".split(), "A C".split()) == [True, False, True, False]


def test_jsonl_has_each_words_confidence_and_min_confidence_leaves_words_out(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    checkpoint, manifest = trained_run["run"] / "last.pt", trained_run["train"]
    code, stdout, stderr = run("decode", checkpoint, manifest, "--format", "jsonl")
    assert code == 0, stderr
    results = [json.loads(line) for line in stdout.splitlines()]
    words = [word for result in results for word in result["words"]]
    assert words and all(0.0 <= word["confidence"] <= 1.0 for word in words)
    for result in results:
        if result["words"]:
            mean = sum(word["confidence"] for word in result["words"]) / len(result["words"])
            assert result["confidence"] == pytest.approx(mean, abs=1e-3)
    threshold = sorted(word["confidence"] for word in words)[len(words) // 2]  # about half of them
    code, stdout, stderr = run("decode", checkpoint, manifest, "--format", "jsonl", "--min-confidence", threshold)
    assert code == 0, stderr
    kept = [word for line in stdout.splitlines() for word in json.loads(line)["words"]]
    left_out = len(words) - len(kept)
    assert 0 < left_out < len(words) and all(word["confidence"] >= threshold for word in kept)
    assert f"{left_out} words less confident than decode.min_confidence={threshold:g} left out" in stderr
    assert all(
        json.loads(line)["text"] == " ".join(w["word"] for w in json.loads(line)["words"])
        for line in stdout.splitlines()
    )


def test_subtitles_carry_each_cues_confidence_on_request(trained_run: dict[str, Path], tmp_path: Path) -> None:
    checkpoint, manifest = trained_run["run"] / "last.pt", trained_run["train"]
    for option, folder in (([], "plain"), (["--cue-confidence"], "rated")):
        code, _, stderr = run("decode", checkpoint, manifest, "--format", "vtt", "--out", tmp_path / folder, *option)
        assert code == 0, stderr
    rated = [line for file in sorted((tmp_path / "rated").iterdir()) for line in file.read_text().splitlines()]
    plain = [line for file in sorted((tmp_path / "plain").iterdir()) for line in file.read_text().splitlines()]
    texts = [(mine, theirs) for mine, theirs in zip(rated, plain, strict=True) if mine != theirs]
    assert texts and all(re.fullmatch(re.escape(theirs) + r" \[[01]\.\d\d\]", mine) for mine, theirs in texts)
