"""Features computed as the batches first read them (`data.extract_ahead`): the same lengths,
features and batches as computed ahead, a cache that fills as training reads it, content
that changed since start-up never served stale, and bad audio found late still one line."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from las.core.config import Config
from las.core.errors import LasError
from las.data.cache import store as cache_module
from las.data.cache.extraction import Missing, extract_features, planned_frames
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
from las.data.front_end.audio import Segment
from las.data.front_end.features import FilterbankExtractor
from las.training import corpus as corpus_module

from .conftest import TINY, an4_rows, assert_clear_error, run, write_manifest

SPEEDS = [1.0, 0.9, 1.1]


def test_lengths_planned_from_headers_are_those_of_the_features(tmp_path: Path) -> None:
    """Any sample rate, segment and speed: the header gives the frames extraction will give."""
    config = Config().features
    extractor = FilterbankExtractor(config)
    draw = random.Random(0)
    for number in range(24):
        rate = draw.choice([8000, 11025, 16000, 22050, 44100, 48000])
        samples = draw.randint(rate // 10, rate * 4)
        path = tmp_path / f"{number}.flac"
        soundfile.write(path, np.random.default_rng(number).normal(0, 0.1, samples).astype(np.float32), rate)
        seconds = samples / rate
        segment = Segment(draw.uniform(0, seconds / 3), draw.choice([None, seconds / 2])) if number % 3 else None
        item = Missing("", path, segment)
        planned = planned_frames(item, config, SPEEDS)
        computed = [extract_features(item, extractor, speed).features.shape for speed in SPEEDS]
        assert planned == computed, (rate, samples, segment)


def test_audio_shorter_than_a_window_is_refused_from_its_header(tmp_path: Path) -> None:
    path = tmp_path / "click.wav"
    soundfile.write(path, np.zeros(100, np.float32), 16000)
    with pytest.raises(LasError, match="shorter than one 25 ms analysis window"):
        planned_frames(Missing("", path, None), Config().features, [1.0])


def six(tmp_path: Path) -> list:
    return read_utterances(write_manifest(tmp_path / "six.tsv", an4_rows("train", 6)))


def test_computed_as_read_equals_computed_ahead_and_fills_the_cache(tmp_path: Path) -> None:
    utterances, config = six(tmp_path), Config().features
    ahead = FeatureCache(tmp_path / "ahead", config).load_at_speeds(utterances, "ahead", SPEEDS)
    as_read = FeatureCache(tmp_path / "as-read", config, ahead_limit=0).load_at_speeds(
        utterances, "as read", SPEEDS, ahead=[0]
    )
    for expected, planned in zip(ahead, as_read, strict=True):
        assert planned.frame_counts() == expected.frame_counts()  # the same length buckets
        assert planned.dimensions() == expected.dimensions()
    assert as_read[0].location[0, 0] >= 0  # the row asked for ahead is computed already
    for expected, planned in zip(ahead, as_read, strict=True):
        for row in range(len(utterances)):
            assert torch.equal(planned[row], expected[row])
    for planned in as_read:  # what this process computed, as the end of a worker writes it
        planned.on_demand.process.write()

    def fail(*_: object) -> None:
        raise AssertionError("computed again")

    later = FeatureCache(tmp_path / "as-read", config, ahead_limit=0)
    later.extract = fail  # type: ignore[method-assign]
    for expected, cached in zip(ahead, later.load_at_speeds(utterances, "later", SPEEDS), strict=True):
        assert (cached.location[:, 0] >= 0).all()  # every row now lies in a shard
        assert all(torch.equal(cached[row], expected[row]) for row in range(len(utterances)))


def test_a_file_changed_after_start_up_is_read_as_it_is_now(tmp_path: Path) -> None:
    """Replaced in place with its size and times kept (`cp -p`): the features are of what the
    file holds when read, and the cache keeps both contents apart."""
    rows = an4_rows("train", 2)
    first, second = Path(rows[0][1]), Path(rows[1][1])
    audio = tmp_path / "utterance.flac"
    audio.write_bytes(first.read_bytes())
    utterance = read_utterances(write_manifest(tmp_path / "one.tsv", [["one", str(audio), "1", "A"]]))
    config = Config().features
    cache = FeatureCache(tmp_path / "cache", config, ahead_limit=0)
    (planned,) = cache.load_at_speeds(utterance, "as read", [1.0])
    times = os.stat(audio)
    samples, rate = soundfile.read(second, dtype="float32")
    samples = samples[: soundfile.info(first).frames]
    soundfile.write(audio, samples, rate)
    os.utime(audio, ns=(times.st_atime_ns, times.st_mtime_ns))
    expected = extract_features(Missing("", audio, None), FilterbankExtractor(config), 1.0).features
    assert torch.equal(planned[0], torch.from_numpy(expected.astype(np.float32)))


def test_training_as_read_matches_training_ahead_and_a_second_run_computes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker processes compute the rows, their shards are written as each epoch's workers end,
    and the run's losses are those of features computed ahead: the same batches, the same
    features."""
    manifest = write_manifest(tmp_path / "train.tsv", an4_rows("train", 8, longest_seconds=2.0))
    monkeypatch.setattr(corpus_module, "NORMALIZER_UTTERANCES", 3)  # the rest are read by training
    losses = {}
    for name, ahead in (("ahead", 1000), ("as-read", 0)):
        code, _, stderr = run(
            "train", "--train", manifest, "--dev", manifest, "--out", tmp_path / name, "--epochs", "1",
            *(f"--set={setting}" for setting in TINY),
            "--set=data.workers=1", "--set=data.batch_size=4", "--set=train.speed_perturbation=0.1",
            f"--set=data.cache_dir={tmp_path / name / 'cache'}", f"--set=data.extract_ahead={ahead}",
        )  # fmt: skip
        assert code == 0, stderr
        losses[name] = json.loads((tmp_path / name / "metrics.jsonl").read_text().splitlines()[0])["train_loss"]
    assert losses["as-read"] == losses["ahead"]
    # The speed each utterance trained at in epoch 1 (SpeechDataset.variants): each is now cached.
    utterances = read_utterances(manifest)
    generator = torch.Generator().manual_seed(Config().train.seed * 100_019)
    variants = torch.randint(len(SPEEDS), (len(utterances),), generator=generator)
    cache = FeatureCache(tmp_path / "as-read" / "cache", Config().features, ahead_limit=0)
    for variant, features in enumerate(cache.load_at_speeds(utterances, "trained on", [1.0, 0.9, 1.1])):
        cached = torch.from_numpy(features.location[:, 0] >= 0)
        assert cached[variants == variant].all()


