"""Recognition as the audio arrives: `Recognizer.stream()`, which `las decode MODEL - --stream` runs.

    stream = recognizer.stream()
    for piece in microphone():            # samples of any size: int16 PCM or floats in [-1, 1]
        for result in stream.push(piece):
            print(result.final, result.text)
    for result in stream.finish():
        ...

A model trained for it (data/recipes/an4-streaming.toml: a causal front end, a listener that hears
a bounded time ahead, an attention that only moves forward) is run a fixed group of frames at a
time: the features (las.data.streaming), the listener (las.model.streaming_listener), then the
speller, which spells each character once the frame its attention selects has arrived
(las.search.streaming). Cut into pieces of any size, a recording gives the same final text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.data.audio import float_samples
from las.data.features import FilterbankExtractor, Normalizer
from las.data.streaming import FeatureStream
from las.model.las import LAS
from las.model.streaming_listener import ForwardListener
from las.recognition.timing import Word
from las.search.common import Rules, Symbols
from las.search.streaming import SpellerStream, Spelt


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

    def __init__(self, model: LAS, config: Config, normalizer: Normalizer, vocabulary: Vocabulary) -> None:
        if not isinstance(model.listener, ForwardListener):
            raise LasError(
                f"streaming needs a listener that hears a bounded time ahead: a model trained with "
                f"model.listener=plstm (data/recipes/an4-streaming.toml), not {config.model.listener}"
            )
        self.sample_rate = config.features.sample_rate
        reduction = 2**config.model.pyramid_layers
        self.frame_seconds = reduction * config.features.hop_ms / 1000  # of an encoder frame
        extractor = FilterbankExtractor(config.features.at_decoding())
        # A group is one encoder frame's input frames: what one listener step reads.
        self.features = FeatureStream(extractor, normalizer, reduction)
        self.listener = model.listener.stream()
        self.speller = SpellerStream(model.speller, Symbols.of(vocabulary), Rules.of(config.decode))
        self.vocabulary = vocabulary
        self.device = next(model.parameters()).device
        self.told = 0  # characters of the current segment given as partial
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
        return self.advance(self.features.push(float_samples(array)), finished=False)

    def finish(self) -> list[StreamResult]:
        """The end of the recording: the rest of what it says."""
        if self.finished:
            return []
        self.finished = True
        return self.advance(self.features.finish(), finished=True)

    @torch.no_grad()
    def advance(self, groups: list[torch.Tensor], finished: bool) -> list[StreamResult]:
        results = []
        for group in groups:
            self.hear(self.listener.push(group.to(self.device)))
            results += self.spell(finished=False)
        if finished:
            self.hear(self.listener.finish())
            results += self.spell(finished=True)
        return results

    def hear(self, top: torch.Tensor) -> None:
        """The listener's next top frames `(frames, hidden)` to the speller."""
        listener = self.listener.listener
        self.speller.extend(listener.key(top), listener.value(top))

    def spell(self, finished: bool) -> list[StreamResult]:
        results = [self.result(segment, final=True) for segment in self.speller.spell(finished)]
        if results:
            self.told = 0
        current = self.speller.segment
        if len(current) > self.told:
            results.append(self.result(current, final=False))
            self.told = len(current)
        return [result for result in results if result.text or not result.final]

    def result(self, characters: list[Spelt], final: bool) -> StreamResult:
        heard = self.features.samples / self.sample_rate
        if not characters:
            return StreamResult(final, "", heard, heard, heard, [])
        words = self.words(characters)
        spelt = self.vocabulary.decode([item.token for item in characters])
        text = " ".join(word.word for word in words) if final else spelt
        start, end = characters[0].frame * self.frame_seconds, (characters[-1].frame + 1) * self.frame_seconds
        return StreamResult(final, text, start, end, heard, words)

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
                words.append(Word(start, end, word))
            run = []
        return words
