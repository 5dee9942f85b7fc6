"""Long recordings in utterance-sized pieces, cut at their pauses before the listener sees them:
content-based attention is trained on utterances of seconds and loses its place on minutes.

Speech and its pauses are found in the log-mel features themselves (each mel band against its
own background, the frame energy against its range), so precomputed features, audio files and
arrays split alike."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from las.data.front_end.runs import leading, long_runs, run_bounds
from las.data.front_end.signal import POWER_FLOOR

PAUSE_FRAMES = 50  # 0.5 s at a 10 ms hop: quiet this long is a pause to cut at
MARGIN_FRAMES = 15  # quiet kept at each side of a piece (at most half its pause), as around utterances
SHORTEST_FRAMES = 10  # pieces with fewer loud frames than this are clicks or breaths, not speech
QUIET_SHARE = 0.3  # a frame is quiet below this share of the way from the floor to the peak
LOUDEST_FRAMES = 30  # 0.3 s: a word, longer than a click
SEARCH_WINDOW_FRAMES = 20  # a piece too long is cut at the quietest stretch this long inside it
# Speech rises and falls, overall and band by band. Its frame energies span 7-12 nats (5th to 95th
# percentile) in AN4, still 1.5 in white noise at 0 dB SNR; silence and white noise a few tenths.
# But noise whose power sits in the low bands (pink, brown, a car, a fan) swells and fades as much
# as speech in noise does (up to 6 nats) while its band activity spans under 0.25 (a tone 0.45),
# against at least 0.75 for speech in any of those noises at 0 dB (docs/archive/experiments.md, the margin
# of the no-speech rule).
SPEECH_CONTRAST = 1.0  # nats of frame energy
BAND_CONTRAST = 0.5  # nats of band activity
# Band activity this far rises as only speech's does (AN4: 4.7 and more; 40 s of mains hum alone
# 1.5): mains hum under a quiet recording holds its frame energy flat, a narrow low mel band
# taking all of a tone's power (a short command with 1 s of a -43 dBFS hum at each end: 0.3-0.6
# nats, and no text).
SPEECH_BANDS = 3.0
BAND_BACKGROUND = 0.1  # a mel band's background level: its 10th percentile over the recording
ACTIVITY_FRAMES = 5  # band activity is averaged over 50 ms
# A pause is also quieter than the background's own swings reach: noise as loud as the speech
# swings through QUIET_SHARE of the way to its peak, and long noise around a few words was
# decoded as words. Its spread is read from its low tail (the 1st to 5th percentile: 0.69
# standard deviations of a normal distribution, whose 5th percentile lies 1.64 under its mean).
NOISE_DEVIATIONS = 3.0
# What surrounds the speech is this many nats (8.7 dB) under it in median frame energy, or it is
# taken for speech: a recording in noise worse than that keeps all of it.
SURROUNDINGS_CONTRAST = 2.0
# But what is that much quieter and still rises in its bands as words do is words (`soft_words`),
# read beyond the speech's own rise and fall (EDGE_FRAMES next to it).
EDGE_FRAMES = 30
SOFT_WORDS_SHARE = 0.5
# A tone holds its spectrum still: weighted by power, its log-mel bands change by 0.002-0.014 nats
# from one frame to the next (a voicemail's beep, a DTMF key, at or above the speech's level with
# a room's background under them); speech stays under 0.02 for 2 frames in a row at most (all of
# AN4; a held "V" stays under 0.05 for 11), noise swings by half a nat. Two tones that beat in one
# band (a dial tone) swing too: only the quieter-surroundings rule trims them.
TONE_CHANGE = 0.02
TONE_FRAMES = 10
TONE_EDGE_FRAMES = 2  # a tone's start and end click in the frames whose windows they fall in
# A frame's median band this close to the log floor, for a pause's length: mains hum put into
# padding lies 0.0-0.1 nats over it (the 16-bit quantiser's noise under it); a recording 40 dB
# under AN4's, in 16 bits, reaches down to 0.05 too, but in stray frames (its 0.1st percentile
# 0.4; 30 dB under, 0.16 and 0.25); AN4's own, 0.6.
EMPTY_BANDS = 0.3


def frame_energy(features: torch.Tensor) -> torch.Tensor:
    """Log power of each frame: `(frames, mel_bins)` log-mel -> `(frames,)`."""
    return features.float().logsumexp(dim=1)


def digital_silence(energy: torch.Tensor, mel_bins: int) -> torch.Tensor:
    """`(frames,)` True where a frame energy `(frames,)` is at the log floor of exact zeros (the
    gaps of a joined or padded file): it says nothing about the noise speech rises from."""
    return energy < math.log(mel_bins * POWER_FLOOR) + 1.0


def tones(features: torch.Tensor, sound: torch.Tensor) -> torch.Tensor:
    """`(frames,)` True where a frame of `features` `(frames, mel_bins)` is part of a tone: where,
    for TONE_FRAMES in a row of `sound` `(frames,)`, the frame's spectrum changes by under
    TONE_CHANGE nats from the last (its bands' mean absolute change, weighted by their share of
    the power above the log floor: a frame next to digital silence holds nearly all of its bands
    at the floor, and still), with TONE_EDGE_FRAMES more at each end. A beep before or after the speech is
    loud, and it was kept and decoded with the speech (1.8-2.0x the CER of AN4 dev)."""
    features = features.float()
    power = (features[1:].exp() - POWER_FLOOR).clamp(min=0)  # (frames - 1, mel_bins) above the floor
    share = power / power.sum(dim=1, keepdim=True).clamp(min=POWER_FLOOR)
    change = (share * (features[1:] - features[:-1]).abs()).sum(dim=1)  # (frames - 1,)
    still = (change < TONE_CHANGE) & sound[1:] & sound[:-1]
    tone = torch.zeros_like(sound)
    for start, end in runs(still):
        if end - start + 1 >= TONE_FRAMES:  # transitions start..end-1 join frames start..end
            tone[max(0, start - TONE_EDGE_FRAMES) : end + 1 + TONE_EDGE_FRAMES] = True
    return tone


def empty(features: torch.Tensor) -> torch.Tensor:
    """`(frames,)` True where most bands of the frames of `features` `(frames, mel_bins)` (their
    median band) lie within EMPTY_BANDS of the log floor of exact zeros for PAUSE_FRAMES or more
    in a row: digital silence with a few bands of sound in it, a hum or a beep put into padding.
    Mains hum around a recording's seconds of padding passed for its background, which the
    recording's own rose above as speech, and 0.5 s of hum alone was decoded with it (1.33x the
    CER of AN4 dev)."""
    near_floor = features.float().median(dim=1).values < math.log(POWER_FLOOR) + EMPTY_BANDS
    return long_runs(near_floor, PAUSE_FRAMES)


def band_activity(features: torch.Tensor, heard: torch.Tensor) -> torch.Tensor:
    """How far each frame rises above the recording's background, band by band: the mean over mel
    bins of a frame's log power above its bin's BAND_BACKGROUND level among the `heard` frames
    `(frames,)`, averaged over ACTIVITY_FRAMES; `(frames, mel_bins)` -> `(frames,)`. Broadband
    noise lifts every band's background with it, while a quiet word still stands out in its own
    bands (in the total energy, white noise at 5 dB SNR drowns it); and speech rises for longer
    than noise swings."""
    features = features.float()
    sample = features[heard] if heard.any() else features
    rank = max(1, math.ceil(BAND_BACKGROUND * len(sample)))
    background = sample.kthvalue(rank, dim=0).values  # (mel_bins,); kthvalue has no size limit
    return over_activity_frames((features - background).clamp(min=0).mean(dim=1))


def over_activity_frames(values: torch.Tensor) -> torch.Tensor:
    """`(frames,)` averaged over ACTIVITY_FRAMES around each frame (fewer at the ends)."""
    window = min(ACTIVITY_FRAMES, len(values) // 2 * 2 + 1)  # odd, at most the frames
    smooth = torch.nn.functional.avg_pool1d(values[None, None], window, 1, window // 2, count_include_pad=False)
    return smooth[0, 0]


def energy_range(energy: torch.Tensor) -> tuple[float, float]:
    """The floor and peak of frame energies `(frames,)`: their 5th and 95th percentiles; the peak
    at least the level that half of the loudest LOUDEST_FRAMES in a row reach, for a recording
    that is mostly silence (two minutes of it and one word: its 95th percentile is silence too).
    The median, not the mean: a click lasts a few frames."""
    energy = energy.float()
    floor, peak = torch.quantile(energy, torch.tensor([0.05, 0.95])).tolist()
    loudest = energy.unfold(0, min(LOUDEST_FRAMES, len(energy)), 1).median(dim=1).values.max()
    return floor, max(peak, float(loudest))


def rises(energy: torch.Tensor, activity: torch.Tensor) -> tuple[float, float]:
    """How far frame energies and band activities `(frames,)` rise from their floor
    (`energy_range`), in nats."""
    (floor, peak), (activity_floor, activity_peak) = energy_range(energy), energy_range(activity)
    return peak - floor, activity_peak - activity_floor


def quiet_frames(energy: torch.Tensor, floor: float, peak: float) -> torch.Tensor:
    """`(frames,)` True where a frame energy `(frames,)` is under QUIET_SHARE of the way from the
    recording's floor to its peak (`energy_range`)."""
    return energy < floor + QUIET_SHARE * (peak - floor)


