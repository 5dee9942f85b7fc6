"""PCM on a pipe: raw samples however the pipe hands them over, a WAV stream's header read and
checked, other containers refused with one clear line."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile
import torch

from las.core.errors import LasError
from las.data.augmentation.channel_effects import clipped
from las.data.front_end.audio import float_samples
from las.data.front_end.pcm import pcm_pieces
from las.data.front_end.signal import resample

from .conftest import an4_rows

RATE = 16000


class Pipe(io.RawIOBase):
    """A pipe that hands over at most `most` bytes a read, as a writer on the other end might."""

    def __init__(self, data: bytes, most: int) -> None:
        self.data, self.most, self.at = data, most, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self.most if size < 0 else min(size, self.most)
        chunk = self.data[self.at : self.at + size]
        self.at += len(chunk)
        return chunk


def heard(data: bytes, most: int = 1 << 20, piece: int = 1600) -> np.ndarray:
    """The samples streamed, as the pieces hold them (int16 where raw: none, an empty int16 array)."""
    pieces = list(pcm_pieces(Pipe(data, most), RATE, piece))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype="<i2")


def samples(count: int = 4000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-20000, 20000, count).astype("<i2")


def wav_bytes(audio: np.ndarray, rate: int = RATE, subtype: str = "PCM_16", format: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, rate, format=format, subtype=subtype)
    return buffer.getvalue()


def chunk(name: bytes, body: bytes) -> bytes:
    return name + struct.pack("<I", len(body)) + body + b"\0" * (len(body) % 2)


def wav_stream(audio: np.ndarray, data_size: int | None = None, before: bytes = b"", after: bytes = b"") -> bytes:
    """A WAV as a writer builds it by hand: chunks `before` the audio, a data size that may not be
    the audio's (an unseekable writer's), chunks `after` it."""
    channels = 1 if audio.ndim == 1 else audio.shape[1]
    fmt = struct.pack("<HHIIHH", 1, channels, RATE, RATE * 2 * channels, 2 * channels, 16)
    body = audio.astype("<i2").tobytes()
    size = len(body) if data_size is None else data_size
    chunks = chunk(b"fmt ", fmt) + before + b"data" + struct.pack("<I", size) + body + after
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


@pytest.mark.parametrize("most", [1, 3, 7, 4096])
def test_raw_pcm_reads_the_same_samples_however_the_pipe_hands_them_over(most: int) -> None:
    audio = samples()
    assert np.array_equal(heard(audio.tobytes(), most), audio)


def test_pieces_are_at_most_the_size_asked_for() -> None:
    pieces = list(pcm_pieces(Pipe(samples(5000).tobytes(), 1 << 20), RATE, 1600))
    assert sum(map(len, pieces)) == 5000 and max(map(len, pieces)) <= 1600


def test_a_wav_stream_is_heard_as_its_samples_not_its_header() -> None:
    audio = samples()
    assert np.array_equal(heard(wav_bytes(audio), 5), audio)
    # Chunks before the audio (one of odd size, padded) are skipped.
    extra = chunk(b"LIST", b"INFOISFT\x05\0\0\0lavf\0") + chunk(b"odd ", b"abc")
    assert np.array_equal(heard(wav_stream(audio, before=extra), 3), audio)


def test_a_wav_streams_audio_ends_where_its_header_says_unless_the_header_could_not_know() -> None:
    audio = samples()
    trailer = chunk(b"LIST", b"INFO" * 10)
    assert np.array_equal(heard(wav_stream(audio, after=trailer)), audio)
    # An unseekable writer's sizes (arecord, sox and ffmpeg on a pipe): the audio runs to the end.
    for unknown in (0, 0xFFFFFFFF, 0x7FFFFFFF):
        assert np.array_equal(heard(wav_stream(audio, data_size=unknown)), audio)


def test_a_wav_streams_channels_are_averaged() -> None:
    left, right = samples(seed=1), samples(seed=2)
    mean = ((left.astype(np.float32) + right) / 2 / 32768).astype(np.float32)
    assert np.allclose(heard(wav_bytes(np.stack([left, right], axis=1)), 7), mean, rtol=0, atol=1e-7)


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE", "ULAW", "ALAW"])
@pytest.mark.parametrize("channels", [1, 2])
def test_a_wav_stream_of_any_pcm_float_or_g711_samples_is_heard_as_the_file_is_read(
    subtype: str, channels: int
) -> None:
    """sox and ffmpeg keep their input's sample format (24-bit from a studio recording or a USB
    microphone, floats from a DAW, G.711 from a call recording): a stream hears each as the file
    read whole is heard (its channels' mean), however the pipe cuts its samples."""
    tracks = np.random.default_rng(3).uniform(-0.6, 0.6, (RATE // 4, channels)).astype(np.float32)
    data = wav_bytes(tracks, subtype=subtype)
    expected = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)[0].mean(axis=1)
    for most in (7, 4096):
        got = heard(data, most)
        assert got.shape == expected.shape
        assert np.allclose(np.asarray(float_samples(got)), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (44100, 2), (48000, 1), (22254, 1)])
def test_a_wav_stream_at_another_rate_is_heard_resampled_to_the_models_however_the_pipe_hands_it_over(
    rate: int, channels: int
) -> None:
    """arecord's default is 8 kHz, a sound card's 44.1 or 48 (and a rate sharing few factors with
    the model's, 22254 Hz, whose whole filter bank would hold 360 MB): what arrives is heard as the
    whole recording resampled (as `las decode` reads a file at another rate), whatever the pieces."""
    tracks = [samples(rate // 2, seed=seed) for seed in range(channels)]
    mono = sum(track.astype(np.float32) / 32768 for track in tracks) / channels
    expected = resample(torch.from_numpy(mono).float(), rate, RATE).numpy()
    data = wav_bytes(np.stack(tracks, axis=1) if channels > 1 else tracks[0], rate=rate)
    for most in (7, 4096):
        got = heard(data, most)
        assert got.dtype == np.float32 and got.shape == expected.shape == (RATE // 2,)
        assert np.abs(got - expected).max() < 1e-5


def test_a_wav_stream_below_a_telephone_lines_rate_is_heard_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    assert len(heard(wav_bytes(samples(2000), rate=4000))) == 8000
    assert "stdin is a WAV stream at 4000 Hz: nothing above 2000 Hz" in capsys.readouterr().err


def test_half_a_sample_at_the_end_is_left_out_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    audio = samples(10)
    assert np.array_equal(heard(audio.tobytes() + b"x"), audio)
    assert "1 byte(s) into a 2-byte sample" in capsys.readouterr().err
    assert len(heard(b"")) == 0 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"RIFF\0\0\0\0WAVE"
            + chunk(b"fmt ", struct.pack("<HHIIHH", 7, 1, RATE, 0, 2, 16))
            + chunk(b"data", bytes(8)),
            "16-bit mu-law",
        ),
        (wav_bytes(samples(), subtype="MS_ADPCM"), "format 2 .neither PCM nor floats"),
        (
            b"RIFF\0\0\0\0WAVE"
            + chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, RATE, 0, 2, 12))
            + chunk(b"data", bytes(8)),
            "12-bit PCM",
        ),
        (
            b"RIFF\0\0\0\0WAVE"
            + chunk(b"fmt ", struct.pack("<HHIIHH", 3, 1, RATE, 0, 2, 16))
            + chunk(b"data", bytes(8)),
            "16-bit floats",
        ),
        (wav_bytes(samples(), format="FLAC"), "a FLAC file, not raw PCM"),
        (wav_bytes(samples(), format="OGG", subtype="VORBIS"), "an Ogg file, not raw PCM"),
        (b"ID3\x04" + bytes(100), "an MP3 file"),
        (wav_bytes(samples())[:30], "ended before its audio began"),
        (b"RIFF\0\0\0\0WAVE" + chunk(b"data", bytes(8)), "before its format"),
        (
            b"RIFF\0\0\0\0WAVE" + chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, 0, 0, 2, 16)) + chunk(b"data", bytes(8)),
            "0 Hz",
        ),
        (
            b"RIFF\0\0\0\0WAVE"
            + chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, 4000000001, 0, 2, 16))
            + chunk(b"data", bytes(8)),
            "4000000001 Hz: its format chunk is damaged",
        ),
        # Sizes that claim gigabytes are read past (metadata) or refused (a format), never held in memory.
        (b"RIFF\0\0\0\0WAVE" + b"LIST\xf0\xff\xff\xff" + bytes(100), "ended before its audio began"),
        (b"RIFF\0\0\0\0WAVE" + b"fmt \xf0\xff\xff\xff" + bytes(100), "format chunk is damaged"),
    ],
)
def test_what_is_not_16_bit_pcm_is_one_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(LasError, match=message):
        heard(data)


