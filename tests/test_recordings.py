"""Recordings of any length: the Python API, cutting at pauses, word times, subtitles."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from las import Recognizer
from las.core.errors import LasError
from las.data.front_end.segmentation import has_speech, split_at_pauses
from las.export.runtime import load_model
from las.recognition.recognizer import Result, with_context
from las.recognition.timing import ONSET_FRAMES, sound_start, token_spans, word_edges
from las.search.common import Rules

from .conftest import AN4, an4_rows, assert_clear_error, run, write_manifest

RATE = 16000
GAP_SECONDS = 0.5


def features_with(loudness: list[tuple[int, float]]) -> torch.Tensor:
    """Log-mel-like features `(frames, 8)`: runs of (frames, level) with a little jitter."""
    generator = torch.Generator().manual_seed(0)
    parts = [level + 0.1 * torch.randn(frames, 8, generator=generator) for frames, level in loudness]
    return torch.cat(parts)


def test_a_recording_is_cut_at_its_pauses_and_long_silence_left_out() -> None:
    quiet, loud = -12.0, 0.0
    features = features_with(
        [(100, quiet), (150, loud), (60, quiet), (200, loud), (10, quiet), (120, loud), (300, quiet)]
    )
    spans = split_at_pauses(features, max_frames=1000)
    # The 10-frame dip is no pause; each piece keeps up to 15 frames of the pauses around it, from
    # one frame beyond the loud ones (band activity is averaged over 5 frames).
    assert spans == [(84, 266), (294, 656)]
    assert split_at_pauses(torch.full((2000, 8), -13.8), max_frames=1000) == []  # digital silence


def test_speech_without_a_pause_is_cut_at_its_quietest_points_into_pieces_no_longer_than_the_maximum() -> None:
    generator = torch.Generator().manual_seed(1)
    syllables = torch.where(torch.arange(2500) % 30 < 20, 0.0, -2.0)  # 0.2 s loud, 0.1 s softer
    features = syllables[:, None] + 0.3 * torch.randn(2500, 8, generator=generator)
    features[1190:1210] -= 3  # a dip too short to be a pause
    spans = split_at_pauses(features, max_frames=700)
    assert all(end - start <= 700 for start, end in spans)
    assert all(previous[1] == following[0] for previous, following in zip(spans, spans[1:], strict=False))
    assert spans[0][0] == 0 and spans[-1][1] == 2500
    assert any(abs(start - 1200) <= 10 for start, _ in spans)  # one cut falls in the dip


def test_silence_tones_and_steady_noise_of_any_colour_hold_no_speech_but_speech_in_them_does(
    trained_run: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from las.core.config import FeatureConfig
    from las.data.augmentation.channel_effects import add_noise, brown_noise, hum, pink_noise, white_noise
    from las.data.front_end.features import FilterbankExtractor

    extractor = FilterbankExtractor(FeatureConfig())
    generator = torch.Generator().manual_seed(0)

    noises = {
        "white": lambda samples: white_noise(samples, generator),
        "pink": lambda samples: pink_noise(samples, generator),
        "brown": lambda samples: brown_noise(samples, generator),
        "hum": lambda samples: hum(samples, RATE),
    }
    speech = torch.from_numpy(soundfile.read(an4_rows("train", 1)[0][1], dtype="float32")[0])
    assert has_speech(extractor(speech))
    for noise in noises.values():
        assert has_speech(extractor(add_noise(speech, noise(len(speech)), snr_db=0)))
    recognizer = Recognizer.load(trained_run["run"] / "best.pt", device="cpu")
    for seconds in (3, 12):  # decoded whole, and cut at pauses
        samples = seconds * RATE
        steady = [torch.zeros(samples), 0.3 * torch.sin(torch.arange(samples) * 0.1)]
        # Pink and brown noise swell and fade in their total energy as speech in noise does.
        steady += [0.3 * noise / noise.abs().max() for noise in (make(samples) for make in noises.values())]
        for nothing in steady:
            assert not has_speech(extractor(nothing))
            capsys.readouterr()
            assert recognizer.transcribe(nothing.numpy(), sample_rate=RATE).text == ""
            assert "warning: no speech" in capsys.readouterr().err  # said, not only an empty text


def test_mains_hum_played_slower_holds_no_speech_as_it_was_recorded(
    trained_run: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Played at 0.95, 3 s of 60 Hz hum beat against the 10 ms frames enough to pass the
    no-speech rule (band contrast 0.56 against 0.5; 0.24 as recorded) and was decoded as a word.
    The rule reads the recording as recorded, at any speed, from samples and from files (whose
    reading is kept in the feature cache with their features)."""
    from las.core.config import FeatureConfig
    from las.data.augmentation.channel_effects import hum
    from las.data.front_end.features import FilterbankExtractor

    mains = hum(3 * RATE, RATE)
    mains = 0.3 * mains / mains.abs().max()
    assert has_speech(FilterbankExtractor(FeatureConfig())(mains, 0.95))  # what the played audio alone says
    soundfile.write(tmp_path / "hum.wav", mains.numpy(), RATE, subtype="PCM_16")
    checkpoint = load_model(trained_run["run"] / "best.pt")
    for speed in (0.9, 0.95, 1.0, 1.1):
        settings = [f"decode.speed={speed}", "decode.other_speed=0", f"data.cache_dir={tmp_path / 'cache'}"]
        recognizer = Recognizer(checkpoint, "cpu", settings)
        for _ in range(2):  # the file's features computed, then read from the cache
            capsys.readouterr()
            assert recognizer.transcribe(tmp_path / "hum.wav").text == "", speed
            assert "warning: no speech" in capsys.readouterr().err
        assert recognizer.transcribe(mains.numpy(), sample_rate=RATE).text == "", speed


