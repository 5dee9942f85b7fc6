"""Every input format a user may have, built from the same AN4 utterances, gives the same records."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from las.core.errors import LasError
from las.data.corpora.manifest import read_utterances
from las.data.front_end.audio import Segment

from .conftest import AN4, an4_rows, write_manifest

ROWS = an4_rows("train", 3)


def records(path: Path, require_text: bool = True) -> list[tuple[str, bytes, str | None]]:
    return [(u.id, u.audio.read_bytes(), u.text) for u in read_utterances(path, require_text)]


@pytest.fixture
def expected() -> list[tuple[str, bytes, str]]:
    return [(identifier, Path(audio).read_bytes(), text) for identifier, audio, _, text in ROWS]


def make_tsv(directory: Path) -> Path:
    return write_manifest(directory / "m.tsv", ROWS)


def make_jsonl(directory: Path) -> Path:
    """Audio paths relative to the manifest; only the first line names its id."""
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, directory / f"{identifier}.flac")
    lines = [
        {"audio_filepath": f"{identifier}.flac", "duration": float(duration), "text": text}
        | ({"id": identifier} if index == 0 else {})
        for index, (identifier, _, duration, text) in enumerate(ROWS)
    ]
    manifest = directory / "m.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return manifest


def lhotse_cut(identifier: str, audio: str, seconds: float, text: str | None, start: float = 0.0) -> dict:
    """A cut as Lhotse 1.33's `CutSet.to_file` writes one (`MonoCut.to_dict`)."""
    supervision = {"id": identifier, "recording_id": identifier, "start": 0.0, "duration": seconds, "channel": 0}
    source = {"type": "file", "channels": [0], "source": audio}
    recording = {"id": identifier, "sources": [source], "sampling_rate": 16000, "num_samples": round(16000 * seconds)}
    return {
        "id": identifier, "start": start, "duration": seconds - start, "channel": 0,
        "supervisions": [] if text is None else [supervision | {"text": text, "speaker": "s"}],
        "recording": recording | {"duration": seconds, "channel_ids": [0]}, "type": "MonoCut",
    }  # fmt: skip


def write_lhotse(path: Path, cuts: list[dict]) -> Path:
    with gzip.open(path, "wt") as file:
        file.writelines(json.dumps(cut) + "\n" for cut in cuts)
    return path


def make_lhotse(directory: Path) -> Path:
    """Gzipped, audio paths relative to the manifest, as Lhotse writes them."""
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, directory / f"{identifier}.flac")
    cuts = [lhotse_cut(i, f"{i}.flac", float(duration), text) for i, _, duration, text in ROWS]
    return write_lhotse(directory / "cuts.jsonl.gz", cuts)


def make_kaldi(directory: Path) -> Path:
    (directory / "wav.scp").write_text("".join(f"{identifier} {audio}\n" for identifier, audio, _, _ in ROWS))
    (directory / "text").write_text("".join(f"{identifier} {text}\n" for identifier, _, _, text in reversed(ROWS)))
    return directory


def make_librispeech(directory: Path) -> Path:
    chapter = directory / "speaker" / "chapter"
    chapter.mkdir(parents=True)
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, chapter / f"{identifier}.flac")
    (chapter / "speaker-chapter.trans.txt").write_text("".join(f"{row[0]} {row[3]}\n" for row in ROWS))
    return directory


