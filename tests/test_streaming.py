"""Streaming: a causal front end, a listener that hears a bounded time ahead, a speller whose
attention only moves forward, run as the audio arrives: any cutting of the audio gives the same
final text, the text that decoding the whole recording gives, with bounded state."""

from __future__ import annotations

import copy
import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile
import torch
from typer.testing import CliRunner

from las.cli import app
from las.core.config import FeatureConfig, load_config
from las.core.errors import LasError
from las.data.front_end.feature_stream import FeatureStream
from las.data.front_end.features import FilterbankExtractor, Normalizer, analysis_sizes
from las.data.front_end.segmentation import CONTEXT_SECONDS, PAUSE_FRAMES, Levels
from las.data.front_end.signal import POWER_FLOOR, resample
from las.model.streaming_listener import ForwardListener
from las.recognition import live
from las.recognition.recognizer import Recognizer
from las.recognition.second_pass import SegmentDecoder
from las.recognition.segment_reader import SegmentModel
from las.recognition.stream import Stream, StreamResult
from las.search.common import Rules, Strategy, Symbols
from las.search.monotonic_stream import Spelt
from las.search.paths import GreedySearch
from las.search.triggered import TriggeredSearch

from .conftest import AN4, TINY, an4_rows, write_manifest

STREAMING = [
    "features.causal=true",
    "features.dereverberation=off",
    "model.listener=plstm",
    "model.lookahead=2",
    "model.attention=monotonic_chunk",
]


@pytest.mark.parametrize(("layers", "lookahead"), [(2, 2), (2, 0), (3, 1), (0, 2), (2, 4), (1, 5)])
def test_the_listener_gives_the_same_frames_streamed_in_any_pieces_as_over_the_whole(
    layers: int, lookahead: int
) -> None:
    torch.manual_seed(0)
    listener = ForwardListener(20, 16, layers, 8, 8, 0.0, lookahead).eval()
    for frames in (1, 5, 37, 64):
        features = torch.randn(frames, 20)
        whole = listener(features[None], torch.tensor([frames]))
        assert whole.hidden.shape[1] == listener.reduced(frames) == int(whole.lengths[0])
        for piece in (1, 3, 8, 100):
            stream = listener.stream()
            parts = [stream.push(features[first : first + piece]) for first in range(0, frames, piece)]
            streamed = torch.cat([*parts, stream.finish()])
            assert streamed.shape == whole.hidden[0].shape
            torch.testing.assert_close(streamed, whole.hidden[0], atol=1e-5, rtol=1e-5)


def test_a_frame_hears_no_further_ahead_than_the_lookahead() -> None:
    torch.manual_seed(0)
    listener = ForwardListener(20, 16, 2, 8, 8, 0.0, lookahead=2).eval()
    features = torch.randn(64, 20)
    changed = features.clone()
    changed[40:] = torch.randn(24, 20)  # input frames 40 on: encoder frame 10 on
    before, after = (listener(item[None], torch.tensor([64])).hidden[0] for item in (features, changed))
    # Encoder frame j reads input frames up to 4j + 3, and its look-ahead up to 4(j + 2) + 3.
    assert torch.equal(before[:8], after[:8])
    assert not torch.allclose(before[8], after[8])


def test_a_padded_batch_gives_each_utterance_what_it_gives_alone() -> None:
    torch.manual_seed(0)
    listener = ForwardListener(20, 16, 2, 8, 8, 0.0, lookahead=2).eval()
    lengths = torch.tensor([64, 37, 5])
    batch = torch.randn(3, 64, 20)
    together = listener(batch, lengths)
    for row, length in enumerate(lengths.tolist()):
        alone = listener(batch[row : row + 1, :length], torch.tensor([length]))
        frames = alone.hidden.shape[1]
        assert int(together.lengths[row]) == frames and int(together.mask[row].sum()) == frames
        torch.testing.assert_close(together.hidden[row, :frames], alone.hidden[0], atol=1e-5, rtol=1e-5)
        assert not together.hidden[row, frames:].any()


def test_a_causal_normaliser_fits_exact_statistics_and_runs_frame_by_frame_as_over_the_whole() -> None:
    torch.manual_seed(0)
    utterances = [torch.randn(frames, 5) * 3 + torch.arange(5.0) for frames in (3, 40, 100)]
    normalizer = Normalizer.fit(iter(utterances), utterance_mean=True, prior_frames=30, causal=True)
    normalised = torch.cat([normalizer(utterance) for utterance in utterances])
    torch.testing.assert_close(normalised.mean(dim=0), torch.zeros(5), atol=1e-5, rtol=0)
    torch.testing.assert_close(normalised.std(dim=0, unbiased=False), torch.ones(5), atol=1e-5, rtol=0)
    # Each frame's mean is of the frames up to it: what comes later changes nothing before it.
    longer = torch.cat([utterances[2], torch.randn(50, 5) * 9])
    assert torch.equal(normalizer(longer)[:100], normalizer(utterances[2]))
    running = normalizer.running()
    pieces = torch.cat([running(utterances[2][first : first + 7]) for first in range(0, 100, 7)])
    torch.testing.assert_close(pieces, normalizer(utterances[2]), atol=1e-6, rtol=0)
    assert Normalizer.from_dict(normalizer.to_dict()).causal
    with pytest.raises(LasError, match="causal front end"):
        Normalizer.fit(iter(utterances), utterance_mean=True, prior_frames=30).running()


@pytest.mark.parametrize("prior_frames", [30, 0])
def test_digital_silence_before_the_speech_moves_no_causal_mean(prior_frames: int) -> None:
    """Frames at the log floor (exact zeros: a muted microphone, a padded file) say nothing of the
    channel: the speech after them is normalised as without them, and they are finite."""
    torch.manual_seed(0)
    speech = torch.randn(60, 5) * 3 + torch.arange(5.0)
    normalizer = Normalizer.fit(iter([speech]), utterance_mean=True, prior_frames=prior_frames, causal=True)
    floor = torch.full((100, 5), math.log(POWER_FLOOR))
    padded = normalizer(torch.cat([floor, speech, floor]))
    torch.testing.assert_close(padded[100:160], normalizer(speech), atol=1e-5, rtol=0)
    assert torch.isfinite(padded).all()


