"""Hostile input, damage and faults: each gives the right answer or one clear line and a non-zero
exit, never a wrong result with exit 0, a traceback, a lost run or code run from a file."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from las.core.config import Config, FeatureConfig
from las.core.errors import LasError
from las.core.files import locked_directory, write_atomically
from las.data.cache import extraction
from las.data.cache.index import row_checksum
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
from las.data.front_end.audio import load_audio
from las.data.front_end.features import FilterbankExtractor, Normalizer
from las.export.runtime import load_model
from las.recognition.decode import json_score
from las.training.train import train

from .conftest import AN4, an4_rows, assert_clear_error, run, write_manifest

AUDIO = AN4 / "audio" / "an10-fjmd-b.flac"  # 1.6 s


def waveform() -> np.ndarray:
    return soundfile.read(AUDIO, dtype="float32")[0]


# --- Non-finite input -------------------------------------------------------------------------


def test_a_nan_sample_in_float_audio_is_refused_by_name(trained_run: dict[str, Path], tmp_path: Path) -> None:
    samples = waveform()
    samples[1000] = np.nan
    soundfile.write(tmp_path / "nan.wav", samples, 16000, subtype="FLOAT")
    rows = an4_rows("train", 3) + [["nan", str(tmp_path / "nan.wav"), "1.6", "NAN"]]
    manifest = write_manifest(tmp_path / "train.tsv", rows)
    code, _, stderr = run(
        "train", "--train", manifest, "--dev", manifest, "--out", tmp_path / "run",
        "--set", f"data.cache_dir={tmp_path / 'cache'}", "--set", "data.workers=0",
    )  # fmt: skip
    assert_clear_error(code, stderr, f"audio file {tmp_path / 'nan.wav'} has 1 non-finite samples")
    samples[1000] = np.inf
    soundfile.write(tmp_path / "inf.wav", samples, 16000, subtype="FLOAT")
    assert_clear_error(*run("decode", trained_run["run"] / "best.pt", tmp_path / "inf.wav")[::2], "non-finite")


def test_non_finite_precomputed_features_are_refused_by_index(trained_run: dict[str, Path], tmp_path: Path) -> None:
    arrays = np.empty(2, dtype=object)
    arrays[0], arrays[1] = np.ones((20, 80), np.float32), np.ones((20, 80), np.float32)
    arrays[1][3, 4] = np.nan
    np.save(tmp_path / "test.npy", arrays, allow_pickle=True)
    code, _, stderr = run("decode", trained_run["run"] / "best.pt", tmp_path / "test.npy")
    assert_clear_error(code, stderr, f"{tmp_path / 'test.npy'}[1]: 1 feature values are not finite")


def test_normalisation_statistics_are_finite_by_construction() -> None:
    with pytest.raises(LasError, match="not finite"):
        Normalizer(torch.tensor([0.0, math.nan]), torch.ones(2))
    with pytest.raises(LasError, match="no feature frames"):
        Normalizer.fit([])
    with pytest.raises(LasError, match="zero standard deviation"):
        Normalizer(torch.zeros(2), torch.zeros(2))


def test_jsonl_never_holds_nan() -> None:
    assert json_score(-1.23456) == -1.2346
    assert json_score(math.nan) is None and json_score(-math.inf) is None


def test_audio_shorter_than_one_window_is_a_clear_error(trained_run: dict[str, Path], tmp_path: Path) -> None:
    for samples in (1, 200, 399):
        soundfile.write(tmp_path / f"short{samples}.wav", waveform()[:samples], 16000)
        code, _, stderr = run("decode", trained_run["run"] / "best.pt", tmp_path / f"short{samples}.wav")
        assert_clear_error(code, stderr, f"is {samples} samples long, shorter than one 25 ms analysis window")


# --- Two processes, one run directory ---------------------------------------------------------


def test_a_run_directory_is_locked_while_a_process_holds_it(tiny_config: Config) -> None:
    out = Path(tiny_config.train.out)
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from las.core.files import locked_directory; from pathlib import Path; import time\n"
         f"with locked_directory(Path({str(out)!r})):\n    print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        for resume in (False, True):
            with pytest.raises(LasError, match=f"{out} is in use by another las process \\(pid {holder.pid}\\)"):
                train(tiny_config, resume=resume)
    finally:
        holder.kill()  # a crash: the kernel frees the lock, nothing stale is left
        holder.wait()
    train(one_epoch(tiny_config))
    assert (out / "last.pt").is_file()
    assert not (out / ".lock").exists()  # an orderly end removes its lock file
    with locked_directory(out):  # released after the run
        assert (out / ".lock").read_text() == f"{os.getpid()}\n"
    assert not (out / ".lock").exists()


def one_epoch(config: Config, **changes: object) -> Config:
    return replace(config, train=replace(config.train, epochs=1, **changes))


# --- Manifest paths and segments --------------------------------------------------------------


def test_relative_manifest_paths_never_depend_on_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    data.mkdir(), elsewhere.mkdir()
    (data / "a.flac").write_bytes(AUDIO.read_bytes())
    (elsewhere / "a.flac").write_bytes((AN4 / "audio" / "an102-mrcb-b.flac").read_bytes())  # same name, other audio
    (data / "manifest.jsonl").write_text(json.dumps({"audio_filepath": "a.flac", "text": "X"}) + "\n")
    (data / "wav.scp").write_text("a a.flac\n")
    monkeypatch.chdir(elsewhere)
    for source in (data / "manifest.jsonl", data):
        assert read_utterances(source, require_text=False)[0].audio == data / "a.flac"


def test_nemo_offsets_and_kaldi_segments_read_exactly_their_segment(tmp_path: Path) -> None:
    samples = waveform()
    (tmp_path / "recording.flac").write_bytes(AUDIO.read_bytes())
    soundfile.write(tmp_path / "cut.wav", samples[8000:16000], 16000, subtype="FLOAT")  # 0.5 s to 1.0 s
    (tmp_path / "segments.jsonl").write_text(
        json.dumps({"audio_filepath": "recording.flac", "offset": 0.5, "duration": 0.5, "text": "A"}) + "\n"
        + json.dumps({"audio_filepath": "recording.flac", "offset": 0.0, "duration": 1.6, "text": "B"}) + "\n"
    )  # fmt: skip
    kaldi = tmp_path / "kaldi"
    kaldi.mkdir()
    (kaldi / "wav.scp").write_text(f"rec {tmp_path / 'recording.flac'}\n")
    (kaldi / "segments").write_text("first rec 0.5 1.0\nrest rec 1.0 -1\n")
    (kaldi / "text").write_text("first A\nrest B\n")
    cache = FeatureCache(tmp_path / "cache", FeatureConfig())
    cut = cache.features(read_utterances(tmp_path / "cut.wav", require_text=False)[0])
    nemo = read_utterances(tmp_path / "segments.jsonl")
    kaldi_utterances = read_utterances(kaldi)
    assert [utterance.id for utterance in kaldi_utterances] == ["first", "rest"]
    for utterance in (nemo[0], kaldi_utterances[0]):
        torch.testing.assert_close(cache.features(utterance), cut)  # the segment, not the whole file
    assert len(cache.features(nemo[1])) == 161 and len(cache.features(kaldi_utterances[1])) == 61
    (tmp_path / "outside.jsonl").write_text(
        json.dumps({"audio_filepath": "recording.flac", "offset": 1.0, "duration": 5.0, "text": "A"}) + "\n"
    )
    with pytest.raises(LasError, match="segment 1s-6s lies outside .*recording.flac, which lasts 1.600s"):
        cache.features(read_utterances(tmp_path / "outside.jsonl")[0])
    (kaldi / "segments").write_text("first nosuch 0.5 1.0\n")
    with pytest.raises(LasError, match="segments:1: recording 'nosuch' is not in wav.scp"):
        read_utterances(kaldi)


# --- A damaged feature cache ------------------------------------------------------------------


def fresh_features(utterances: list) -> list[torch.Tensor]:
    extractor = FilterbankExtractor(FeatureConfig())
    return [extractor(load_audio(utterance.audio, 16000)).half().float() for utterance in utterances]


def damage_shard(shard: Path, how: str) -> None:
    content = shard.read_bytes()
    if how == "truncated":
        shard.write_bytes(content[: len(content) // 2])
    elif how == "garbage":  # same size, header intact: only the checksums can tell
        header = 128
        shard.write_bytes(content[:header] + np.random.default_rng(0).bytes(len(content) - header))
    elif how == "deleted":
        shard.unlink()


@pytest.mark.parametrize("how", ["truncated", "garbage", "deleted", "shifted", "shifted-consistently"])
def test_a_damaged_cache_is_detected_dropped_and_recomputed(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture
) -> None:
    utterances = read_utterances(write_manifest(tmp_path / "three.tsv", an4_rows("train", 3)))
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    shard = next((tmp_path / "cache").rglob("shard-*.npy"))
    index = next((tmp_path / "cache").rglob("index.sqlite"))
    if how.startswith("shifted"):
        with sqlite3.connect(index) as connection:
            key, *fields = connection.execute("SELECT * FROM entries ORDER BY offset").fetchall()[1][:6]
            fields[1] += 7  # the offset, still inside the shard
            # Consistently: the row's own checksum recomputed, so that only the entry's can tell.
            check = row_checksum([key, *fields]) if how == "shifted-consistently" else "0" * 32
            connection.execute("UPDATE entries SET offset=?, check_sum=? WHERE key=?", (fields[1], check, key))
        connection.close()
    else:
        damage_shard(shard, how)
    features = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert "warning:" in capsys.readouterr().err
    for served, expected in zip(features, fresh_features(utterances), strict=True):
        torch.testing.assert_close(served, expected)
    capsys.readouterr()
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)  # repaired: no warning now
    assert "warning:" not in capsys.readouterr().err


def test_a_cache_that_cannot_be_written_computes_in_memory(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    utterances = read_utterances(write_manifest(tmp_path / "two.tsv", an4_rows("train", 2)))
    (tmp_path / "file").write_text("a file where the cache's folder should be")
    features = FeatureCache(tmp_path / "file" / "cache", FeatureConfig(), workers=2).load(utterances)
    assert "warning: cannot write the feature cache" in capsys.readouterr().err
    for served, expected in zip(features, fresh_features(utterances), strict=True):
        torch.testing.assert_close(served, expected)


def test_a_cache_whose_disk_fills_up_computes_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    utterances = read_utterances(write_manifest(tmp_path / "two.tsv", an4_rows("train", 2)))

    def disk_full(*_: object) -> None:
        raise LasError("cannot write shard: No space left on device")

    monkeypatch.setattr(extraction, "write_atomically", disk_full)
    features = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert "warning: cannot write the feature cache" in capsys.readouterr().err
    for served, expected in zip(features, fresh_features(utterances), strict=True):
        torch.testing.assert_close(served, expected)


# --- Damaged checkpoints ----------------------------------------------------------------------


def edited_checkpoint(source: Path, target: Path, edit) -> Path:
    payload = torch.load(source, weights_only=True)
    edit(payload)
    torch.save(payload, target)
    return target


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda payload: payload.pop("model"), "damaged checkpoint: 'model' is missing"),
        (lambda payload: payload.pop("vocabulary"), "damaged checkpoint: 'vocabulary' is missing"),
        (lambda payload: payload.pop("normalizer"), "damaged checkpoint: 'normalizer' is missing"),
        (lambda payload: payload["normalizer"].pop("std"), "damaged checkpoint: 'std' is missing"),
        (lambda payload: payload.update(vocabulary=["<pad>"]), "does not start with the special symbols"),
        (lambda payload: payload["config"]["decode"].update(beam_size=0), "'decode.beam_size'"),
        (lambda payload: payload["model"].pop(next(iter(payload["model"]))), "weights do not fit its model settings"),
        (lambda payload: next(iter(payload["model"].values())).fill_(math.nan), "is not finite (NaN or infinity)"),
    ],
)
def test_a_damaged_checkpoint_is_one_clear_line(trained_run: dict[str, Path], tmp_path: Path, edit, message) -> None:
    damaged = edited_checkpoint(trained_run["run"] / "best.pt", tmp_path / "damaged.pt", edit)
    assert_clear_error(*run("decode", damaged, trained_run["train"])[::2], message)


def test_a_checkpoint_without_training_state_decodes_but_does_not_resume(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    edited_checkpoint(trained_run["run"] / "last.pt", out / "last.pt", lambda payload: payload["training"].clear())
    code, _, stderr = run("train", "--resume", "--out", out)
    assert_clear_error(code, stderr, "its training state is missing or damaged")


# --- Unwritable outputs -----------------------------------------------------------------------


def test_unwritable_outputs_fail_before_the_work(trained_run: dict[str, Path], tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_text("x")
    assert_clear_error(*run("train", "--out", regular / "run")[::2], "a file is in the way")
    checkpoint, manifest = trained_run["run"] / "best.pt", trained_run["train"]
    assert_clear_error(*run("decode", checkpoint, manifest, "--out", tmp_path)[::2], "is a folder; name a file")
    assert_clear_error(*run("decode", checkpoint, manifest, "--out", regular / "out.csv")[::2], "a file is in the way")
    before = manifest.read_bytes(), checkpoint.read_bytes()
    assert_clear_error(*run("decode", checkpoint, manifest, "--out", manifest)[::2], "is the input: decoding would")
    assert_clear_error(*run("decode", checkpoint, manifest, "--out", checkpoint)[::2], "is the checkpoint")
    assert (manifest.read_bytes(), checkpoint.read_bytes()) == before


def test_a_full_disk_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "last.pt"
    target.write_bytes(b"the previous checkpoint")

    def fill_the_disk(file: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(LasError, match=f"cannot write {target}: No space left on device"):
        write_atomically(target, fill_the_disk)
    assert target.read_bytes() == b"the previous checkpoint"
    assert [path.name for path in tmp_path.iterdir()] == ["last.pt"]  # no temporary left behind


class FillingFile:
    """A file on a disk that fills up after `room` bytes: its writes raise ENOSPC from there on."""

    def __init__(self, file, room: list[int]) -> None:
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room[0] -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exception: object) -> None:
        self.file.close()


def fill_the_disk_after(monkeypatch: pytest.MonkeyPatch, room: int) -> None:
    """Every file las publishes from now on shares `room` bytes of free disk."""
    from las.core import files

    left = [room]
    monkeypatch.setattr(files, "open", lambda path, mode="r": FillingFile(open(path, mode), left), raising=False)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 256 KiB tmpfs where this process may mount one (root, as CI runs); else the test is skipped
    (`fill_the_disk_after` injects the same fault everywhere)."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield folder
    subprocess.run(["umount", str(folder)], check=False)


def test_a_checkpoint_on_a_full_file_system_is_one_line_and_keeps_the_old_one(small_disk: Path) -> None:
    from las.core.files import save_atomically

    target = small_disk / "last.pt"
    save_atomically(target, {"weights": torch.zeros(10)})
    # torch.save itself reports a full disk as "RuntimeError: [enforce fail ...] unexpected pos".
    with pytest.raises(LasError, match=f"cannot write {target}: No space left on device"):
        save_atomically(target, {"weights": torch.zeros(200_000)})
    assert torch.equal(torch.load(target)["weights"], torch.zeros(10))
    assert [path.name for path in small_disk.iterdir()] == ["last.pt"]  # no temporary left behind


def test_training_on_a_filling_disk_stops_with_one_line_and_resumes_from_the_last_good_checkpoint(
    tiny_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ["train.average_best=0", "train.tensorboard=false"]
    config = replace(tiny_config.replace(settings), train=replace(tiny_config.train, epochs=1, average_best=0))
    run_directory = train(config)
    saved = load_model(run_directory / "last.pt").training_state["progress"]["step"]
    fill_the_disk_after(monkeypatch, room=100_000)  # less than a checkpoint
    with pytest.raises(LasError, match=r"cannot write .*\.pt: No space left on device"):
        train(config, resume=True, assignments=["train.epochs=2"])
    assert load_model(run_directory / "last.pt").training_state["progress"]["step"] == saved  # the last good
    assert not [path for path in run_directory.rglob("*.tmp")]
    monkeypatch.undo()  # room again
    train(config, resume=True, assignments=["train.epochs=2"])
    assert load_model(run_directory / "last.pt").training_state["progress"]["epoch"] == 2


def write_each_kind(kind: str, folder: Path) -> None:
    """What las writes, each through the function that writes it, with more than a small disk holds."""
    from las.core.files import save_atomically, write_text_atomically
    from las.training.metrics_file import append_line

    big = "x" * 400_000
    if kind == "checkpoint, snapshot, averaged weights":
        save_atomically(folder / "last.pt", {"weights": torch.zeros(100_000)})
    elif kind == "transcripts, subtitles, config, records":
        write_text_atomically(folder / "dev.srt", big)
    elif kind == "metrics line":
        append_line(folder / "metrics.jsonl", big)
    elif kind == "cache shard":
        write_atomically(folder / "shard-0.npy", lambda file: np.save(file, np.zeros(100_000, dtype=np.float32)))
    elif kind == "attention plot":
        from las.core.text import Vocabulary
        from las.recognition.plots import plot_hypothesis
        from las.search import Hypothesis

        vocabulary = Vocabulary.from_texts(["AB"])
        attention = torch.rand(40, 200)  # a PNG of about 70 KB: its noise does not compress
        plot_hypothesis(
            "x", Hypothesis([4] * 39, 0.0, attention / attention.sum(1, keepdim=True)), vocabulary, folder / "a.png"
        )


KINDS = ["checkpoint, snapshot, averaged weights", "transcripts, subtitles, config, records", "metrics line"]
KINDS += ["cache shard", "attention plot"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_file_on_a_full_file_system_is_one_line_and_keeps_the_old_file(
    small_disk: Path, kind: str
) -> None:
    status = os.statvfs(small_disk)  # the disk filled but for 16 KB, less than any kind writes
    (small_disk / "filler").write_bytes(bytes(max(0, status.f_bavail * status.f_frsize - 16_384)))
    before = {path.name: path.read_bytes() for path in small_disk.iterdir()}
    with pytest.raises(LasError, match=r"cannot write .*: (No space left on device|\d+ requested and \d+ written)"):
        write_each_kind(kind, small_disk)
    leftovers = [path.name for path in small_disk.iterdir() if path.name not in before and path.stat().st_size]
    assert leftovers in ([], ["metrics.jsonl"])  # an appended line may be cut short: `keep_metrics_until` drops it


def test_tensorboard_on_a_full_file_system_is_one_warning_and_the_run_goes_on(
    small_disk: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from las.training.monitor import Monitor

    monitor = Monitor(Config(), small_disk, total_steps=10)
    for step in range(400):  # each flush writes a transcript table of 1 KB: the disk fills up
        monitor.epoch(
            {"step": step, "dev_cer": 1.0, "dev_wer": 1.0, "dev_diagonal_share": 0.5, "train_loss": 1.0},
            None,
            [("id", "x" * 1000, "y")],
        )
    monitor.close(best_cer=1.0)
    error = capfd.readouterr().err
    assert error.count("cannot write TensorBoard events (No space left on device)") == 1
    assert "Traceback" not in error


# --- Config values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("decode.beam_size=0", "'decode.beam_size': expected a number >= 1, got 0"),
        ("decode.temperature=0", "'decode.temperature': expected a number > 0, got 0.0"),
        ("decode.speed=3", "'decode.speed': expected a number >= 0.5 and <= 2, got 3.0"),
        ("decode.max_length_ratio=-1", "'decode.max_length_ratio': expected a number > 0"),
        ("decode.ctc_weight=1.5", "'decode.ctc_weight': expected a number >= 0 and <= 1, got 1.5"),
        ("decode.strategy=beem", "'decode.strategy': 'beem' is not one of greedy, sample, beam, ctc"),
        ("decode.nbest=nan", "expected int"),
        ("decode.lm_weight=inf", "'decode.lm_weight': expected a finite number"),
    ],
)
def test_decode_settings_are_checked_before_any_work(trained_run: dict[str, Path], assignment, message) -> None:
    # The input does not exist: the config error comes first, so nothing was read.
    code, _, stderr = run("decode", trained_run["run"] / "best.pt", "no/such/input.tsv", "--set", assignment)
    assert_clear_error(code, stderr, message)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--set", "data.batch_size=0"], "'data.batch_size': expected a number >= 1, got 0"),
        (["--epochs", "0"], "'train.epochs': expected a number >= 1, got 0"),
        (["--set", "model.attention=locaton"], "'model.attention': 'locaton' is not one of"),
        (["--set", "train.learning_rate=-1"], "'train.learning_rate': expected a number > 0"),
        (["--set", "model.dropout=1.5"], "'model.dropout': expected a number >= 0 and <= 0.95"),
        (["--set", "data.input_format=wav"], "'data.input_format': 'wav' is not one of"),
        (["--set", "train.checkpoint_minutes=-5"], "'train.checkpoint_minutes': expected a number >= 0"),
    ],
)
def test_train_settings_are_checked_before_any_work(tmp_path: Path, arguments: list[str], message: str) -> None:
    code, _, stderr = run("train", "--train", "no/such/train.tsv", "--out", tmp_path / "run", *arguments)
    assert_clear_error(code, stderr, message)
    assert not (tmp_path / "run").exists()


# --- Code in files ----------------------------------------------------------------------------


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_payload_in_an_npy_file_never_runs(trained_run: dict[str, Path], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    arrays = np.empty(2, dtype=object)
    arrays[0], arrays[1] = np.ones((20, 80), np.float32), Payload(marker)
    np.save(tmp_path / "hostile.npy", arrays, allow_pickle=True)
    code, _, stderr = run("decode", trained_run["run"] / "best.pt", tmp_path / "hostile.npy")
    assert_clear_error(code, stderr, "asks for posix.system; las loads numpy arrays only")
    assert not marker.exists()


# --- Faults during training -------------------------------------------------------------------


def test_last_pt_is_saved_mid_epoch_every_few_minutes(tiny_config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    from las.training import train as train_module

    saved: list[tuple[str, int, int]] = []
    original = train_module.Trainer.save

    def record(self, path: Path) -> None:
        saved.append((path.name, self.progress.epoch, self.progress.batch_in_epoch))
        original(self, path)

    monkeypatch.setattr(train_module.Trainer, "save", record)
    clock = iter(range(0, 10_000, 120))  # two minutes pass per reading
    monkeypatch.setattr(train_module.time, "monotonic", lambda: next(clock))
    config = one_epoch(tiny_config, checkpoint_minutes=3)
    config = replace(config, data=replace(config.data, batch_size=1))
    train(config)
    mid_epoch = [entry for entry in saved if entry[0] == "last.pt" and entry[1] == 0]
    assert any(0 < batch < 4 for _, _, batch in mid_epoch)
    assert load_model(Path(config.train.out) / "last.pt").training_state["progress"]["epoch"] == 1


def test_a_second_signal_stops_at_once_without_saving(tiny_config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    from las.training.optimisation import Optimisation

    def interrupted_twice(*_: object, **__: object) -> None:
        raise KeyboardInterrupt  # what StopRequests raises on a second signal

    monkeypatch.setattr(Optimisation, "loss", interrupted_twice)
    with pytest.raises(LasError, match="interrupted twice: stopped at once without saving"):
        train(tiny_config)
    assert not (Path(tiny_config.train.out) / "last.pt").exists()
    monkeypatch.undo()
    train(one_epoch(tiny_config))  # the directory was not left locked
    assert (Path(tiny_config.train.out) / "last.pt").is_file()


# --- Text files that are not what they claim --------------------------------------------------


def test_manifests_that_are_not_utf8_are_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "latin1.tsv").write_bytes(b"id\tpath\tduration_s\ttext\nx\t\xe9t\xe9.flac\t1.0\tYES\n")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"audio_filepath": "\xe9.flac", "text": "A"}\n')
    for manifest in ("latin1.tsv", "latin1.jsonl"):
        with pytest.raises(LasError, match=f"{manifest}: not UTF-8 text"):
            read_utterances(tmp_path / manifest)


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path: Path) -> None:
    rows = an4_rows("train", 1)
    manifest = tmp_path / "bom.tsv"
    manifest.write_text("\ufeffid\tpath\tduration_s\ttext\n" + "\t".join(rows[0]) + "\n", encoding="utf-8")
    assert read_utterances(manifest)[0].id == rows[0][0]


def test_ids_that_would_break_outputs_are_refused(tmp_path: Path) -> None:
    row = an4_rows("train", 1)[0]
    with pytest.raises(LasError, match="id 'two words' has whitespace or control characters"):
        read_utterances(write_manifest(tmp_path / "spaces.tsv", [["two words", *row[1:]]]))


def test_file_names_with_spaces_give_ids_without(tmp_path: Path) -> None:
    """A manifest's ids are the user's to fix; a file's name is not an id the user chose."""
    row = an4_rows("train", 1)[0]
    folder = tmp_path / "recordings"
    folder.mkdir()
    shutil.copy(row[1], folder / "Meeting 3\tnotes.flac")
    assert [utterance.id for utterance in read_utterances(folder, require_text=False)] == ["Meeting_3_notes"]
    assert read_utterances(folder / "Meeting 3\tnotes.flac", require_text=False)[0].id == "Meeting_3_notes"