FORMATS = {
    "tsv": make_tsv,
    "jsonl": make_jsonl,
    "lhotse": make_lhotse,
    "kaldi": make_kaldi,
    "librispeech": make_librispeech,
}


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_gives_the_same_records(tmp_path: Path, expected: list, name: str) -> None:
    assert records(FORMATS[name](tmp_path)) == expected


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_trains_and_decodes_through_the_cli(tmp_path: Path, name: str) -> None:
    from typer.testing import CliRunner

    from las.cli import app

    from .conftest import TINY

    data = FORMATS[name](tmp_path)
    settings = [item for setting in [*TINY, f"data.cache_dir={tmp_path / 'cache'}"] for item in ("--set", setting)]
    runner = CliRunner()
    out = tmp_path / "run"
    arguments = ["train", "--train", data, "--dev", data, "--input-format", name, "--out", out, "--epochs", "1"]
    result = runner.invoke(app, [str(item) for item in [*arguments, *settings]])
    assert result.exit_code == 0, result.stderr
    result = runner.invoke(app, ["decode", str(out / "last.pt"), str(data), "--format", "kaldi"])
    assert result.exit_code == 0, result.stderr
    assert [line.split(" ")[0] for line in result.stdout.splitlines()] == [row[0] for row in ROWS]


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_is_a_reference_las_eval_scores_against(tmp_path: Path, name: str) -> None:
    """`las eval HYP LibriSpeech/dev-clean-2` (or a Kaldi data directory, a NeMo or Lhotse
    manifest): what trains and decodes is also a reference."""
    from typer.testing import CliRunner

    from las.cli import app

    reference = FORMATS[name](tmp_path)
    hypotheses = tmp_path / "hyp.txt"
    # one word wrong of the first utterance, the rest exact
    wrong = ROWS[0][3].split()
    wrong[0] = "QQQ"
    lines = [f"{ROWS[0][0]} {' '.join(wrong)}"] + [f"{row[0]} {row[3]}" for row in ROWS[1:]]
    hypotheses.write_text("".join(line + "\n" for line in lines))
    result = CliRunner().invoke(app, ["eval", str(hypotheses), str(reference), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    words = sum(len(row[3].split()) for row in ROWS)
    assert report["utterances"] == len(ROWS)
    assert report["wer"] == pytest.approx(100 / words)


def test_a_reference_needs_its_transcripts_not_its_audio(tmp_path: Path) -> None:
    """Scoring reads transcripts alone: a LibriSpeech folder whose audio is elsewhere (or a Kaldi
    data directory whose wav.scp names files not here) still scores, an empty transcript says
    nothing was said, and a folder of audio with no transcripts is one clear error."""
    from las.recognition.transcripts import read_transcripts

    chapter = tmp_path / "LibriSpeech" / "dev-clean-2" / "84" / "121123"
    chapter.mkdir(parents=True)
    (chapter / "84-121123.trans.txt").write_text("84-121123-0000 GO DO YOU HEAR\n84-121123-0001 \n")
    assert read_transcripts(tmp_path / "LibriSpeech" / "dev-clean-2") == {
        "84-121123-0000": "GO DO YOU HEAR",
        "84-121123-0001": "",
    }
    kaldi = tmp_path / "kaldi"
    kaldi.mkdir()
    (kaldi / "wav.scp").write_text("u1 /nowhere/u1.wav\n")
    (kaldi / "text").write_text("u1 HELLO\n")
    assert read_transcripts(kaldi) == {"u1": "HELLO"}
    audio = tmp_path / "audio"
    audio.mkdir()
    shutil.copy(ROWS[0][1], audio / "a.flac")
    with pytest.raises(LasError, match="has no transcripts; scoring needs them"):
        read_transcripts(audio)


def test_audio_folder_and_single_file_have_no_transcripts(tmp_path: Path, expected: list) -> None:
    for identifier, audio, _, _ in ROWS:
        shutil.copy(audio, tmp_path / f"{identifier}.flac")
    assert records(tmp_path, require_text=False) == [(i, audio, None) for i, audio, _ in sorted(expected)]
    assert records(Path(ROWS[0][1]), require_text=False) == [(expected[0][0], expected[0][1], None)]


def test_audio_las_cannot_read_is_named_with_what_to_do_never_passed_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A phone's voice memo (.m4a, AAC): alone, one clear error; in a folder beside audio that las
    reads, a warning that names it; in a manifest, the reader's error with the same advice."""
    from las.data.front_end.audio import load_audio

    memo = tmp_path / "memos" / "monday.m4a"
    memo.parent.mkdir()
    memo.write_bytes(b"\x00\x00\x00\x20ftypM4A " + bytes(100))
    advice = r"\(las reads .flac, .wav, .* not .m4a: convert it first, e.g. ffmpeg -i monday.m4a monday.flac\)"
    with pytest.raises(LasError, match=f"monday.m4a: an audio format las cannot read {advice}"):
        read_utterances(memo, require_text=False)
    with pytest.raises(LasError, match=f"memos: no audio files las can read; 1 audio file.* {advice}"):
        read_utterances(memo.parent, require_text=False)
    shutil.copy(ROWS[0][1], memo.parent / "tuesday.flac")
    assert [utterance.id for utterance in read_utterances(memo.parent, require_text=False)] == ["tuesday"]
    assert f"left out 1 audio file(s) in a format las cannot read: {memo}" in capsys.readouterr().err
    shutil.copy(ROWS[0][1], memo.parent / "tuesday.wav")  # the same id twice: named where it was first
    with pytest.raises(LasError, match=r"tuesday.wav: duplicate id 'tuesday' \(first at .*tuesday.flac\)"):
        read_utterances(memo.parent, require_text=False)
    assert capsys.readouterr().err.count("left out 1 audio file") == 1  # once, not again while finding it
    with pytest.raises(LasError, match=f"cannot read audio file .*monday.m4a: .* {advice}"):
        load_audio(memo, 16000)


def test_stereo_is_mixed_down_and_channels_in_opposite_phase_give_the_louder_one(tmp_path: Path) -> None:
    """Two channels are averaged; where the average cancels (one channel's wires swapped: left =
    -right), the loudest channel is taken instead of what is left of the mean: near silence."""
    import soundfile

    from las.data.front_end.audio import load_audio, samples_to_waveform

    speech, rate = soundfile.read(ROWS[0][1], dtype="float32")
    for name, right, expected in (
        ("stereo", 0.5 * speech, 0.75 * speech),
        ("inverted", -0.9 * speech, speech),
        ("silent-right", 0 * speech, 0.5 * speech),
    ):
        stereo = np.stack([speech, right], axis=1)  # (samples, channels)
        path = tmp_path / f"{name}.wav"
        soundfile.write(path, stereo, rate, subtype="FLOAT")
        np.testing.assert_allclose(load_audio(path, rate).numpy(), expected, atol=1e-6)
        np.testing.assert_allclose(samples_to_waveform(stereo.T, rate, rate).numpy(), expected, atol=1e-6)


def test_a_wav_file_cut_short_is_named_and_a_whole_or_streamed_one_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupted recording or download: its header promises more samples than it holds.
    Decoding gives what it holds, and says so; a file written as a stream (its data length
    unknown: 0 or 0xFFFFFFFF) and a whole file are not named."""
    import soundfile

    from las.data.corpora.manifest import warn_about_audio
    from las.data.corpora.utterances import Utterance
    from las.data.front_end.audio import cut_short

    speech, rate = soundfile.read(ROWS[0][1], dtype="int16")
    whole = tmp_path / "whole.wav"
    soundfile.write(whole, speech, rate, subtype="PCM_16")
    content = whole.read_bytes()
    short = tmp_path / "short.wav"
    short.write_bytes(content[: 44 + 2 * rate // 2])  # the 44-byte header and half a second
    streamed = tmp_path / "streamed.wav"
    streamed.write_bytes(content[:40] + (0xFFFFFFFF).to_bytes(4, "little") + content[44 : 44 + 2 * rate // 2])
    assert content[36:40] == b"data"  # the layout the cuts above assume
    promised = len(speech) / rate
    assert cut_short(short) == (promised, 0.5)
    assert cut_short(whole) is None and cut_short(streamed) is None and cut_short(Path(ROWS[0][1])) is None
    utterances = [Utterance(path.stem, path) for path in (whole, short, streamed)]
    warn_about_audio(utterances, tmp_path)
    warning = capsys.readouterr().err
    assert "1 audio file(s) cut short (a recording or download interrupted?), read as far as they go" in warning
    assert f"first {short}, 0.50 s of the {promised:.2f} s its header promises" in warning
    warn_about_audio(utterances[:1], tmp_path)
    assert capsys.readouterr().err == ""


def test_audio_narrower_than_a_telephone_line_is_decoded_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4 kHz recording keeps 2 kHz of speech, narrower than any channel training hears: it is
    decoded, and one warning names it; 8 kHz (a telephone line) and up are not named."""
    import soundfile

    from las.data.corpora.manifest import warn_about_audio
    from las.data.corpora.utterances import Utterance
    from las.data.front_end.audio import samples_to_waveform
    from las.data.front_end.signal import resample

    speech, rate = soundfile.read(ROWS[0][1], dtype="float32")
    utterances = []
    for new_rate in (4000, 8000, 6000):
        resampled = resample(torch.from_numpy(speech), rate, new_rate).numpy()
        soundfile.write(tmp_path / f"at{new_rate}.flac", resampled, new_rate)
        utterances.append(Utterance(f"at{new_rate}", tmp_path / f"at{new_rate}.flac"))
    warn_about_audio(utterances, tmp_path)
    warning = capsys.readouterr().err
    assert "2 audio file(s) below a telephone line's rate, first" in warning and "at4000.flac" in warning
    assert "at4000.flac, at 4000 Hz: nothing above 2000 Hz" in warning and "expect wrong transcripts" in warning
    warn_about_audio(utterances[1:2], tmp_path)
    assert capsys.readouterr().err == ""
    assert samples_to_waveform(speech[::4], 4000, 16000).shape == (len(speech[::4]) * 4,)
    assert "samples at 4000 Hz: nothing above 2000 Hz" in capsys.readouterr().err


def test_training_on_audio_narrower_than_a_telephone_line_warns_from_a_sample_of_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training reads the headers of AUDIO_CHECKS files of each manifest (all of AN4's; a sample of
    a million, whose start-up stays as fast): a corpus recorded at 4 kHz is named before it trains."""
    import soundfile

    from las.core.config import load_config
    from las.data.front_end.signal import resample
    from las.training import corpus

    from .conftest import TINY

    rows = an4_rows("train", 4, longest_seconds=1.6)
    for row in rows:
        speech, rate = soundfile.read(row[1], dtype="float32")
        narrow = resample(torch.from_numpy(speech), rate, 4000).numpy()
        row[1] = str(tmp_path / f"{row[0]}.flac")
        soundfile.write(row[1], narrow, 4000)
    manifest = write_manifest(tmp_path / "train.tsv", rows)
    config = load_config(None, [*TINY, f"data.train={manifest}", f"data.dev={manifest}", f"data.cache_dir={tmp_path}"])
    monkeypatch.setattr(corpus, "AUDIO_CHECKS", 3)
    corpus.load_corpus(config, None, None)
    warning = capsys.readouterr().err
    assert "3 audio file(s) below a telephone line's rate (in 3 of its 4 utterances), first" in warning


def test_piped_wav_scp_is_refused(tmp_path: Path) -> None:
    (tmp_path / "wav.scp").write_text(f"a {ROWS[0][1]}\nb sox {ROWS[1][1]} -t wav - |\n")
    with pytest.raises(LasError, match=r"wav.scp:2: 'b' is read through a command .* las reads audio files only"):
        read_utterances(tmp_path, require_text=False)


def test_kaldi_transcript_missing_for_an_id(tmp_path: Path) -> None:
    (tmp_path / "wav.scp").write_text(f"a {ROWS[0][1]}\nb {ROWS[1][1]}\n")
    (tmp_path / "text").write_text("a YES\n")
    with pytest.raises(LasError, match=r"wav.scp:2: 'b' has no transcript in .*text"):
        read_utterances(tmp_path)


def test_bad_jsonl_line(tmp_path: Path) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"audio_filepath": ROWS[0][1], "text": "A"}) + '\n{"text": "B"}\n')
    with pytest.raises(LasError, match=r"m.jsonl:2: expected a JSON object with 'audio_filepath'"):
        read_utterances(manifest)


def test_files_of_one_name_in_subfolders_are_told_apart_by_their_folders(tmp_path: Path) -> None:
    """A recorder's layout (one folder a speaker, take1.wav in each) decodes as it is: those files'
    ids are their paths in the folder, the other files keep their names as ids."""
    for name in ("spk 1/take1.flac", "spk2/take1.flac", "spk2/only.flac"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(AN4 / "audio" / "an10-fjmd-b.flac", tmp_path / name)
    ids = [utterance.id for utterance in read_utterances(tmp_path, require_text=False)]
    assert ids == ["spk_1/take1", "only", "spk2/take1"]


def test_lhotse_cuts_of_parts_of_recordings_and_without_supervisions(tmp_path: Path) -> None:
    identifier, audio, duration, text = ROWS[0]
    cuts = [lhotse_cut("part", audio, float(duration), text, start=0.5), lhotse_cut("unlabelled", audio, 1.0, None)]
    cuts[1]["recording"]["duration"] = float(duration)  # the first second of the recording
    utterances = read_utterances(write_lhotse(tmp_path / "c.jsonl.gz", cuts), require_text=False)
    assert [(u.id, u.text, u.segment) for u in utterances] == [
        ("part", text, Segment(0.5, float(duration) - 0.5)),
        ("unlabelled", None, Segment(0.0, 1.0)),
    ]
    plain = tmp_path / "c.jsonl"  # not gzipped: told from a NeMo manifest by its content
    plain.write_text(json.dumps(lhotse_cut(identifier, audio, float(duration), text)) + "\n")
    assert [(u.id, u.text, u.segment) for u in read_utterances(plain)] == [(identifier, text, None)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda cut: cut.update(type="MixedCut"), "a Lhotse MixedCut is not read"),
        (lambda cut: cut.update(recording=None), "has no recording"),
        (lambda cut: cut["recording"]["sources"][0].update(type="url"), "is read from url; las reads audio files"),
        (lambda cut: cut["recording"].update(channel_ids=[0, 1]), "has 2 channels; las reads one"),
        (lambda cut: cut["recording"]["sources"][0].update(channels=[1]), r"is channel \[1\] of its file"),
        (lambda cut: cut.pop("duration"), "expected a Lhotse cut"),
    ],
)
def test_lhotse_cuts_las_cannot_read_are_one_clear_error(tmp_path: Path, change, message: str) -> None:
    cut = lhotse_cut(*ROWS[0][:2], float(ROWS[0][2]), ROWS[0][3])
    change(cut)
    with pytest.raises(LasError, match=rf"c.jsonl.gz:1: .*{message}"):
        read_utterances(write_lhotse(tmp_path / "c.jsonl.gz", [cut]))


def mixed_cut(cut: dict) -> dict:
    """A Lhotse MixedCut as `CutSet.to_file` writes it: tracks of cuts, no recording of its own."""
    return {"id": "mix", "type": "MixedCut", "tracks": [{"cut": cut, "offset": 0.0}, {"cut": cut, "offset": 0.4}]}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (lambda cut: [mixed_cut(cut)], r"c.jsonl:1: a Lhotse MixedCut is not read"),
        (lambda cut: [{"id": "pad", "type": "PaddingCut", "duration": 1.0}], "a Lhotse PaddingCut is not read"),
        (lambda cut: [cut["recording"]], r"c.jsonl: a Lhotse RecordingSet manifest; las reads Lhotse cut manifests"),
        (
            lambda cut: [{"id": "s", "recording_id": "r", "start": 0.0, "duration": 1.0, "text": "A"}],
            "a Lhotse SupervisionSet manifest",
        ),
        (lambda cut: [{"text": "B"}], r"c.jsonl:1: expected a JSON object with 'audio_filepath'"),  # NeMo's, unnamed
    ],
)
def test_every_lhotse_manifest_is_named_as_lhotse_when_refused(tmp_path: Path, lines, message: str) -> None:
    """A refusal names what the file is: a MixedCut first once got the NeMo reader's message."""
    cut = lhotse_cut(*ROWS[0][:2], float(ROWS[0][2]), ROWS[0][3])
    manifest = tmp_path / "c.jsonl"
    manifest.write_text("".join(json.dumps(line) + "\n" for line in [*lines(cut), cut]))
    with pytest.raises(LasError, match=message):
        read_utterances(manifest)


def object_array(items: list) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


@pytest.fixture
def hw4_features(tmp_path: Path) -> Path:
    """HW4-style 40-dimensional features: train/dev `.npy` object arrays with transcript arrays
    (words as bytes for train, characters between <sos> and <eos> for dev), and a test set."""
    generator = np.random.default_rng(0)
    texts = [row[3] for row in ROWS]
    features = object_array([generator.normal(size=(40 + 7 * index, 40)).astype(np.float32) for index in range(3)])
    for split in ("train", "dev", "test"):
        np.save(tmp_path / f"{split}.npy", features, allow_pickle=True)
    words = object_array([np.array([word.encode() for word in text.split()]) for text in texts])
    np.save(tmp_path / "train_transcripts.npy", words, allow_pickle=True)
    characters = object_array([np.array(["<sos>", *text, "<eos>"]) for text in texts])
    np.save(tmp_path / "dev_transcripts.npy", characters, allow_pickle=True)
    return tmp_path


def test_hw4_feature_arrays_with_word_or_character_transcripts(hw4_features: Path) -> None:
    for split in ("train", "dev"):
        utterances = read_utterances(hw4_features / f"{split}.npy")
        assert [(u.id, u.text, u.features.shape) for u in utterances] == [
            (str(index), row[3], (40 + 7 * index, 40)) for index, row in enumerate(ROWS)
        ]
    assert [u.text for u in read_utterances(hw4_features / "test.npy", require_text=False)] == [None] * 3
    with pytest.raises(LasError, match="has no transcripts"):
        read_utterances(hw4_features / "test.npy")


def test_one_utterances_feature_matrix_in_a_npy_file_is_one_utterance(tmp_path: Path) -> None:
    """A numeric (frames, dim) `.npy`, as `las decode utterance.npy` is given one, is not read as
    `frames` utterances of one row each; a damaged one is refused with the file's name."""
    features = np.random.default_rng(0).normal(size=(50, 40)).astype(np.float16)
    np.save(tmp_path / "Meeting 3.npy", features)
    [utterance] = read_utterances(tmp_path / "Meeting 3.npy", require_text=False)
    assert (utterance.id, utterance.features.dtype) == ("Meeting_3", np.float32)
    assert np.array_equal(utterance.features, features.astype(np.float32))
    features[3, 4] = np.nan
    np.save(tmp_path / "damaged.npy", features)
    with pytest.raises(LasError, match=r"damaged.npy: 1 feature values are not finite"):
        read_utterances(tmp_path / "damaged.npy", require_text=False)
    np.save(tmp_path / "empty.npy", np.zeros((0, 40), np.float32))
    with pytest.raises(LasError, match=r"empty.npy: expected a \(frames, dim\) array of features, got shape \(0, 40\)"):
        read_utterances(tmp_path / "empty.npy", require_text=False)


def test_hw4_per_utterance_folders_match_the_object_array(hw4_features: Path) -> None:
    """HW4P2 layout: `mfcc/<id>.npy` and `transcript/<id>.npy` (characters between <sos> and <eos>)."""
    folder = hw4_features / "train-clean"
    (folder / "mfcc").mkdir(parents=True)
    (folder / "transcript").mkdir()
    arrays = read_utterances(hw4_features / "dev.npy")
    for utterance in arrays:
        np.save(folder / "mfcc" / f"utt{utterance.id}.npy", utterance.features)
        np.save(folder / "transcript" / f"utt{utterance.id}.npy", np.array(["<sos>", *utterance.text, "<eos>"]))
    for input_format in ("auto", "hw4-folder"):
        utterances = read_utterances(folder, input_format=input_format)
        assert [(u.id, u.text) for u in utterances] == [(f"utt{u.id}", u.text) for u in arrays]
        files = [np.load(utterance.feature_file) for utterance in utterances]  # read through the cache
        assert all(np.array_equal(a, b.features) for a, b in zip(files, arrays, strict=True))
    (folder / "transcript" / "utt1.npy").unlink()
    with pytest.raises(LasError, match=r"utt1.npy: no transcript .*transcript/utt1.npy"):
        read_utterances(folder)


def test_input_format_overrides_detection_and_is_checked(tmp_path: Path, expected: list) -> None:
    manifest = write_manifest(tmp_path / "train.list", ROWS)  # a TSV manifest by another name
    with pytest.raises(LasError, match="unknown input format"):
        read_utterances(manifest)
    assert [(u.id, u.audio.read_bytes(), u.text) for u in read_utterances(manifest, input_format="tsv")] == expected
    with pytest.raises(LasError, match="--input-format 'wav': expected auto or one of tsv, jsonl, lhotse, kaldi"):
        read_utterances(manifest, input_format="wav")
    with pytest.raises(LasError, match="--input-format kaldi reads a folder, this is a file"):
        read_utterances(manifest, input_format="kaldi")
    with pytest.raises(LasError, match="--input-format tsv reads a file, this is a folder"):
        read_utterances(tmp_path, input_format="tsv")
    with pytest.raises(LasError, match="wav.scp: not found"):
        read_utterances(tmp_path, input_format="kaldi")


@pytest.mark.parametrize(
    ("setting", "name"),
    [
        ("train.speed_perturbation=0.2", "train.speed_perturbation"),
        ("train.augment.noise=0.2", "train.augment.noise"),
        ("train.augment.snr_low=10", "train.augment.snr_low"),
    ],
)
def test_chosen_speed_perturbation_and_augmentation_need_audio(hw4_features: Path, setting: str, name: str) -> None:
    from las.core.config import load_config
    from las.training.corpus import load_corpus

    split = hw4_features / "train.npy"
    config = load_config(None, [f"data.train={split}", f"data.dev={split}", setting])
    with pytest.raises(LasError, match=f"{name} needs audio"):
        load_corpus(config, None, None)


def test_default_waveform_effects_are_off_for_precomputed_features(
    hw4_features: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from las.core.config import load_config
    from las.training.corpus import load_corpus

    split = hw4_features / "train.npy"
    config = load_config(None, [f"data.train={split}", f"data.dev={split}", "data.workers=0"])
    assert config.train.speed_perturbation and config.train.augment.enabled  # the defaults
    trained = load_corpus(config, None, None).config
    assert not trained.train.speed_perturbation and not trained.train.augment.enabled
    assert "precomputed features: no speed perturbation or waveform augmentation" in capsys.readouterr().err
    # Draws made of features are kept, chosen or not; an effect turned off is no choice to refuse.
    chosen = [
        "train.augment.joined=0.3",
        "train.augment.words=0.2",
        "train.augment.noise=0",
        "train.augment.start_epoch=2",
    ]
    kept = load_corpus(
        load_config(None, [f"data.train={split}", f"data.dev={split}", "data.workers=0", *chosen]), None, None
    )
    assert (kept.config.train.augment.joined, kept.config.train.augment.words) == (0.3, 0.2)
    assert not kept.config.train.augment.enabled


def test_hw4_features_train_and_decode_with_their_own_dimension(hw4_features: Path) -> None:
    from typer.testing import CliRunner

    from las.cli import app
    from las.export.runtime import load_model

    from .conftest import TINY

    runner = CliRunner()
    assignments = TINY + ["data.batch_size=3", f"data.cache_dir={hw4_features / 'cache'}"]
    settings = [item for assignment in assignments for item in ("--set", assignment)]
    out = hw4_features / "run"
    arguments = ["train", "--train", hw4_features / "train.npy", "--dev", hw4_features / "dev.npy"]
    result = runner.invoke(app, [str(item) for item in [*arguments, "--out", out, "--epochs", "2", *settings]])
    assert result.exit_code == 0, result.stderr
    assert load_model(out / "last.pt").input_size == 40
    result = runner.invoke(app, ["decode", str(out / "last.pt"), str(hw4_features / "test.npy")])
    assert result.exit_code == 0, result.stderr
    # The same features as a folder of per-utterance files, named by --input-format.
    (hw4_features / "test-folder").mkdir()
    for index, array in enumerate(np.load(hw4_features / "test.npy", allow_pickle=True)):
        np.save(hw4_features / "test-folder" / f"{index}.npy", array)
    folder = runner.invoke(
        app, ["decode", str(out / "last.pt"), str(hw4_features / "test-folder"), "--input-format", "hw4-folder"]
    )
    assert folder.exit_code == 0, folder.stderr
    assert folder.stdout == result.stdout
    assert result.stdout.splitlines()[0] == "id,label" and [
        line.split(",")[0] for line in result.stdout.splitlines()[1:]
    ] == ["0", "1", "2"]
    result = runner.invoke(app, ["decode", str(out / "last.pt"), str(AN4 / "audio" / "an10-fjmd-b.flac")])
    assert result.exit_code == 1
    assert "features have 80 dimensions, the model reads 40" in result.stderr