class Levels(NamedTuple):
    """How loud a recording's frames are, overall and band by band, against its own range."""

    energy: torch.Tensor  # (frames,) frame_energy
    heard: torch.Tensor  # (frames,) True where a frame is neither digital silence nor `inserted`
    inserted: torch.Tensor  # (frames,) True where a sound was put into the recording: a tone, `empty`
    activity: torch.Tensor  # (frames,) band_activity
    energy_range: tuple[float, float]  # (floor, peak) of the energy
    activity_range: tuple[float, float]  # of the activity, digital silence left out
    pause_level: float  # the activity under which a frame is quiet

    @classmethod
    def of(cls, features: torch.Tensor) -> Levels:
        """The levels of `features` `(frames, mel_bins)`."""
        energy = frame_energy(features)
        sound = ~digital_silence(energy, features.shape[1])
        inserted = sound & (tones(features, sound) | empty(features))
        heard = sound & ~inserted
        activity = band_activity(features, heard)
        sample = activity[heard] if heard.any() else activity
        floor, peak = energy_range(sample)
        lowest, low = torch.quantile(sample, torch.tensor([0.01, 0.05])).tolist()
        swings = low + (1.64 + NOISE_DEVIATIONS) * (low - lowest) / 0.69  # the background's highest
        pause_level = max(floor + QUIET_SHARE * (peak - floor), swings)
        return cls(energy, heard, inserted, activity, energy_range(energy), (floor, peak), pause_level)

    @property
    def contrasts(self) -> tuple[float, float]:
        """How far the energy and the band activity rise from their floor, in nats."""
        (floor, peak), (activity_floor, activity_peak) = self.energy_range, self.activity_range
        return peak - floor, activity_peak - activity_floor

    @property
    def speech(self) -> bool:
        """Whether they rise and fall as speech does, overall and band by band: silence, tones and
        steady noise of any colour do not; or, where a hum under the speech holds the energy flat,
        band by band alone by SPEECH_BANDS."""
        energy, bands = self.contrasts
        return bands >= BAND_CONTRAST and (energy >= SPEECH_CONTRAST or bands >= SPEECH_BANDS)

    def soft_words(self, part: slice, speech_activity: float) -> bool:
        """Whether the frames `part` are words spoken softer than the rest, not what surrounds
        them: on their own they rise and fall as speech does (`speech`'s test, on their heard
        frames), and their median frame rises band by band at least SOFT_WORDS_SHARE as far as the
        speech's median frame (`speech_activity`). A room's background, whatever its swells, stays
        near its bands' own level (a tenth to a third of the speech's rise in AN4's recordings;
        words a speaker trailed off on, 0.6-0.85)."""
        heard = self.heard[part]
        energy, activity = self.energy[part][heard], self.activity[part][heard]
        if len(energy) < SHORTEST_FRAMES or float(activity.median()) < SOFT_WORDS_SHARE * speech_activity:
            return False
        energy_rise, band_rise = rises(energy, activity)
        return energy_rise >= SPEECH_CONTRAST and band_rise >= BAND_CONTRAST

    def steady(self, part: slice) -> bool:
        """Whether the heard frames `part`, a pause's length at least, neither rise nor fall,
        overall or band by band (by less than SPEECH_CONTRAST and BAND_CONTRAST over
        ACTIVITY_FRAMES, which a hum's harmonics beating against the frames do not outlast): a
        steady sound, however loud. Mains hum around a quiet recording outweighs its speech in
        frame energy (1 s of it at -45 dBFS around a short command was kept and decoded as
        words)."""
        heard = self.heard[part]
        if heard.sum() < PAUSE_FRAMES:
            return False
        energy_rise, band_rise = rises(over_activity_frames(self.energy[part][heard]), self.activity[part][heard])
        return energy_rise < SPEECH_CONTRAST and band_rise < BAND_CONTRAST

    @property
    def pauses(self) -> torch.Tensor:
        """`(frames,)` True where a frame is quiet in its bands (`pause_level`). Not in its total
        energy: that is the lowest bands' in the noise of cars, fans and rooms, which swells and
        fades as speech does (in a recording of sparse speech, a car's noise at 10 dB SNR was all
        taken for speech, and decoded), while in white noise at 0 dB speech's quiet words fall
        below it (a tenth of the loud speech frames left out) (docs/archive/experiments.md, "Long
        recordings"). Nor is what is not heard (digital silence, a sound inserted) ever speech."""
        return (self.activity < self.pause_level) | ~self.heard

    def speech_regions(self) -> list[tuple[int, int]]:
        """`sound_regions`, less those at either end that sound like the background rather than
        the speech: a swell of the background seconds away from the words (a recording's own
        background, 3 s of it around a few words, rose once in a region of its own, and everything
        between it and the words was kept as speech). An end region is background where the median
        energy of its loud frames is nearer the pauses' than the speech's, and SURROUNDINGS_CONTRAST
        under the speech's: a soft word is louder than the silence it is spoken in."""
        regions = sound_regions(self.pauses)
        loud = torch.zeros_like(self.pauses)
        for start, end in regions:
            loud[start:end] = ~self.pauses[start:end]
        speech, background = median_energy(self, loud), median_energy(self, self.pauses & ~loud)
        if math.isnan(background):
            return regions
        level = min((speech + background) / 2, speech - SURROUNDINGS_CONTRAST)

        def background_like(region: tuple[int, int]) -> bool:
            start, end = region
            part = torch.zeros_like(loud)
            part[start:end] = loud[start:end]
            return median_energy(self, part) < level

        while len(regions) > 1 and background_like(regions[0]):
            regions = regions[1:]
        while len(regions) > 1 and background_like(regions[-1]):
            regions = regions[:-1]
        return regions

    def speech_extent(self) -> tuple[int, int]:
        """`[start, end)` frames from the first loud frame of the first sound region to the last
        of the last (`sound_regions`): where the speech is, without what surrounds it. Sounds
        that a pause (PAUSE_FRAMES or longer) does not set apart count as speech: in a clip cut
        at its words, the quietest tenth of the frames that band activity is read against is
        speech, and shorter quiet stretches there are soft words (a tight crop trimmed at every
        quiet run lost its last words)."""
        heard = self.heard.nonzero().flatten()  # neither digital silence nor an inserted sound is speech
        if not len(heard):
            return 0, len(self.pauses)
        regions = self.speech_regions()
        if not regions:
            # Nothing heard stands out from the rest as speech from a pause: a word alone in digital
            # silence, its pause level read against itself (a padded word was heard with all of
            # its padding and decoded as another word), or no speech at all.
            return int(heard[0]), int(heard[-1]) + 1
        first, last = without_clicks(runs(~self.pauses[regions[0][0] : regions[-1][1]]))
        first, last = first + regions[0][0], last + regions[0][0]
        # And only what is clearly quieter than the speech, or `steady`, and does not
        # rise and fall as speech does (`soft_words`): where nothing around it is, band activity
        # is read against the speech itself, and whole words can pass for a pause; and a speaker
        # who trails off says the last words more than SURROUNDINGS_CONTRAST under the first
        # (tight crops lost them). What is read, and kept where it is not surroundings, ends where a
        # sound was put into the recording (`reach`): past a beep is not the speech's soft end (a
        # beep 0.3 s after a quiet command was kept). Not at digital silence: a recording 40 dB
        # under AN4's, in 16 bits, has runs of exact zeros inside its soft sounds.
        speech, speech_activity = self.energy[first:last], self.activity[first:last]
        heard_speech = self.heard[first:last]
        level = float(speech[heard_speech].median()) - SURROUNDINGS_CONTRAST if heard_speech.any() else math.inf
        activity = float(speech_activity[heard_speech].median()) if heard_speech.any() else math.inf

        def surroundings(part: slice, beyond: slice) -> bool:
            """Whether `part` is surroundings; `beyond`: the part without the rise or fall next to the speech."""
            sound = self.energy[part][self.heard[part]]
            if not len(sound):
                return True
            return (float(sound.median()) < level or self.steady(beyond)) and not self.soft_words(beyond, activity)

        reach_before, reach_after = self.reach(first, last)
        start, end = first - reach_before, last + reach_after
        heard = heard[(heard >= start) & (heard < end)]  # the speech's own frames among them
        if not surroundings(slice(start, first), slice(start, max(start, first - EDGE_FRAMES))):
            first = int(heard[0])
        if not surroundings(slice(last, end), slice(last + EDGE_FRAMES, end)):
            last = int(heard[-1]) + 1
        return first, last

    def reach(self, first: int, last: int) -> tuple[int, int]:
        """How many frames before and after the speech at `[first, last)` lie between it and the
        nearest sound `inserted` into the recording (or the recording's end)."""
        return runs_around(~self.inserted, first, last)

    def heard_around(self, first: int, last: int) -> tuple[int, int]:
        """How many frames before and after the speech at `[first, last)` are heard up to the
        first that is not (digital silence, a sound inserted)."""
        return runs_around(self.heard, first, last)