def test_streamed_features_are_the_same_in_pieces_of_any_size_and_those_of_the_whole_recording() -> None:
    config = FeatureConfig(causal=True, dereverberation="off")
    extractor = FilterbankExtractor(config)
    waveform = torch.from_numpy(soundfile.read(an4_rows("dev", 1)[0][1], dtype="float32")[0])
    whole = extractor(waveform)
    normalizer = Normalizer.fit([whole], utterance_mean=True, prior_frames=30, causal=True)
    streamed = {}
    for piece in (1, 77, 160, 1600, len(waveform)):
        stream = FeatureStream(extractor, normalizer, group=4)
        groups = [
            group for first in range(0, len(waveform), piece) for group in stream.push(waveform[first : first + piece])
        ]
        groups += stream.finish()
        assert all(len(group) == 4 for group in groups[:-1])
        streamed[piece] = torch.cat(groups)
    for piece, features in streamed.items():
        assert torch.equal(features, streamed[1]), piece  # bit for bit, whatever the pieces
    assert streamed[1].shape == whole.shape
    torch.testing.assert_close(streamed[1], normalizer(whole), atol=1e-4, rtol=1e-4)
    # The causal front end reads the recording as it comes: zeros, not a mirror, beyond its ends.
    assert not torch.allclose(whole[0], FilterbankExtractor(FeatureConfig(dereverberation="off")).log_mel(waveform)[0])


def test_streaming_settings_that_cannot_hold_are_refused() -> None:
    with pytest.raises(LasError, match="model.lookahead"):
        load_config(None, ["model.lookahead=2"])
    with pytest.raises(LasError, match="features.dereverberation"):
        load_config(None, ["features.causal=true", "features.dereverberation=always"])
    assert not FeatureConfig(causal=True).at_decoding().dereverberates  # "decoding" cannot wait either


