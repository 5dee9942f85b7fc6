"""Recognition as the audio arrives: `Recognizer.stream()`, which `las decode MODEL - --stream` runs.

    stream = recognizer.stream()
    for piece in microphone():            # samples of any size: int16 PCM or floats in [-1, 1]
        for result in stream.push(piece):
            print(result.final, result.text)
    for result in stream.finish():
        ...

A model trained for it (data/an4/streaming.toml: a causal front end, a listener that hears
a bounded time ahead) is run a fixed group of frames at a time: the features
(las.data.front_end.feature_stream), the listener (las.model.streaming_listener), then the search: by default
the CTC head's, the speller scoring what it emits (las.search.triggered), each segment decoded
again whole once it ends (las.recognition.second_pass); or the speller alone, with an attention
that only moves forward (las.search.monotonic_stream). Cut into pieces of any size, a recording gives
the same final text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.progress import warn
from las.core.text import Vocabulary
from las.data.front_end.audio import float_samples
from las.data.front_end.feature_stream import FeatureStream
from las.data.front_end.features import FilterbankExtractor, Normalizer
from las.model.las import LAS
from las.model.streaming_listener import ForwardListener
from las.recognition.confidence import CharacterConfidence, word_confidence
from las.recognition.second_pass import SegmentDecoder
from las.recognition.segment_reader import SegmentModel
from las.recognition.timing import Word
from las.search.common import Rules, Symbols
from las.search.monotonic_stream import SpellerStream, Spelt
from las.search.triggered import TriggeredSearch


@dataclass(frozen=True)
class StreamResult:
    """The current segment so far (`final` False: it may still grow), or a segment that ended
    (`final`: it will not change). Times are on the recording's clock."""

    final: bool
    text: str  # a final one's words joined by spaces; a partial one as spelt, a space at its end once its last word is
    start: float  # seconds: the segment's first character's frame
    end: float  # the end of its last character's frame
    heard: float  # seconds of audio pushed when it was given
    words: list[Word]


class Stream:
    """One recording as it arrives, through `model` as `config` decodes (a `Recognizer`'s), its
    features normalised by `normalizer`, spelt in `vocabulary`."""

    def __init__(
        self,
        model: LAS,
        config: Config,
        normalizer: Normalizer,
        vocabulary: Vocabulary,
        reading: SegmentModel | None = None,
    ) -> None:
        """`reading`: the model its second pass decodes segments by (`SegmentDecoder`)."""
        if not isinstance(model.listener, ForwardListener):
            raise LasError(
                f"streaming needs a listener that hears a bounded time ahead: a model trained with "
                f"model.listener=plstm (data/an4/streaming.toml), not {config.model.listener}"
            )
        self.sample_rate = config.features.sample_rate
        reduction = config.model.reduction
        self.frame_seconds = reduction * config.features.hop_ms / 1000  # of an encoder frame
        extractor = FilterbankExtractor(config.features.at_decoding())
        # A group is one encoder frame's input frames: what one listener step reads.
        self.features = FeatureStream(extractor, normalizer, reduction)
        self.listener = model.listener.stream()
        self.ctc_head = model.ctc_head
        self.search = searcher(model, config, vocabulary, self.frame_seconds)
        self.second_pass: SegmentDecoder | None = None  # the CTC head's search only: its segments end at pauses
        if config.decode.stream_second_pass and isinstance(self.search, TriggeredSearch):
            self.second_pass = self.search.second_pass = SegmentDecoder(
                reading or SegmentModel.of(model, config, normalizer, vocabulary), config, vocabulary
            )
        self.vocabulary = vocabulary
        self.device = next(model.parameters()).device
        self.told: list[Spelt] = []  # the partial result given last
        self.min_confidence = config.decode.min_confidence
        self.left_out = 0  # final words less confident than that
        self.finished = False

    def push(self, samples: np.ndarray | torch.Tensor) -> list[StreamResult]:
        """The next samples `(samples,)`, at the model's sample rate, mono: int16 (or other
        integer) PCM, or floats in [-1, 1]. What they decide."""
        if self.finished:
            raise LasError("this stream has finished: start another with Recognizer.stream()")
        array = samples.detach().cpu().numpy() if isinstance(samples, torch.Tensor) else np.asarray(samples)
        if array.ndim != 1:
            raise LasError(f"a stream takes mono samples of shape (samples,): got {array.shape}")
        if not array.size:
            return []
        samples = float_samples(array)
        if self.second_pass is not None:
            self.second_pass.listen(samples)
        return self.advance(self.features.push(samples), finished=False)

    def finish(self) -> list[StreamResult]:
        """The end of the recording: the rest of what it says."""
        if self.finished:
            return []
        self.finished = True
        results = self.advance(self.features.finish(), finished=True)
        if self.left_out:
            warn(f"{self.left_out} words less confident than decode.min_confidence={self.min_confidence:g} left out")
        return results

    @torch.no_grad()
    def advance(self, groups: list[torch.Tensor], finished: bool) -> list[StreamResult]:
        results = []
        for group in groups:
            if self.second_pass is not None:
                self.second_pass.hear(group)
            self.hear(self.listener.push(group.to(self.device)))
            results += self.spell(finished=False)
        if finished:
            self.hear(self.listener.finish())
            results += self.spell(finished=True)
        return results

    def hear(self, top: torch.Tensor) -> None:
        """The listener's next top frames `(frames, hidden)` to the search."""
        listener = self.listener.listener
        log_probs = self.ctc_head(top).float().log_softmax(dim=-1) if self.ctc_head is not None else None
        self.search.extend(listener.key(top), listener.value(top), log_probs)

    def spell(self, finished: bool) -> list[StreamResult]:
        finals = [self.result(piece, final=True) for piece in self.search.spell(finished)]
        results = [result for result in finals if result.text]
        partial = self.search.partial
        if finals:
            self.told = []  # what was partial is final now, or gone with its segment
        if partial != self.told:
            results.append(self.result(partial, final=False))
            self.told = partial
        return results

    def result(self, characters: list[Spelt], final: bool) -> StreamResult:
        heard = self.features.samples / self.sample_rate
        words = self.words(characters)
        if final:  # as decoding whole leaves them out; a partial one may still change
            kept = [word for word in words if word.confidence is None or word.confidence >= self.min_confidence]
            self.left_out += len(words) - len(kept)
            words = kept
        if not words:
            return StreamResult(final, "", heard, heard, heard, [])
        spelt = self.vocabulary.decode([item.token for item in characters])
        text = " ".join(word.word for word in words) if final else spelt
        return StreamResult(final, text, words[0].start, words[-1].end, heard, words)

    def words(self, characters: list[Spelt]) -> list[Word]:
        """The words of a segment's characters, each from its first character's frame to the
        end of its last one's."""
        words: list[Word] = []
        run: list[Spelt] = []
        for spelt in [*characters, None]:
            if spelt is not None and self.vocabulary.symbols[spelt.token] != " ":
                run.append(spelt)
                continue
            if run:
                word = self.vocabulary.decode([item.token for item in run])
                start, end = run[0].frame * self.frame_seconds, (run[-1].frame + 1) * self.frame_seconds
                trust = [item.confidence for item in run]
                confidence = word_confidence(trust) if None not in trust else None  # type: ignore[arg-type]
                words.append(Word(start, end, word, confidence))
            run = []
        return words