def runs_around(flags: torch.Tensor, first: int, last: int) -> tuple[int, int]:
    """How many of the flags `(frames,)` are True in a row just before `first` and from `last` on."""
    return leading(flags[:first].flip(0)), leading(flags[last:])


def without_clicks(loud: list[tuple[int, int]]) -> tuple[int, int]:
    """`[start, end)` from the first of the `loud` runs `[start, end)` to the last, less those at
    either end shorter than SHORTEST_FRAMES that quiet of EDGE_FRAMES or more sets apart from the
    rest: a click (a record button's, 0.3 s after the speech, was kept and decoded with it), not
    the release of a last stop after its closure."""
    while len(loud) > 1 and loud[-1][1] - loud[-1][0] < SHORTEST_FRAMES and loud[-1][0] - loud[-2][1] >= EDGE_FRAMES:
        loud = loud[:-1]
    while len(loud) > 1 and loud[0][1] - loud[0][0] < SHORTEST_FRAMES and loud[1][0] - loud[0][1] >= EDGE_FRAMES:
        loud = loud[1:]
    return loud[0][0], loud[-1][1]


def median_energy(levels: Levels, frames: torch.Tensor) -> float:
    """The median frame energy where `frames` `(frames,)` is True and the frame is heard; NaN where none is."""
    energy = levels.energy[frames & levels.heard]
    return float(energy.median()) if len(energy) else math.nan


