"""The Python API, which `las decode` uses too: a trained model that transcribes audio files,
arrays, manifests and folders of any length into text with segment and word times.

    from las import Recognizer
    recognizer = Recognizer.load("runs/an4/best.pt")
    result = recognizer.transcribe("meeting.flac")
    print(result.text, result.segments[0].start, result.words[0].word)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from las.core.device import resolve_device
from las.core.errors import LasError
from las.core.progress import warn
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances, warn_about_audio, warn_about_characters
from las.data.corpora.utterances import Utterance
from las.data.dataset import SpeechDataset
from las.data.front_end.audio import AUDIO_SUFFIXES, samples_to_waveform
from las.data.front_end.declipping import clipped_share
from las.data.front_end.features import Analysed, FeatureSet, FilterbankExtractor, InMemoryFeatures, analysed_features
from las.data.front_end.segmentation import CONTEXT_SECONDS, Levels, cut_at_inner_pauses, frame_energy, split_at_pauses
from las.data.front_end.speech_margins import Surroundings
from las.export.runtime import load_model, run_on
from las.model.checkpoint import Checkpoint
from las.recognition.confidence import overall_confidence
from las.recognition.inference import transcribe
from las.recognition.segment_reader import SegmentModel
from las.recognition.stream import Stream
from las.recognition.timing import Word, WordTimer
from las.search import Hypothesis, build_strategy
from las.search.common import Rules

Audio = str | Path | np.ndarray | torch.Tensor  # a file (or manifest, or folder), or samples


@dataclass(frozen=True)
class Piece:
    """A part of a recording to decode on its own: frames `start`-`end` are heard, and the words
    of frames `own_start`-`own_end` kept."""

    recording: int
    start: int
    end: int
    own_start: int
    own_end: int


@dataclass(frozen=True)
class Segment:
    """A piece of a recording decoded on its own: one per recording unless it was long enough
    to split at its pauses."""

    start: float  # seconds
    end: float
    text: str
    score: float
    hypothesis: Hypothesis  # the best one, with its attention weights and character frames
    words: list[Word]


@dataclass(frozen=True)
class Result:
    id: str
    text: str  # the segments' texts joined by spaces
    score: float  # log-likelihood, summed over segments
    segments: list[Segment]
    words: list[Word]
    nbest: list[tuple[str, float]]  # (text, score) best first; of the whole recording if unsplit
    confidence: float | None = None  # the mean of its words' (None without words)


@dataclass(frozen=True)
class Timing:
    """Where the time of the last `recognize` went: features excluded."""

    seconds: float
    audio_seconds: float

    @property
    def real_time_factor(self) -> float:
        return self.seconds / max(self.audio_seconds, 1e-9)


class Recognizer:
    def __init__(self, checkpoint: Checkpoint, device: str | torch.device = "auto", settings: Sequence[str] = ()):
        """`settings`: `decode.*` (and `data.*`) assignments over the decoding defaults."""
        self.config = checkpoint.decoding_config(list(settings))
        self.checkpoint = checkpoint
        self.vocabulary = checkpoint.vocabulary
        self.device = resolve_device(str(device)) if checkpoint.export is None else run_on(device)
        self.model = checkpoint.build_model(self.device)
        self.strategy = build_strategy(self.config.decode, self.vocabulary, self.model)
        self.surroundings = Surroundings.of(self.config, decoding=True)
        self.timer = WordTimer(self.vocabulary, self.config.model.reduction, self.config.features.mel_bins)
        self.timing = Timing(0.0, 0.0)
        self.segment_model: SegmentModel | None = None  # what streams' second passes decode by, loaded once

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "auto", **settings: object) -> Recognizer:
        """The model at `path`; `settings` name `decode.*` keys: `Recognizer.load(path, beam_size=4)`."""
        return cls(load_model(path), device, [f"decode.{key}={value}" for key, value in settings.items()])

    def transcribe(self, audio: Audio | Sequence[Audio], sample_rate: int | None = None) -> Result | list[Result]:
        """One result for one recording (an audio file, or samples at `sample_rate`); a list of
        them for a list, a manifest or a folder."""
        items = [audio] if isinstance(audio, (str, Path, np.ndarray, torch.Tensor)) else list(audio)
        ids: list[str] = []
        features: list[torch.Tensor] = []
        others: list[torch.Tensor | None] = []
        speech: list[bool | None] = []
        from_audio: list[bool] = []
        for index, item in enumerate(items):
            if isinstance(item, (np.ndarray, torch.Tensor)):
                ids.append(f"audio{index}")
                analysed = self.array_analysed(item, sample_rate, ids[-1])
                features.append(analysed.features)
                speech.append(analysed.speech)
                other = self.other_speed
                others.append(self.array_features(item, sample_rate, speed=other) if other else None)
                from_audio.append(True)
            elif not isinstance(item, (str, Path)):
                raise LasError(f"cannot transcribe a {type(item).__name__}: give paths, numpy arrays or tensors")
            else:
                utterances, found = self.utterance_features(read_utterances(item, require_text=False), item)
                ids.extend(utterance.id for utterance in utterances)
                features.extend(found)
                speech.extend(found.speech_as_recorded())
                others.extend(self.other_features(utterances))
                from_audio.extend(utterance.audio_location is not None for utterance in utterances)
        results = self.recognize(ids, features, from_audio, others, speech)
        one = isinstance(audio, (np.ndarray, torch.Tensor))
        one = one or (isinstance(audio, (str, Path)) and Path(audio).suffix.lower() in AUDIO_SUFFIXES)
        return results[0] if one else results

    def stream(self) -> Stream:
        """Recognition of one recording as it arrives (las.recognition.stream): push samples,
        read partial and final results; a model trained for it (data/an4/streaming.toml)."""
        normalizer = self.checkpoint.normalizer
        if self.segment_model is None and self.config.decode.stream_second_pass:
            self.segment_model = SegmentModel.of(self.model, self.config, normalizer, self.vocabulary)
        return Stream(self.model, self.config, normalizer, self.vocabulary, self.segment_model)

    def utterance_features(
        self, utterances: list[Utterance], source: str | Path
    ) -> tuple[Sequence[Utterance], FeatureSet]:
        """The utterances kept (`data.bad_utterances=skip` leaves unusable ones out) and their
        log-mel features `(frames, mel_bins)`, through the feature cache: of audio played at
        `decode.speed`, precomputed ones as they are."""
        data = self.config.data
        warn_about_characters(utterances, self.vocabulary, source)
        warn_about_audio(utterances, source)
        cache = self.feature_cache()
        parts = []  # (utterances, their features) of audio, then of precomputed features
        for audio in (True, False):
            subset = [utterance for utterance in utterances if (utterance.audio_location is not None) == audio]
            speed = self.config.decode.speed if audio else 1.0
            if subset and data.bad_utterances == "skip":
                subset = list(cache.usable(subset, source, [speed]))
            if subset:
                parts.append((subset, cache.load(subset, speed=speed)))
                warn_about_clipping([utterance.id for utterance in subset], parts[-1][1].clipped_shares())
        if len(parts) == 1:
            kept, features = parts[0]
        else:  # both kinds (or none left): one list, in the input's order
            found = {
                utterance.id: (item, said)
                for subset, part in parts
                for utterance, item, said in zip(subset, part, part.speech_as_recorded(), strict=True)
            }
            kept = [utterance for utterance in utterances if utterance.id in found]
            items = [found[utterance.id][0] for utterance in kept]
            features = InMemoryFeatures(items, [found[utterance.id][1] for utterance in kept])
        self.checkpoint.check_features(features, source)
        return kept, features

    def feature_cache(self) -> FeatureCache:
        """The feature cache of decoding's front end (`features.at_decoding`)."""
        data = self.config.data
        return FeatureCache(data.cache_dir, self.config.features.at_decoding(), data.workers)

    def other_features(self, utterances: Sequence[Utterance]) -> list[torch.Tensor | None]:
        """Each of `utterances`' features played at `decode.other_speed` (`other_speed`), through
        the feature cache; None for precomputed features, and for all where there is no other speed."""
        audio = [utterance for utterance in utterances if utterance.audio_location is not None]
        if not self.other_speed or not audio:
            return [None] * len(utterances)
        found = iter(self.feature_cache().load(audio, "features, played at the other speed", self.other_speed))
        return [next(found) if utterance.audio_location is not None else None for utterance in utterances]

    def array_features(
        self,
        samples: np.ndarray | torch.Tensor,
        sample_rate: int | None,
        name: str = "samples",
        speed: float | None = None,
    ) -> torch.Tensor:
        """Log-mel features `(frames, mel_bins)` of samples at `sample_rate` (see `samples_to_waveform`),
        played at `decode.speed` (what is told of them is told then), or at `speed`."""
        return self.array_analysed(samples, sample_rate, name, speed).features

    def array_analysed(
        self,
        samples: np.ndarray | torch.Tensor,
        sample_rate: int | None,
        name: str = "samples",
        speed: float | None = None,
    ) -> Analysed:
        """`array_features`, and whether the samples hold speech as recorded."""
        config = self.config.features.at_decoding()
        waveform = samples_to_waveform(samples, sample_rate, config.sample_rate)
        if speed is None:
            warn_about_clipping([name], [clipped_share(waveform)])
        played = self.config.decode.speed if speed is None else speed
        return analysed_features(FilterbankExtractor(config), waveform, "samples", played)

    @property
    def other_speed(self) -> float | None:
        """The speed each recording is also played at (`decode.other_speed`), if any."""
        other = self.config.decode.other_speed
        return other if other > 0 and other != self.config.decode.speed else None

    def recognize(
        self,
        ids: Sequence[str],
        features: Sequence[torch.Tensor],
        from_audio: Sequence[bool] | None = None,
        others: Sequence[torch.Tensor | None] | None = None,
        speech: Sequence[bool | None] | None = None,
    ) -> list[Result]:
        """Results for recordings with these features `(frames, mel_bins)`: each longer than
        `decode.segment_seconds` is cut at its pauses into pieces no longer, a shorter one from
        audio to its speech and the decoding margin around it (`decode.surroundings_seconds`),
        cut at its pauses of a second or more, and every piece of every recording is decoded in
        the same length-bucketed batches. A recording whose log-mel features come `from_audio`
        (all, by default) and hold no speech — silence, steady noise — gives no text, rather than
        what the decoder makes of noise; precomputed features of unknown scale are always decoded.
        Whether a recording holds speech is read as recorded where that was read (`speech`, or the
        feature set's own `speech_as_recorded`), else on its features. Where a recording's features
        played at `decode.other_speed` are given (`others`), each of its pieces is decoded that way
        too, and the transcript the search ranks higher kept."""
        hop = self.config.features.hop_ms / 1000  # the model's clock: segments and context as trained
        longest = max(1, round(self.config.decode.segment_seconds / hop))
        audio_of = [from_audio is None or from_audio[recording] for recording in range(len(features))]
        if speech is None:
            speech = features.speech_as_recorded() if isinstance(features, FeatureSet) else [None] * len(features)
        pieces, silent = [], []
        for recording, item in enumerate(features):
            audio = audio_of[recording]
            if len(item) > longest:
                spans = split_at_pauses(item, longest)
            elif not audio:
                spans = [(0, len(item))]
            else:
                spans = self.speech_span(Levels.of(item), speech[recording])
            pieces += with_context(recording, spans, len(item), round(CONTEXT_SECONDS / hop))
            silent += [] if spans else [ids[recording]]
        if silent:  # an empty transcript is a result too, but not a silent one
            named = ", ".join(silent[:3]) + (", ..." if len(silent) > 3 else "")
            warn(f"no speech (silence, a tone, steady noise) in {len(silent)} recording(s), no text: {named}")
        played = [(piece, features[piece.recording], self.frame_seconds(audio_of[piece.recording])) for piece in pieces]
        replayed = self.at_other_speed(pieces, others)
        heard = played + [item for item in replayed if item is not None]
        dataset = self.dataset(
            [f"{ids[piece.recording]}:{piece.start}" for piece, _, _ in heard],
            [source[piece.start : piece.end] for piece, source, _ in heard],
        )
        started = time.perf_counter()
        found = transcribe(
            self.model,
            dataset,
            self.strategy,
            self.config.decode.batch_size,
            self.config.data.max_batch_frames,
            self.device,
            align=self.config.decode.word_times,
            confidence=(self.config.decode.confidence, self.config.decode.confidence_from),
        )
        seconds = sum(len(item) * self.frame_seconds(audio) for item, audio in zip(features, audio_of, strict=True))
        self.timing = Timing(time.perf_counter() - started, seconds)
        segments: list[list[Segment]] = [[] for _ in features]
        left_out = 0  # words below decode.min_confidence
        nbests: list[list[Hypothesis]] = [[] for _ in features]
        rank, again = Rules.of(self.config.decode).rank, iter(found[len(pieces) :])
        for (piece, source, seconds), twin, hypotheses in zip(played, replayed, found[: len(pieces)], strict=True):
            if twin is not None and rank((heard_again := next(again))[0]) > rank(hypotheses[0]):
                (piece, source, seconds), hypotheses = twin, heard_again
            energy = frame_energy(source[piece.start : piece.end]) if audio_of[piece.recording] else None
            segment, dropped = self.segment(piece, hypotheses[0], seconds, energy)
            segments[piece.recording].append(segment)
            left_out += dropped
            nbests[piece.recording] = hypotheses
        if left_out:
            threshold = self.config.decode.min_confidence
            warn(f"{left_out} words less confident than decode.min_confidence={threshold:g} left out")
        return [
            self.result(identifier, pieces_of, nbest)
            for identifier, pieces_of, nbest in zip(ids, segments, nbests, strict=True)
        ]

    def speech_span(self, levels: Levels, as_recorded: bool | None = None) -> list[tuple[int, int]]:
        """The `[start, end)` frames to decode of a recording shorter than a segment, with these
        `levels`: its speech with the model's margin of what surrounds it (the whole recording
        where the model heard everything around its speech), cut at the pauses of a second or
        more inside it (`cut_at_inner_pauses`); none without speech, read on the recording
        `as_recorded` where that was read."""
        if not (levels.speech if as_recorded is None else as_recorded):
            return []
        start, end = self.surroundings.span(levels) if self.surroundings else (0, len(levels.pauses))
        pause = self.config.features.frames(self.config.decode.inner_pause_seconds)
        return cut_at_inner_pauses(levels.pauses, start, end, pause)

    def dataset(self, ids: Sequence[str], features: Sequence[torch.Tensor]) -> SpeechDataset:
        """Utterances with these features `(frames, mel_bins)`, normalised as the model was
        trained, to batch (`SpeechDataset.collate`) and decode."""
        return SpeechDataset(
            ids, features, [None] * len(ids), self.vocabulary, with_targets=False, normalizer=self.checkpoint.normalizer
        )

    def frame_seconds(self, audio: bool = True, speed: float | None = None) -> float:
        """Seconds of the recording per feature frame: audio played at `speed` (`decode.speed`)
        before its features spans `speed` hops of its own clock in each frame."""
        hop = self.config.features.hop_ms / 1000
        return hop * (self.config.decode.speed if speed is None else speed) if audio else hop

    def at_other_speed(
        self, pieces: Sequence[Piece], others: Sequence[torch.Tensor | None] | None
    ) -> list[tuple[Piece, torch.Tensor, float] | None]:
        """Each piece as heard played at `decode.other_speed`: the same stretch of its recording
        in the frames of its features `others[recording]` (None where it has none), with those
        features and their seconds per frame."""
        if others is None or self.other_speed is None:
            return [None] * len(pieces)
        ratio, seconds = self.config.decode.speed / self.other_speed, self.frame_seconds(True, self.other_speed)
        found: list[tuple[Piece, torch.Tensor, float] | None] = []
        for piece in pieces:
            other = others[piece.recording]
            if other is None:
                found.append(None)
                continue
            start = min(round(piece.start * ratio), len(other) - 1)
            end = min(max(start + 1, round(piece.end * ratio)), len(other))
            own = (max(start, round(piece.own_start * ratio)), min(end, round(piece.own_end * ratio)))
            found.append((Piece(piece.recording, start, end, *own), other, seconds))
        return found

    def segment(
        self, piece: Piece, hypothesis: Hypothesis, seconds: float, energy: torch.Tensor | None
    ) -> tuple[Segment, int]:
        """The part of `piece` it owns: where the piece was heard with context around a cut in
        speech, only the words centred in its own part (the neighbour has the others), and
        without those below `decode.min_confidence`, which it counts. `seconds`: of the recording
        per frame; `energy` `(frames,)`: of the piece's audio, for where words begin (None:
        features of unknown scale)."""
        start, end = piece.own_start * seconds, piece.own_end * seconds
        words = [
            dataclasses.replace(word, start=max(word.start, start))  # a sound begun in the context
            for word in self.timer.words(hypothesis, piece.start * seconds, piece.end * seconds, seconds, energy)
            if start <= (word.start + word.end) / 2 < end
        ]
        threshold = self.config.decode.min_confidence
        kept = [word for word in words if word.confidence is None or word.confidence >= threshold]
        rebuilt = (piece.start, piece.end) != (piece.own_start, piece.own_end) or len(kept) < len(words)
        text = " ".join(word.word for word in kept) if rebuilt else self.vocabulary.decode(hypothesis.tokens)
        return Segment(start, end, text, hypothesis.score, hypothesis, kept), len(words) - len(kept)

    def result(self, identifier: str, segments: list[Segment], nbest: list[Hypothesis]) -> Result:
        """A recording's result from its segments; its n-best list only when it was not split."""
        spoken = [segment for segment in segments if segment.text]
        text = " ".join(segment.text for segment in spoken)
        listed = [(self.vocabulary.decode(item.tokens), item.score) for item in nbest] if len(segments) == 1 else []
        score = sum(segment.score for segment in segments)
        words = [word for segment in spoken for word in segment.words]
        confidence = overall_confidence([word.confidence for word in words])
        return Result(identifier, text, score, spoken, words, listed or [(text, score)], confidence)


