"""The training's dev pass reads dev as decoding does: utterances longer than decoding reads
(`decode.segment_seconds`) cut at their pauses, each utterance's pieces joined into its text."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from las.core.config import Config
from las.core.text import Vocabulary
from las.data.dataset import SpeechDataset
from las.training import dev_evaluation
from las.training import train as train_module
from las.training.dev_evaluation import as_decoded
from las.training.train import train


def features_with(loudness: list[tuple[int, float]]) -> torch.Tensor:
    """Log-mel-like features `(frames, 8)`: runs of (frames, level) with a little jitter."""
    generator = torch.Generator().manual_seed(0)
    return torch.cat([level + 0.1 * torch.randn(frames, 8, generator=generator) for frames, level in loudness])


def test_dev_utterances_longer_than_decoding_reads_are_cut_at_their_pauses() -> None:
    quiet, loud = -12.0, 0.0
    short = features_with([(20, quiet), (200, loud), (20, quiet)])
    long = features_with([(100, quiet), (600, loud), (80, quiet), (500, loud), (300, quiet)])  # 15.8 s, a pause
    vocabulary = Vocabulary.from_texts(["A B"])
    dataset = SpeechDataset(["short", "long"], [short, long], ["A", "B"], vocabulary)
    pieces, owners = as_decoded(dataset, longest=1000)
    assert owners == [0, 1, 1]
    assert pieces.ids[0] == "short:0" and pieces.ids[1].startswith("long:") and pieces.ids[2].startswith("long:")
    assert torch.equal(pieces.features[0], short)  # a short one as it is
    first, second = (pieces.features[index] for index in (1, 2))
    assert len(first) + len(second) < len(long) and max(len(first), len(second)) <= 1000  # the pause left out
    assert first.mean() > -3 and second.mean() > -3  # each piece is speech
    assert as_decoded(dataset, longest=2000) == (dataset, [0, 1])  # nothing longer: dev as it is


def test_a_dev_pass_decodes_utterances_longer_than_a_segment_in_pieces_and_joins_them(
    tiny_config: Config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    read: list[list[int]] = []
    real = dev_evaluation.transcribe

    def recorded(model, dataset, *args, **kwargs):
        read.append(dataset.frame_counts())
        return real(model, dataset, *args, **kwargs)

    monkeypatch.setattr(dev_evaluation, "transcribe", recorded)
    evaluated: list[dev_evaluation.DevResult] = []
    real_evaluate = train_module.evaluate_dev
    monkeypatch.setattr(
        train_module, "evaluate_dev", lambda *args: evaluated.append(real_evaluate(*args)) or evaluated[-1]
    )
    # The tiny dev set's two utterances last 1.2-1.6 s: decoded in pieces of at most a second.
    config = replace(tiny_config, decode=replace(tiny_config.decode, segment_seconds=1.0))
    train(replace(config, train=replace(config.train, epochs=1, average_best=0, out=str(tmp_path / "run"))))
    (pieces,) = read
    assert max(pieces) <= 100 and len(pieces) > 2
    (result,) = evaluated
    assert len(result.texts) == 2  # one text an utterance, its pieces joined