def test_audio_that_cannot_be_decoded_stops_training_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header that reads but samples that do not (NaN), found by a worker mid-epoch."""
    rows = an4_rows("train", 4, longest_seconds=2.0)
    bad = tmp_path / "bad.wav"
    samples = np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32)
    samples[8000] = np.nan
    soundfile.write(bad, samples, 16000, subtype="FLOAT")
    manifest = write_manifest(tmp_path / "train.tsv", [*rows, ["bad", str(bad), "1.0", "HELLO"]])
    dev = write_manifest(tmp_path / "dev.tsv", rows)
    monkeypatch.setattr(corpus_module, "normalizer_sample", lambda count, seed: [0, 1])
    code, _, stderr = run(
        "train", "--train", manifest, "--dev", dev, "--out", tmp_path / "run", "--epochs", "1",
        *(f"--set={setting}" for setting in TINY), "--set=data.workers=1",
        f"--set=data.cache_dir={tmp_path / 'cache'}", "--set=data.extract_ahead=0",
    )  # fmt: skip
    assert_clear_error(code, stderr, f"audio file {bad} has 1 non-finite samples")


def test_a_missing_file_is_still_found_before_training(tmp_path: Path) -> None:
    rows = an4_rows("train", 3)
    manifest = write_manifest(tmp_path / "train.tsv", [*rows, ["gone", str(tmp_path / "gone.flac"), "1.0", "A"]])
    code, _, stderr = run(
        "train", "--train", manifest, "--dev", manifest, "--out", tmp_path / "run",
        *(f"--set={setting}" for setting in TINY),
        f"--set=data.cache_dir={tmp_path / 'cache'}", "--set=data.extract_ahead=0",
    )  # fmt: skip
    assert_clear_error(code, stderr, "audio file not found")


def test_a_read_only_cache_computes_as_read_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    utterances, config = six(tmp_path)[:2], Config().features
    expected = FeatureCache(tmp_path / "ahead", config).load(utterances)

    def cannot_write(*_: object) -> None:
        raise LasError("read-only file system")

    monkeypatch.setattr(cache_module, "make_directory", cannot_write)
    cache = FeatureCache(tmp_path / "read-only", config, ahead_limit=0)
    (features,) = cache.load_at_speeds(utterances, "as read", [1.0])
    assert features.on_demand.directory is None
    assert all(torch.equal(features[row], expected[row]) for row in range(2))