def has_speech(features: torch.Tensor) -> bool:
    """Whether `features` `(frames, mel_bins)` hold speech (`Levels.speech`)."""
    return Levels.of(features).speech


# Heard beyond a cut in a recording, so that no word is decoded half: decoding whole hears each
# piece this much further where a neighbour follows without a pause, and a stream's second pass
# hears this much before each segment (las.recognition.second_pass).
CONTEXT_SECONDS = 0.5


def split_at_pauses(features: torch.Tensor, max_frames: int) -> list[tuple[int, int]]:
    """`[start, end)` frame spans of the speech in `features` `(frames, mel_bins)`, in order: cut at
    every pause (`Levels.pauses`), long silence left out, and no span longer than `max_frames` (a
    stretch without a pause is cut at its quietest point). Empty for a recording without speech
    (`has_speech`)."""
    levels = Levels.of(features)
    if not levels.speech:
        return []
    spans = []
    for start, end in loud_regions(levels.pauses):
        spans.extend(cut_to_length(levels.energy, start, end, max_frames))
    return spans


def cut_at_inner_pauses(pauses: torch.Tensor, start: int, end: int, pause_frames: int) -> list[tuple[int, int]]:
    """`[start, end)` cut at the pauses of `pause_frames` or more (`Levels.pauses` `(frames,)`;
    0: not cut) inside it, as a long recording is cut at its pauses (`split_at_pauses`): each
    piece widened by up to MARGIN_FRAMES of its pauses, the first and the last keeping the span's
    own edges. Two of AN4's utterances with a second of silence between them read 1.9x worse than
    one by one, and 4x with three seconds."""
    if pause_frames <= 0:
        return [(start, end)]
    regions = [(start + first, start + last) for first, last in loud_regions(pauses[start:end], pause_frames)]
    if len(regions) <= 1:
        return [(start, end)]
    return [(start, regions[0][1]), *regions[1:-1], (regions[-1][0], end)]


