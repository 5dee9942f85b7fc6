"""A recording cut flat at full scale is given its peaks back; any other recording is left as it is."""

from __future__ import annotations

import math

import pytest
import torch

from las.core.config import FeatureConfig
from las.data.augmentation.channel_effects import clipped, in_16_bits
from las.data.front_end.audio import load_audio
from las.data.front_end.declipping import HEADROOM, MIN_RUNS, clipped_runs, clipped_share, declipped
from las.data.front_end.features import FilterbankExtractor, without_offset

from .conftest import AN4

RATE = 16000
SPEECH = AN4 / "audio" / "an10-fjmd-b.flac"


def upper_band_error(waveform: torch.Tensor, speech: torch.Tensor) -> float:
    """How far the upper half of the mel bins of `waveform`'s loud frames (the louder half of
    `speech`'s) lies from `speech`'s, in nats, each at its own level: where flat tops spread
    their energy."""
    extractor = FilterbankExtractor(FeatureConfig())
    heard, recorded = (extractor.log_mel(without_offset(item, extractor.window)) for item in (waveform, speech))
    energy = recorded.logsumexp(dim=1)
    loud = energy > energy.median()
    heard, recorded = (item - item[loud].logsumexp(dim=1).mean() for item in (heard, recorded))
    upper = recorded.shape[1] // 2
    return float((heard - recorded)[loud, upper:].abs().mean())


def test_recordings_that_are_not_clipped_are_left_exactly_as_they_are() -> None:
    speech = load_audio(SPEECH, RATE)
    quiet = in_16_bits(speech * 10 ** (-40 / 20))  # a few quantiser steps repeat at its peaks
    padded = torch.cat([torch.zeros(RATE), speech, torch.zeros(RATE)])  # runs of zeros
    tone = 0.5 * torch.sin(2 * math.pi * 440 * torch.arange(RATE) / RATE)
    for waveform in (speech, quiet, padded, tone, torch.zeros(RATE), torch.ones(1), torch.zeros(0)):
        assert len(clipped_runs(waveform)[0]) == 0
        assert torch.equal(declipped(waveform), waveform)
        assert clipped_share(waveform) == 0.0


def test_the_clipped_share_grows_with_how_far_over_full_scale_the_recording_was_driven() -> None:
    speech = load_audio(SPEECH, RATE)
    shares = [clipped_share(clipped(speech, over_db)) for over_db in (6, 10, 20)]
    assert 0 < shares[0] < shares[1] < shares[2] < 0.5
    cut = clipped(speech, 20)
    starts, ends = clipped_runs(cut)
    assert shares[2] == pytest.approx(float((ends - starts).sum()) / len(cut))


def test_a_clipped_recording_gets_its_peaks_back() -> None:
    speech = load_audio(SPEECH, RATE)
    for over_db in (10, 20):
        cut = clipped(speech, over_db)
        starts, ends = clipped_runs(cut)
        assert len(starts) >= MIN_RUNS and (ends - starts >= 2).all()
        restored = declipped(cut)
        rail = float(cut.abs().max())
        assert rail < float(restored.abs().max()) <= HEADROOM * rail  # beyond the rail, within reach
        assert len(clipped_runs(restored)[0]) == 0  # nothing left to fill: a second pass keeps it
        assert torch.isfinite(restored).all() and restored.shape == cut.shape


def test_a_clipped_recordings_upper_bands_come_nearer_the_speech_as_recorded() -> None:
    for name in ("an10-fjmd-b", "an6-fjmd-b", "cen1-fjmd-b"):
        speech = load_audio(AN4 / "audio" / f"{name}.flac", RATE)
        for over_db in (10, 20):
            cut = clipped(speech, over_db)
            assert upper_band_error(declipped(cut), speech) < upper_band_error(cut, speech)


def test_a_clipped_recording_gets_its_peaks_back_before_it_is_played_slower() -> None:
    """Decoding may play audio at `decode.speed` (`--speed 0.9`, say); resampled first, the flat runs that
    tell clipping are smoothed away (clipped-20 read 21.0% against 15.1% so, one seed)."""
    from las.data.front_end.features import change_speed

    extractor = FilterbankExtractor(FeatureConfig())
    speech = load_audio(SPEECH, RATE)
    cut = clipped(speech, 20)
    assert len(clipped_runs(change_speed(cut, 0.9, RATE))[0]) < MIN_RUNS  # why: no run is left flat
    wanted = extractor(speech, 0.9)
    upper = wanted.shape[1] // 2

    def error(features: torch.Tensor) -> float:
        return float((features - wanted)[:, upper:].abs().mean())

    assert error(extractor(cut, 0.9)) < error(extractor(change_speed(cut, 0.9, RATE)))
    assert torch.equal(extractor(speech, 1.0), extractor(speech))  # at 1, as ever