def warn_about_clipping(ids: Sequence[str], shares: Sequence[float]) -> None:
    """One warning for the recordings clipped at full scale (`shares` of their samples flat at the
    rail, as `las.data.front_end.declipping` finds them), as for silence and steady noise: their peaks are
    given back in part only, and AN4 dev so recorded reads 1.4-2.6x its CER."""
    clipped = [(share, identifier) for identifier, share in zip(ids, shares, strict=True) if share > 0]
    if clipped:
        worst, named = max(clipped)
        warn(
            f"{len(clipped)} recording(s) clipped at full scale (recorded too loud): transcripts may be less "
            f"accurate; most in {named}, {worst:.1%} of its samples flat at the rail"
        )


def with_context(recording: int, spans: list[tuple[int, int]], frames: int, context: int) -> list[Piece]:
    """Pieces for the `spans` of a recording of `frames`: each heard with `context` frames more
    on a side where its neighbour follows without a pause (a cut in speech)."""
    pieces = []
    for index, (start, end) in enumerate(spans):
        cut_before = index > 0 and spans[index - 1][1] == start
        cut_after = index + 1 < len(spans) and spans[index + 1][0] == end
        heard = (max(0, start - context) if cut_before else start, min(frames, end + context) if cut_after else end)
        pieces.append(Piece(recording, *heard, start, end))
    return pieces