def sound_regions(quiet: torch.Tensor, pause_frames: int = PAUSE_FRAMES) -> list[tuple[int, int]]:
    """Spans between pauses (quiet runs of `pause_frames` or more, and the recording's ends) with
    at least SHORTEST_FRAMES loud frames: speech, not clicks or breaths."""
    bounds = [0, *[edge for pause in pause_runs(quiet, pause_frames) for edge in pause], len(quiet)]
    spans = zip(bounds[0::2], bounds[1::2], strict=True)
    return [(start, end) for start, end in spans if int((~quiet[start:end]).sum()) >= SHORTEST_FRAMES]


def pause_runs(quiet: torch.Tensor, pause_frames: int) -> list[tuple[int, int]]:
    return [(start, end) for start, end in runs(quiet) if end - start >= pause_frames]


def loud_regions(quiet: torch.Tensor, pause_frames: int = PAUSE_FRAMES) -> list[tuple[int, int]]:
    """`sound_regions`, each widened by up to MARGIN_FRAMES of its pauses."""
    pauses = pause_runs(quiet, pause_frames)
    regions = []
    for start, end in sound_regions(quiet, pause_frames):
        before = next((pause for pause in pauses if pause[1] == start), None)
        after = next((pause for pause in pauses if pause[0] == end), None)
        widen_before = min(MARGIN_FRAMES, (before[1] - before[0]) // 2) if before else 0
        widen_after = min(MARGIN_FRAMES, (after[1] - after[0]) // 2) if after else 0
        regions.append((start - widen_before, end + widen_after))
    return regions


def runs(flags: torch.Tensor) -> list[tuple[int, int]]:
    """`[start, end)` of each run of True in `flags` `(frames,)`."""
    starts, ends = run_bounds(flags)
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


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
