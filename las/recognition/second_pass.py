"""A stream's second pass: each segment decoded whole once it has ended (`decode.stream_second_pass`).

The first pass (las.search.triggered) spells as the frames arrive, its speller reading only the
frames heard at each character's trigger; its words are partial. A segment ends where the first
pass has spelt nothing for `decode.stream_pause_seconds` and its audio has paused since (`quiet`,
as `las decode` cuts a long recording). Once it ends, its audio has all been heard, and this pass
decodes it as `las decode` decodes a piece of a recording (las.recognition.segment_reader; by
another checkpoint's model with `decode.stream_second_pass_model`): its features, with
CONTEXT_SECONDS before it (no more of a longer pause before its speech: `SegmentModel.features`),
through a listener started afresh (the stream's has run since the recording began), the same search
(decode.strategy, beam, CTC weight), played at `decode.other_speed` too and the better transcript
kept, characters placed on their frames by the CTC head's forced alignment, confidences as offline.
The words centred in the segment are its final ones (those in the context were the segment
before's), up to half a pause after the first pass's last character: a word after that was heard
before the first pass began one there (the search says where: `TriggeredSearch.owned_until`), and
waits for the next segment, which drops it where it was the onset of its own first word and gives
it otherwise. The stream gives up word-by-word finality
for the accuracy of decoding whole, as two-pass recognisers rescore a streaming pass at each
endpoint (Sainath et al., 2019). With `decode.stream_second_pass_words`, the search also calls
`early` each time its best hypothesis begins a word: the segment so far is decoded whole, and its
words before that point are final at once; the rest at the pause. With
`decode.stream_second_pass_words_hold`, the last of those words waits for the next where its
confidence is under that: it is given by the next call, decoded with the word after it heard. So
does a last word this decoding has not heard end (it runs on to where the first pass began the
next), whatever its confidence.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from Levenshtein import distance

from las.core.config import Config
from las.core.text import Vocabulary
from las.data.front_end.features import analysis_sizes
from las.data.front_end.segmentation import CONTEXT_SECONDS, PAUSE_FRAMES, Levels, pause_runs
from las.recognition.confidence import word_confidence
from las.recognition.segment_reader import SegmentModel, SegmentReader
from las.search.monotonic_stream import Spelt


class SegmentDecoder:
    """Given the stream's samples (`listen`) and its normalised features, a group of frames per
    encoder frame (`hear`), as they come; called with a segment's span of encoder frames and the
    first pass's characters for it, the segment decoded whole (nothing where the first pass heard
    nothing: a pause is not decoded). Keeps the current segment's samples and features, and the
    context before it."""

    def __init__(self, reading: SegmentModel, config: Config, vocabulary: Vocabulary) -> None:
        """`reading`: the model segments are decoded by (the stream's, or another loaded once
        for many streams)."""
        settings = config.decode
        self.reader = SegmentReader(reading, config, vocabulary)
        self.reduction = config.model.reduction  # feature frames per encoder frame
        self.frame_samples = self.reduction * analysis_sizes(config.features)[1]  # of an encoder frame
        self.hold = settings.stream_second_pass_words_hold  # an early word less confident than this waits
        encoder_frame_seconds = self.frame_samples / config.features.sample_rate
        self.context = round(CONTEXT_SECONDS / encoder_frame_seconds)  # encoder frames
        self.pending: list[Spelt] = []  # those words of the segment that ended last, and of no other yet
        self.said: list[tuple[int, ...]] = []  # the current segment's words given early (stream_second_pass_words)
        self.space = vocabulary.index.get(" ", -1)
        self.groups: list[torch.Tensor] = []  # (group, mel_bins) per encoder frame heard, from `origin`
        self.samples = torch.zeros(0)  # heard, from encoder frame `origin`'s first
        self.origin = 0  # the encoder frame of groups[0], from the recording's start

    def listen(self, samples: torch.Tensor) -> None:
        """The stream's next samples `(samples,)` in [-1, 1]."""
        self.samples = torch.cat([self.samples, samples.float()])

    def hear(self, group: torch.Tensor) -> None:
        """The stream's next group of normalised features `(group, mel_bins)`: an encoder frame's."""
        self.groups.append(group)

    @torch.no_grad()
    def __call__(self, start: int, end: int, until: int | None, given: int = 0) -> list[Spelt]:
        """The characters of the segment of encoder frames `[start, end)` (from the recording's
        start), each at the first frame of its aligned span: its words centred from frame `given`
        on (the segment's start by default; later where `early` gave those before) and before
        frame `until` (half a pause after the first pass's last character; None where the first
        pass spelt nothing); those after it wait (`pending`). What was heard before the next
        segment's context is then dropped."""
        heard_from, features, samples = self.heard(start, end)
        self.drop(max(self.origin, end - self.context))  # a later segment starts at `end` or after
        said, self.said = self.said, []  # the next segment's words start afresh
        if until is None or not features:
            return self.finish()  # the first pass heard no word begin: none of those pending is an onset
        spelt = self.reader.spelt(heard_from, features, samples)
        before = self.carried(spelt, start)
        owned = self.owned(spelt, start, max(start, given), said=said)
        found = words(owned, self.space)
        pending = [item for word in found if centre(word, self.space) >= until for item in word]
        kept = owned[: len(owned) - len(pending)]
        if pending and pending[-1].token != self.space:  # the words given after them are words of their own
            pending.append(Spelt(self.space, pending[-1].frame))
        self.pending = pending
        return before + kept

    def finish(self) -> list[Spelt]:
        """The words pending, given: no segment follows them (the recording has ended, or the
        first pass heard nothing after them)."""
        pending, self.pending = self.pending, []
        return pending

    def carried(self, spelt: list[Spelt], start: int) -> list[Spelt]:
        """The words pending from the segment before the one begun at frame `start`, given unless
        `spelt`, this segment decoded, has a word of its own across their frames: then they were
        its onset, heard as a word before the first pass began it ("E" of "SIX" after "THREE"),
        and given, it would be said twice. Otherwise a word the first pass missed ("W E L L"'s
        "E", heard as the pause went on): given, it is not lost."""
        if not self.pending:
            return []
        first, last = self.pending[0].frame, letters(self.pending, self.space)[-1].frame
        spans = [letters(word, self.space) for word in words(spelt, self.space) if centre(word, self.space) >= start]
        onset = any(inside[0].frame <= last + 1 and inside[-1].frame >= first for inside in spans)
        pending = self.finish()
        return [] if onset else pending

    @torch.no_grad()
    def early(self, start: int, end: int, given: int, until: int) -> tuple[list[Spelt], int]:
        """The words centred in frames `[given, until)` of the segment begun at frame `start`, as
        it is decoded whole once frames up to `end` are heard (the segment goes on: nothing is
        dropped): a word is final once the first pass has begun the next
        (`decode.stream_second_pass_words`); and the frame the words given end at (`until`, or
        before the last of them where it is held back)."""
        heard_from, features, samples = self.heard(start, end)
        if not features:
            return [], until
        spelt = self.reader.spelt(heard_from, features, samples)
        before = self.carried(spelt, start)
        owned = self.owned(spelt, start, max(start, given), until, self.said)
        kept, through = self.held(owned, max(start, given), until)
        self.said += [spoken(word, self.space) for word in words(kept, self.space)]
        return before + kept, through

    def quiet(self, start: int, since: int, end: int) -> bool:
        """Whether the audio of the segment of encoder frames `[start, end)` has paused since
        frame `since` (the first pass's last character): PAUSE_FRAMES quiet by the levels of what
        the segment is decoded from, as `las decode` cuts a long recording at its pauses
        (`split_at_pauses`). The first pass falls silent where the speech goes on too (it spelt
        nothing of "THREE TWO EIGHT" for half a second): a segment ended there cuts a word, which
        neither it nor the next reads whole."""
        heard_from, _, samples = self.heard(start, end)
        extractor = self.reader.reading.extractor
        if len(samples) < extractor.window:
            return True
        pauses = Levels.of(extractor(samples, 1.0)).pauses  # (frames,) of the features from `heard_from`
        return bool(pause_runs(pauses[max(0, since - heard_from) * self.reduction :], PAUSE_FRAMES))

    def heard(self, start: int, end: int) -> tuple[int, list[torch.Tensor], torch.Tensor]:
        """What a segment of encoder frames `[start, end)` is decoded from: its first frame
        (`window`), the groups of features from there to `end`, and their samples."""
        heard_from = self.window(start)
        features = self.groups[heard_from - self.origin : end - self.origin]
        samples = self.samples[
            (heard_from - self.origin) * self.frame_samples : (end - self.origin) * self.frame_samples
        ]
        return heard_from, features, samples

    def window(self, start: int) -> int:
        """The first encoder frame a segment starting at frame `start` is decoded from: the
        context before it."""
        return max(self.origin, start - self.context)

    def drop(self, frame: int) -> None:
        """Forget what was heard before encoder frame `frame`."""
        self.groups = self.groups[frame - self.origin :]
        self.samples = self.samples[(frame - self.origin) * self.frame_samples :]
        self.origin = frame

    def owned(
        self,
        spelt: list[Spelt],
        start: int,
        given: int,
        until: float = float("inf"),
        said: Sequence[tuple[int, ...]] = (),
    ) -> list[Spelt]:
        """The words of `spelt` (each with the space after it) of the segment begun at frame
        `start` (centred at or after it: those before were heard as context) that follow the
        words given already, up to those centred at `until`. Those given are the words centred
        before frame `given`; where early calls have asked for words of this segment (`given`
        past its start), the words that match those they gave (`said`) best, nearest that split
        where several match alike: two decodings of a segment place a word's centre a frame or
        two apart, and one near the split would otherwise be given twice or never."""
        segment = [word for word in words(spelt, self.space) if centre(word, self.space) >= start]
        split = sum(centre(word, self.space) < given for word in segment)  # centres rise word by word
        if given > start:
            decoded = [spoken(word, self.space) for word in segment]
            split = min(
                range(len(segment) + 1), key=lambda index: (distance(said, decoded[:index]), abs(index - split))
            )
        return [item for word in segment[split:] if centre(word, self.space) < until for item in word]

    def held(self, owned: list[Spelt], given: int, until: int) -> tuple[list[Spelt], int]:
        """`owned` (the words of an early call, from frame `given`) and `until`; or, where its last
        word is not yet sure, the words before it and a frame between them and it, so that the
        next call, which hears more of it, gives it. Not sure: its confidence is under
        `decode.stream_second_pass_words_hold`, or it runs on to `until`, where the first pass
        began the next word: this decoding has not heard it end (a word cut at a pause inside it,
        "ER" of "ERASE", would be final, and the next call would give the whole word again)."""
        found = words(owned, self.space)
        if not found:
            return owned, until
        last = letters(found[-1], self.space)
        trust = [item.confidence for item in last]
        ended = last[-1].frame < until
        if ended and (None in trust or word_confidence(trust) >= self.hold):  # type: ignore[arg-type]
            return owned, until
        before = [item for word in found[:-1] for item in word]
        if not before:
            return [], given
        return before, max(given, (before[-1].frame + last[0].frame + 1) // 2)


def words(spelt: list[Spelt], space: int) -> list[list[Spelt]]:
    """`spelt` as words, each with the space after it (the last one's where there is one)."""
    found: list[list[Spelt]] = []
    word: list[Spelt] = []
    for item in spelt:
        word.append(item)
        if item.token == space:
            if len(word) > 1:
                found.append(word)
            word = []
    return found + ([word] if word else [])


def letters(word: list[Spelt], space: int) -> list[Spelt]:
    """A word's characters without the space after it."""
    return [item for item in word if item.token != space]


def centre(word: list[Spelt], space: int) -> float:
    """The frame at the middle of a word's characters (from the first's frame to the frame after the last's)."""
    inside = letters(word, space)
    return (inside[0].frame + inside[-1].frame + 1) / 2


def spoken(word: list[Spelt], space: int) -> tuple[int, ...]:
    """A word's tokens without the space after it: what it says, to compare one decoding's words with another's."""
    return tuple(item.token for item in letters(word, space))