@pytest.fixture(scope="module")
def streaming_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny streaming model trained for a few seconds; its attention's selection made as likely
    as not (a trained one's selects: this one is too young to), so that it spells."""
    from las.training.train import train

    root = tmp_path_factory.mktemp("streaming")
    manifest = write_manifest(root / "train.tsv", an4_rows("train", 4, longest_seconds=1.6))
    settings = [
        *TINY,
        *STREAMING,
        f"data.train={manifest}",
        f"data.dev={manifest}",
        f"data.cache_dir={root / 'cache'}",
        f"train.out={root / 'run'}",
        "data.batch_size=2",
        "train.epochs=2",
    ]
    train(load_config(None, settings))
    payload = torch.load(root / "run" / "best.pt", weights_only=False)
    payload["model"]["speller.attention.offset"] = torch.tensor(0.0)
    torch.save(payload, root / "spelling.pt")
    return {"root": root, "checkpoint": root / "spelling.pt", "untouched": root / "run" / "best.pt"}


def streamed(stream: Stream, samples: np.ndarray, piece: int) -> list[StreamResult]:
    results = [
        result for first in range(0, len(samples), piece) for result in stream.push(samples[first : first + piece])
    ]
    return results + stream.finish()


@pytest.mark.parametrize(
    ("strategy", "ctc_weight", "lookahead", "second_pass", "pause", "words"),
    [
        ("beam", 0.5, 0.0, False, 1.0, False),
        ("beam", 1.0, 0.0, False, 1.0, False),
        ("greedy", 0.5, 0.0, True, 1.0, False),  # the speller alone ends its own segments: no second pass
        ("beam", 0.5, 0.12, False, 1.0, False),
        ("beam", 0.5, 0.12, True, 1.0, False),
        ("beam", 0.5, 0.12, True, 0.2, False),  # segments at short pauses
        # each word decoded with the segment so far once the next begins (those unsure of, one word later)
        ("beam", 0.5, 0.12, True, 1.0, True),
    ],
)
def test_any_cutting_of_the_audio_gives_the_same_final_text(
    streaming_model: dict[str, Path],
    strategy: str,
    ctc_weight: float,
    lookahead: float,
    second_pass: bool,
    pause: float,
    words: bool,
) -> None:
    """By the default joint search (las.search.triggered), with its speller reading past the
    trigger, with each segment decoded again whole once it ends (at long or short pauses) or word
    by word, its CTC head alone, and the speller alone (las.search.monotonic_stream)."""
    recognizer = Recognizer.load(
        streaming_model["checkpoint"],
        "cpu",
        strategy=strategy,
        ctc_weight=ctc_weight,
        stream_trigger_lookahead_seconds=lookahead,
        stream_second_pass=second_pass,
        stream_second_pass_words=words,
        stream_pause_seconds=pause,
    )
    for index, row in enumerate(an4_rows("dev", 2, longest_seconds=1.5)):
        samples = soundfile.read(row[1], dtype="int16")[0]
        duration = len(samples) / 16000
        finals = {}
        # A sample, 10 ms, 100 ms, a second at a time (a sample at a time for one recording: slow).
        for piece in (1, 160, 1600, 16000)[index:]:
            results = streamed(recognizer.stream(), samples, piece)
            finals[piece] = [
                (result.text, result.start, result.end, result.words) for result in results if result.final
            ]
            assert all(0 <= result.start <= result.end <= duration + 0.05 for result in results)
            assert all(result.heard <= duration for result in results)
            # Each word's confidence, as decoding whole measures it: its least confident character's.
            words = [word for result in results for word in result.words]
            assert words and all(word.confidence is not None and 0 <= word.confidence <= 1 for word in words)
            if strategy == "greedy":  # spelt greedily, what a partial says is final already
                final_text = " ".join(text for text, *_ in finals[piece])
                assert all(result.text.replace(" ", "") in final_text.replace(" ", "") for result in results)
        first = next(iter(finals.values()))
        assert first and all(found == first for found in finals.values())


def test_min_confidence_leaves_less_confident_final_words_out_as_decoding_whole_does(
    streaming_model: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    samples = np.concatenate([soundfile.read(row[1], dtype="int16")[0] for row in an4_rows("dev", 4)])
    every = Recognizer.load(streaming_model["checkpoint"], "cpu")
    words = [word for result in streamed(every.stream(), samples, 1600) if result.final for word in result.words]
    threshold = sorted(word.confidence for word in words)[len(words) // 2]  # about half of them kept
    kept = [word for word in words if word.confidence >= threshold]
    assert 0 < len(kept) < len(words)
    choosy = Recognizer.load(streaming_model["checkpoint"], "cpu", min_confidence=threshold)
    results = streamed(choosy.stream(), samples, 1600)
    assert [word for result in results if result.final for word in result.words] == kept
    assert all(result.text == " ".join(word.word for word in result.words) for result in results if result.final)
    assert f"{len(words) - len(kept)} words less confident than decode.min_confidence" in capsys.readouterr().err


def test_the_first_segment_is_what_decoding_the_whole_recording_spells(streaming_model: dict[str, Path]) -> None:
    """Under the same limit on its length: the stream counts a segment's frames up to each step
    (what comes later cannot change a step), decoding whole the recording's."""
    recognizer = Recognizer.load(streaming_model["checkpoint"], "cpu", max_length_ratio=1e-6, strategy="greedy")
    for row in an4_rows("dev", 3):
        samples = soundfile.read(row[1], dtype="int16")[0]
        finals = " ".join(result.text for result in streamed(recognizer.stream(), samples, 1600) if result.final)
        whole = " ".join(whole_greedy(recognizer, samples).split())
        assert whole and finals.startswith(whole)


def whole_greedy(recognizer: Recognizer, samples: np.ndarray) -> str:
    """Greedy decoding by the speller alone of the whole recording's features, as training's dev
    pass decodes."""
    rules = Rules(max_length_ratio=recognizer.config.decode.max_length_ratio, ctc_length_ratio=0)
    return decoded_whole(recognizer, samples, GreedySearch(Symbols.of(recognizer.vocabulary), rules))


def decoded_whole(recognizer: Recognizer, samples: np.ndarray, search: Strategy, from_speech: bool = False) -> str:
    """`search` over the listener's frames of the whole recording's features; `from_speech`: from
    CONTEXT_SECONDS before its speech at most, a whole encoder frame."""
    config = recognizer.config
    features = FilterbankExtractor(config.features.at_decoding())(torch.from_numpy(samples / 32768).float())
    start = 0
    if from_speech:
        start = max(0, Levels.of(features).speech_extent()[0] - config.features.frames(CONTEXT_SECONDS))
        start -= start % 2**config.model.pyramid_layers
    features = recognizer.checkpoint.normalizer(features)[start:]
    model = recognizer.model
    memory = model.listener(features[None], torch.tensor([len(features)]))
    return recognizer.vocabulary.decode(search.search(model, memory)[0][0].tokens)


def test_a_second_pass_gives_a_segment_as_decoding_its_frames_whole_does(streaming_model: dict[str, Path]) -> None:
    """A recording short of a pause long enough to end a segment is one segment: its final text is
    the default beam search's over the whole recording's features (at one speed), heard from a
    context's length before its speech at most; partial results come before it."""
    recognizer = Recognizer.load(
        streaming_model["checkpoint"],
        "cpu",
        stream_second_pass=True,
        stream_pause_seconds=10,
        segment_seconds=30,
        other_speed=0,
    )
    quiet = np.random.default_rng(0).normal(0, 20, 24000).astype(np.int16)  # 1.5 s of a quiet room
    for index, row in enumerate(an4_rows("dev", 2)):
        samples = soundfile.read(row[1], dtype="int16")[0]
        if index == 1:  # a pause longer than the context before the speech: not heard
            samples = np.concatenate([quiet, samples])
        results = streamed(recognizer.stream(), samples, 1600)
        finals = [result for result in results if result.final]
        assert len(finals) == 1 and results[-1] is finals[0] and len(results) > 1
        whole = " ".join(decoded_whole(recognizer, samples, recognizer.strategy, from_speech=True).split())
        assert whole and finals[0].text == whole


def test_a_segment_is_heard_from_a_context_before_its_speech_at_most(streaming_model: dict[str, Path]) -> None:
    """The stream's own model hears an ended segment's own frames from CONTEXT_SECONDS before its
    speech (a whole encoder frame), not the pause before that: a segment begins where the one
    before ended, however long ago."""
    recognizer = Recognizer.load(streaming_model["checkpoint"], "cpu")
    config = recognizer.config
    reading = SegmentModel.of(recognizer.model, config, recognizer.checkpoint.normalizer, recognizer.vocabulary)
    reduction, lead = 2**config.model.pyramid_layers, config.features.frames(CONTEXT_SECONDS)
    frame_samples = reduction * analysis_sizes(config.features)[1]  # of an encoder frame
    quiet = np.random.default_rng(0).normal(0, 20, 24000)  # 1.5 s of a quiet room
    samples = torch.from_numpy(np.concatenate([quiet, soundfile.read(an4_rows("dev", 1)[0][1])[0] * 32768]) / 32768)
    features = FilterbankExtractor(config.features.at_decoding())(samples.float())
    count = len(samples) // frame_samples  # encoder frames
    groups = list(recognizer.checkpoint.normalizer(features)[: count * reduction].split(reduction))
    first = Levels.of(features).speech_extent()[0]
    assert first >= 150  # the quiet is not speech
    heard, skipped = reading.features(groups, samples.float()[: count * frame_samples], 1.0)
    assert skipped == (first - lead) // reduction and torch.equal(heard, torch.cat(groups[skipped:]))
    slower, skipped_slower = reading.features(groups, samples.float()[: count * frame_samples], 0.9)
    assert skipped_slower > 0 and len(slower) < len(features) / 0.9 - lead


def test_a_second_pass_by_another_model_reads_a_segment_as_that_model_decodes_the_recording(
    streaming_model: dict[str, Path], trained_run: dict[str, Path]
) -> None:
    """With decode.stream_second_pass_model, each segment is decoded by that checkpoint's model
    (here a pBLSTM's) from the segment's audio through its own front end: a recording that is one
    segment, heard from its start, reads as `las decode` with that model reads it; the model is
    loaded once for all the recogniser's streams."""
    other = trained_run["run"] / "best.pt"
    settings = dict(stream_pause_seconds=10, segment_seconds=30, other_speed=0)
    recognizer = Recognizer.load(streaming_model["checkpoint"], "cpu", stream_second_pass_model=str(other), **settings)
    offline = Recognizer.load(other, "cpu", **settings)
    for row in an4_rows("dev", 2):
        samples = soundfile.read(row[1], dtype="int16")[0]
        stream = recognizer.stream()
        assert stream.second_pass is not None and stream.second_pass.reader.reading.model is not recognizer.model
        assert stream.second_pass.reader.reading is recognizer.segment_model  # type: ignore[union-attr]: loaded once
        stream.second_pass.context = 10**6  # the segment heard from the recording's start, as decoding whole hears it
        finals = [result.text for result in streamed(stream, samples, 1600) if result.final]
        whole = offline.transcribe(samples, 16000).text  # type: ignore[union-attr]
        assert whole and finals == [whole]


def test_a_second_pass_model_that_cannot_speak_for_the_stream_is_refused(
    streaming_model: dict[str, Path], trained_run: dict[str, Path], tmp_path: Path
) -> None:
    """A model whose characters or encoder frames are not the stream's could not give its words as
    the stream's: refused when the stream starts, with what differs."""
    original = torch.load(trained_run["run"] / "best.pt", weights_only=False)
    changes = {
        "spells other characters": lambda payload: payload["vocabulary"].append("@"),
        "another sample rate or frame": lambda payload: payload["config"]["model"].update(pyramid_layers=3),
    }
    for index, (message, change) in enumerate(changes.items()):
        payload = copy.deepcopy(original)
        change(payload)
        torch.save(payload, tmp_path / f"{index}.pt")
        recognizer = Recognizer.load(
            streaming_model["checkpoint"], "cpu", stream_second_pass_model=str(tmp_path / f"{index}.pt")
        )
        with pytest.raises(LasError, match=message):
            recognizer.stream()


@pytest.mark.parametrize(("second_pass", "given", "frames"), [(True, "auto", 0), (False, "auto", 4), (True, 0.08, 2)])
def test_the_search_reads_past_its_trigger_only_where_its_own_words_are_final(
    streaming_model: dict[str, Path], second_pass: bool, given: float | str, frames: int
) -> None:
    """auto: where the second pass gives the final words, the search only says where they end,
    and a look-ahead would only delay that; where its words are final, 0.16 s (40 ms frames)."""
    recognizer = Recognizer.load(
        streaming_model["checkpoint"], "cpu", stream_second_pass=second_pass, stream_trigger_lookahead_seconds=given
    )
    stream = recognizer.stream()
    assert isinstance(stream.search, TriggeredSearch)
    assert stream.frame_seconds == pytest.approx(0.04) and stream.search.lookahead == frames


def test_a_word_heard_past_half_a_pause_waits_for_the_next_segment_which_says_if_it_began_a_word_there(
    streaming_model: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment ends a pause after the first pass's last character; its last frames may hold the
    onset of the next word, which its decoding spells as a word ("E" of "SIX" after "THREE"). A
    word centred past half the pause waits: dropped where the next segment's decoding spells a
    word of its own across its frames, given first where it does not (a word the first pass
    missed), given once the recording ends where no segment follows."""
    recognizer = Recognizer.load(streaming_model["checkpoint"], "cpu")
    stream = recognizer.stream()
    decoder, search = stream.second_pass, stream.search
    assert decoder is not None and isinstance(search, TriggeredSearch)
    assert search.pause_frames // 2 == 12  # half of a 1 s pause, in frames of 40 ms: past a last character's frame + 1
    for _ in range(200):
        decoder.hear(torch.zeros(4, recognizer.config.features.mel_bins))
    decodings: list[list[Spelt]] = []
    monkeypatch.setattr(decoder.reader, "spelt", lambda *heard, early=False: decodings.pop(0))
    index, space = recognizer.vocabulary.index, decoder.space

    def spelt(word: str, *frames: int) -> list[Spelt]:
        return [Spelt(index[letter], frame) for letter, frame in zip(word, frames, strict=True)]

    ten, onset = spelt("TEN", 2, 6, 10), spelt("E", 38)
    decodings.append([*ten, Spelt(space, 12), *onset])  # E centred at 38.5, past frame 11 + 12: it waits
    assert decoder(0, 40, 11 + 12, 0) == [*ten, Spelt(space, 12)]
    decodings.append(spelt("SIX", 38, 42, 44))  # the next segment's own first word, across frame 38
    assert decoder(40, 80, 45 + 12, 40) == spelt("SIX", 38, 42, 44)  # E was its onset
    o, missed = spelt("O", 85), spelt("E", 110)
    decodings.append([*o, Spelt(space, 90), *missed])
    assert decoder(80, 120, 86 + 12, 80) == [*o, Spelt(space, 90)]
    decodings.append([*missed, Spelt(space, 112), *spelt("A", 135)])  # E again, but centred in the context
    assert decoder(120, 160, 135 + 12, 120) == [*missed, Spelt(space, 110), *spelt("A", 135)]
    decodings.append([*spelt("O", 165), Spelt(space, 170), *spelt("I", 190)])
    assert decoder(160, 200, 166 + 12, 160) == [*spelt("O", 165), Spelt(space, 170)]
    assert decoder.finish() == [*spelt("I", 190), Spelt(space, 190)] and decoder.finish() == []


@pytest.mark.parametrize(
    ("strategy", "frames", "second_pass"),
    [("greedy", 8, False), ("beam", 2 * 1000 // 40 + 1, False), ("beam", 2 * 1000 // 40 + 1, True)],
)
def test_a_stream_keeps_bounded_state_over_long_audio(
    streaming_model: dict[str, Path], strategy: str, frames: int, second_pass: bool
) -> None:
    """Spelling greedily, the frames from the one selected last and MoChA's chunk behind it; the
    joint search (and its second pass), a segment's frames (ended at decode.segment_seconds, 2 s
    of 40 ms here, if no pause ends it first) and the context before it."""
    recognizer = Recognizer.load(
        streaming_model["checkpoint"],
        "cpu",
        strategy=strategy,
        segment_seconds=2,
        stream_second_pass=second_pass,
    )
    stream = recognizer.stream()
    generator = np.random.default_rng(0)
    speech = soundfile.read(an4_rows("dev", 1)[0][1], dtype="int16")[0]
    kept = []
    for _ in range(3):  # speech, then a second of quiet noise: 12 s of audio in all
        stream.push(speech)
        stream.push((generator.standard_normal(16000) * 30).astype(np.int16))
        kept.append((len(stream.search.keys), len(stream.features.pending), stream.listener.waiting.shape[1]))
    assert max(keys for keys, _, _ in kept) <= frames
    # + the look-ahead's and the context before the segment
    held = stream.second_pass
    assert held is None or len(held.groups) <= frames + 4 + held.context
    assert all(samples < 4 * 160 + 400 and waiting <= 2 for _, samples, waiting in kept)
    assert stream.finish() is not None


def test_a_stream_refuses_what_it_cannot_use(streaming_model: dict[str, Path], trained_run: dict[str, Path]) -> None:
    with pytest.raises(LasError, match="model.listener=plstm"):
        Recognizer.load(trained_run["run"] / "best.pt", "cpu").stream()
    with pytest.raises(LasError, match="beam, ctc or greedy"):
        Recognizer.load(streaming_model["checkpoint"], "cpu", strategy="sample").stream()
    with pytest.raises(LasError, match="stream_second_pass=true"):
        Recognizer.load(streaming_model["checkpoint"], "cpu", stream_second_pass_words=True, stream_second_pass=False)
    with pytest.raises(LasError, match="stream_second_pass_model.*stream_second_pass=true"):
        Recognizer.load(streaming_model["checkpoint"], "cpu", stream_second_pass_model="x.pt", stream_second_pass=False)
    with pytest.raises(LasError, match="decode.lm or decode.lexicon"):
        Recognizer.load(streaming_model["checkpoint"], "cpu", lexicon=str(AN4 / "words.txt")).stream()
    unused = Recognizer.load(streaming_model["checkpoint"], "cpu", lm="absent-lm.pt", lm_weight=0.0).stream()
    assert unused.finish() == []  # an LM at weight 0 is not read, streamed or whole
    stream = Recognizer.load(streaming_model["checkpoint"], "cpu").stream()
    with pytest.raises(LasError, match="mono samples"):
        stream.push(np.zeros((160, 2), dtype=np.int16))
    with pytest.raises(LasError, match="dtype"):
        stream.push(np.array(["a"]))
    with pytest.raises(LasError, match="non-finite"):
        stream.push(np.array([np.nan], dtype=np.float32))
    assert stream.push(np.zeros(0, dtype=np.int16)) == []
    stream.finish()
    with pytest.raises(LasError, match="has finished"):
        stream.push(np.zeros(160, dtype=np.int16))


def test_a_second_pass_keeps_the_words_centred_in_its_segment_not_those_of_its_context() -> None:
    space = 0
    spelt = [
        Spelt(token, frame) for token, frame in [(5, 8), (6, 11), (space, 12), (7, 13), (8, 16), (space, 17), (9, 20)]
    ]
    owner = SimpleNamespace(space=space)
    # The first word spans frames 8-11 (centre 10): the segment before's, from 11 on; the second's centre is 15.
    assert SegmentDecoder.owned(owner, spelt, 10, 10) == spelt  # type: ignore[arg-type]
    assert SegmentDecoder.owned(owner, spelt, 11, 11) == spelt[3:]  # type: ignore[arg-type]
    assert SegmentDecoder.owned(owner, spelt, 16, 16) == spelt[6:]  # type: ignore[arg-type]
    assert SegmentDecoder.owned(owner, spelt, 21, 21) == []  # type: ignore[arg-type]
    # Given early, word by word: those centred before the space the first pass has spelt.
    assert SegmentDecoder.owned(owner, spelt, 0, 0, 12) == spelt[:3]  # type: ignore[arg-type]
    assert SegmentDecoder.owned(owner, spelt, 12, 12, 17) == spelt[3:6]  # type: ignore[arg-type]


def test_word_by_word_a_word_whose_centre_moves_across_the_split_is_given_once() -> None:
    """Two decodings of a segment place a word's centre a frame or two apart: after early calls,
    the words given are those that match what they gave, not those centred before a frame."""
    space = 0
    spelt = [
        Spelt(token, frame) for token, frame in [(5, 8), (6, 11), (space, 12), (7, 13), (8, 14), (space, 15), (9, 20)]
    ]
    owner = SimpleNamespace(space=space)
    # The first word given early, the split then at frame 16: the second word, now centred at 14, is not lost.
    assert SegmentDecoder.owned(owner, spelt, 0, 16, said=[(5, 6)]) == spelt[3:]  # type: ignore[arg-type]
    # Both given early, the split then at frame 13: the second word, now centred at 14, is not given again.
    assert SegmentDecoder.owned(owner, spelt, 0, 13, said=[(5, 6), (7, 8)]) == spelt[6:]  # type: ignore[arg-type]
    # Early calls that gave nothing (their decodings had no word there yet): every word is the segment's to give.
    assert SegmentDecoder.owned(owner, spelt, 0, 16, said=[]) == spelt  # type: ignore[arg-type]
    # A word given early and spelt otherwise since: the words after it, not it again.
    assert SegmentDecoder.owned(owner, spelt, 0, 12, said=[(5, 7)]) == spelt[3:]  # type: ignore[arg-type]
    # One word given, spelt otherwise since: the first word or none match it alike; the split nearest the frame given.
    again = [Spelt(token, frame) for token, frame in [(5, 2), (space, 3), (5, 6), (space, 7), (5, 10)]]
    assert SegmentDecoder.owned(owner, again, 0, 8, said=[(6,)]) == again[2:]  # type: ignore[arg-type]
    assert SegmentDecoder.owned(owner, again, 0, 8, until=8, said=[(6,)]) == again[2:4]  # type: ignore[arg-type]
    assert SegmentDecoder.owned(owner, again, 0, 2, said=[(6,)]) == again  # type: ignore[arg-type]


def test_word_by_word_the_last_word_waits_for_the_next_where_it_is_unsure_or_not_heard_to_end() -> None:
    space = 0
    spelt = [
        Spelt(token, frame, trust)
        for token, frame, trust in [
            (5, 8, 0.9),
            (6, 11, 0.8),
            (space, 12, 0.9),
            (7, 15, 0.9),
            (8, 16, 0.4),
            (space, 17, 0.9),
        ]
    ]
    sure, unsure = SimpleNamespace(space=space, hold=0.3), SimpleNamespace(space=space, hold=0.5)
    assert SegmentDecoder.held(sure, spelt, 2, 18) == (spelt, 18)  # type: ignore[arg-type]
    # Its least confident character (0.4) is under 0.5: the words before it, to a frame between them and it.
    assert SegmentDecoder.held(unsure, spelt, 2, 18) == (spelt[:3], 14)  # type: ignore[arg-type]
    assert SegmentDecoder.owned(unsure, spelt, 14, 14, 18) == spelt[3:]  # type: ignore[arg-type]  # the next call's
    assert SegmentDecoder.held(unsure, spelt[3:], 14, 18) == ([], 14)  # type: ignore[arg-type]  # no word before it
    # A sure word that runs on to where the first pass began the next (frame 16) has not been heard to end: it waits.
    assert SegmentDecoder.held(sure, spelt, 2, 16) == (spelt[:3], 14)  # type: ignore[arg-type]
    unmeasured = [Spelt(item.token, item.frame) for item in spelt]
    assert SegmentDecoder.held(unsure, unmeasured, 2, 18) == (unmeasured, 18)  # type: ignore[arg-type]


def test_las_decode_streams_pcm_from_stdin_as_json_lines(streaming_model: dict[str, Path], tmp_path: Path) -> None:
    samples = soundfile.read(an4_rows("dev", 1)[0][1], dtype="int16")[0]
    checkpoint = str(streaming_model["checkpoint"])
    result = CliRunner().invoke(
        app,
        ["decode", checkpoint, "-", "--stream", "--set", "decode.beam_size=4"],
        input=samples.astype("<i2").tobytes(),
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines and any(line["final"] for line in lines)
    assert all({"final", "text", "start", "end", "heard", "delay", "words"} <= set(line) for line in lines)
    words = [word for line in lines for word in line["words"]]
    assert words and all({"word", "start", "end", "confidence"} == set(word) for word in words)
    recognizer = Recognizer.load(checkpoint, "cpu", beam_size=4)
    expected = [result.text for result in streamed(recognizer.stream(), samples, 1600) if result.final]
    assert [line["text"] for line in lines if line["final"]] == expected
    # A WAV stream (what arecord writes unless told -t raw): its header read, not heard.
    soundfile.write(wav := io.BytesIO(), samples, 16000, format="WAV", subtype="PCM_16")
    result = CliRunner().invoke(
        app, ["decode", checkpoint, "-", "--stream", "--set", "decode.beam_size=4"], input=wav.getvalue()
    )
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in result.stdout.splitlines() if json.loads(line)["final"]] == expected
    # A file, at its own pace or as fast as it decodes, into --out.
    soundfile.write(tmp_path / "one.wav", samples, 16000)
    out = tmp_path / "stream.jsonl"
    result = CliRunner().invoke(
        app, ["decode", checkpoint, str(tmp_path / "one.wav"), "--stream", "--out", str(out), "--beam-size", "4"]
    )
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in out.read_text().splitlines() if json.loads(line)["final"]] == expected
    # At 8 kHz (arecord's default rate), piped as a WAV stream or given as a file: resampled alike.
    narrow = resample(torch.from_numpy(samples / 32768).float(), 16000, 8000)
    soundfile.write(tmp_path / "narrow.wav", narrow.numpy(), 8000, subtype="PCM_16")
    finals = []
    for source, piped in (("-", (tmp_path / "narrow.wav").read_bytes()), (str(tmp_path / "narrow.wav"), None)):
        result = CliRunner().invoke(app, ["decode", checkpoint, source, "--stream", "--beam-size", "4"], input=piped)
        assert result.exit_code == 0, result.output
        finals.append([json.loads(line)["text"] for line in result.stdout.splitlines() if json.loads(line)["final"]])
    assert finals[0] == finals[1] and "".join(finals[0])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--realtime"], "without --stream"),
        (["--stream", "--format", "srt"], "JSON lines"),
        (["--stream", "--plot-attention", "1"], "--plot-attention"),
    ],
)
def test_las_decode_stream_refuses_options_it_has_no_use_for(
    streaming_model: dict[str, Path], arguments: list[str], message: str
) -> None:
    result = CliRunner().invoke(app, ["decode", str(streaming_model["checkpoint"]), "-", *arguments], input=b"")
    assert result.exit_code != 0 and message in result.output


def test_realtime_plays_each_piece_once_its_end_is_due_on_the_recordings_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--realtime, a file or stdin alike: a piece of 0.1 s waits until 0.1 s after the first
    began; one that arrives late (live audio, a slow pipe) waits for nothing. Timed by a clock
    the test moves, not the machine's."""
    clock = {"now": 100.0}
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(round(seconds, 6))
        clock["now"] += seconds

    monkeypatch.setattr(live.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(live.time, "sleep", sleep)

    def arriving() -> Iterator[np.ndarray]:
        for late in (0.0, 0.0, 0.15, 0.0):  # the third piece arrives 0.15 s after the second was played
            clock["now"] += late
            yield np.zeros(1600, dtype="int16")

    assert sum(map(len, live.paced(arriving(), 16000))) == 4 * 1600
    assert waits == [0.1, 0.1, 0.0, 0.05]  # the third's end was due at 0.3 s, the fourth's at 0.4: it is 0.35


def test_las_decode_stream_refuses_stdin_it_would_hear_as_noise(streaming_model: dict[str, Path]) -> None:
    soundfile.write(audio := io.BytesIO(), np.zeros(16000, dtype="int16"), 16000, format="FLAC", subtype="PCM_16")
    result = CliRunner().invoke(
        app, ["decode", str(streaming_model["checkpoint"]), "-", "--stream"], input=audio.getvalue()
    )
    assert result.exit_code == 1 and "a FLAC file, not raw PCM" in result.output and "Traceback" not in result.output
    assert not [line for line in result.stdout.splitlines() if line.startswith("{")]


def test_las_decode_streams_one_recording_not_a_manifest(streaming_model: dict[str, Path]) -> None:
    manifest = str(Path(__file__).parent.parent / "data" / "an4" / "dev.tsv")
    result = CliRunner().invoke(app, ["decode", str(streaming_model["checkpoint"]), manifest, "--stream"])
    assert result.exit_code != 0 and "not an audio file" in result.output


# The joint search's own symbols: blank 0, <sos> 1, <eos> 2, space 3, A 4, B 5.
SYMBOLS, SPACE, A, B = Symbols(sos=1, eos=2, blank=0, forbidden=(0, 1)), 3, 4, 5


def ctc_frames(*frames: dict[int, float]) -> torch.Tensor:
    """Log-probabilities `(frames, 6)`: each frame's symbols at their probabilities, a little on the others."""
    probabilities = torch.full((len(frames), 6), 1e-6)
    for row, frame in enumerate(frames):
        for symbol, probability in frame.items():
            probabilities[row, symbol] = probability
    return (probabilities / probabilities.sum(dim=1, keepdim=True)).log()


def ctc_search(beam_size: int = 4, pause_frames: int = 3) -> TriggeredSearch:
    return TriggeredSearch(None, SYMBOLS, SPACE, beam_size, 1.0, 0.0, 10.0, pause_frames, longest_frames=100)


def heard(search: TriggeredSearch, log_probs: torch.Tensor, finished: bool = False) -> list[list[int]]:
    search.extend(torch.zeros(len(log_probs), 0), torch.zeros(len(log_probs), 0), log_probs)
    return [[spelt.token for spelt in piece] for piece in search.spell(finished)]


def test_the_ctc_prefix_beam_sums_the_paths_of_a_prefix_where_the_best_path_says_nothing() -> None:
    # Two frames of blank 0.6, A 0.4: the best path is two blanks (0.36), but A is said by
    # A-blank, blank-A and A-A (0.64).
    frames = ctc_frames({0: 0.6, A: 0.4}, {0: 0.6, A: 0.4})
    assert heard(ctc_search(beam_size=4), frames, finished=True) == [[A]]
    assert heard(ctc_search(beam_size=1), frames, finished=True) == []  # a beam of one is the best path


def test_a_repeated_character_needs_a_blank_between_and_words_are_final_once_the_beam_agrees() -> None:
    search = ctc_search(pause_frames=3)
    sure = [{A: 0.98}, {A: 0.98}, {0: 0.98}, {A: 0.98}, {SPACE: 0.98}, {B: 0.98}]
    assert heard(search, ctc_frames(*sure)) == [[A, A, SPACE]]  # before the segment ends
    assert [(spelt.token, spelt.frame) for spelt in search.partial] == [(B, 5)]
    assert heard(search, ctc_frames({0: 0.98}, {0: 0.98})) == []  # a pause shorter than 3 frames
    assert heard(search, ctc_frames({0: 0.98})) == [[B]]  # 3 frames without a character: its segment ends
    assert search.partial == [] and search.keys == []


class RecordedSecondPass:
    """A second pass that says what it was asked: its words are the frames it was called with."""

    def __init__(self, holds: int = 0, loud_until: int = 0) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.holds = holds  # early calls that hold their word back for the next
        self.loud_until = loud_until  # the audio pauses from this frame on

    def __call__(self, start: int, end: int, until: int | None, given: int = 0) -> list[Spelt]:
        self.calls.append((start, end, until, given))
        return [Spelt(B, given)]

    def early(self, start: int, end: int, given: int, until: int) -> tuple[list[Spelt], int]:
        self.calls.append((start, end, given, until))
        if self.holds:
            self.holds -= 1
            return [], given
        return [Spelt(A, given), Spelt(SPACE, until)], until

    def finish(self) -> list[Spelt]:
        return []

    def quiet(self, start: int, since: int, end: int) -> bool:
        return end >= self.loud_until


def test_a_segment_ends_at_a_pause_of_the_first_pass_only_where_its_audio_pauses_too() -> None:
    """The first pass falls silent where the speech goes on too: the segment goes on until the
    second pass hears a pause in its audio (or it is as long as a segment may be)."""
    second_pass = RecordedSecondPass(loud_until=6)
    search = TriggeredSearch(None, SYMBOLS, SPACE, 4, 1.0, 0.0, 10.0, 2, longest_frames=8, second_pass=second_pass)
    assert heard(search, ctc_frames({A: 0.98}, {0: 0.98}, {0: 0.98}, {0: 0.98})) == []  # paused at frame 2, still loud
    assert heard(search, ctc_frames({0: 0.98}, {0: 0.98})) == [[B]] and second_pass.calls == [(0, 6, 2, 0)]
    second_pass.loud_until = 100  # loud throughout: the segment ends at its longest
    assert heard(search, ctc_frames({A: 0.98}, *[{0: 0.98}] * 7)) == [[B]] and second_pass.calls[1:] == [(6, 14, 8, 6)]


def test_word_by_word_the_words_before_a_pause_of_the_first_pass_are_given_while_the_audio_goes_on() -> None:
    """Word by word, where the first pass pauses and the audio does not, the segment so far is
    decoded whole and its words before the first pass's last character given once; the segment
    goes on to the pause of its audio."""
    second_pass = RecordedSecondPass(loud_until=6)
    search = TriggeredSearch(
        None, SYMBOLS, SPACE, 4, 1.0, 0.0, 10.0, 2, longest_frames=100, second_pass=second_pass, early_words=True
    )
    assert heard(search, ctc_frames({A: 0.98}, {0: 0.98}, {0: 0.98})) == [[A, SPACE]]  # paused at frame 2
    assert second_pass.calls == [(0, 3, 0, 2)] and search.partial == []  # to half a pause after A: all it spelt
    assert heard(search, ctc_frames({0: 0.98}, {0: 0.98})) == [] and len(second_pass.calls) == 1  # asked once
    assert heard(search, ctc_frames({0: 0.98})) == [[B]] and second_pass.calls[1:] == [(0, 6, 2, 2)]


def test_the_second_pass_hears_a_pause_where_the_audio_has_been_quiet_for_a_pause(
    streaming_model: dict[str, Path],
) -> None:
    recognizer = Recognizer.load(streaming_model["checkpoint"], "cpu")
    decoder = recognizer.stream().second_pass
    assert decoder is not None
    samples = torch.from_numpy(soundfile.read(an4_rows("dev", 1)[0][1], dtype="float32")[0])
    padded = torch.cat([samples, torch.zeros(recognizer.config.features.sample_rate * 3 // 2)])
    decoder.listen(padded)
    reduction = 2**recognizer.config.model.pyramid_layers
    speech_end = Levels.of(recognizer.array_features(samples, recognizer.config.features.sample_rate)).speech_extent()[
        1
    ]  # feature frames
    after = (speech_end + PAUSE_FRAMES + 20) // reduction  # 0.7 s of the quiet after the speech heard
    assert not decoder.quiet(0, 0, (speech_end - 10) // reduction)  # the speech goes on
    assert decoder.quiet(0, 0, after) and decoder.quiet(0, speech_end // reduction, after)
    assert not decoder.quiet(0, after - PAUSE_FRAMES // reduction + 2, after)  # quiet, but not a pause's length since


def test_a_second_pass_word_by_word_gives_each_word_once_the_next_is_begun_and_the_rest_at_the_pause() -> None:
    """decode.stream_second_pass_words: where the first pass spells a space, the segment so far is
    decoded whole and its words before that space are final; at the pause, the words after it."""
    second_pass = RecordedSecondPass()
    search = TriggeredSearch(
        None, SYMBOLS, SPACE, 4, 1.0, 0.0, 10.0, 3, longest_frames=100, second_pass=second_pass, early_words=True
    )
    assert heard(search, ctc_frames({A: 0.98}, {0: 0.98})) == [] and second_pass.calls == []
    assert heard(search, ctc_frames({SPACE: 0.98})) == [[A, SPACE]]  # frame 2: the segment to frame 3, its words to 2
    assert second_pass.calls == [(0, 3, 0, 2)]
    assert heard(search, ctc_frames({B: 0.98}, {0: 0.98})) == [] and search.partial == [Spelt(B, 3)]
    assert heard(search, ctc_frames({0: 0.98}, {0: 0.98})) == [[B]]  # 3 frames after B: the pause ends the segment
    assert second_pass.calls[1:] == [
        (0, 7, 5, 2)
    ]  # decoded whole, its words centred in frames 2-4 (to half a pause after B)
    assert search.given == search.origin == 7


def test_a_word_held_back_word_by_word_is_asked_for_again_at_the_next_space_not_at_every_frame() -> None:
    """decode.stream_second_pass_words_hold: where the second pass holds the last word back, the
    frames given stay where they were, and the next space the first pass spells asks again."""
    second_pass = RecordedSecondPass(holds=1)
    search = TriggeredSearch(
        None, SYMBOLS, SPACE, 4, 1.0, 0.0, 10.0, 5, longest_frames=100, second_pass=second_pass, early_words=True
    )
    assert heard(search, ctc_frames({A: 0.98}, {SPACE: 0.98}, {B: 0.98}, {0: 0.98})) == []  # held at frame 1
    assert second_pass.calls == [(0, 2, 0, 1)] and search.given == 0
    assert [spelt.token for spelt in search.partial] == [A, SPACE, B]  # the held word is still partial
    assert heard(search, ctc_frames({SPACE: 0.98})) == [[A, SPACE]]  # the next space: both words from frame 0
    assert second_pass.calls[1:] == [(0, 5, 0, 4)] and search.given == 4