def test_attention_plots_stay_in_their_folder_whatever_the_id(trained_run: dict[str, Path], tmp_path: Path) -> None:
    row = an4_rows("train", 1)[0]
    manifest = write_manifest(tmp_path / "sneaky.tsv", [["../../escaped", *row[1:]]])
    code, _, stderr = run(
        "decode", trained_run["run"] / "best.pt", manifest, "--out", tmp_path / "out" / "hyp.csv", "--plot-attention", 1
    )
    assert code == 0, stderr
    assert [path.name for path in (tmp_path / "out" / "hyp_attention").iterdir()] == ["_.._escaped.png"]
    assert not (tmp_path / "escaped.png").exists()


def test_subtitles_of_a_recorders_folders_get_a_file_each_and_ids_of_one_file_name_are_refused(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    row = an4_rows("train", 1)[0]
    for speaker in ("spk1", "spk2"):
        (tmp_path / "recorder" / speaker).mkdir(parents=True)
        shutil.copy(row[1], tmp_path / "recorder" / speaker / "take1.flac")
    code, _, stderr = run(
        "decode", trained_run["run"] / "best.pt", tmp_path / "recorder", "--format", "srt", "--out", tmp_path / "srt"
    )
    assert code == 0, stderr
    assert sorted(path.name for path in (tmp_path / "srt").iterdir()) == ["spk1_take1.srt", "spk2_take1.srt"]
    manifest = write_manifest(tmp_path / "clash.tsv", [["a/b", *row[1:]], ["a_b", *row[1:]]])
    assert_clear_error(
        *run("decode", trained_run["run"] / "best.pt", manifest, "--format", "vtt", "--out", tmp_path / "vtt")[::2],
        "ids 'a/b' and 'a_b' would both be written to",
    )
    assert not (tmp_path / "vtt").exists()


def test_empty_paths_and_unreadable_config_files_are_refused(tmp_path: Path) -> None:
    assert_clear_error(*run("train", "--out", "")[::2], "config key 'train.out': must not be empty")
    assert_clear_error(*run("train", "--config", tmp_path)[::2], "cannot read config file")
    (tmp_path / "latin1.toml").write_bytes(b"[train]\nout = '\xe9'\n")
    assert_clear_error(*run("train", "--config", tmp_path / "latin1.toml")[::2], "invalid TOML")


# --- Skipping what cannot be used, when the user asks ------------------------------------------


def test_bad_utterances_can_be_skipped_with_a_counted_warning(
    trained_run: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    samples = waveform()
    samples[5] = np.nan
    soundfile.write(tmp_path / "nan.wav", samples, 16000, subtype="FLOAT")
    soundfile.write(tmp_path / "short.wav", waveform()[:100], 16000)
    (tmp_path / "empty.flac").write_bytes(b"")
    good = [line.split("\t") for line in trained_run["train"].read_text().splitlines()[1:]]
    text = good[0][3]  # in the model's vocabulary: only what cannot be read is skipped
    rows = good + [
        ["nan", str(tmp_path / "nan.wav"), "1.6", text],
        ["short", str(tmp_path / "short.wav"), "0.1", text],
        ["empty", str(tmp_path / "empty.flac"), "1.0", text],
        ["missing", str(tmp_path / "absent.flac"), "1.0", text],
    ]
    manifest = write_manifest(tmp_path / "messy.tsv", rows)
    code, stdout, stderr = run(
        "decode", trained_run["run"] / "best.pt", manifest, "--set", "data.bad_utterances=skip",
        "--set", f"data.cache_dir={tmp_path / 'cache'}",
    )  # fmt: skip
    assert code == 0, stderr
    assert [line.split(",")[0] for line in stdout.splitlines()[1:]] == [row[0] for row in good]
    assert "skipped 1 unusable utterances" in stderr and "audio file not found" in stderr  # read: missing
    assert f"{manifest}: skipped 3 unusable utterances" in stderr  # computed: non-finite, too short, empty
    code, _, stderr = run("decode", trained_run["run"] / "best.pt", manifest)
    assert_clear_error(code, stderr, "audio file not found")  # the default: refuse


def test_training_skips_bad_utterances_at_every_speed(tiny_config: Config, tmp_path: Path) -> None:
    from las.training.corpus import load_corpus

    samples = waveform()
    samples[5] = np.inf
    soundfile.write(tmp_path / "inf.wav", samples, 16000, subtype="FLOAT")
    rows = an4_rows("train", 3) + [["inf", str(tmp_path / "inf.wav"), "1.6", "INF"]]
    manifest = write_manifest(tmp_path / "train.tsv", rows)
    data = replace(tiny_config.data, train=str(manifest), bad_utterances="skip")
    config = replace(tiny_config, data=data, train=replace(tiny_config.train, speed_perturbation=0.1))
    corpus = load_corpus(config, None, None)
    assert list(corpus.train.ids) == [row[0] for row in rows[:3]]
    assert len(corpus.train.perturbed) == 2 and all(len(variant) == 3 for variant in corpus.train.perturbed)


def test_ctrl_c_while_decoding_stops_and_writes_nothing(
    trained_run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal
    import threading

    from las.recognition.decode import decode
    from las.search import GreedySearch

    original = GreedySearch.search

    def interrupted_search(self, model, memory):  # Ctrl-C in the middle of the first batch
        # At the main thread, which blocks it. Sent to the process, it can land on a thread that an
        # earlier test started before the mask, and in a loaded full suite it was lost there twice
        # (2026-11-26; not understood yet): this test is of the check between batches.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return original(self, model, memory)

    monkeypatch.setattr(GreedySearch, "search", interrupted_search)
    output = tmp_path / "hyp.csv"
    with pytest.raises(KeyboardInterrupt):
        settings = ["decode.batch_size=1", "decode.strategy=greedy"]
        decode(trained_run["run"] / "best.pt", trained_run["train"], output, "csv", settings, "cpu")
    assert not output.exists() and list(tmp_path.iterdir()) == []
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == set()  # the signal mask is as it was


# --- Run files damaged in their middle ---------------------------------------------------------


def damaged_in_the_middle(path: Path) -> None:
    """A tenth of the file overwritten in its middle with bytes that are not UTF-8 (a torn write)."""
    data = bytearray(path.read_bytes())
    length = max(8, len(data) // 10)
    start = len(data) // 2 - length // 2
    data[start : start + length] = bytes((index * 37 + 11) % 256 for index in range(length))
    path.write_bytes(bytes(data))


def test_a_run_whose_metrics_are_damaged_in_their_middle_resumes_and_plots_with_a_warning(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    """metrics.jsonl damaged past its first lines once ended `las train --resume` in a traceback
    (UnicodeDecodeError) and `las plot` in an error: its intact lines are kept, the file as it was
    beside it, and the run goes on."""
    out = tmp_path / "run"
    shutil.copytree(trained_run["run"], out)
    metrics = out / "metrics.jsonl"
    epochs = [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()]
    damaged_in_the_middle(metrics)
    code, _, stderr = run("plot", out, "--out", tmp_path / "plot.png")
    assert code == 0 and "damaged line(s) left out of the plot" in stderr and (tmp_path / "plot.png").exists()
    code, _, stderr = run(
        "train", "--resume", "--out", out, "--epochs", str(len(epochs) + 1), "--set", f"data.cache_dir={tmp_path}"
    )
    assert code == 0 and "Traceback" not in stderr, stderr[-2000:]
    assert stderr.count("damaged line(s) left out (the file as it was: metrics.jsonl.damaged)") == 1
    kept = [json.loads(line)["epoch"] for line in metrics.read_text().splitlines()]
    assert kept[-1] == len(epochs) + 1 and set(kept) < set(epochs) | {len(epochs) + 1}  # the damaged ones out
    assert kept[:2] == epochs[:2] and (out / "metrics.jsonl.damaged").exists()
