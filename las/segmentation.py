"""Long recordings in utterance-sized pieces, cut at their pauses before the listener sees them:
content-based attention is trained on utterances of seconds and loses its place on minutes.

Pauses are found in the log-mel features themselves (frame energy against the recording's own
range, and each band against its own background), so precomputed features, audio files and
arrays split alike."""

from __future__ import annotations

import math

import torch

from las.data.features import POWER_FLOOR

PAUSE_FRAMES = 30  # 0.3 s at a 10 ms hop: quiet this long is a pause to cut at
MARGIN_FRAMES = 15  # quiet kept at each side of a piece (at most half its pause), as around utterances
SHORTEST_FRAMES = 10  # pieces with fewer loud frames than this are clicks or breaths, not speech
QUIET_SHARE = 0.3  # a frame is quiet below this share of the way from the energy floor to its peak
LOUDEST_FRAMES = 30  # 0.3 s: a word, longer than a click
SEARCH_WINDOW_FRAMES = 20  # a piece too long is cut at the quietest stretch this long inside it
# Speech rises and falls: its frame energies span 7-12 nats (5th to 95th percentile) in AN4, still
# 2.4 in white noise at 5 dB SNR; steady noise or silence spans a few tenths (docs/BENCHMARKS.md).
SPEECH_CONTRAST = 1.0
BAND_BACKGROUND = 0.1  # a mel band's background level: its 10th percentile over the recording


def digital_silence(energy: torch.Tensor, mel_bins: int) -> torch.Tensor:
    """`(frames,)` True where a frame energy `(frames,)` is at the log floor of exact zeros (the
    gaps of a joined or padded file): it says nothing about the noise speech rises from."""
    return energy < math.log(mel_bins * POWER_FLOOR) + 1.0


def band_activity(features: torch.Tensor) -> torch.Tensor:
    """How far each frame rises above the recording's background, band by band: the mean over mel
    bins of a frame's log power above its bin's BAND_BACKGROUND level, `(frames, mel_bins)` ->
    `(frames,)`. Broadband noise lifts every band's background with it, while a quiet word still
    stands out in its own bands; in the total energy, white noise at 5 dB SNR drowns it."""
    features = features.float()
    heard = features[~digital_silence(frame_energy(features), features.shape[1])]
    heard = heard if len(heard) else features
    rank = max(1, math.ceil(BAND_BACKGROUND * len(heard)))
    background = heard.kthvalue(rank, dim=0).values  # (mel_bins,); kthvalue has no size limit
    return (features - background).clamp(min=0).mean(dim=1)


def frame_energy(features: torch.Tensor) -> torch.Tensor:
    """Log power of each frame: `(frames, mel_bins)` log-mel -> `(frames,)`."""
    return features.float().logsumexp(dim=1)


def energy_range(energy: torch.Tensor) -> tuple[float, float]:
    """The floor and peak of frame energies `(frames,)`: their 5th and 95th percentiles; the peak
    at least the level that half of the loudest LOUDEST_FRAMES in a row reach, for a recording
    that is mostly silence (two minutes of it and one word: its 95th percentile is silence too).
    The median, not the mean: a click lasts a few frames."""
    energy = energy.float()
    floor, peak = torch.quantile(energy, torch.tensor([0.05, 0.95])).tolist()
    loudest = energy.unfold(0, min(LOUDEST_FRAMES, len(energy)), 1).median(dim=1).values.max()
    return floor, max(peak, float(loudest))


def quiet_frames(energy: torch.Tensor, floor: float, peak: float) -> torch.Tensor:
    """`(frames,)` True where a frame energy `(frames,)` is under QUIET_SHARE of the way from the
    recording's floor to its peak (`energy_range`)."""
    return energy < floor + QUIET_SHARE * (peak - floor)


def has_speech(features: torch.Tensor) -> bool:
    """Whether the energy of `features` `(frames, mel_bins)` rises and falls as speech does;
    silence and steady noise do not."""
    floor, peak = energy_range(frame_energy(features))
    return peak - floor >= SPEECH_CONTRAST


