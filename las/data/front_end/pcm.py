"""PCM arriving on a pipe (`las decode MODEL - --stream`): raw 16-bit samples at the model's rate,
or a WAV stream whose header is read and checked, resampled as it arrives where its rate is
another (`arecord` writes WAV at 8 kHz unless told `-t raw` or `-r`; so do `sox -t wav -` and
`ffmpeg -f wav -`, at their input's rate and sample format: 24-bit from a studio recording or a
USB microphone, floats from a DAW, G.711 from a call recording). Any other container (FLAC,
Ogg, MP3, ...) is refused with one clear line: its bytes read as samples would be heard as noise,
and nothing would say so."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from las.core.errors import LasError
from las.core.progress import warn
from las.data.front_end.audio import float_samples, narrow_band
from las.data.front_end.signal import StreamingResampler

# The first bytes of containers that are not PCM (two samples of raw audio would have to spell them).
CONTAINERS = {
    b"fLaC": "a FLAC file",
    b"OggS": "an Ogg file",
    b"ID3": "an MP3 file",
    b"FORM": "an AIFF file",
    b".snd": "an AU file",
    b"\x1aE\xdf\xa3": "a Matroska / WebM file",
    b"caff": "a CAF file",
}
PCM, IEEE_FLOAT, A_LAW, MU_LAW, EXTENSIBLE = 1, 3, 6, 7, 0xFFFE  # WAV format tags
# The samples a WAV stream may hold, by format tag and bits: how numpy reads them (24-bit samples
# are read into the top three bytes of an int32: the same full scale; G.711's codes as bytes).
SAMPLE_TYPES = {(PCM, 8): "u1", (PCM, 16): "<i2", (PCM, 24): "<i4", (PCM, 32): "<i4", (IEEE_FLOAT, 32): "<f4"}
SAMPLE_TYPES |= {(IEEE_FLOAT, 64): "<f8", (A_LAW, 8): "u1", (MU_LAW, 8): "u1"}
# A data chunk's size as a writer that cannot seek back leaves it: the audio runs to the end.
UNKNOWN_SIZES = (0, 0xFFFFFFFF)
LARGEST_KNOWN_SIZE = 0x7FFF0000  # arecord and sox write about 2**31 on a pipe
LARGEST_FORMAT = 1024  # bytes: a format chunk is 16 to 40; a larger one is damaged, not read into memory
SKIP_PIECE = 1 << 16
# No audio interface records faster (768 kHz): a header that says more is damaged.
# Unsigned 8-bit samples read in pairs as signed 16-bit: each byte of each is a sample near its
# middle (128). Raw stdin's first CHECKED_SECONDS is refused where most samples (MIDDLE_BYTES)
# have both bytes within 32 of 128: AN4 dev, bare or clipped 20 dB too hot at full scale, at most
# 5% of a half second; AN4 as unsigned 8-bit so read, 76% at full scale and more when quieter.
CHECKED_SECONDS, MIDDLE_BYTES = 0.5, 0.5
HIGHEST_RATE = 768_000


@dataclass(frozen=True)
class WavFormat:
    tag: int
    channels: int
    rate: int
    bits: int


def pcm_pieces(reader: BinaryIO, rate: int, piece_samples: int) -> Iterator[np.ndarray]:
    """Mono samples `(samples,)` at `rate` read from `reader` as they arrive, about
    `piece_samples` at a time: raw little-endian 16-bit mono (int16), or a WAV stream of integer
    PCM (8 to 32 bits), floats or G.711, as its samples are (int16, uint8, int32 or floats) where
    it is mono at `rate`, float32 in [-1, 1] where its channels were averaged or it was resampled
    from another rate. A WAV of another kind, or another container, is one clear error before
    anything is heard."""
    head = read_exactly(reader, 12)
    if head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE":
        wav, remaining = read_wav_header(reader, head[:4] == b"RF64")
        check_wav(wav)
        pieces = sample_pieces(reader, b"", wav, remaining, piece_samples * wav.rate // rate or 1)
        yield from pieces if wav.rate == rate else resampled(pieces, wav.rate, rate)
        return
    refuse_containers(head)
    yield from signed(sample_pieces(reader, head, WavFormat(PCM, 1, rate, 16), None, piece_samples), rate)


def signed(pieces: Iterator[np.ndarray], rate: int) -> Iterator[np.ndarray]:
    """Raw int16 `pieces`, refused once their first CHECKED_SECONDS read as unsigned 8-bit samples
    (arecord's default without `-f`) taken for signed 16-bit: heard, they would be noise, decoded
    into words all the same."""
    first: list[np.ndarray] | None = []  # the pieces of the first CHECKED_SECONDS, until checked
    for piece in pieces:
        if first is not None:
            first.append(piece.astype(np.int64))
            if sum(map(len, first)) >= rate * CHECKED_SECONDS:
                check_signed(np.concatenate(first))
                first = None
        yield piece
    if first:
        check_signed(np.concatenate(first))


def check_signed(samples: np.ndarray) -> None:
    """One clear line where most raw samples `(samples,)` are two unsigned 8-bit samples."""
    codes = samples.astype(np.int64) & 0xFFFF
    middle = (np.abs((codes & 0xFF) - 128) < 32) & (np.abs((codes >> 8) - 128) < 32)
    if float(middle.mean()) > MIDDLE_BYTES:
        raise LasError(
            "stdin: raw samples that read as pairs of unsigned 8-bit samples are not 16-bit signed PCM "
            "(arecord writes 8-bit unless told -f S16_LE): record or convert to it, or pipe a WAV stream"
        )


def sample_pieces(
    reader: BinaryIO, head: bytes, wav: WavFormat, remaining: int | None, piece_samples: int
) -> Iterator[np.ndarray]:
    """Interleaved samples of the format `wav` from `reader`, after the bytes `head` already read,
    up to `remaining` bytes (None: to the end), as mono `(samples,)` up to `piece_samples` at a
    time: mono as read, channels averaged as float32."""
    width = wav.bits // 8
    frame = width * wav.channels
    pending = head
    while True:
        whole = len(pending) // frame * frame
        if whole:
            samples = decoded(pending[:whole], wav)
            yield samples if wav.channels == 1 else float_samples(samples).reshape(-1, wav.channels).mean(1).numpy()
            pending = pending[whole:]
        wanted = frame * piece_samples if remaining is None else min(frame * piece_samples, remaining)
        chunk = (reader.read1(wanted) if hasattr(reader, "read1") else reader.read(wanted)) if wanted else b""
        if not chunk:
            break
        if remaining is not None:
            remaining -= len(chunk)
        pending += chunk
    if pending:
        warn(f"stdin ended {len(pending)} byte(s) into a {frame}-byte sample: left out")


def decoded(data: bytes, wav: WavFormat) -> np.ndarray:
    """Whole frames of `wav`'s samples as numpy reads them (`SAMPLE_TYPES`) `(samples * channels,)`;
    G.711's codes as the 16-bit samples they stand for."""
    if wav.tag in G711:
        return G711[wav.tag][np.frombuffer(data, dtype=np.uint8)]
    if wav.bits != 24:  # a copy: torch takes no read-only buffer
        return np.frombuffer(data, dtype=SAMPLE_TYPES[wav.tag, wav.bits]).copy()
    padded = np.zeros((len(data) // 3, 4), dtype=np.uint8)  # each sample's 3 bytes above a zero byte
    padded[:, 1:] = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3)
    return padded.view("<i4")[:, 0]


def mu_law_samples() -> np.ndarray:
    """The 16-bit sample `(256,)` each G.711 mu-law code stands for (telephone lines in North
    America and Japan; call recordings keep it): the code's bits inverted, a sign, a 3-bit segment
    and a 4-bit step within it."""
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = ((((code & 0x0F) << 3) + 0x84) << ((code >> 4) & 7)) - 0x84
    return np.where(code & 0x80, -magnitude, magnitude).astype(np.int16)


def a_law_samples() -> np.ndarray:
    """The 16-bit sample `(256,)` each G.711 A-law code stands for (telephone lines elsewhere): its
    even bits inverted, a sign (set: positive), a 3-bit segment and a 4-bit step within it."""
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment, step = (code >> 4) & 7, code & 0x0F
    magnitude = np.where(segment == 0, (step << 4) + 8, ((step << 4) + 0x108) << np.maximum(segment - 1, 0))
    return np.where(code & 0x80, magnitude, -magnitude).astype(np.int16)


G711 = {MU_LAW: mu_law_samples(), A_LAW: a_law_samples()}


def resampled(pieces: Iterator[np.ndarray], rate: int, new_rate: int) -> Iterator[np.ndarray]:
    """`pieces` at `rate` as float32 ones in [-1, 1] at `new_rate`, resampled as they come
    (what they give joined is the whole signal resampled, however it arrives)."""
    if warning := narrow_band(rate):
        warn(f"stdin is a WAV stream {warning}")
    resampler = StreamingResampler(rate, new_rate)
    for piece in pieces:
        yield resampler.push(float_samples(piece)).numpy()
    yield resampler.finish().numpy()


def read_exactly(reader: BinaryIO, count: int) -> bytes:
    """Up to `count` bytes, fewer only where the input ends (a pipe hands them over as written)."""
    data = b""
    while len(data) < count and (chunk := reader.read(count - len(data))):
        data += chunk
    return data


def read_wav_header(reader: BinaryIO, rf64: bool) -> tuple[WavFormat, int | None]:
    """The chunks after `RIFF....WAVE` up to the audio: its format and how many bytes of audio
    follow (None: to the end of the input)."""
    wav = None
    while True:
        header = read_exactly(reader, 8)
        if len(header) < 8:
            raise LasError("stdin: a WAV stream ended before its audio began")
        name, size = header[:4], struct.unpack("<I", header[4:])[0]
        if name == b"data":
            if wav is None:
                raise LasError("stdin: a WAV stream whose audio comes before its format ('fmt ' chunk)")
            known = not rf64 and size not in UNKNOWN_SIZES and size < LARGEST_KNOWN_SIZE
            return wav, size if known else None
        padded = size + size % 2  # chunks are padded to even sizes
        if name == b"fmt ":
            if size > LARGEST_FORMAT:
                raise LasError("stdin: a WAV stream's format chunk is damaged")
            body = read_exactly(reader, padded)
            if len(body) < size:
                raise LasError("stdin: a WAV stream ended before its audio began")
            wav = wav_format(body)
        elif skipped(reader, padded) < size:  # metadata: read past, a piece at a time, whatever size it claims
            raise LasError("stdin: a WAV stream ended before its audio began")


def skipped(reader: BinaryIO, count: int) -> int:
    """Read past `count` bytes, holding at most SKIP_PIECE at a time; how many there were."""
    done = 0
    while done < count and (chunk := reader.read(min(SKIP_PIECE, count - done))):
        done += len(chunk)
    return done


def wav_format(body: bytes) -> WavFormat:
    """A WAV `fmt ` chunk's format; an extensible one's tag is its sub-format's."""
    if len(body) < 16:
        raise LasError("stdin: a WAV stream's format chunk is damaged")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
    if tag == EXTENSIBLE and len(body) >= 26:
        tag = struct.unpack("<H", body[24:26])[0]
    return WavFormat(tag, channels, rate, bits)


def check_wav(wav: WavFormat) -> None:
    """One clear line where a WAV stream is not what a stream reads, with the way to make it so."""
    if (wav.tag, wav.bits) not in SAMPLE_TYPES:
        kinds = {PCM: "PCM", IEEE_FLOAT: "floats", A_LAW: "A-law", MU_LAW: "mu-law"}
        kind = f"{wav.bits}-bit {kinds[wav.tag]}" if wav.tag in kinds else f"format {wav.tag} (neither PCM nor floats)"
        raise LasError(
            f"stdin is a WAV stream of {kind}; --stream reads 8- to 32-bit PCM, 32- and 64-bit floats "
            "and 8-bit A-law or mu-law: record or convert to one (arecord -f S16_LE; sox ... -b 16 -e signed)"
        )
    if wav.channels < 1:
        raise LasError("stdin: a WAV stream with no channels")
    if not 1 <= wav.rate <= HIGHEST_RATE:
        raise LasError(f"stdin: a WAV stream at {wav.rate} Hz: its format chunk is damaged")


def refuse_containers(head: bytes) -> None:
    """One clear line where the input is a container, not raw PCM."""
    for magic, kind in CONTAINERS.items():
        if head.startswith(magic):
            raise LasError(
                f"stdin is {kind}, not raw PCM: give its path (las decode MODEL FILE --stream [--realtime]), "
                "or convert it (sox FILE -t raw -b 16 -e signed -c 1 -r RATE -)"
            )
