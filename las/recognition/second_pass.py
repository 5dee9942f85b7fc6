"""A stream's second pass: each segment decoded whole once it has ended (`decode.stream_second_pass`).

The first pass (las.search.triggered) spells as the frames arrive, its speller reading only the
frames heard at each character's trigger; its words are partial. Once a segment ends at a pause,
its audio has all been heard, and this pass decodes it as `las decode` decodes a piece of a
recording: its features, with CONTEXT_SECONDS before it, through a listener started afresh (the
stream's has run since the recording began), the same search (decode.strategy, beam, CTC
weight), played at `decode.other_speed` too and the better transcript kept, characters placed on
their frames by the CTC head's forced alignment, confidences as offline. The words centred in the
segment are its final ones (those in the context were the segment before's). With
`decode.stream_second_pass_reach_seconds`, the context is the segments that began within that
long before this one, whole: with short pauses ending segments, each word is final at the first
pause after it but spelt with the sentence before it in view. The stream gives up
word-by-word finality for the accuracy of decoding whole, as two-pass recognisers rescore a
streaming pass at each endpoint (Sainath et al., 2019). With `decode.stream_second_pass_words`,
the search also calls `early` each time its best hypothesis begins a word: the segment so far is
decoded whole, and its words before that point are final at once; the rest at the pause.
"""

from __future__ import annotations

import torch

from las.core.config import Config
from las.core.text import Vocabulary
from las.data.features import FilterbankExtractor, Normalizer
from las.data.segmentation import CONTEXT_SECONDS
from las.model.las import LAS
from las.recognition.inference import aligned
from las.search import Hypothesis, Rules, build_strategy
from las.search.streaming import Spelt


class SegmentDecoder:
    """Given the stream's samples (`listen`) and its normalised features, a group of frames per
    encoder frame (`hear`), as they come; called with a segment's span of encoder frames and the
    first pass's characters for it, the segment decoded whole (nothing where the first pass heard
    nothing: a pause is not decoded). Keeps the current segment's samples and features, and the
    context before it."""

    def __init__(self, model: LAS, config: Config, normalizer: Normalizer, vocabulary: Vocabulary) -> None:
        settings = config.decode
        self.model, self.normalizer = model, normalizer
        self.strategy = build_strategy(settings, vocabulary, model)
        self.rank = Rules.of(settings).rank
        self.confidence = (settings.confidence, settings.confidence_from)
        self.extractor = FilterbankExtractor(config.features.at_decoding())
        other = settings.other_speed
        self.other_speed = other if other > 0 and other != 1 else None
        self.frame_samples = 2**config.model.pyramid_layers * self.extractor.hop  # of an encoder frame
        encoder_frame_seconds = self.frame_samples / config.features.sample_rate
        self.context = round(CONTEXT_SECONDS / encoder_frame_seconds)  # encoder frames
        self.reach = round(settings.stream_second_pass_reach_seconds / encoder_frame_seconds)
        self.starts: list[int] = []  # the first frames of the segments decoded within `reach` of the latest
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
    def __call__(self, start: int, end: int, first: list[Spelt], given: int = 0) -> list[Spelt]:
        """The characters of the segment of encoder frames `[start, end)` (from the recording's
        start), each at the first frame of its aligned span: its words centred from frame `given`
        on (the segment's start by default; later where `early` gave those before). What was heard
        before the next segment's context is then dropped."""
        heard_from, features, samples = self.heard(start, end)
        # A later segment starts at `end` or after: it reaches back to segments that began since `end - reach`.
        self.starts = [frame for frame in [*self.starts, *([start] if first else [])] if frame >= end - self.reach]
        self.drop(max(self.origin, min([*self.starts, end]) - self.context))
        if not first or not features:
            return []
        return self.owned(self.spelt(heard_from, features, samples), max(start, given))

    @torch.no_grad()
    def early(self, start: int, end: int, given: int, until: int) -> list[Spelt]:
        """The words centred in frames `[given, until)` of the segment begun at frame `start`, as
        it is decoded whole once frames up to `end` are heard (the segment goes on: nothing is
        dropped): a word is final once the first pass has begun the next
        (`decode.stream_second_pass_words`)."""
        heard_from, features, samples = self.heard(start, end)
        if not features:
            return []
        return self.owned(self.spelt(heard_from, features, samples), max(start, given), until)

    def heard(self, start: int, end: int) -> tuple[int, list[torch.Tensor], torch.Tensor]:
        """What a segment of encoder frames `[start, end)` is decoded from: its first frame
        (`window`), the groups of features from there to `end`, and their samples."""
        heard_from = self.window(start)
        features = self.groups[heard_from - self.origin : end - self.origin]
        samples = self.samples[
            (heard_from - self.origin) * self.frame_samples : (end - self.origin) * self.frame_samples
        ]
        return heard_from, features, samples

    def spelt(self, heard_from: int, features: list[torch.Tensor], samples: torch.Tensor) -> list[Spelt]:
        """The characters decoded from `features` (a group per encoder frame from `heard_from`)
        and their `samples`, each at the first frame of its aligned span on the recording's clock."""
        heard = [torch.cat(features)]  # (frames, mel_bins)
        if self.other_speed is not None and len(samples) >= self.extractor.window:
            heard.append(self.normalizer(self.extractor(samples, self.other_speed)))
        found = self.decoded(heard)
        best, speed = max(zip(found, (1.0, self.other_speed), strict=False), key=lambda pair: self.rank(pair[0]))
        spans = best.spans or []
        trust = best.confidences or [None] * len(best.tokens)
        return [
            Spelt(token, heard_from + round(span[0] * (speed or 1.0)), confidence)  # on the recording's clock
            for token, span, confidence in zip(best.tokens, spans, trust, strict=True)
        ]

    def window(self, start: int) -> int:
        """The first encoder frame a segment starting at frame `start` is decoded from: the first
        of the segments decoded before it that began within `reach` frames of it (or its own),
        with the context before that."""
        first = min((frame for frame in self.starts if frame >= start - self.reach), default=start)
        return max(self.origin, min(first, start) - self.context)

    def drop(self, frame: int) -> None:
        """Forget what was heard before encoder frame `frame`."""
        self.groups = self.groups[frame - self.origin :]
        self.samples = self.samples[(frame - self.origin) * self.frame_samples :]
        self.origin = frame

    def decoded(self, heard: list[torch.Tensor]) -> list[Hypothesis]:
        """The best hypothesis of each of `heard`'s features, aligned by the CTC head."""
        lengths = torch.tensor([len(item) for item in heard])
        batch = torch.nn.utils.rnn.pad_sequence(heard, batch_first=True)  # (pieces, frames, mel_bins)
        device = next(self.model.parameters()).device
        memory = self.model.listener(batch.to(device), lengths)
        found = self.strategy.search(self.model, memory)
        return [nbest[0] for nbest in aligned(self.model, memory, found, "ctc", self.confidence)]

    def owned(self, spelt: list[Spelt], start: int, until: float = float("inf")) -> list[Spelt]:
        """The words of `spelt` (each with the space after it) centred at or after frame `start`
        and before `until`: those before it were heard as context, and the segment before (or an
        early call) gave them."""
        kept: list[Spelt] = []
        word: list[Spelt] = []
        for item in [*spelt, None]:
            if item is not None and item.token != self.space:
                word.append(item)
                continue
            if word and start <= (word[0].frame + word[-1].frame + 1) / 2 < until:
                kept += word + ([item] if item is not None else [])
            word = []
        return kept
