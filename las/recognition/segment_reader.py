"""What decodes a stream's segment once it has been heard (las.recognition.second_pass): a model,
the features it reads the segment's audio as, and the search, as `las decode` decodes a piece of
a recording.

By default the stream's own model reads the stream's own features. With
`decode.stream_second_pass_model`, another checkpoint's model reads the segment's audio through
its own front end: one whose listener reads both ways (the offline default's pBLSTM) hears a
segment that has ended as decoding whole hears it, where the stream's must read forwards only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.data.front_end.features import FilterbankExtractor, Normalizer
from las.data.front_end.segmentation import CONTEXT_SECONDS, Levels
from las.data.front_end.speech_margins import Surroundings
from las.export.runtime import load_model
from las.model.checkpoint import Checkpoint
from las.model.las import LAS
from las.recognition.inference import aligned
from las.search import Hypothesis, Rules, Strategy, build_strategy
from las.search.monotonic_stream import Spelt


@dataclass(frozen=True)
class SegmentModel:
    """The model that decodes a stream's ended segments and how it hears them: the stream's own
    features (`own_front_end` False), or their audio through this front end."""

    model: LAS
    normalizer: Normalizer
    extractor: FilterbankExtractor
    reduction: int  # feature frames per encoder frame
    lead: int  # feature frames of a segment's lead-in heard at most, by the stream's own model
    surroundings: Surroundings | None = None  # what of a segment's background it hears, its own front end's
    own_front_end: bool = False

    @classmethod
    def of(cls, model: LAS, config: Config, normalizer: Normalizer, vocabulary: Vocabulary) -> SegmentModel:
        """The stream's model (with its normaliser), or the checkpoint `decode.stream_second_pass_model` names."""
        path = config.decode.stream_second_pass_model
        reduction = config.model.reduction  # the other model's too (`second_model`)
        lead = config.features.frames(CONTEXT_SECONDS)
        if not path:
            return cls(model, normalizer, FilterbankExtractor(config.features.at_decoding()), reduction, lead)
        checkpoint = second_model(path, config, vocabulary)
        theirs = checkpoint.config
        return cls(
            checkpoint.build_model(next(model.parameters()).device),
            checkpoint.normalizer,
            FilterbankExtractor(theirs.features.at_decoding()),
            reduction,
            lead,
            Surroundings.of(theirs, decoding=True),
            own_front_end=True,
        )

    def features(self, groups: list[torch.Tensor], samples: torch.Tensor, speed: float) -> tuple[torch.Tensor, int]:
        """The normalised features `(frames, mel_bins)` a segment is decoded from, played at
        `speed`, and how many encoder frames (at that speed) of it they leave out before their
        first. The stream's own model hears the stream's own frames at 1, from at most `lead`
        frames before the segment's speech: a segment begins where the one before ended, and a
        pause longer than the context before a segment (CONTEXT_SECONDS), its background and
        the tail of the word before, is nothing an utterance begins with. Another model hears the
        segment's audio through its own front end, its speech with the margin around it that
        model decodes (`Surroundings`), as `las decode` hears a recording (a pBLSTM trained on
        utterances trimmed so misread them with a second of background); the stream's model read
        worse so trimmed (docs/archive/experiments.md, "A segment heard from a context before its speech")."""
        if len(samples) < self.extractor.window:
            if self.own_front_end or speed != 1.0:
                return torch.zeros(0, len(self.normalizer.mean)), 0
            return torch.cat(groups), 0
        features = self.extractor(samples, speed)
        if not self.own_front_end:
            start, end = max(0, Levels.of(features).speech_extent()[0] - self.lead), len(features)
        elif self.surroundings:
            start, end = self.surroundings.span(Levels.of(features))
        else:  # that model's front end keeps all it hears
            start, end = 0, len(features)
        start -= start % self.reduction  # on an encoder frame's first
        if end <= start:  # no speech in it
            return features[:0], 0
        skipped = start // self.reduction
        if self.own_front_end or speed != 1.0:
            return self.normalizer(features[start:end]), skipped
        return torch.cat(groups[skipped:]), skipped


class SegmentReader:
    """The characters a segment says, from the stream's features of it (a group of frames per
    encoder frame) and its samples, each placed on an encoder frame of the recording's clock."""

    def __init__(self, reading: SegmentModel, config: Config, vocabulary: Vocabulary) -> None:
        settings = config.decode
        self.reading = reading
        self.strategy = build_strategy(settings, vocabulary, reading.model)
        self.rank = Rules.of(settings).rank
        self.confidence = (settings.confidence, settings.confidence_from)
        other = settings.other_speed
        self.other_speed = other if other > 0 and other != 1 else None

    def spelt(self, heard_from: int, groups: list[torch.Tensor], samples: torch.Tensor) -> list[Spelt]:
        """The characters decoded from the stream's `groups` (one per encoder frame from
        `heard_from`) and their `samples`, each at the first frame of its aligned span on the
        recording's clock."""
        speeds = [1.0]
        if self.other_speed is not None and len(samples) >= self.reading.extractor.window:
            speeds.append(self.other_speed)
        heard = [self.reading.features(groups, samples, speed) for speed in speeds]
        kept = [
            (features, skipped, speed)
            for (features, skipped), speed in zip(heard, speeds, strict=True)
            if len(features)
        ]
        if not kept:
            return []
        found = self.decoded([features for features, _, _ in kept], self.strategy)
        best, (_, skipped, speed) = max(zip(found, kept, strict=True), key=lambda pair: self.rank(pair[0]))
        spans = best.spans or []
        trust = best.confidences or [None] * len(best.tokens)
        return [
            Spelt(token, heard_from + round((skipped + span[0]) * speed), confidence)  # on the recording's clock
            for token, span, confidence in zip(best.tokens, spans, trust, strict=True)
        ]

    def decoded(self, heard: list[torch.Tensor], strategy: Strategy) -> list[Hypothesis]:
        """The best hypothesis of each of `heard`'s features by `strategy`, aligned by the CTC head."""
        lengths = torch.tensor([len(item) for item in heard])
        batch = torch.nn.utils.rnn.pad_sequence(heard, batch_first=True)  # (pieces, frames, mel_bins)
        model = self.reading.model
        memory = model.listener(batch.to(next(model.parameters()).device), lengths)
        found = strategy.search(model, memory)
        return [nbest[0] for nbest in aligned(model, memory, found, "ctc", self.confidence)]


def second_model(path: str, config: Config, vocabulary: Vocabulary) -> Checkpoint:
    """The checkpoint at `path` (`decode.stream_second_pass_model`), refused unless it spells the
    stream's characters on encoder frames as long, from audio at the same sample rate: its
    characters are given as the stream's, on the stream's clock."""
    checkpoint = load_model(path)
    theirs = checkpoint.config
    if checkpoint.vocabulary != vocabulary:
        raise LasError(f"decode.stream_second_pass_model: {path} spells other characters than the stream's model")
    ours = (config.features.sample_rate, config.features.hop_ms, config.model.reduction)
    if (theirs.features.sample_rate, theirs.features.hop_ms, theirs.model.reduction) != ours:
        raise LasError(f"decode.stream_second_pass_model: {path} reads another sample rate or frame than the stream's")
    return checkpoint
