"""Word times of known transcripts (`las align`): CTC forced alignment of each reference, each
word's edges moved to where its sound rises and falls, never into a neighbour
(las.recognition.timing.word_edges), written as CTM (las.data.corpora.ctm)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import torch

from las.core.errors import LasError
from las.core.files import check_writable, write_text_atomically
from las.core.progress import progress_bar, warn
from las.core.text import PAD_INDEX
from las.data.cache.extraction import content_digest
from las.data.corpora.ctm import WordTime, write_ctm
from las.data.corpora.manifest import read_utterances, unknown_characters
from las.data.front_end.segmentation import frame_energy
from las.export.runtime import load_model
from las.model.ctc_path import ctc_frames_needed
from las.recognition.recognizer import Recognizer
from las.recognition.timing import token_spans
from las.search import Hypothesis


def align(recognizer: Recognizer, features: torch.Tensor, text: str, audio: bool = True) -> list[WordTime]:
    """The words of `text` in the utterance with these log-mel `features` `(frames, mel_bins)`
    (of audio at `decode.speed`, or precomputed: not `audio`); none where its encoder frames are
    too few for CTC to place every character."""
    model = recognizer.model
    if model.ctc_head is None:
        raise LasError("las align needs a model with a CTC head (trained with model.ctc_weight > 0)")
    tokens = recognizer.vocabulary.encode(text)
    with torch.no_grad():
        normalized = recognizer.checkpoint.normalizer(features)[None].to(recognizer.device)
        memory = model.listener(normalized, torch.tensor([len(features)]))
        log_probs = model.ctc_head(memory.hidden).float().log_softmax(-1)[0, : int(memory.lengths[0])]
    if not tokens or len(log_probs) < ctc_frames_needed(tokens):
        return []
    spans, how = token_spans(tokens, log_probs, None, PAD_INDEX)
    seconds = recognizer.frame_seconds(audio)
    hypothesis = Hypothesis(tokens, 0.0, None, spans, how)
    words = recognizer.timer.words(hypothesis, 0.0, len(features) * seconds, seconds, frame_energy(features))
    return [WordTime(word.word, word.start, word.end) for word in words]


def align_file(
    checkpoint: str | Path,
    input_path: str | Path,
    out: str | Path | None = None,
    input_format: str = "auto",
    device: str = "auto",
) -> tuple[int, int]:
    """Write the word times of every transcribed utterance of `input_path` as CTM to `out`
    (stdout for None): how many utterances were aligned, and how many left out (characters the
    model never saw, or too few frames for their characters)."""
    recognizer = Recognizer(load_model(checkpoint), device, ["decode.speed=1"])  # as training reads them
    if out is not None:
        check_writable(out, "--out")
    skip = recognizer.config.data.bad_utterances == "skip"
    utterances = read_utterances(input_path, require_text=True, input_format=input_format, skip_bad=skip)
    utterances, features = recognizer.utterance_features(utterances, input_path)
    alignments, digests = [], {}
    for utterance, found in zip(progress_bar(utterances, "aligning", "utterances"), features, strict=True):
        known = not unknown_characters(utterance, recognizer.vocabulary)
        words = align(recognizer, found, utterance.text, utterance.audio_location is not None) if known else []
        if words:
            alignments.append((utterance.id, words))
            digests[utterance.id] = content_digest(utterance)  # so that training can tell stale times
    text = io.StringIO()
    write_ctm(alignments, text, digests)
    if out is None:
        sys.stdout.write(text.getvalue())
    else:
        write_text_atomically(out, text.getvalue())
    left_out = len(utterances) - len(alignments)
    if left_out:
        warn(f"{input_path}: {left_out} utterance(s) not aligned (characters outside the vocabulary, or too short)")
    return len(alignments), left_out
