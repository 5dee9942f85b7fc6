"""Dereverberation (WPE): it takes reverberation away, leaves dry audio exactly as it is, and gives
the same result however a long recording is cut into chunks and blocks."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import soundfile
import torch

import las.data.front_end.dereverberation as dereverberation
from las import Recognizer
from las.core.config import FeatureConfig
from las.data.augmentation.channel_effects import hum, power, reverberate, room_response
from las.data.front_end.dereverberation import Dereverberation
from las.data.front_end.features import FilterbankExtractor, dereverberated

from .conftest import AN4

RATE = 16000
EXTRACTOR = FilterbankExtractor(FeatureConfig())


def speech() -> torch.Tensor:
    return torch.from_numpy(soundfile.read(AN4 / "audio" / "an10-fjmd-b.flac", dtype="float32")[0])


def in_a_room(waveform: torch.Tensor, rt60: float, seed: int = 0) -> torch.Tensor:
    return reverberate(waveform, room_response(RATE, rt60, torch.Generator().manual_seed(seed)))


def smear_db(waveform: torch.Tensor, dry: torch.Tensor) -> float:
    """Power in the dry speech's quietest 30% of frames against its loudest 30%, in dB: what a room
    spreads from the words into the gaps between them."""
    power, reference = (EXTRACTOR(item).exp().sum(dim=1) for item in (waveform, dry))  # (frames,)
    quiet, loud = reference < reference.quantile(0.3), reference > reference.quantile(0.7)
    return 10 * math.log10(float(power[quiet].mean() / power[loud].mean()))


@pytest.mark.parametrize("rt60", [0.3, 0.6, 0.8])
def test_a_reverberant_utterance_comes_back_with_less_of_the_room_between_its_words(rt60: float) -> None:
    dry = speech()
    wet = in_a_room(dry, rt60)
    restored = Dereverberation()(wet)
    assert restored.shape == wet.shape and torch.isfinite(restored).all()
    assert smear_db(dry, dry) < smear_db(wet, dry) - 10  # the room fills the gaps ...
    assert smear_db(restored, dry) < smear_db(wet, dry) - 1.5  # ... and less of it is left


def test_dry_speech_silence_and_audio_shorter_than_a_window_are_left_exactly_as_they_are() -> None:
    process = Dereverberation()
    for waveform in (speech(), torch.zeros(RATE), speech()[:100], torch.zeros(0)):
        assert process(waveform) is waveform


@pytest.mark.parametrize("frequency", [50.0, 60.0])
def test_mains_hum_under_and_around_dry_speech_leaves_it_as_it_is_and_a_room_under_hum_is_filtered(
    frequency: float,
) -> None:
    """A hum is all predictable from its past, so WPE takes it away; counted in the gate, that
    opened it for dry speech (half of AN4 dev with 1 s of hum around it: 1.15x the CER). The gate
    reads the bands above the hum (HUM_HZ)."""
    second = torch.zeros(RATE)
    for dry in (speech(), torch.from_numpy(soundfile.read(AN4 / "audio" / "an121-fjdn-b.flac", dtype="float32")[0])):
        mains = hum(len(dry) + 2 * RATE, RATE, frequency, harmonics=4)
        mains = mains * (10 ** (-45 / 20) / power(mains).sqrt())
        process = Dereverberation()
        humming = torch.cat([second, dry, second]) + mains
        assert process(humming) is humming
        wet = torch.cat([second, in_a_room(dry, 0.6)[: len(dry)], second]) + mains
        assert not torch.equal(process(wet), wet)


def test_chunks_of_frames_give_the_filter_of_the_whole_block(monkeypatch: pytest.MonkeyPatch) -> None:
    wet = in_a_room(speech(), 0.6)
    whole = Dereverberation()(wet)
    monkeypatch.setattr(dereverberation, "CHUNK_FRAMES", 7)
    # float32 sums in another order, through three solves: the same to a thousandth of the peak
    assert (Dereverberation()(wet) - whole).abs().max() < 1e-3 * whole.abs().max()


def test_a_long_recording_is_filtered_block_by_block_with_the_audio_before_each_as_its_past(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dereverberation, "BLOCK_SECONDS", 2.0)
    dry = torch.cat([speech(), speech().flip(0), speech()])
    wet = in_a_room(dry, 0.6)
    process = Dereverberation()
    restored = process(wet)
    assert restored.shape == wet.shape and torch.isfinite(restored).all()
    block = 2 * RATE
    assert torch.equal(restored[:block], process.filtered(wet[:block]))  # the first block on its own
    hop, window = process.sizes()
    lead = (process.delay + process.taps + 1) * hop + window
    assert torch.equal(restored[block : 2 * block], process.filtered(wet[block - lead : 2 * block])[lead:])
    assert smear_db(restored, dry) < smear_db(wet, dry) - 0.5  # a filter from 2 s of room reaches less far


def test_digital_silence_around_and_inside_a_recording_stays_silent_and_unheard_by_the_filter() -> None:
    """A reverberant utterance padded with exact zeros, and with a gap of them inside: the filter
    hears what was recorded, from its first sample to its last, and leaves the zeros zero. Alone,
    WPE's output in them is minus its prediction: sound where the file has none."""
    wet, zeros, process = in_a_room(speech(), 0.6), torch.zeros(RATE // 2), Dereverberation()
    padded = torch.cat([zeros, wet, zeros])
    assert process(padded)[-len(zeros) :].abs().max() > 0  # the filter alone
    restored = dereverberated(padded, process, EXTRACTOR.window)
    assert not restored[: len(zeros)].any() and not restored[-len(zeros) :].any()
    assert torch.equal(restored[len(zeros) : -len(zeros)], process(wet))
    gapped = dereverberated(torch.cat([wet[:RATE], zeros, wet[RATE:]]), process, EXTRACTOR.window)
    assert not gapped[RATE : RATE + len(zeros)].any() and gapped[:RATE].any()


def test_the_front_end_dereverberates_at_decoding_and_caches_it_apart(trained_run: dict[str, Path]) -> None:
    wet = in_a_room(speech(), 0.6)
    plain = FeatureConfig(dereverberation="off")
    always, decoding = dataclasses.replace(plain, dereverberation="always"), FeatureConfig()
    assert not torch.equal(FilterbankExtractor(always)(wet), FilterbankExtractor(plain)(wet))
    assert torch.equal(FilterbankExtractor(always)(speech()), FilterbankExtractor(plain)(speech()))  # dry: as it was
    # The default dereverberates at decoding, not in training: training's cache is the plain one.
    assert torch.equal(FilterbankExtractor(decoding)(wet), FilterbankExtractor(plain)(wet))
    assert decoding.extraction() == plain.extraction() != always.extraction()
    assert decoding.at_decoding().extraction() == always.extraction()
    recognizer = Recognizer.load(trained_run["run"] / "last.pt", "cpu", speed=1.0)  # the audio as it is
    assert torch.equal(recognizer.array_features(wet.numpy(), RATE), FilterbankExtractor(always)(wet))
