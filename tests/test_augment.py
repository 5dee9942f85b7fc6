"""Channel, noise and room augmentation: each effect does what it says, draws are reproducible."""

from __future__ import annotations

import math

import pytest
import soundfile
import torch

from las.core.config import AugmentConfig, FeatureConfig
from las.data.augmentation.augmenter import Source, WaveformAugmentation
from las.data.augmentation.channel_effects import (
    add_noise,
    babble,
    compressed,
    encoded,
    frame_levels_db,
    pink_noise,
    reverberate,
    room_response,
    telephone,
    white_noise,
)

from .conftest import AN4

AUDIO = AN4 / "audio" / "an10-fjmd-b.flac"
RATE = 16000


def speech() -> torch.Tensor:
    return torch.from_numpy(soundfile.read(AUDIO, dtype="float32")[0])


def band_energy(waveform: torch.Tensor, low: float, high: float) -> float:
    spectrum = torch.fft.rfft(waveform).abs().pow(2)
    frequencies = torch.fft.rfftfreq(len(waveform), 1 / RATE)
    return spectrum[(frequencies >= low) & (frequencies < high)].sum().item()


def test_a_telephone_line_keeps_only_the_telephone_band() -> None:
    clean = speech()
    narrow = telephone(clean, RATE)
    assert narrow.shape == clean.shape
    total = band_energy(narrow, 0, RATE / 2)
    assert band_energy(narrow, 4000, RATE / 2) / total < 1e-3  # nothing above the 8 kHz line's Nyquist
    assert band_energy(clean, 4000, RATE / 2) / band_energy(clean, 0, RATE / 2) > 0.01  # which AN4 has
    assert band_energy(narrow, 0, 150) / total < 0.02


@pytest.mark.parametrize(("codec", "level", "kilobits"), [("mp3", 0.9, 24), ("opus", 0.99, 8)])
def test_a_lossy_codec_gives_speech_back_at_its_bit_rate(codec: str, level: float, kilobits: int) -> None:
    """Encoded and decoded in memory: about as long (the encoder's delay and padding, within two MP3
    frames), most of the speech band kept, what the rate cannot afford gone."""
    clean = speech()
    heard = encoded(clean, RATE, codec, level)
    assert heard.dtype == torch.float32 and abs(len(heard) - len(clean)) <= 2 * 1152
    assert not torch.equal(heard[: len(clean)], clean)
    assert band_energy(heard, 300, 3400) / band_energy(clean, 300, 3400) == pytest.approx(1.0, abs=0.3)
    if kilobits <= 8:  # a narrowband rate: nothing much above 4 kHz
        assert band_energy(heard, 4500, RATE / 2) / band_energy(heard, 0, RATE / 2) < 1e-3


