"""Sounds that are not speech: they rise and fall as speech does (the no-speech rule lets them
through), training draws them reproducibly with an empty transcript, and a model learns from
them to say nothing."""

from __future__ import annotations

import pytest
import torch

from las.core.config import Config, FeatureConfig, load_config
from las.data.augmentation.channel_effects import babble
from las.data.augmentation.nonspeech import PEAK, SOUNDS, NonSpeech, crowd
from las.data.front_end.features import FilterbankExtractor, log_mel_features
from las.data.front_end.segmentation import Levels

from .test_augment import speech

RATE = 16000


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name", [*SOUNDS, "crowd"])
def test_each_sound_is_reproducible_at_a_recording_level_and_passes_for_speech_by_its_levels(name: str) -> None:
    sound = SOUNDS.get(name) or crowd([speech()] * 3)
    first = sound(3 * RATE, RATE, generator(1))
    assert first.shape == (3 * RATE,) and first.abs().max().item() == pytest.approx(PEAK)
    assert torch.equal(first, sound(3 * RATE, RATE, generator(1)))
    assert not torch.equal(first, sound(3 * RATE, RATE, generator(2)))
    # Why training must hear them: they rise and fall as speech does, and decoding takes them for it,
    # heard in a room (-80 dBFS of noise: between a generated knock's blows, most bands are digital
    # silence, not heard, and its few heard frames alone are no speech).
    room = first + 1e-4 * torch.randn(len(first), generator=generator(3))
    assert Levels.of(log_mel_features(FilterbankExtractor(FeatureConfig()), room, name)).speech


def nonspeech(share: float, pool: list[torch.Tensor] | None = None) -> NonSpeech:
    config = load_config(None, [f"train.augment.nonspeech={share}"])
    drawn = NonSpeech.of(config, pool or [])
    assert drawn is not None
    return drawn


def test_a_share_of_draws_is_a_sound_as_long_as_its_utterance_and_the_same_on_every_resume() -> None:
    assert NonSpeech.of(load_config(None, ["train.augment.nonspeech=0"]), []) is None  # off: nothing drawn
    always = nonspeech(1.0, [speech()] * 3)
    features = always.draw(250, generator(3))
    assert features is not None and features.shape == (250, 80)
    assert torch.equal(features, always.draw(250, generator(3)))
    sometimes = nonspeech(0.2)
    drawn = [sometimes.draw(100, generator(seed)) is not None for seed in range(300)]
    assert 0.12 < sum(drawn) / len(drawn) < 0.28


def test_a_crowd_is_talkers_summed_with_none_of_them_followed() -> None:
    pool = [speech()] * 3
    mixed = babble(pool, RATE, 20, generator(4))
    assert torch.allclose(crowd(pool)(RATE, RATE, generator(4)), PEAK * mixed / mixed.abs().max())


def nonspeech_config(tiny_config: Config, share: float) -> Config:
    from dataclasses import replace

    augment = replace(tiny_config.train.augment, nonspeech=share, start_epoch=0)
    return replace(tiny_config, train=replace(tiny_config.train, augment=augment))


def test_a_drawn_sound_trains_with_an_empty_transcript_and_a_finite_loss(tiny_config: Config) -> None:
    from las.data.dataset import Draw
    from las.model.las import LAS
    from las.model.losses import joint_loss
    from las.training.corpus import load_corpus

    corpus = load_corpus(nonspeech_config(tiny_config, 1.0), None, None)
    example = corpus.train[Draw(0, 0, 5)]
    assert example.text == "" and len(example.tokens) == 0 and example.features.shape[1] == 80
    batch = corpus.train.collate([Draw(0, 0, 5), Draw(1, 0, 6)])
    assert batch.target_lengths.tolist() == [1, 1]  # <eos> alone
    model = LAS.build(tiny_config.model, 80, len(corpus.train.vocabulary))
    output = model(batch.features, batch.feature_lengths, batch.targets_in)
    loss, _ = joint_loss(output, batch.targets_in, batch.targets_out, batch.target_lengths, 0.3, 0.0)
    assert torch.isfinite(loss)