def test_one_word_in_minutes_of_silence_is_found_and_a_click_is_not() -> None:
    from las.core.config import FeatureConfig
    from las.data.front_end.features import FilterbankExtractor

    extractor = FilterbankExtractor(FeatureConfig())
    speech = torch.from_numpy(soundfile.read(an4_rows("train", 1)[0][1], dtype="float32")[0])
    silence = torch.zeros(120 * RATE)
    features = extractor(torch.cat([silence, speech]))  # speech: 1% of the frames
    assert has_speech(features)
    spans = split_at_pauses(features, max_frames=1000)
    assert len(spans) == 1 and spans[0][0] >= len(silence) // 160 - 20  # the word, not the silence
    click = silence.clone()
    click[60 * RATE : 60 * RATE + 80] = 0.9  # 5 ms
    assert not has_speech(extractor(click))


def test_no_utterance_is_left_out_of_a_recording_in_loud_broadband_noise() -> None:
    from las.core.config import FeatureConfig
    from las.data.augmentation.channel_effects import add_noise, white_noise
    from las.data.front_end.features import FilterbankExtractor
    from las.data.front_end.segmentation import digital_silence, energy_range, frame_energy

    extractor = FilterbankExtractor(FeatureConfig())
    waveforms = [torch.from_numpy(soundfile.read(row[1], dtype="float32")[0]) for row in an4_rows("dev", 8)]
    gap = torch.zeros(round(GAP_SECONDS * RATE))
    joined = torch.cat([part for waveform in waveforms for part in (waveform, gap)])
    starts = torch.tensor([0] + [len(waveform) + len(gap) for waveform in waveforms]).cumsum(0) // 160
    # The speech: frames of the clean recording above the middle of its range (zeros left out).
    energy = frame_energy(extractor(joined))
    heard = ~digital_silence(energy, FeatureConfig().mel_bins)
    floor, peak = energy_range(energy[heard])
    speech = (energy > (floor + peak) / 2) & heard
    noisy = add_noise(joined, white_noise(len(joined), torch.Generator().manual_seed(0)), snr_db=0)
    kept = torch.zeros(len(speech), dtype=torch.bool)
    for start, end in split_at_pauses(extractor(noisy), max_frames=1000):
        kept[start:end] = True
    # In the total energy alone, two of these utterances vanish into the noise, a third half.
    for start, end in zip(starts, starts[1:], strict=False):
        assert (kept & speech)[start:end].sum() >= 0.9 * speech[start:end].sum()