@pytest.mark.parametrize("subtype", ["ULAW", "ALAW"])
def test_every_g711_code_is_the_sample_libsndfile_reads_for_it(subtype: str) -> None:
    data = wav_bytes(np.arange(-32768, 32768, 7, dtype=np.int16), subtype=subtype)  # a ramp through every code
    expected = soundfile.read(io.BytesIO(data), dtype="int16")[0]
    assert len(np.unique(expected)) >= 255
    assert np.array_equal(heard(data, 7), expected)


@pytest.mark.parametrize("seconds", [2.0, 0.2])
def test_raw_unsigned_8_bit_samples_on_stdin_are_one_clear_error_not_noise_decoded(seconds: float) -> None:
    """`arecord -t raw` without `-f` writes unsigned 8-bit: read as signed 16-bit, each pair of
    samples near 128 is a sample near -32640, noise a model would decode into words."""
    audio = np.clip(128 + np.random.default_rng(0).normal(0, 20, round(seconds * 8000)), 0, 255).astype(np.uint8)
    with pytest.raises(LasError, match="pairs of unsigned 8-bit samples are not 16-bit signed PCM"):
        heard(audio.tobytes(), 4096)
    time = np.arange(RATE) / RATE
    clipped = (np.clip(3 * np.sin(2 * np.pi * 300 * time), -1, 1) * 32767).astype("<i2")  # a hot microphone
    square = (np.sign(np.sin(2 * np.pi * 200 * time)) * 20000).astype("<i2")
    for loud in (clipped, square):  # still audio
        assert np.array_equal(heard(loud.tobytes()), loud)


def test_speech_bare_or_clipped_at_full_scale_is_heard_and_as_unsigned_8_bit_is_refused() -> None:
    """Which raw streams read as unsigned 8-bit: none of AN4's speech at full scale, bare or clipped
    20 dB too hot (the rails at each edge of a clipped run), and all of it written as 8-bit."""
    for _, audio, _, _ in an4_rows("dev", 12):
        speech = torch.from_numpy(soundfile.read(audio, dtype="float32")[0])
        for waveform in (speech, clipped(speech, 20)):
            full = (waveform / waveform.abs().max() * 32767).numpy().astype("<i2")
            assert np.array_equal(heard(full.tobytes()), full)
        eight_bit = np.round(speech.numpy()[::2] / float(speech.abs().max()) * 127 + 128).astype(np.uint8)
        with pytest.raises(LasError, match="unsigned 8-bit"):
            heard(eight_bit.tobytes())
