"""Audio decoding through soundfile, with one clear error per unreadable file."""

from __future__ import annotations

import io
from pathlib import Path

import soundfile
import torch
import torchaudio.functional

from las.errors import LasError

AUDIO_SUFFIXES = (".flac", ".wav", ".ogg", ".mp3", ".opus", ".aiff", ".aif")


def decode_audio(content: bytes, path: Path, sample_rate: int) -> torch.Tensor:
    """Mono waveform `(samples,)` at `sample_rate` from the encoded bytes of the file at `path`."""
    if not content:
        raise LasError(f"audio file is empty: {path}")
    try:
        samples, rate = soundfile.read(io.BytesIO(content), dtype="float32", always_2d=True)
    except soundfile.LibsndfileError as error:
        raise LasError(f"cannot read audio file {path}: {error.error_string}") from None
    except (RuntimeError, TypeError) as error:
        raise LasError(f"cannot read audio file {path}: {error}") from None
    if samples.shape[0] == 0:
        raise LasError(f"audio file is empty: {path}")
    waveform = torch.from_numpy(samples).mean(dim=1)  # (samples,): mix channels down
    if rate != sample_rate:
        waveform = torchaudio.functional.resample(waveform, rate, sample_rate)
    return waveform


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise LasError(f"audio file not found: {path}") from None
    except OSError as error:
        raise LasError(f"cannot read audio file {path}: {error.strerror}") from None