@pytest.mark.parametrize("snr", [20.0, 5.0, -5.0])
def test_noise_is_added_at_the_signal_to_noise_ratio_asked(snr: float) -> None:
    clean = speech()
    noise = white_noise(RATE // 3, torch.Generator().manual_seed(0))  # shorter: repeated to fit
    noisy = add_noise(clean, noise, snr)
    measured = 10 * math.log10(clean.pow(2).mean() / (noisy - clean).pow(2).mean())
    assert measured == pytest.approx(snr, abs=0.01)


def test_pink_noise_falls_3_db_per_octave_and_babble_is_normalised_speech() -> None:
    noise = pink_noise(RATE * 4, torch.Generator().manual_seed(0))
    octave_low, octave_high = band_energy(noise, 500, 1000), band_energy(noise, 1000, 2000)
    assert 10 * math.log10(octave_high / octave_low) == pytest.approx(0.0, abs=0.5)  # equal energy per octave
    mixture = babble([speech(), speech().flip(0)], RATE * 2, talkers=3, generator=torch.Generator().manual_seed(0))
    assert mixture.shape == (RATE * 2,) and torch.isfinite(mixture).all()


def test_a_room_response_decays_by_60_db_in_rt60() -> None:
    response = room_response(RATE, 0.4, torch.Generator().manual_seed(0))
    assert len(response) == int(0.4 * RATE) and response.norm().item() == pytest.approx(1.0)
    first, last = response[1:800].pow(2).mean(), response[-800:].pow(2).mean()
    assert 10 * math.log10(first / last) > 40
    clean = speech()
    wet = reverberate(clean, response)
    assert wet.shape == clean.shape and wet.pow(2).mean().item() == pytest.approx(clean.pow(2).mean().item())


def augmentation(**probabilities: float) -> WaveformAugmentation:
    """Only the effects named: the others off, whatever the defaults."""
    config = AugmentConfig(**{"reverberation": 0.0, "noise": 0.0, "telephone": 0.0, "gain_db": 0.0, **probabilities})
    return WaveformAugmentation.of(config, FeatureConfig(), [Source(AUDIO)] * 3, seed=0)


def draw(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_augmented_features_are_reproducible_per_seed_and_none_when_nothing_is_drawn() -> None:
    everything = augmentation(reverberation=1.0, noise=1.0, telephone=1.0, gain_db=6.0)
    first = everything.features(Source(AUDIO), 1.0, draw(7))
    assert first is not None and first.shape == (161, 80)  # as the clean features: 1.6 s, 80 bins
    assert torch.equal(first, everything.features(Source(AUDIO), 1.0, draw(7)))
    assert not torch.equal(first, everything.features(Source(AUDIO), 1.0, draw(8)))
    assert everything.features(Source(AUDIO), 0.9, draw(7)).shape[0] > 161  # slower: longer
    assert augmentation(noise=0.0).features(Source(AUDIO), 1.0, draw(7)) is None
    drawn = [augmentation(noise=0.3).features(Source(AUDIO), 1.0, draw(seed)) is not None for seed in range(200)]
    assert 0.2 < sum(drawn) / len(drawn) < 0.4  # each effect with its probability


def test_a_quiet_microphone_is_drawn_last_in_16_bits_and_leaves_the_other_draws_as_they_were() -> None:
    """A recording 20-40 dB quieter, on the 16-bit grid (the front end raises it back); drawn after
    every other effect, so that with it off, every draw is what it was."""
    waveform = speech()
    (quiet,) = augmentation(quiet=1.0).effects(draw(3))
    heard = quiet(waveform)
    assert torch.equal(heard * 2**15, (heard * 2**15).round())
    drop = 20 * math.log10(waveform.abs().max().item() / heard.abs().max().item())
    assert 20 - 0.1 <= drop <= 40 + 0.1
    others = {"reverberation": 1.0, "noise": 1.0, "telephone": 1.0, "gain_db": 6.0}
    without, with_it = augmentation(**others).effects(draw(4)), augmentation(**others, quiet=1.0).effects(draw(4))
    assert len(with_it) == len(without) + 1
    for before, after in zip(without, with_it, strict=False):
        assert torch.equal(before(waveform), after(waveform))


def test_a_microphone_set_too_hot_is_drawn_last_clipped_flat_and_leaves_the_other_draws_as_they_were() -> None:
    """The peak driven 3-20 dB over full scale and cut flat there, on the 16-bit grid; drawn after
    every other effect (the quiet microphone too), so that with it off, every draw is what it was."""
    waveform = speech()
    (hot,) = augmentation(clipping=1.0).effects(draw(3))
    heard = hot(waveform)
    assert torch.equal(heard * 2**15, (heard * 2**15).round())
    cut = heard.abs() >= 32767 / 32768
    assert 0 < cut.float().mean() < 0.5  # the loudest samples, not all of them
    gain = heard[~cut].abs().sum() / waveform[~cut].abs().sum()  # where it is not cut: the same waveform, louder
    over = 20 * math.log10(float(gain) * waveform.abs().max().item())  # the peak's level, had it not been cut
    assert 3 - 0.1 <= over <= 20 + 0.1
    others = {"reverberation": 1.0, "noise": 1.0, "telephone": 1.0, "gain_db": 6.0, "quiet": 1.0}
    without, with_it = augmentation(**others).effects(draw(4)), augmentation(**others, clipping=1.0).effects(draw(4))
    assert len(with_it) == len(without) + 1
    for before, after in zip(without, with_it, strict=False):
        assert torch.equal(before(waveform), after(waveform))


def test_a_compressor_flattens_the_loud_frames_and_leaves_the_quiet_ones_their_shape() -> None:
    """Frames above the threshold come out `ratio` times closer to it; the whole is raised to
    the peak asked for, so the quiet frames keep their differences (one gain for all of them)."""
    waveform, frame = speech(), RATE // 100
    levels = frame_levels_db(waveform, frame)
    threshold = float(levels.max()) - 20
    heard = compressed(waveform, frame, threshold, ratio=4.0, peak_db=-1.0)
    assert heard.shape == waveform.shape
    assert abs(20 * math.log10(heard.abs().max().item()) + 1) < 1e-4
    after = frame_levels_db(heard, frame)
    loud, quiet = levels > threshold + 6, levels < threshold - 20
    assert loud.sum() > 10 and quiet.sum() > 10
    # The loud frames' spread shrinks (a 4:1 ratio, gain interpolated between frames' centres).
    assert after[loud].std() < 0.5 * levels[loud].std()
    gain = after[quiet] - levels[quiet]  # the same make-up gain for every quiet frame, nearly
    assert gain.std() < 1.0
    assert torch.equal(compressed(torch.zeros(800), frame, -40.0, 4.0), torch.zeros(800))


def test_a_compressor_is_drawn_last_in_16_bits_and_leaves_the_other_draws_as_they_were() -> None:
    """Its threshold 10-30 dB under the loudest frame, raised to a -1 dBFS peak, on the 16-bit
    grid; drawn after every other effect, so that with it off, every draw is what it was."""
    waveform = speech()
    (compressor,) = augmentation(compression=1.0).effects(draw(3))
    heard = compressor(waveform)
    assert torch.equal(heard * 2**15, (heard * 2**15).round())
    assert abs(20 * math.log10(heard.abs().max().item()) + 1) < 0.01
    frame = RATE // 100
    spread = frame_levels_db(waveform, frame).quantile(0.9) - frame_levels_db(waveform, frame).quantile(0.5)
    assert frame_levels_db(heard, frame).quantile(0.9) - frame_levels_db(heard, frame).quantile(0.5) < spread
    others = {"reverberation": 1.0, "noise": 1.0, "telephone": 1.0, "gain_db": 6.0, "quiet": 1.0, "clipping": 1.0}
    without = augmentation(**others).effects(draw(4))
    with_it = augmentation(**others, compression=1.0).effects(draw(4))
    assert len(with_it) == len(without) + 1
    for before, after in zip(without, with_it, strict=False):
        assert torch.equal(before(waveform), after(waveform))


def test_augmentation_settings_are_checked() -> None:
    from las.core.config import load_config
    from las.core.errors import LasError

    assert load_config(None, []).train.augment.enabled  # the default
    off = ["train.augment.noise=0", "train.augment.telephone=0", "train.augment.reverberation=0"]
    off += ["train.augment.gain_db=0", "train.augment.crop=0", "train.augment.nonspeech=0"]
    assert not load_config(None, off).train.augment.enabled
    with pytest.raises(LasError, match="'train.augment.noise': expected a number >= 0 and <= 1"):
        load_config(None, ["train.augment.noise=2"])
    with pytest.raises(LasError, match="snr_low': 40.0 is above snr_high=30.0"):
        load_config(None, ["train.augment.snr_low=40"])
