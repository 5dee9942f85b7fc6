"""The torch-only front end (las.data.front_end.signal, the CTC Viterbi of las.recognition.timing) against torchaudio,
which it replaced: bit for bit where torchaudio's arithmetic was plain torch (resampling, the mel
spectrum, mu-law), within float32 rounding where it ran a compiled loop (the biquads), and the
same spans from forced alignment. The comparisons run wherever torchaudio imports (the locked
environment installs it for them: `make install`); the behaviour tests run everywhere."""

from __future__ import annotations

import math

import pytest
import soundfile
import torch

from las.data.front_end import signal as signal_module
from las.data.front_end.signal import (
    MelPowerSpectrum,
    highpass,
    lowpass,
    mel_filter_bank,
    mu_law_decode,
    mu_law_encode,
    resample,
    resampled_length,
)
from las.model.ctc_path import runs, viterbi_path, viterbi_paths
from las.recognition.timing import token_spans

from .conftest import an4_rows


def reference():
    """torchaudio, where it imports beside this torch (its compiled library is built for one)."""
    try:
        import torchaudio
        import torchaudio.functional  # noqa: F401
    except (ImportError, OSError) as error:  # an undefined symbol is an OSError
        pytest.skip(f"torchaudio does not import here: {error}")
    return torchaudio


@pytest.fixture(scope="module")
def speech() -> tuple[torch.Tensor, int]:
    samples, rate = soundfile.read(an4_rows("dev", 1)[0][1], dtype="float32")
    return torch.from_numpy(samples), rate


RATE_PAIRS = [(16000, 14400), (16000, 17600), (44100, 16000), (8000, 16000), (16000, 8000), (22050, 16000)]


@pytest.mark.parametrize(("rate", "new_rate"), RATE_PAIRS)
def test_resampling_is_torchaudios_bit_for_bit(speech: tuple[torch.Tensor, int], rate: int, new_rate: int) -> None:
    torchaudio = reference()
    waveform = speech[0]
    for signal in (waveform, waveform.double(), torch.stack([waveform, -waveform])):
        expected = torchaudio.functional.resample(signal, rate, new_rate)
        assert torch.equal(resample(signal, rate, new_rate), expected)
    assert resampled_length(len(waveform), rate, new_rate) == len(expected[0])


def test_resampling_keeps_a_tone_below_the_new_nyquist_rate_and_its_length_is_planned() -> None:
    time = torch.arange(16000) / 16000
    tone = torch.sin(2 * math.pi * 440 * time)
    down = resample(tone, 16000, 8000)
    assert down.shape == (resampled_length(16000, 16000, 8000),) == (8000,)
    expected = torch.sin(2 * math.pi * 440 * torch.arange(8000) / 8000)
    assert float((down - expected)[100:-100].abs().max()) < 1e-3  # away from the edges' zero padding
    assert resample(tone, 16000, 16000) is tone
    with pytest.raises(TypeError, match="floating-point"):
        resample(torch.arange(10), 2, 1)


