"""Audio reading through soundfile — whole files or segments of them — with one clear error per
unreadable, damaged or non-finite file."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import torch

from las.core.errors import LasError
from las.core.progress import warn
from las.data.augmentation.channel_effects import TELEPHONE_RATE
from las.data.front_end.signal import resample

AUDIO_SUFFIXES = (".flac", ".wav", ".ogg", ".mp3", ".opus", ".aiff", ".aif")
# Audio that phones, browsers and video hold, which libsndfile cannot read (AAC, AMR, WMA, ...):
# named, not passed over, where a folder or a manifest has them.
UNREADABLE_SUFFIXES = (".m4a", ".aac", ".mp4", ".3gp", ".amr", ".wma", ".webm", ".mkv", ".mka", ".caf", ".ac3")
HEADER_BYTES = 4096  # of a file read for its plain header (`plain_header`)
# A segment may end this far past the end of its file (manifests round durations); further is an error.
SEGMENT_END_TOLERANCE_SECONDS = 0.1


@dataclass(frozen=True)
class Segment:
    """The part of a recording an utterance is: `start` seconds in, `duration` seconds long (None:
    to the end), as NeMo's `offset`/`duration` and Kaldi's `segments` give it."""

    start: float
    duration: float | None = None

    def __post_init__(self) -> None:
        if not (np.isfinite(self.start) and self.start >= 0):
            raise LasError(f"segment start {self.start!r} must be a finite number of seconds >= 0")
        if self.duration is not None and not (np.isfinite(self.duration) and self.duration > 0):
            raise LasError(f"segment duration {self.duration!r} must be a finite number of seconds > 0")

    def frames(self, rate: int, total: int, path: Path) -> tuple[int, int]:
        """First and end sample of the segment in a file of `total` samples at `rate`."""
        start = round(self.start * rate)
        end = total if self.duration is None else round((self.start + self.duration) * rate)
        if start >= total or end > total + SEGMENT_END_TOLERANCE_SECONDS * rate:
            raise LasError(f"segment {self} lies outside {path}, which lasts {total / rate:.3f}s")
        return start, min(end, total)

    def __str__(self) -> str:
        end = "end" if self.duration is None else f"{self.start + self.duration:g}s"
        return f"{self.start:g}s-{end}"


def load_audio(
    path: Path, sample_rate: int, segment: Segment | None = None, content: bytes | None = None
) -> torch.Tensor:
    """Mono waveform `(samples,)` at `sample_rate` of the file at `path`, or of its `segment`;
    decoded from `content` where given (the file's bytes, already read and hashed)."""
    with opened(path, content) as file:
        rate = file.samplerate
        start, end = segment.frames(rate, file.frames, path) if segment else (0, file.frames)
        file.seek(start)
        samples = file.read(end - start, dtype="float32", always_2d=True)  # (samples, channels)
    if samples.shape[0] == 0:
        raise LasError(f"audio file is empty: {path}")
    non_finite = int(samples.size - np.isfinite(samples).sum())
    if non_finite:
        # One NaN would make the normalisation statistics, and with them every batch, NaN.
        raise LasError(f"audio file {path} has {non_finite} non-finite samples (NaN or infinity); repair or remove it")
    waveform = mixed_down(torch.from_numpy(samples))
    if rate != sample_rate:
        waveform = resample(waveform, rate, sample_rate)
    return waveform


# A mix-down with less power than this share of its channels' mean cancels: their signals are in
# opposite phase (a microphone wired with its poles swapped on one channel, a "wide stereo"
# effect), and the mean of the channels is left with little but their differences.
CANCELLING_MIX = 0.1


def mixed_down(samples: torch.Tensor) -> torch.Tensor:
    """`(samples, channels)` -> `(samples,)`: the channels' mean, or the loudest channel where the
    mean cancels (CANCELLING_MIX)."""
    mix = samples.mean(dim=1)
    if samples.shape[1] > 1:
        power = samples.double().pow(2).mean(dim=0)  # (channels,)
        if float(mix.double().pow(2).mean()) < CANCELLING_MIX * float(power.mean()):
            return samples[:, int(power.argmax())].contiguous()
    return mix


def audio_length(path: Path, segment: Segment | None = None) -> tuple[int, int]:
    """(samples, sample rate) of the file at `path`, or of its `segment`, from its header alone."""
    header = plain_header(path)
    if header is None:
        with opened(path) as file:
            header = file.frames, file.samplerate
    frames, rate = header
    start, end = segment.frames(rate, frames, path) if segment else (0, frames)
    if end <= start:
        raise LasError(f"audio file is empty: {path}")
    return end - start, rate


def plain_header(path: Path, read: tuple[bytes, int] | None = None) -> tuple[int, int] | None:
    """(samples, sample rate) read straight from a plain FLAC or WAV header, as libsndfile reads
    them, in a tenth of its time (a million files' lengths are read at start-up); None for
    anything else (other formats, tags before a FLAC stream, a WAV whose data chunk is not
    where or as large as it says), which goes to libsndfile. `read`: its `file_head`, if read already."""
    read = read or file_head(path)
    if read is None:
        return None  # libsndfile's error names it
    head, size = read
    if head[:4] == b"fLaC" and len(head) >= 42 and head[4] & 0x7F == 0:  # STREAMINFO comes first
        fields = int.from_bytes(head[18:26], "big")  # rate 20 bits, channels 3, bits 5, samples 36
        rate, samples = fields >> 44, fields & ((1 << 36) - 1)
        return (samples, rate) if samples and rate else None  # 0 samples: unknown, libsndfile counts
    chunk = wav_data_chunk(head)
    if chunk is None:
        return None
    body, length, block, rate = chunk
    if body + length != size and body + length + 1 != size:
        return None  # a size that is not the file's (streamed, cut short)
    return length // block, rate


def file_head(path: Path) -> tuple[bytes, int] | None:
    """The first HEADER_BYTES of the file at `path` and its size in bytes; None where it cannot be
    read (the caller's fallback or later reading names why)."""
    try:  # unbuffered: a Python file object costs as much again
        descriptor = os.open(path, os.O_RDONLY)
        try:
            return os.read(descriptor, HEADER_BYTES), os.fstat(descriptor).st_size
        finally:
            os.close(descriptor)
    except OSError:
        return None


def wav_data_chunk(head: bytes) -> tuple[int, int, int, int] | None:
    """(where its samples start, how many bytes its header says they take, bytes per frame, sample
    rate) of the data chunk of a plain WAV file (PCM or float) that begins with `head`; None for
    anything else, or where the format chunk does not come first."""
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    offset, block, rate = 12, 0, 0
    while offset + 8 <= len(head):
        name, length = head[offset : offset + 4], int.from_bytes(head[offset + 4 : offset + 8], "little")
        body = offset + 8
        if name == b"fmt " and body + 16 <= len(head):
            tag = int.from_bytes(head[body : body + 2], "little")
            if tag not in (1, 3, 0xFFFE):  # PCM, float, extensible: frames are block-aligned
                return None
            rate = int.from_bytes(head[body + 4 : body + 8], "little")
            block = int.from_bytes(head[body + 12 : body + 14], "little")
        elif name == b"data":
            return (body, length, block, rate) if block and rate else None
        offset = body + length + (length & 1)  # chunks are padded to even sizes
    return None


STREAMED_LENGTHS = (0, 0xFFFFFFFF)  # what a WAV written as a stream says its data takes: unknown


def cut_short(path: Path, read: tuple[bytes, int] | None = None) -> tuple[float, float] | None:
    """(seconds its header promises, seconds it holds) of a WAV file whose samples end before its
    header says they do (a recording or a download interrupted); None for a whole file, another
    format, or one that cannot be read (whose reading says why)."""
    read = read or file_head(path)
    chunk = wav_data_chunk(read[0]) if read else None
    if read is None or chunk is None:
        return None
    body, length, block, rate = chunk
    size = read[1]
    if length in STREAMED_LENGTHS or body + length <= size:
        return None
    return length // block / rate, max(0, size - body) // block / rate


@contextlib.contextmanager
def opened(path: Path, content: bytes | None = None) -> Iterator[soundfile.SoundFile]:
    """The audio file at `path` (or `content`, its bytes) open for reading; one clear error for a
    missing, empty or unreadable one."""
    if (read_size(path) if content is None else len(content)) == 0:
        raise LasError(f"audio file is empty: {path}")
    try:
        with soundfile.SoundFile(path if content is None else io.BytesIO(content)) as file:
            yield file
    except soundfile.LibsndfileError as error:
        reason = error.error_string.rstrip(".")
        raise LasError(f"cannot read audio file {path}: {reason}{conversion_hint(path)}") from None
    except (RuntimeError, TypeError, ValueError) as error:
        raise LasError(f"cannot read audio file {path}: {error}") from None


def conversion_hint(path: Path | str) -> str:
    """What to do with a file in a format las cannot read, as " (...)" to end a message; "" for others."""
    path = Path(path)
    if path.suffix.lower() not in UNREADABLE_SUFFIXES:
        return ""
    return (
        f" (las reads {', '.join(AUDIO_SUFFIXES)}, not {path.suffix.lower()}: "
        f"convert it first, e.g. ffmpeg -i {path.name} {path.stem}.flac)"
    )


def samples_to_waveform(samples: np.ndarray | torch.Tensor, sample_rate: int | None, target_rate: int) -> torch.Tensor:
    """Mono float waveform `(samples,)` at `target_rate` of samples given in memory: floats in
    [-1, 1] or integer PCM (scaled to it), `(samples,)`, `(samples, channels)` or
    `(channels, samples)` (the shorter side is taken for the channels)."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise LasError(f"samples need their sample_rate, a positive whole number of Hz: got {sample_rate!r}")
    array = samples.detach().cpu().numpy() if isinstance(samples, torch.Tensor) else np.asarray(samples)
    if array.ndim not in (1, 2) or array.size == 0:
        raise LasError(f"samples must have shape (samples,) or (samples, channels): got {array.shape}")
    waveform = float_samples(array)
    if waveform.dim() == 2:
        waveform = mixed_down(waveform if waveform.shape[0] >= waveform.shape[1] else waveform.T)  # as files are
    peak = float(waveform.abs().max())
    if peak > 1.0 + 1e-3:
        warn(f"samples reach {peak:.3g}, beyond full scale [-1, 1]: integer PCM passed as floats? (divide by 32768)")
    if reason := narrow_band(int(sample_rate)):
        warn(f"samples {reason}")
    if sample_rate != target_rate:
        waveform = resample(waveform, int(sample_rate), target_rate)
    return waveform


def float_samples(array: np.ndarray) -> torch.Tensor:
    """Samples as float32 in [-1, 1], the same shape: floats as they are, integer PCM scaled from
    its type's full range; one clear error for anything else, or for values that are not finite."""
    if array.dtype.kind not in "iuf":
        raise LasError(f"samples must be real numbers (floats or integer PCM): got dtype {array.dtype}")
    if array.dtype.kind in "iu":  # PCM: full scale is the type's range
        information = np.iinfo(array.dtype)
        middle = (int(information.max) + int(information.min) + 1) / 2  # 0, or 128 for unsigned 8-bit
        array = (array.astype(np.float64) - middle) / (information.max - middle + 1)
    waveform = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    if not torch.isfinite(waveform).all():
        raise LasError("samples hold non-finite values (NaN or infinity)")
    return waveform


def narrow_band(rate: int) -> str | None:
    """What to tell of audio sampled at `rate`: below a telephone line's rate it holds no sound
    above half of it, narrower than any channel training hears (a 4 kHz file keeps 2 kHz of
    speech and loses most consonants), so its transcript is likely wrong; None at 8 kHz and up."""
    if rate >= TELEPHONE_RATE:
        return None
    return (
        f"at {rate} Hz: nothing above {rate // 2} Hz, narrower than a telephone line "
        f"({TELEPHONE_RATE} Hz), the narrowest audio las models are made for: expect wrong transcripts"
    )


def sample_rate(path: Path, read: tuple[bytes, int] | None = None) -> int | None:
    """The sample rate of the audio file at `path` from its header; None where it cannot be read
    (reading it later says why). `read`: its `file_head`, if read already."""
    header = plain_header(path, read)
    if header is not None:
        return header[1]
    try:
        return soundfile.info(str(path)).samplerate
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError):
        return None


def read_size(path: Path) -> int:
    """The size of the file at `path` in bytes; a missing or unreadable file is one clear error."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise LasError(f"audio file not found: {path}") from None
    except OSError as error:
        raise LasError(f"cannot read audio file {path}: {error.strerror}") from None


def read_bytes(path: Path, what: str = "audio file") -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise LasError(f"{what} not found: {path}") from None
    except OSError as error:
        raise LasError(f"cannot read {what} {path}: {error.strerror}") from None