def pause_frames(features: torch.Tensor) -> torch.Tensor:
    """`(frames,)` True where a frame of `features` `(frames, mel_bins)` is quiet both in its total
    energy and in its bands (`band_activity`), each against the recording's own range (the
    activity's without digital silence). Speech is what either measure hears: energy alone drops
    whole quiet words in broadband noise (a tenth of the loud speech frames at 0 dB SNR), bands
    alone cut more utterances inside (docs/BENCHMARKS.md, "Long recordings")."""
    energy = frame_energy(features)  # (frames,)
    activity = band_activity(features)  # (frames,)
    heard = activity[~digital_silence(energy, features.shape[1])]
    return quiet_frames(energy, *energy_range(energy)) & quiet_frames(
        activity, *energy_range(heard if len(heard) else activity)
    )


def split_at_pauses(features: torch.Tensor, max_frames: int) -> list[tuple[int, int]]:
    """`[start, end)` frame spans of the speech in `features` `(frames, mel_bins)`, in order: cut at
    every pause (`pause_frames`), long silence left out, and no span longer than `max_frames` (a
    stretch without a pause is cut at its quietest point). Empty for a recording without speech
    (`has_speech`)."""
    energy = frame_energy(features)  # (frames,)
    floor, peak = energy_range(energy)
    if peak - floor < SPEECH_CONTRAST:
        return []
    quiet = pause_frames(features)
    spans = []
    for start, end in loud_regions(quiet):
        spans.extend(cut_to_length(energy, start, end, max_frames))
    return spans


def loud_regions(quiet: torch.Tensor) -> list[tuple[int, int]]:
    """Spans between pauses (quiet runs of PAUSE_FRAMES or more) with enough loud frames, each
    widened by up to MARGIN_FRAMES of its pauses."""
    frames = len(quiet)
    pauses = [(start, end) for start, end in runs(quiet) if end - start >= PAUSE_FRAMES]
    # Speech lies between consecutive pauses (and the recording's ends).
    bounds = [0, *[edge for pause in pauses for edge in pause], frames]
    regions = []
    for start, end in zip(bounds[0::2], bounds[1::2], strict=True):
        if int((~quiet[start:end]).sum()) < SHORTEST_FRAMES:
            continue
        before = next((pause for pause in pauses if pause[1] == start), None)
        after = next((pause for pause in pauses if pause[0] == end), None)
        widen_before = min(MARGIN_FRAMES, (before[1] - before[0]) // 2) if before else 0
        widen_after = min(MARGIN_FRAMES, (after[1] - after[0]) // 2) if after else 0
        regions.append((start - widen_before, end + widen_after))
    return regions


def runs(flags: torch.Tensor) -> list[tuple[int, int]]:
    """`[start, end)` of each run of True in `flags` `(frames,)`."""
    padded = torch.nn.functional.pad(flags.int(), (1, 1))
    changes = torch.diff(padded).nonzero().flatten().tolist()  # alternately run starts and run ends
    return list(zip(changes[0::2], changes[1::2], strict=True))


def cut_to_length(energy: torch.Tensor, start: int, end: int, max_frames: int) -> list[tuple[int, int]]:
    """`[start, end)` in spans of at most `max_frames`, each cut at the quietest stretch left in
    the middle half of what it divides (so pieces stay utterance-sized, not slivers)."""
    if end - start <= max_frames:
        return [(start, end)]
    low, high = start + (end - start) // 4, end - (end - start) // 4
    window = min(SEARCH_WINDOW_FRAMES, high - low)
    stretches = energy[low:high].unfold(0, window, 1).mean(dim=1)  # (positions,) mean over each window
    cut = min(max(low + int(stretches.argmin()) + window // 2, start + 1), end - 1)
    return cut_to_length(energy, start, cut, max_frames) + cut_to_length(energy, cut, end, max_frames)
