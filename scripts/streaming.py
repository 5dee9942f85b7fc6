"""Streaming against decoding whole (issue 73): accuracy, each word's delay, and how many
streams the CPU holds in real time.

    las align runs/an4/best.pt data/an4/dev.tsv --out runs/streaming/dev.ctm   # reference word ends
    python scripts/streaming.py measure runs/an4-streaming/seed-{1,2,3}/best.pt \\
        --offline runs/an4/seed-{1,2,3}/best.pt --ctm runs/streaming/dev.ctm \\
        --set data/an4/dev.tsv --set runs/robustness/sets/telephone.tsv

Each recording is pushed 10 ms at a time, as fast as the stream takes it, on one thread. A word
is emitted when a final result gives it (it will not change after: by default once every
hypothesis of the beam shares it, las.search.triggered; spelling greedily, once its space is
spelt, las.search.monotonic_stream). Its **delay** is the audio heard by then minus the word's end in
the reference's forced alignment (CTC, from a model that decodes whole), plus how long the
stream took to compute the piece that made it final once that piece had arrived and the pieces
before it were done (the process's CPU time, so a busy machine does not count): what a listener
waits after saying the word. Words are matched to the reference's by an edit-distance alignment; a
wrong word has no delay. **Partial words changed**: of the complete words partial results show
(each time one is shown), the share that the final transcript does not have at that place.
**Streams in real time**: the cores divided by the real-time factor of one stream at a thread.

    python scripts/streaming.py speed runs/streaming/guided/best.pt --variant "" --variant ctc_weight=1

`speed` times the stream alone: search settings (or two checkouts, run a round each in turn)
side by side in paired rounds, the median real-time factor of each and its ratio to the first.

    python scripts/streaming.py pauses runs/streaming/tuning.ctm --set data/an4/tuning.tsv

`pauses` counts, from the reference's word times alone, how soon words can be final where a
stream makes them final only at pauses (its second pass), for each pause length.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import typer
from harness import header, row, spread

from las.core.metrics import character_error_rate
from las.data.corpora.ctm import WordTime, read_ctm
from las.data.corpora.manifest import read_utterances
from las.data.front_end.audio import load_audio
from las.recognition.decode import decode
from las.recognition.recognizer import Recognizer
from las.recognition.stream import StreamResult
from las.recognition.transcripts import read_transcripts

app = typer.Typer(add_completion=False)


@app.callback()
def main() -> None:
    """Streaming against decoding whole."""


PIECE_SECONDS = 0.01


@dataclass
class Streamed:
    emitted: list[tuple[str, float]]  # each final word, and the audio heard (s) when it was final
    # Each word a partial result showed complete (a space after it), and the final word at its place.
    shown: list[tuple[int, str]]
    seconds: float  # computing
    audio_seconds: float

    @property
    def text(self) -> str:
        return " ".join(word for word, _ in self.emitted)

    def changed(self) -> int:
        """Partial words that the final transcript does not keep at their place."""
        finals = [word for word, _ in self.emitted]
        return sum(index >= len(finals) or finals[index] != word for index, word in self.shown)


def stream_recording(recognizer: Recognizer, waveform: np.ndarray) -> Streamed:
    """`waveform` pushed PIECE_SECONDS at a time; its words with when each became final. Each
    piece is computed once it has arrived (on the audio's clock) and what came before it is done,
    so a word waits for the computing of the piece that made it final as well as any backlog.
    Computing is timed in the process's CPU time (one thread): what the stream takes of a core it
    has to itself, however busy the machine it is measured on."""
    stream = recognizer.stream()
    rate = stream.sample_rate
    piece = round(rate * PIECE_SECONDS)
    streamed = Streamed([], [], 0.0, len(waveform) / rate)
    done = 0.0  # when the pieces so far were computed, on the audio's clock (s)
    for first in [*range(0, len(waveform), piece), None]:  # None: the end of the stream
        arrived = min(first + piece, len(waveform)) / rate if first is not None else len(waveform) / rate
        started = time.process_time()
        results = stream.push(waveform[first : first + piece]) if first is not None else stream.finish()
        computing = time.process_time() - started
        done = max(done, arrived) + computing
        streamed.seconds += computing
        note(results, streamed, done - arrived)
    return streamed


def note(results: list[StreamResult], streamed: Streamed, lag: float) -> None:
    """The words these results make final, in order, each with the audio heard then plus `lag`;
    and the complete words partial results show, at the places they show them."""
    for result in results:
        if result.final:
            streamed.emitted += [(word.word, result.heard + lag) for word in result.words]
            continue
        complete = result.words if result.text.endswith(" ") else result.words[:-1]
        streamed.shown += [(len(streamed.emitted) + index, word.word) for index, word in enumerate(complete)]


def delays(emitted: list[tuple[str, float]], reference: list[WordTime]) -> list[float]:
    """Emission minus the reference's end, for each word spelt as said, matched in order."""
    hypothesis = [word for word, _ in emitted]
    said = [word.word for word in reference]
    matched = []
    for hypothesis_index, reference_index in aligned_pairs(hypothesis, said):
        if hypothesis[hypothesis_index] == said[reference_index]:
            matched.append(emitted[hypothesis_index][1] - reference[reference_index].end)
    return matched


def aligned_pairs(first: list[str], second: list[str]) -> list[tuple[int, int]]:
    """Index pairs of the words an edit-distance alignment of two word sequences puts together."""
    costs = np.zeros((len(first) + 1, len(second) + 1), dtype=np.int64)
    costs[:, 0], costs[0, :] = np.arange(len(first) + 1), np.arange(len(second) + 1)
    for i, word in enumerate(first, 1):
        for j, other in enumerate(second, 1):
            costs[i, j] = min(costs[i - 1, j] + 1, costs[i, j - 1] + 1, costs[i - 1, j - 1] + (word != other))
    pairs, i, j = [], len(first), len(second)
    while i and j:
        if costs[i, j] == costs[i - 1, j - 1] + (first[i - 1] != second[j - 1]):
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif costs[i, j] == costs[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def percentile(values: list[float], share: float) -> float:
    return float(np.percentile(values, 100 * share)) if values else float("nan")


def offline_cer(checkpoint: Path, manifest: Path) -> float:
    """CER (%) of `checkpoint` decoding `manifest` whole, with the default decoding."""
    output = Path("/tmp") / f"streaming-offline-{checkpoint.parent.name}-{manifest.stem}.csv"
    decode(checkpoint, manifest, output, "csv", [], "cpu")
    hypotheses, references = read_transcripts(output), read_transcripts(manifest)
    return character_error_rate([hypotheses[key] for key in references], list(references.values()))


@app.command()
def measure(
    checkpoints: list[Path] = typer.Argument(..., help="Streaming models, one per seed."),
    offline: list[Path] = typer.Option([], "--offline", help="Models that decode whole, one per seed."),
    second_pass: list[Path] = typer.Option(
        [], "--second-pass", help="Models that decode each segment (decode.stream_second_pass_model), one per seed."
    ),
    sets: list[Path] = typer.Option([Path("data/an4/dev.tsv")], "--set", help="Manifests to decode."),
    ctm: Path | None = typer.Option(None, "--ctm", help="Reference word times of the first set (las align)."),
    threads: int = 1,
    cores: int = typer.Option(2, help="Cores whose streams in real time are counted."),
    decoding: list[str] = typer.Option([], "--decode", help="KEY=VALUE: a decode.* setting of the stream."),
    pad: float = typer.Option(0.0, help="Seconds of digital silence (zeros) streamed before and after each recording."),
) -> None:
    """CER streamed and decoded whole per set, word delays and streams in real time (tables)."""
    torch.set_num_threads(threads)
    if second_pass and len(second_pass) != len(checkpoints):  # paired by seed: none may be left unpaired
        raise typer.BadParameter(f"{len(second_pass)} --second-pass models for {len(checkpoints)} streaming models")
    reference_times = read_ctm(ctm) if ctm else {}
    columns = ["streamed CER %", "decoded whole CER %", "x", "median delay s", "90th pct s", "partial words changed %"]
    print(header("set", *columns, "RTF", "streams"))
    for manifest in sets:
        references = read_transcripts(manifest)
        utterances = read_utterances(manifest)
        rates, word_delays, factors, shown, changed = [], [], [], 0, 0
        for index, checkpoint in enumerate(checkpoints):
            settings = dict(setting.split("=", 1) for setting in decoding)
            if second_pass:
                settings["stream_second_pass_model"] = str(second_pass[index])
            recognizer = Recognizer.load(checkpoint, "cpu", **settings)
            hypotheses, seconds, audio = {}, 0.0, 0.0
            for utterance in utterances:
                rate = recognizer.config.features.sample_rate
                waveform = load_audio(Path(utterance.audio_location), rate).numpy()
                silence = np.zeros(round(pad * rate), dtype=waveform.dtype)
                streamed = stream_recording(recognizer, np.concatenate([silence, waveform, silence]))
                hypotheses[utterance.id] = streamed.text
                seconds, audio = seconds + streamed.seconds, audio + streamed.audio_seconds
                shown, changed = shown + len(streamed.shown), changed + streamed.changed()
                if manifest == sets[0] and utterance.id in reference_times:
                    emitted = [(word, heard - pad) for word, heard in streamed.emitted]  # on the recording's clock
                    word_delays += delays(emitted, reference_times[utterance.id])
            rates.append(character_error_rate([hypotheses[key] for key in references], list(references.values())))
            factors.append(seconds / audio)
        whole = [offline_cer(checkpoint, manifest) for checkpoint in offline]
        ratio = f"{statistics.mean(rates) / statistics.mean(whole):.2f}" if whole else ""
        factor = statistics.median(factors)
        cells = [spread(rates), spread(whole) if whole else "", ratio]
        timing = (
            [f"{percentile(word_delays, 0.5):.2f}", f"{percentile(word_delays, 0.9):.2f}"] if word_delays else ["", ""]
        )
        stability = f"{100 * changed / shown:.1f}" if shown else ""
        print(row(manifest, *cells, *timing, stability, f"{factor:.3f}", f"{cores / (threads * factor):.0f}"))


@app.command()
def speed(
    checkpoint: Path,
    manifest: Path = Path("data/an4/dev.tsv"),
    utterances: int = typer.Option(20, help="The manifest's first recordings streamed each round."),
    variants: list[str] = typer.Option(
        [""], "--variant", help="decode.* settings of one variant, KEY=VALUE joined by commas; empty: the defaults."
    ),
    rounds: int = 3,
    threads: int = 1,
) -> None:
    """Real-time factor of streaming by search settings, variants interleaved in paired rounds."""
    torch.set_num_threads(threads)
    recognizers = {
        variant or "defaults": Recognizer.load(
            checkpoint, "cpu", **dict(setting.split("=", 1) for setting in variant.split(",") if setting)
        )
        for variant in variants
    }
    rate = next(iter(recognizers.values())).config.features.sample_rate
    waveforms = [
        load_audio(Path(utterance.audio_location), rate).numpy() for utterance in read_utterances(manifest)[:utterances]
    ]
    factors: dict[str, list[float]] = {name: [] for name in recognizers}
    for _ in range(rounds):
        for name, recognizer in recognizers.items():
            streamed = [stream_recording(recognizer, waveform) for waveform in waveforms]
            factors[name].append(sum(item.seconds for item in streamed) / sum(item.audio_seconds for item in streamed))
    first = statistics.median(next(iter(factors.values())))
    print(header("variant", "RTF, median of rounds", "x the first", "streams in real time per core"))
    for name, values in factors.items():
        factor = statistics.median(values)
        print(row(name, f"{factor:.4f}", f"{factor / first:.2f}", f"{1 / (threads * factor):.1f}"))


@app.command()
def pauses(
    ctm: Path = typer.Argument(..., help="Reference word times (las align)."),
    manifest: Path = typer.Option(Path("data/an4/tuning.tsv"), "--set", help="The recordings the words are of."),
    seconds: list[float] = typer.Option([0.2, 0.3, 0.5, 1.0], "--pause", help="Pause lengths that end a segment."),
    wider: list[float] = typer.Option([0.0, 0.1], help="Seconds added to every gap between words."),
) -> None:
    """Word delays where each word is final only when its segment ends (a second pass at each
    pause), from the reference's word times alone: a word waits for the first gap of at least the
    pause after it (or the last word's end: live, silence follows), then for the pause itself.
    `wider` stands for a first pass whose characters leave wider gaps than the words' sounds."""
    reference = read_ctm(ctm)
    print(header("pause s", "gaps wider by s", "median delay s", "90th pct s"))
    for pause in seconds:
        for widen in wider:
            waits = []
            for utterance in read_utterances(manifest):
                words = reference.get(utterance.id, [])
                for index, word in enumerate(words):
                    last = index
                    while last + 1 < len(words) and words[last + 1].start - words[last].end + widen < pause:
                        last += 1
                    waits.append(words[last].end + pause - word.end)
            print(row(f"{pause:g}", f"{widen:g}", f"{percentile(waits, 0.5):.2f}", f"{percentile(waits, 0.9):.2f}"))


if __name__ == "__main__":
    app()