def test_a_few_words_in_long_noise_are_cut_out_and_the_noise_is_not() -> None:

    from las.core.config import FeatureConfig
    from las.data.augmentation.channel_effects import brown_noise, pink_noise, power, white_noise
    from las.data.front_end.features import FilterbankExtractor
    from las.data.front_end.signal import lowpass

    extractor = FilterbankExtractor(FeatureConfig())
    waveforms = [torch.from_numpy(soundfile.read(row[1], dtype="float32")[0]) for row in an4_rows("dev", 2)]
    silence = [torch.zeros(seconds * RATE) for seconds in (10, 15, 10)]
    clean = torch.cat([silence[0], waveforms[0], silence[1], waveforms[1], silence[2]])
    starts = [len(silence[0]), len(silence[0]) + len(waveforms[0]) + len(silence[1])]
    words = [(start // 160, (start + len(waveform)) // 160) for start, waveform in zip(starts, waveforms, strict=True)]
    generator = torch.Generator().manual_seed(0)
    samples = len(clean)
    car = lowpass(white_noise(samples, generator), RATE, 200.0)  # or a ventilation
    # Rumbles at 10 dB under the words' power: their total energy swells and fades as speech does.
    # Broadband noise as loud as the words: its bands swing through much of the words' rise.
    noises = [(car, 10), (brown_noise(samples, generator), 10)]
    noises += [(white_noise(samples, generator), 0), (pink_noise(samples, generator), 0)]
    for noise, snr_db in noises:
        noisy = clean + noise * (power(torch.cat(waveforms)) / (10 ** (snr_db / 10) * power(noise))).sqrt()
        spans = split_at_pauses(extractor(noisy), max_frames=1000)
        assert len(spans) == 2
        for (start, end), (first, last) in zip(spans, words, strict=True):
            assert first - 50 <= start <= first + 50 and last - 50 <= end <= last + 50


def test_ctc_alignment_finds_the_frames_of_each_character_and_attention_serves_when_ctc_cannot() -> None:
    frames, vocabulary, blank = 12, 6, 0
    log_probs = torch.full((frames, vocabulary), -10.0)
    log_probs[:, blank] = 0.0
    for frame, token in ((2, 3), (3, 3), (6, 4), (9, 3)):  # 3 held two frames, then 4, then 3 again
        log_probs[frame] = -10.0
        log_probs[frame, token] = 0.0
    spans, method = token_spans([3, 4, 3], log_probs.log_softmax(dim=-1), None, blank)
    assert (spans, method) == ([(2, 4), (6, 7), (9, 10)], "ctc")
    attention = torch.zeros(3, 2)
    attention[0, 0] = attention[1, 1] = attention[2, 1] = 1.0
    # Two frames cannot hold two characters and a repeat: the attention peaks give the times.
    spans, method = token_spans([3, 3], log_probs[:2].log_softmax(dim=-1), attention, blank)
    assert (spans, method) == ([(0, 1), (1, 2)], "attention")


def test_a_word_starts_where_its_sound_rises_not_where_ctc_emits_it() -> None:
    """Frame energies: digital silence, background noise, the weak start of a word (an "s"), then
    its vowel, where CTC emits the first character."""
    silence = math.log(80 * 1e-6)  # exact zeros through 80 mel bins
    runs = [(40, silence), (60, -4.0), (20, -1.0), (30, 5.0)]
    energy = torch.cat([torch.full((frames,), level) for frames, level in runs])
    # Back through the weak start, not into the noise: digital silence is not the background.
    assert sound_start(energy, 125, 0, 80) == 100
    assert sound_start(energy, 125, 110, 80) == 110  # never before the previous word's end
    # No further back than ONSET_FRAMES.
    energy = torch.cat([torch.full((frames,), level) for frames, level in [(100, -4.0), (80, -1.0), (30, 5.0)]])
    assert sound_start(energy, 185, 0, 80) == 185 - ONSET_FRAMES


def test_words_spoken_without_a_pause_meet_at_the_dip_between_them() -> None:
    """Frame energies of two spelled letters run together, "E" then "L" ("ee", a dip, "el"), CTC
    emitting each at its loudest part, in noise; then a pause and a third word."""
    runs = [(30, -4.0), (20, 5.0), (10, 4.0), (4, 2.0), (10, 4.0), (20, 5.0), (30, -4.0), (20, 5.0), (30, -4.0)]
    energy = torch.cat([torch.full((frames,), level) for frames, level in runs])
    emitted = [(35, 45), (80, 90), (130, 140)]  # the dip is frames 60-64, the pause 94-123
    (e_start, e_end), (l_start, l_end), (third_start, third_end) = word_edges(energy, emitted, 80)
    assert e_start == 30 and 60 <= e_end <= 64 and e_end == l_start  # the "e" of "el" stays with L
    assert l_end == 94 and (third_start, third_end) == (124, 144)  # a pause: each stops where it is quiet
    assert word_edges(None, emitted, 80) == emitted and word_edges(energy, [], 80) == []


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Three real AN4 utterances joined with half a second of silence, as one recording."""
    folder = tmp_path_factory.mktemp("recording")
    rows = an4_rows("train", 3, longest_seconds=1.6)
    waveforms = [soundfile.read(row[1], dtype="float32")[0] for row in rows]
    gap = np.zeros(round(GAP_SECONDS * RATE), dtype=np.float32)
    joined = np.concatenate([waveforms[0], gap, waveforms[1], gap, waveforms[2]])
    soundfile.write(folder / "joined.flac", joined, RATE, subtype="PCM_16")
    starts = np.cumsum([0] + [len(waveform) / RATE + GAP_SECONDS for waveform in waveforms[:-1]])
    return {"path": folder / "joined.flac", "starts": starts.tolist(), "samples": joined}


def test_the_api_gives_what_the_cli_gives(trained_run: dict[str, Path], tmp_path: Path) -> None:
    checkpoint, manifest = trained_run["run"] / "best.pt", trained_run["train"]
    recognizer = Recognizer.load(checkpoint, device="cpu")
    results = recognizer.transcribe(manifest)
    output = tmp_path / "hypotheses.jsonl"
    code, _, stderr = run("decode", checkpoint, manifest, "--format", "jsonl", "--out", output, "--device", "cpu")
    assert code == 0, stderr
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(record["id"], record["text"]) for record in records] == [(result.id, result.text) for result in results]
    assert [record["score"] for record in records] == [round(result.score, 4) for result in results]
    # One file gives one result; samples give what their file gives, at any sample rate.
    path = Path(an4_rows("train", 1)[0][1])
    from_file = recognizer.transcribe(path)
    samples, rate = soundfile.read(path, dtype="float32")
    assert recognizer.transcribe(samples, sample_rate=rate).text == from_file.text
    assert [result.text for result in recognizer.transcribe([samples, path], sample_rate=rate)] == [from_file.text] * 2
    # As PCM integers, as torchaudio's (channels, samples), at 8 kHz: the same words, give or take.
    pcm = np.round(samples * 32767).astype(np.int16)
    assert recognizer.transcribe(pcm, sample_rate=rate).text == from_file.text
    assert recognizer.transcribe(torch.from_numpy(samples)[None].repeat(2, 1), sample_rate=rate).text == from_file.text
    assert recognizer.transcribe([], sample_rate=rate) == []
    long_silence = recognizer.transcribe(np.zeros(30 * rate, dtype=np.float32), sample_rate=rate)
    assert (long_silence.text, long_silence.segments, long_silence.words) == ("", [], [])


@pytest.mark.parametrize(
    ("samples", "sample_rate", "message"),
    [
        (np.zeros(16000, dtype=np.float32), None, "need their sample_rate"),
        (np.zeros(16000, dtype=np.float32), 0, "need their sample_rate"),
        (np.zeros(16000, dtype=np.float32), 16000.5, "need their sample_rate"),
        (np.full(16000, np.nan, dtype=np.float32), 16000, "non-finite"),
        (np.zeros((2, 2, 16000), dtype=np.float32), 16000, "must have shape"),
        (np.zeros(0, dtype=np.float32), 16000, "must have shape"),
        (np.zeros(16000, dtype=np.complex64), 16000, "must be real numbers"),
        (np.array(["a", "b"]), 16000, "must be real numbers"),
        (np.zeros(100, dtype=np.float32), 16000, "shorter than one"),
        ([0.1, 0.2], 16000, "cannot transcribe a float"),
    ],
)
def test_bad_samples_are_refused_clearly(
    trained_run: dict[str, Path], samples: object, sample_rate: object, message: str
) -> None:
    recognizer = Recognizer.load(trained_run["run"] / "best.pt", device="cpu")
    with pytest.raises(LasError, match=message):
        recognizer.transcribe(samples, sample_rate=sample_rate)


def test_samples_beyond_full_scale_are_decoded_with_a_warning(
    trained_run: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    samples, rate = soundfile.read(an4_rows("train", 1)[0][1], dtype="float32")
    Recognizer.load(trained_run["run"] / "best.pt", device="cpu").transcribe(samples * 32768, sample_rate=rate)
    assert "beyond full scale" in capsys.readouterr().err


def test_recordings_clipped_at_full_scale_are_decoded_with_a_warning_that_says_how_much(
    trained_run: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from las.data.augmentation.channel_effects import clipped

    rows = an4_rows("dev", 3)
    speech = [torch.from_numpy(soundfile.read(row[1], dtype="float32")[0]) for row in rows]
    soundfile.write(tmp_path / "hot.wav", clipped(speech[0], 20).numpy(), RATE, subtype="PCM_16")
    soundfile.write(tmp_path / "fine.wav", speech[1].numpy(), RATE, subtype="PCM_16")
    checkpoint = load_model(trained_run["run"] / "best.pt")
    recognizer = Recognizer(checkpoint, "cpu", [f"data.cache_dir={tmp_path / 'cache'}"])
    files = [tmp_path / "hot.wav", tmp_path / "fine.wav"]
    for _ in range(2):  # computed, then read from the cache: told both times
        capsys.readouterr()
        recognizer.transcribe(files)
        told = [line for line in capsys.readouterr().err.splitlines() if "clipped" in line]
        assert len(told) == 1 and "1 recording(s) clipped at full scale" in told[0] and "hot" in told[0]
        assert re.search(r"\d+\.\d% of its samples", told[0])
    recognizer.transcribe(clipped(speech[2], 10).numpy(), sample_rate=RATE)  # samples too
    assert "clipped at full scale" in capsys.readouterr().err
    recognizer.transcribe(files[1:])  # and nothing said of a recording that is not
    assert "clipped" not in capsys.readouterr().err


def test_a_long_recording_is_decoded_in_pieces_cut_at_its_pauses(
    trained_run: dict[str, Path], recording: dict[str, object]
) -> None:
    recognizer = Recognizer.load(trained_run["run"] / "best.pt", device="cpu", segment_seconds=2.0)
    result = recognizer.transcribe(recording["path"])
    # Every cut falls in a pause between the utterances, none inside one.
    assert_cut_between(result, recording["starts"][1:], GAP_SECONDS)
    # Words lie inside their segment, in time order.
    for segment in result.segments:
        times = [(word.start, word.end) for word in result.words if segment.start <= word.start < segment.end]
        assert all(segment.start <= start < end <= segment.end for start, end in times)
    starts = [word.start for word in result.words]
    assert starts == sorted(starts)
    assert {segment.hypothesis.aligned_by for segment in result.segments} <= {"ctc", ""}  # by the CTC head
    by_attention = Recognizer.load(trained_run["run"] / "best.pt", "cpu", segment_seconds=2.0, word_times="attention")
    peaks = by_attention.transcribe(recording["path"])
    assert peaks.text == result.text and {segment.hypothesis.aligned_by for segment in peaks.segments} <= {
        "attention",
        "",
    }
    assert all(
        segment.start <= word.start < word.end <= segment.end
        for segment in peaks.segments
        for word in peaks.words
        if segment.start <= word.start < segment.end
    )
    # Under decode.segment_seconds, with pauses under a second: whole. (Durations are read on the
    # played audio's clock: at 0.9 the 1.0 s between two utterances' words lasts 1.1 s.)
    whole = Recognizer.load(trained_run["run"] / "best.pt", device="cpu", speed=1.0).transcribe(recording["path"])
    assert len(whole.segments) <= 1


def assert_cut_between(result: Result, boundaries: list[float], gap: float) -> None:
    """At most a segment per utterance, none across the middle of a `gap` before a boundary."""
    assert len(result.segments) <= len(boundaries) + 1
    for segment in result.segments:
        assert not any(segment.start + 0.05 < boundary - gap / 2 < segment.end - 0.05 for boundary in boundaries)
    assert result.text == " ".join(segment.text for segment in result.segments)


def test_a_recording_shorter_than_a_segment_is_cut_at_pauses_of_a_second_inside_it(
    trained_run: dict[str, Path],
) -> None:
    """Two AN4 utterances with 1 or 3 s of digital silence between them read 1.9x and 4x worse
    whole than one by one (docs/archive/experiments.md): a pause of a second or more inside a recording
    is cut at, whatever its length."""
    rows = an4_rows("train", 3, longest_seconds=1.6)
    waveforms = [torch.from_numpy(soundfile.read(row[1], dtype="float32")[0]) for row in rows]
    gap = 1.5
    joined = torch.cat(
        [waveforms[0], torch.zeros(round(gap * RATE)), waveforms[1], torch.zeros(round(gap * RATE)), waveforms[2]]
    )
    boundaries = np.cumsum([len(waveform) / RATE + gap for waveform in waveforms[:-1]]).tolist()
    recognizer = Recognizer.load(trained_run["run"] / "best.pt", device="cpu")
    assert len(joined) / RATE < recognizer.config.decode.segment_seconds
    assert_cut_between(recognizer.transcribe(joined, sample_rate=RATE), boundaries, gap)


def test_pieces_cut_in_speech_are_heard_with_context_and_keep_their_own_words(
    trained_run: dict[str, Path], recording: dict[str, object]
) -> None:
    spans = [(0, 100), (100, 200), (230, 300)]  # a cut in speech at 100, a pause from 200 to 230
    pieces = with_context(0, spans, 300, context=50)
    assert [(piece.start, piece.end, piece.own_start, piece.own_end) for piece in pieces] == [
        (0, 150, 0, 100),
        (50, 200, 100, 200),
        (230, 300, 230, 300),
    ]
    # Cut into pieces of 1 s at most, mostly in speech: no word kept twice, none outside its piece.
    recognizer = Recognizer.load(trained_run["run"] / "best.pt", "cpu", segment_seconds=1.0)
    samples = recording["samples"][: 3 * RATE]
    result = recognizer.transcribe(samples, sample_rate=RATE)
    assert len(result.segments) >= 3
    middles = [(word.start + word.end) / 2 for word in result.words]
    assert middles == sorted(middles)
    for segment in result.segments:
        assert all(segment.start <= (word.start + word.end) / 2 < segment.end for word in segment.words)
        assert segment.text == " ".join(word.word for word in segment.words)


def parse_cues(text: str) -> list[tuple[float, float, str]]:
    pattern = r"(\d\d):(\d\d):(\d\d)[,.](\d\d\d) --> (\d\d):(\d\d):(\d\d)[,.](\d\d\d)\n(.+)"
    cues = []
    for match in re.finditer(pattern, text):
        numbers = [int(value) for value in match.groups()[:8]]
        start = numbers[0] * 3600 + numbers[1] * 60 + numbers[2] + numbers[3] / 1000
        end = numbers[4] * 3600 + numbers[5] * 60 + numbers[6] + numbers[7] / 1000
        cues.append((start, end, match.group(9)))
    return cues


def test_subtitles_parse_and_their_times_increase(
    trained_run: dict[str, Path], recording: dict[str, object], tmp_path: Path
) -> None:
    checkpoint = trained_run["run"] / "best.pt"
    texts = {}
    for subtitle_format in ("srt", "vtt"):
        code, stdout, stderr = run(
            "decode", checkpoint, recording["path"], "--format", subtitle_format, "--set", "decode.segment_seconds=2"
        )
        assert code == 0, stderr
        cues = parse_cues(stdout)
        assert cues and all(start < end for start, end, _ in cues)
        assert all(first[1] <= second[0] for first, second in zip(cues, cues[1:], strict=False))
        texts[subtitle_format] = cues
        if subtitle_format == "srt":
            assert stdout.startswith("1\n00:00:")
        else:
            assert stdout.startswith("WEBVTT\n\n")
    assert texts["srt"] == texts["vtt"]
    # Subtitles of several recordings: one file each, in a folder.
    manifest = trained_run["train"]
    assert_clear_error(*run("decode", checkpoint, manifest, "--format", "srt")[::2], "needs --out FOLDER")
    code, _, stderr = run("decode", checkpoint, manifest, "--format", "vtt", "--out", tmp_path / "subtitles")
    assert code == 0, stderr
    assert len(list((tmp_path / "subtitles").glob("*.vtt"))) == 4


def test_references_the_model_cannot_spell_are_decoded_with_a_warning(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    rows = an4_rows("train", 2, longest_seconds=1.6)
    rows[1][3] = "ÇA VA"  # characters the model never saw: only a reference
    manifest = write_manifest(tmp_path / "test.tsv", rows)
    code, stdout, stderr = run("decode", trained_run["run"] / "best.pt", manifest, "--device", "cpu")
    assert code == 0, stderr
    assert len(stdout.splitlines()) == 3 and "cannot be matched by this model" in stderr


def test_beam_size_is_not_silently_ignored(trained_run: dict[str, Path]) -> None:
    checkpoint, manifest = trained_run["run"] / "best.pt", trained_run["train"]
    code, stderr = run("decode", checkpoint, manifest, "--strategy", "greedy", "--beam-size", "4")[::2]
    assert_clear_error(code, stderr, "--beam-size is a beam search setting; --strategy greedy would ignore it")


def test_the_readme_example_runs(trained_run: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    example = re.sub(r"runs/an4/(\w+\.pt)", lambda match: str(trained_run["run"] / match.group(1)), example)
    example = example.replace("data/an4/dev.tsv", str(trained_run["train"])).replace("data/an4", str(AN4))
    exec(compile(example, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()


def test_audio_played_slower_keeps_the_recordings_own_clock(
    trained_run: dict[str, Path], recording: dict[str, object]
) -> None:
    """`decode.speed` plays the audio slower (or faster) before its features; cuts, segments and
    word times still come back in seconds of the recording, and samples decode as their file does."""
    checkpoint = trained_run["run"] / "best.pt"
    duration = len(recording["samples"]) / RATE
    for speed in (0.8, 1.25):
        recognizer = Recognizer.load(checkpoint, device="cpu", segment_seconds=2.0, speed=speed)
        result = recognizer.transcribe(recording["path"])
        assert_cut_between(result, recording["starts"][1:], GAP_SECONDS)
        assert result.segments[-1].end == pytest.approx(duration, abs=0.05)
        assert all(0 <= word.start < word.end <= duration + 0.02 for word in result.words)  # to the last frame
        assert recognizer.timing.audio_seconds == pytest.approx(duration, abs=0.05)
        assert recognizer.transcribe(recording["samples"], sample_rate=RATE).text == result.text
    slower = Recognizer.load(checkpoint, device="cpu", speed=0.8).array_features(recording["samples"], RATE)
    plain = Recognizer.load(checkpoint, device="cpu", speed=1.0).array_features(recording["samples"], RATE)
    assert len(slower) == pytest.approx(len(plain) / 0.8, abs=2)


def test_each_piece_keeps_the_transcript_ranked_higher_of_its_two_speeds(
    trained_run: dict[str, Path], recording: dict[str, object]
) -> None:
    """`decode.other_speed`: every piece is decoded at both speeds and the one the search ranks
    higher kept, on the recording's own clock; 0, or the speed itself, is one pass."""
    checkpoint = trained_run["run"] / "best.pt"
    files = [row[1] for row in an4_rows("dev", 6)] + [recording["path"]]
    durations = [soundfile.info(file).duration for file in files]
    one_pass = Recognizer.load(checkpoint, device="cpu", segment_seconds=2.0, other_speed=0).transcribe(files)
    same = Recognizer.load(checkpoint, device="cpu", segment_seconds=2.0, other_speed=1.0).transcribe(files)
    assert [result.text for result in same] == [result.text for result in one_pass]
    rank = Rules().rank  # the search's own: score / (characters + 1)
    for speed, other in ((1.0, 0.9), (2.0, 1.0)):  # played twice as fast, 1 wins some pieces
        recognizer = Recognizer.load(checkpoint, device="cpu", segment_seconds=2.0, speed=speed, other_speed=other)
        both = recognizer.transcribe(files)
        alone = Recognizer.load(checkpoint, device="cpu", segment_seconds=2.0, speed=speed, other_speed=0)
        first = alone.transcribe(files)
        switched = 0  # pieces whose transcript at the other speed ranked higher
        for chosen, plain, duration in zip(both, first, durations, strict=True):
            if len(chosen.segments) == len(plain.segments) == 1:
                ranks = rank(chosen.segments[0].hypothesis), rank(plain.segments[0].hypothesis)
                assert ranks[0] >= ranks[1] - 1e-4
                switched += ranks[0] > ranks[1] + 1e-4
            last = duration + 0.025 * speed  # the last frame's, 2.5 of its hops of the recording
            assert all(0 <= word.start < word.end <= last for word in chosen.words)
            assert all(0 <= segment.start < segment.end <= last for segment in chosen.segments)
        assert switched >= (1 if speed == 2.0 else 0)  # the second pass is heard, not only run


def test_audio_and_precomputed_features_together_keep_their_order_and_their_own_speed(
    trained_run: dict[str, Path],
) -> None:
    """Audio is played at `decode.speed`; precomputed features cannot be, and are decoded as they are."""
    from las.data.corpora.utterances import Utterance

    recognizer = Recognizer.load(trained_run["run"] / "best.pt", device="cpu", speed=0.8)
    path = Path(an4_rows("train", 1)[0][1])
    as_said = Recognizer.load(trained_run["run"] / "best.pt", device="cpu", speed=1.0)
    precomputed = as_said.array_features(soundfile.read(path, dtype="float32")[0], RATE).numpy()
    utterances = [Utterance("first", path), Utterance("second", None, features=precomputed), Utterance("third", path)]
    kept, features = recognizer.utterance_features(utterances, "mixed")
    assert [utterance.id for utterance in kept] == ["first", "second", "third"]
    assert len(features[0]) == len(features[2]) == pytest.approx(len(precomputed) / 0.8, abs=2)
    assert torch.equal(features[1], torch.from_numpy(precomputed))
    results = recognizer.recognize([u.id for u in kept], list(features), [True, False, True])
    duration = soundfile.info(path).duration  # every time on the recording's clock
    assert results[1].segments[-1].end == pytest.approx(len(precomputed) * 0.01)
    assert all(result.segments[-1].end <= duration + 0.02 for result in (results[0], results[2]))
    assert results[0].segments[-1].end > duration - 0.3