@pytest.mark.parametrize(("rate", "new_rate"), RATE_PAIRS)
def test_resampling_without_the_whole_filter_bank_reads_as_with_it(
    speech: tuple[torch.Tensor, int], rate: int, new_rate: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rates sharing few factors (22254 Hz) are resampled from each phase's reach alone: the same
    taps, the zeros between them left out."""
    waveform = speech[0]
    for signal in (waveform, torch.stack([waveform, -waveform])):
        expected = resample(signal, rate, new_rate)
        monkeypatch.setattr(signal_module, "LARGEST_BANK", 0)
        got = resample(signal, rate, new_rate)
        monkeypatch.undo()
        assert got.shape == expected.shape and float((got - expected).abs().max()) < 1e-5


@pytest.mark.parametrize("rate", [22254, 44101, 8001])
def test_a_rate_sharing_few_factors_with_the_new_one_is_resampled_in_bounded_memory(rate: int) -> None:
    """From 22254 Hz the whole bank would hold 360 MB, from 44101 Hz 2.8 GB: resampled here from
    each phase's taps, a tone stays the tone, and the length is the one planned."""
    seconds = 3
    tone = torch.sin(2 * math.pi * 440 * torch.arange(seconds * rate, dtype=torch.float64) / rate).float()
    down = resample(tone, rate, 16000)
    assert down.shape == (resampled_length(len(tone), rate, 16000),)
    expected = torch.sin(2 * math.pi * 440 * torch.arange(len(down), dtype=torch.float64) / 16000).float()
    assert float((down - expected)[100:-100].abs().max()) < 1e-3


def test_the_mel_power_spectrum_is_torchaudios_bit_for_bit(speech: tuple[torch.Tensor, int]) -> None:
    torchaudio = reference()
    for rate, window, hop, mel_bins in ((16000, 400, 160, 40), (16000, 512, 128, 80), (8000, 200, 80, 23)):
        transform = torchaudio.transforms.MelSpectrogram(
            sample_rate=rate, n_fft=window, win_length=window, hop_length=hop, n_mels=mel_bins, center=False
        )
        assert torch.equal(mel_filter_bank(window // 2 + 1, rate, mel_bins), transform.mel_scale.fb)
        assert torch.equal(MelPowerSpectrum(rate, window, hop, mel_bins)(speech[0]), transform(speech[0]))


def test_mel_filters_are_triangles_that_cover_the_band_between_the_first_and_last_peaks() -> None:
    filters = mel_filter_bank(201, 16000, 40)  # (bins, mel_bins)
    assert filters.shape == (201, 40) and float(filters.min()) == 0.0 and float(filters.max()) <= 1.0
    peaks = filters.argmax(dim=0)
    assert bool((peaks[1:] > peaks[:-1]).all())  # centres rise with the filter's index
    between = filters[int(peaks[0]) + 1 : int(peaks[-1])].sum(dim=1)  # neighbours' slopes sum to one
    assert torch.allclose(between, torch.ones_like(between), atol=0.05)


def test_mu_law_is_torchaudios_bit_for_bit() -> None:
    torchaudio = reference()
    values = torch.linspace(-1, 1, 20001)
    codes = mu_law_encode(values, 256)
    assert torch.equal(codes, torchaudio.functional.mu_law_encoding(values, 256))
    assert torch.equal(mu_law_decode(codes, 256), torchaudio.functional.mu_law_decoding(codes, 256))
    assert int(codes.min()) == 0 and int(codes.max()) == 255


@pytest.mark.parametrize(("rate", "cutoff"), [(16000, 300.0), (16000, 3400.0), (16000, 200.0), (8000, 1000.0)])
def test_biquads_are_torchaudios_within_float32_rounding(
    speech: tuple[torch.Tensor, int], rate: int, cutoff: float
) -> None:
    torchaudio = reference()
    loud = speech[0] * 3  # past full scale: torchaudio clamps the output to [-1, 1], and so must these
    for ours, theirs in (
        (lowpass, torchaudio.functional.lowpass_biquad),
        (highpass, torchaudio.functional.highpass_biquad),
    ):
        for signal in (speech[0], loud):
            torch.testing.assert_close(ours(signal, rate, cutoff), theirs(signal, rate, cutoff), atol=1e-5, rtol=0)


def test_a_biquad_passes_its_band_and_stops_the_other() -> None:
    time = torch.arange(16000) / 16000
    low, high = 0.5 * torch.sin(2 * math.pi * 100 * time), 0.5 * torch.sin(2 * math.pi * 6000 * time)
    settled = slice(2000, None)
    assert float(lowpass(low + high, 16000, 1000)[settled].std()) == pytest.approx(float(low.std()), rel=0.02)
    assert float(highpass(low + high, 16000, 1000)[settled].std()) == pytest.approx(float(high.std()), rel=0.02)


def test_the_telephone_line_is_torchaudios_within_float32_rounding(speech: tuple[torch.Tensor, int]) -> None:
    torchaudio = reference()
    functional = torchaudio.functional
    from las.data.augmentation.channel_effects import telephone

    waveform, rate = speech
    band = functional.lowpass_biquad(functional.highpass_biquad(waveform, rate, 300.0), rate, 3400.0)
    narrow = functional.resample(band, rate, 8000)
    narrow = functional.mu_law_decoding(functional.mu_law_encoding(narrow.clamp(-1, 1), 256), 256)
    expected = functional.resample(narrow, 8000, rate)[: len(waveform)]
    found = telephone(waveform, rate)
    # A sample within rounding of a mu-law step's edge may land on the next code: a few, one step each.
    differing = (found - expected).abs() > 1e-5
    assert int(differing.sum()) <= len(waveform) // 1000
    assert float((found - expected).abs().max()) < 0.02


def random_alignment_cases(count: int) -> list[tuple[torch.Tensor, list[int]]]:
    generator = torch.Generator().manual_seed(0)
    cases = []
    for _ in range(count):
        length = int(torch.randint(1, 8, (), generator=generator))
        tokens = torch.randint(1, 5, (length,), generator=generator).tolist()  # repeats among 4 symbols
        repeats = sum(a == b for a, b in zip(tokens, tokens[1:], strict=False))
        frames = length + repeats + int(torch.randint(0, 12, (), generator=generator))
        logits = 3 * torch.randn(frames, 6, generator=generator)
        cases.append((logits.log_softmax(-1), tokens))
    return cases


def test_the_ctc_viterbi_path_is_torchaudios_forced_alignment() -> None:
    torchaudio = reference()
    for log_probs, tokens in random_alignment_cases(300):
        targets = torch.tensor([tokens], dtype=torch.int32)
        path, _ = torchaudio.functional.forced_align(log_probs[None], targets, blank=0)
        assert viterbi_path(log_probs, tokens, 0) == path[0].tolist()


def test_a_batch_of_viterbi_paths_is_each_rows_path_alone() -> None:
    cases = random_alignment_cases(60)
    longest = max(len(log_probs) for log_probs, _ in cases)
    batch = torch.full((len(cases), longest, 6), -3.0)  # padding frames beyond each row's own
    for row, (log_probs, _) in enumerate(cases):
        batch[row, : len(log_probs)] = log_probs
    lengths, tokens = [len(log_probs) for log_probs, _ in cases], [tokens for _, tokens in cases]
    assert viterbi_paths(batch, lengths, tokens, 0) == [viterbi_path(*case, 0) for case in cases]
    assert viterbi_paths(batch[:0], [], [], 0) == []


def test_the_ctc_viterbi_path_spells_the_tokens_and_each_run_is_a_span() -> None:
    for log_probs, tokens in random_alignment_cases(100):
        path = viterbi_path(log_probs, tokens, 0)
        assert len(path) == len(log_probs)
        spans = runs(path, 0)
        assert [path[start] for start, _ in spans] == tokens
        assert all(start < end and set(path[start:end]) == {path[start]} for start, end in spans)
    # Tight: as many frames as the tokens and the blanks between repeats need, and no choice left.
    tight = torch.zeros(5, 4).log_softmax(-1)
    assert viterbi_path(tight, [1, 1, 2, 3], 0) == [1, 0, 1, 2, 3]
    spans, how = token_spans([1, 1, 2, 3], tight, None, 0)
    assert (spans, how) == ([(0, 1), (2, 3), (3, 4), (4, 5)], "ctc")