def searcher(
    model: LAS, config: Config, vocabulary: Vocabulary, frame_seconds: float
) -> TriggeredSearch | SpellerStream:
    """How a stream spells: by default (`decode.strategy=beam` with a CTC head), a prefix beam
    search over the CTC head's frames that the speller scores as they come (las.search.triggered);
    `decode.strategy=ctc`, that search with the CTC head alone and a beam of one; `greedy`, or a
    model without a CTC head, the speller alone, its monotonic attention selecting the frames."""
    settings = config.decode
    judge = CharacterConfidence(settings.confidence, settings.confidence_from)
    space = vocabulary.index.get(" ", -1)  # without one, words are final at a segment's end
    if settings.strategy not in ("beam", "ctc", "greedy"):
        raise LasError(f"decode.strategy={settings.strategy}: a stream decodes with beam, ctc or greedy")
    if (settings.lm and settings.lm_weight > 0) or settings.lexicon:  # an LM at weight 0 is unused, as whole
        raise LasError("a stream does not use decode.lm or decode.lexicon yet: decode the recording whole for them")
    joint = settings.strategy == "beam" and settings.ctc_weight > 0
    if model.ctc_head is not None and (joint or settings.strategy == "ctc"):
        speller = model.speller if joint and settings.ctc_weight < 1 else None
        return TriggeredSearch(
            speller,  # type: ignore[arg-type]
            Symbols.of(vocabulary),
            space,
            settings.beam_size if joint else 1,
            settings.ctc_weight,
            settings.length_penalty,
            settings.stream_beam_nats,
            pause_frames=max(1, round(settings.stream_pause_seconds / frame_seconds)),
            longest_frames=max(1, round(settings.segment_seconds / frame_seconds)),
            judge=judge,
            # the CTC head alone reads no frame past its own: a look-ahead would only delay it
            lookahead_frames=round(settings.stream_lookahead / frame_seconds) if speller else 0,
            early_words=settings.stream_second_pass_words,
        )
    if settings.strategy == "ctc":
        raise LasError("decode.strategy=ctc streams with the CTC head: this model has none (model.ctc_weight=0)")
    return SpellerStream(model.speller, Symbols.of(vocabulary), Rules.of(settings), space, judge)
