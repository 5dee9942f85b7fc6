"""When each character of a hypothesis was spoken, in encoder frames: by CTC forced alignment of
the decoded text where the model has a CTC head (the frames CTC itself would spend on each
character), else by the peak of the attention that emitted it; and where the sound of each word
begins and ends, from the energy of the audio around its characters."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from las.core.text import Vocabulary
from las.data.front_end.segmentation import QUIET_SHARE, digital_silence
from las.model.ctc_path import runs, viterbi_path
from las.recognition.confidence import word_confidence
from las.search import Hypothesis

ONSET_FRAMES = 50  # a word's sound begins at most 0.5 s (10 ms frames) before CTC emits it
BACKGROUND_FRAMES = 100  # the background level is read over the second before that
PEAK_FRAMES = 10  # and the word's level over the 0.1 s from its first character on
GAP_FRAMES = 8  # a quiet stretch this long (80 ms) ends a word's sound; a shorter one is inside it
DIP_FRAMES = 5  # energy is averaged over 50 ms to find the dip between two words' syllables

Span = tuple[int, int]  # [start, end) frames: encoder frames from token_spans, feature frames in word_edges


def token_spans(
    tokens: list[int],
    ctc_log_probs: torch.Tensor | None,  # (frames, vocabulary) of the utterance's valid frames
    attention: torch.Tensor | None,  # (tokens + 1, frames) weights per emitted symbol
    blank: int,
) -> tuple[list[Span], str]:
    """`[start, end)` encoder frames of each token, and how they were found: "ctc" or
    "attention" ("" for no tokens). CTC needs a frame per token and one between repeats; where the
    text is too long for its frames, the attention peaks serve."""
    if not tokens:
        return [], ""
    frames = ctc_log_probs.shape[0] if ctc_log_probs is not None else 0
    repeats = sum(first == second for first, second in zip(tokens, tokens[1:], strict=False))
    if ctc_log_probs is not None and frames >= len(tokens) + repeats:
        return runs(viterbi_path(ctc_log_probs, tokens, blank), blank), "ctc"
    if attention is None:
        raise ValueError("token_spans needs CTC log-probabilities or attention weights")
    peaks = attention[: len(tokens)].argmax(dim=1).tolist()
    return [(peak, peak + 1) for peak in peaks], "attention"


def sound_start(energy: torch.Tensor, emitted: int, earliest: int, mel_bins: int) -> int:
    """The feature frame where the sound of a word begins, given the frames' energies `(frames,)`
    (las.data.front_end.segmentation.frame_energy) and the frame `emitted` where its first character is aligned.

    CTC emits a character late in its sound, often at the vowel: a spelled "C" at its "ee", a
    third of a second after the "s". So walk back from `emitted` while frames stay above the quiet
    threshold (QUIET_SHARE of the way from the background to the word's level), across quiet
    stretches shorter than GAP_FRAMES (a stop consonant's closure: the "k" of a spelled "K" comes
    before a silent instant and its "ay"), to `earliest` at most and ONSET_FRAMES at most. The
    background is the quietest tenth of the second before, digital silence (exact zeros, at the
    log floor) left out: it says nothing about the noise a word rises from."""
    low = max(earliest, emitted - ONSET_FRAMES, 0)
    before = energy[max(0, emitted - BACKGROUND_FRAMES) : emitted + 1]
    before = before[~digital_silence(before, mel_bins)]
    word = energy[emitted : emitted + PEAK_FRAMES]
    if not len(before) or not len(word):
        return emitted
    floor, peak = float(torch.quantile(before, 0.1)), float(word.max())
    threshold = floor + QUIET_SHARE * (peak - floor)
    start, position, quiet = emitted, emitted, 0
    while position > low and quiet < GAP_FRAMES:
        position -= 1
        start, quiet = (position, 0) if energy[position] >= threshold else (start, quiet + 1)
    return start


def smoothed(energy: torch.Tensor) -> torch.Tensor:
    """`energy` `(frames,)` averaged over DIP_FRAMES around each frame, as dips between words are found."""
    return torch.nn.functional.avg_pool1d(
        energy[None, None].float(), DIP_FRAMES, stride=1, padding=DIP_FRAMES // 2, count_include_pad=False
    )[0, 0]


def word_edges(energy: torch.Tensor | None, emitted: list[Span], mel_bins: int) -> list[Span]:
    """`[start, end)` feature frames of each word's sound, from the frames `emitted` where its
    characters were aligned (first to last, in order) and the frames' energies `(frames,)`
    (las.data.front_end.segmentation.frame_energy); the emitted frames themselves without `energy`.

    A word's sound runs on both sides of its characters: its start walks back and its end on while
    the audio stays loud (`sound_start`). Two words spoken without a pause between them are never
    quiet in between, so each walk stops at their boundary: the quietest frame between the last
    character of the one and the first of the next, the dip between their syllables. Without it
    the first word's end took everything up to the next one's character: a spelled "L" after
    another letter lost its "e" to it and sounded like "O"."""
    if energy is None or not emitted:
        return list(emitted)
    frames = len(energy)
    smooth = smoothed(energy)
    boundaries = [0]
    for (_, last), (first, _) in zip(emitted, emitted[1:], strict=False):
        low, high = min(last, first), min(max(last, first), frames - 1)
        boundaries.append(low + int(torch.argmin(smooth[low : high + 1])) if high > low else low)
    boundaries.append(frames)
    flipped = energy.flip(0)
    return [
        (
            sound_start(energy, first, boundaries[index], mel_bins),
            frames - sound_start(flipped, frames - last, frames - boundaries[index + 1], mel_bins),
        )
        for index, (first, last) in enumerate(emitted)
    ]


@dataclass(frozen=True)
class Word:
    start: float  # seconds from the start of the recording
    end: float
    word: str
    confidence: float | None = None  # in [0, 1] (las.recognition.confidence)


@dataclass(frozen=True)
class WordTimer:
    """The words of a model's hypotheses, with their times and confidences: its vocabulary, its
    listener's time reduction, and its features' mel bins."""

    vocabulary: Vocabulary
    reduction: int  # feature frames per encoder frame
    mel_bins: int

    def words(
        self, hypothesis: Hypothesis, start: float, end: float, seconds: float, energy: torch.Tensor | None
    ) -> list[Word]:
        """Word times from the frames of their characters (`Hypothesis.spans`) in a piece of a
        recording from `start` to `end` seconds, `seconds` per frame; each word's edges moved to where
        its sound begins and ends (`word_edges`) when the piece's frame `energy` `(frames,)`
        is known."""
        trust = hypothesis.confidences or [None] * len(hypothesis.tokens)
        characters = [*zip(hypothesis.tokens, hypothesis.spans or [], trust, strict=True), (None, None, None)]
        texts, emitted, confidences, current = [], [], [], []
        for token, span, confidence in characters:
            if token is None or self.vocabulary.decode([token]) == " ":
                if current:
                    texts.append(self.vocabulary.decode([item for item, _, _ in current]))
                    first = min(span[0] for _, span, _ in current) * self.reduction
                    emitted.append((first, max(span[1] for _, span, _ in current) * self.reduction))
                    measured = [value for _, _, value in current if value is not None]
                    confidences.append(word_confidence(measured) if measured else None)
                current = []
            else:
                current.append((token, span, confidence))
        edges = word_edges(energy, emitted, self.mel_bins)
        return [
            Word(start + first * seconds, min(start + last * seconds, end), text, trusted)
            for text, (first, last), trusted in zip(texts, edges, confidences, strict=True)
        ]
