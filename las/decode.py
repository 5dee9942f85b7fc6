"""`las decode`: load a checkpoint, transcribe a manifest, an audio file or a folder, write the result."""

from __future__ import annotations

import io
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from las.checkpoint import load_checkpoint
from las.data.cache import FeatureCache
from las.data.dataset import SpeechDataset
from las.data.manifest import check_characters, read_utterances
from las.device import resolve_device
from las.errors import LasError
from las.files import check_writable, make_directory, write_text_atomically
from las.inference import transcribe
from las.plots import plot_hypothesis
from las.search import Hypothesis, build_strategy
from las.text import Vocabulary
from las.transcripts import Transcript, write_transcripts


@dataclass(frozen=True)
class DecodeSummary:
    utterances: int
    seconds: float  # searching only: features are cached, the model loaded
    audio_seconds: float

    @property
    def real_time_factor(self) -> float:
        return self.seconds / max(self.audio_seconds, 1e-9)


def decode(
    checkpoint_path: str | Path,
    input_path: str | Path,
    out: str | Path | None = None,
    output_format: str = "csv",
    assignments: list[str] | None = None,
    device_name: str = "auto",
    plot_attention: int = 0,
    plot_directory: str | Path | None = None,
    input_format: str = "auto",
) -> DecodeSummary:
    """Transcribe `input_path` with the `decode.*` defaults and `assignments` on top of them."""
    checkpoint = load_checkpoint(checkpoint_path)
    config = checkpoint.decoding_config(assignments)
    if out is not None:
        for precious, what in ((checkpoint_path, "the checkpoint"), (input_path, "the input")):
            if Path(out).resolve() == Path(precious).resolve():
                raise LasError(f"--out {out} is {what}: decoding would overwrite it")
        check_writable(out, "--out")
    # Beside the output by default: dev.csv -> dev_attention/
    directory = Path(plot_directory or (Path(out).with_name(f"{Path(out).stem}_attention") if out else "attention"))
    if plot_attention:
        make_directory(directory, "--plot-dir")
    device = resolve_device(device_name)
    vocabulary = checkpoint.vocabulary
    skip = config.data.bad_utterances == "skip"
    utterances = read_utterances(input_path, require_text=False, input_format=input_format, skip_bad=skip)
    utterances = check_characters(utterances, vocabulary, input_path, skip)
    model = checkpoint.build_model(device)
    strategy = build_strategy(config.decode, vocabulary, model)
    cache = FeatureCache(config.data.cache_dir, config.features, config.data.workers)
    if skip:
        utterances = cache.usable(utterances, input_path)
    features = cache.load(utterances)
    checkpoint.check_features(features, input_path)
    dataset = SpeechDataset.from_utterances(utterances, features, checkpoint.normalizer, vocabulary, with_targets=False)
    started = time.perf_counter()
    results = transcribe(model, dataset, strategy, config.decode.batch_size, config.data.max_batch_frames, device)
    seconds = time.perf_counter() - started
    transcripts = [
        transcript(identifier, hypotheses, vocabulary)
        for identifier, hypotheses in zip(dataset.ids, results, strict=True)
    ]
    write_output(transcripts, output_format, out)
    for identifier, hypotheses in list(zip(dataset.ids, results, strict=True))[:plot_attention]:
        plot_hypothesis(identifier, hypotheses[0], vocabulary, directory / file_name(identifier, ".png"))
    frames = sum(dataset.frame_counts())  # 10 ms frames, as in HW4 features too
    return DecodeSummary(len(transcripts), seconds, frames * config.features.hop_ms / 1000)


def file_name(identifier: str, suffix: str) -> str:
    """A file name for an utterance id that stays inside its folder whatever the id holds ("../x", "a/b")."""
    safe = re.sub(r"[^\w.-]", "_", identifier).lstrip(".")
    return (safe or "_") + suffix


def transcript(identifier: str, hypotheses: list[Hypothesis], vocabulary: Vocabulary) -> Transcript:
    """The best hypothesis as text; JSONL also gets its score and the n-best list."""
    best = hypotheses[0]
    nbest = [{"text": vocabulary.decode(item.tokens), "score": json_score(item.score)} for item in hypotheses]
    return Transcript(identifier, vocabulary.decode(best.tokens), {"score": json_score(best.score), "nbest": nbest})


def json_score(score: float) -> float | None:
    """A score as JSON can hold it: rounded, and null rather than NaN or infinity (not JSON)."""
    return round(score, 4) if math.isfinite(score) else None


def write_output(transcripts: list[Transcript], output_format: str, out: str | Path | None) -> None:
    """To stdout, or to `out` through a temporary file, so an interrupted run leaves no half file."""
    if out is None:
        write_transcripts(transcripts, output_format, sys.stdout)
        return
    text = io.StringIO()
    write_transcripts(transcripts, output_format, text)
    write_text_atomically(out, text.getvalue())
