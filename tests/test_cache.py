"""The sharded feature cache: computed once in worker processes, read memory-mapped."""

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from las.core.config import FeatureConfig
from las.core.errors import LasError
from las.data.cache import extraction
from las.data.cache import store as cache_module
from las.data.cache.index import line_checksum, write_rows
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
from las.data.front_end.audio import load_audio
from las.data.front_end.declipping import declipped
from las.data.front_end.dereverberation import Dereverberation
from las.data.front_end.features import FilterbankExtractor, Normalizer
from las.data.front_end.runs import run_bounds

from .conftest import an4_rows, write_manifest


def forbid(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """These functions of the cache fail if called: the work they do must not happen."""

    def fail(*_: object) -> None:
        raise AssertionError("work done despite the cache")

    for name in names:
        for module in (cache_module, extraction):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fail)


@pytest.fixture
def utterances(tmp_path: Path) -> list:
    return read_utterances(write_manifest(tmp_path / "six.tsv", an4_rows("train", 6)))


def test_workers_fill_float16_shards_that_match_direct_extraction(tmp_path: Path, utterances: list) -> None:
    features = FeatureCache(tmp_path / "cache", FeatureConfig(), workers=2).load(utterances)
    shards = sorted((tmp_path / "cache").rglob("shard-*.npy"))
    assert len(shards) == 2 and all(np.load(shard, mmap_mode="r").dtype == np.float16 for shard in shards)
    assert features.frame_counts() == [len(item) for item in features] and features.dimensions() == {80}
    extractor = FilterbankExtractor(FeatureConfig())
    for utterance, stored in zip(utterances, features, strict=True):
        direct = extractor(load_audio(utterance.audio, 16000))
        assert stored.dtype == torch.float32
        torch.testing.assert_close(stored, direct, atol=0.02, rtol=2e-3)  # float16 rounding only


def test_a_corpus_looked_up_in_chunks_gets_every_utterances_own_features(
    tmp_path: Path, utterances: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large corpora are looked up (and filled) a chunk of rows at a time, the chunks joined into
    one set whose shards are numbered anew: the same features, in the same order, cold and warm."""
    whole = FeatureCache(tmp_path / "whole", FeatureConfig()).load(utterances)
    monkeypatch.setattr(cache_module, "SHARD_UTTERANCES", 2)  # chunks that span several shards
    monkeypatch.setattr(cache_module, "LOOKUP_ROWS", 4)
    twice = [*utterances[::-1], *utterances]  # a chunk that repeats what another filled
    ids = [utterance.id for utterance in utterances]
    for _ in ("cold", "warm"):
        chunked = FeatureCache(tmp_path / "chunked", FeatureConfig()).load(twice)
        assert len(chunked) == 12 and len(chunked.shard_names) == 3
        for index, utterance in enumerate(twice):
            assert torch.equal(chunked[index], whole[ids.index(utterance.id)])


def test_a_second_run_extracts_nothing_and_rehashes_nothing(
    tmp_path: Path, utterances: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = FeatureCache(tmp_path / "cache", FeatureConfig(), workers=2).load(utterances)

    forbid(monkeypatch, "extract_chunk", "read_bytes")  # unchanged files are known without reading them
    again = FeatureCache(tmp_path / "cache", FeatureConfig(), workers=2).load(utterances)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_features_computed_by_other_feature_code_are_never_served(
    tmp_path: Path, utterances: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier release or an experiment's edit of the front end computed other features: the
    cache keys its folder by the code of the modules that compute and store them, not by a
    version number that an edit can leave as it was."""
    keyed = {f"las.data.{name}" for name in cache_module.FEATURE_MODULES.split()}
    computing = [load_audio, declipped, run_bounds, FilterbankExtractor, Dereverberation]
    computing += [extraction.extract_chunk, line_checksum]
    assert {function.__module__ for function in computing} <= keyed  # what reads, computes and indexes them
    ours = FeatureCache(tmp_path / "cache", FeatureConfig())
    ours.load(utterances)
    monkeypatch.setattr(cache_module, "FEATURE_CODE", cache_module.code_digest([__file__]))  # other code
    other = FeatureCache(tmp_path / "cache", FeatureConfig())
    assert other.directory.parent == ours.directory.parent and other.directory != ours.directory
    assert not other.directory.exists() or not any(other.directory.glob("shard-*"))  # nothing to serve


def test_a_cache_used_before_opens_without_reading_its_features(
    tmp_path: Path, utterances: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards unchanged since their entries were found intact are not read again; one written to
    since (even with the same bytes) is checked entry by entry."""
    first = FeatureCache(tmp_path / "cache", FeatureConfig(), workers=2).load(utterances)
    checked: list[str] = []
    intact = cache_module.entry_is_intact

    def counted(entry: cache_module.Entry, shard: np.ndarray | None) -> bool:
        checked.append(entry.shard)
        return intact(entry, shard)

    monkeypatch.setattr(cache_module, "entry_is_intact", counted)
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert checked == [] and all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    shard = sorted((tmp_path / "cache").rglob("shard-*.npy"))[0]
    shard.write_bytes(shard.read_bytes())  # a write, as a copy over it or a restore from backup is
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert set(checked) == {shard.name} and len(checked) == 3  # its 3 entries, the other shard not read
    checked.clear()
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert checked == []  # found intact: recorded again


def test_symbolic_links_to_cached_files_are_served_without_reading_them(
    tmp_path: Path, utterances: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus of links (a symlink farm, a moved tree of links) is the same files: known by
    their inode, size and times, not by the path."""
    first = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    rows = []
    for number, utterance in enumerate(utterances):
        link = tmp_path / "links" / f"{number}.flac"
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(utterance.audio)
        rows.append([f"link{number}", str(link), "1.0", utterance.text])
    linked = read_utterances(write_manifest(tmp_path / "links.tsv", rows))

    forbid(monkeypatch, "extract_chunk", "read_bytes")
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(linked)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_a_link_pointed_at_another_recording_gets_that_recordings_features(tmp_path: Path, utterances: list) -> None:
    """A link is known by the file it points to, so pointing it elsewhere is a new file."""
    link = tmp_path / "link.flac"
    link.symlink_to(utterances[0].audio)
    manifest = write_manifest(tmp_path / "link.tsv", [["a", str(link), "1.0", "A"]])
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(read_utterances(manifest))
    link.unlink()
    link.symlink_to(utterances[1].audio)
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(read_utterances(manifest))[0]
    direct = FilterbankExtractor(FeatureConfig())(load_audio(utterances[1].audio, 16000))
    torch.testing.assert_close(again, direct, atol=0.02, rtol=2e-3)


def test_an_index_written_by_an_older_las_keeps_its_entries(
    tmp_path: Path, utterances: list, capsys: pytest.CaptureFixture
) -> None:
    """An older las's `index.jsonl` is imported once: no line is called damaged and nothing is
    recomputed. Its oldest lines had no ctime: those files are re-hashed once, found by content."""
    first = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    folder = next((tmp_path / "cache").iterdir())
    with sqlite3.connect(folder / "index.sqlite") as connection:
        entries = connection.execute("SELECT key, shard, offset, frames, dimension, checksum FROM entries").fetchall()
        files = {row[4]: row for row in connection.execute("SELECT size, mtime, inode, ctime, digest, path FROM files")}
    connection.close()
    (folder / "index.sqlite").unlink()
    lines = []
    for number, (key, shard, offset, frames, dimension, frames_checksum) in enumerate(entries):
        size, mtime, inode, ctime, digest, path = files[key.split("@")[0]]
        source = [path, size, mtime, inode] + ([ctime] if number % 2 else [])  # with and without ctime
        record = dict(
            key=key, shard=shard, offset=offset, frames=frames, dimension=dimension, checksum=frames_checksum
        ) | dict(source=source, digest=digest)
        lines.append(json.dumps({**record, "check": line_checksum(record)}) + "\n")
    (folder / "index.jsonl").write_text("".join(lines))
    capsys.readouterr()
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert "damaged" not in capsys.readouterr().err and not (folder / "index.jsonl").exists()
    assert len(list((tmp_path / "cache").rglob("shard-*.npy"))) == 1  # nothing recomputed
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


def test_a_run_looks_up_its_own_entries_and_reads_no_others(tmp_path: Path, utterances: list) -> None:
    """Opening a cache does not grow with what it holds: the rows of other corpora stay unread."""
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    folder = next((tmp_path / "cache").iterdir())
    other = [[f"{index:064x}@1", "shard-other.npy", 0, 10, 80, "0" * 32, 0.0, None] for index in range(20_000)]
    with sqlite3.connect(folder / "index.sqlite") as connection:
        write_rows(connection, other, [])
    connection.close()
    cache = FeatureCache(tmp_path / "cache", FeatureConfig())
    rows: list[str] = []
    cache.index.connect().set_trace_callback(rows.append)
    features = cache.load(utterances[:2])
    assert len(features) == 2
    assert any("FROM entries WHERE key IN" in row for row in rows)  # looked up, by key
    assert all(" WHERE " in row for row in rows) and "shard-other" not in " ".join(rows)  # nothing else read


def test_a_file_replaced_with_its_size_and_modification_time_kept_is_recomputed(tmp_path: Path) -> None:
    """As `cp -p`, `rsync -t` and `tar` replace a file: other audio of the same size, the old mtime."""
    first_audio, second_audio = (load_audio(Path(row[1]), 16000) for row in an4_rows("train", 2))
    samples = min(len(first_audio), len(second_audio))
    audio = tmp_path / "a.wav"
    soundfile.write(audio, first_audio[:samples].numpy(), 16000, subtype="PCM_16")
    utterances = read_utterances(write_manifest(tmp_path / "one.tsv", [["a", str(audio), "1.0", "A"]]))
    first = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)[0]
    status = audio.stat()
    soundfile.write(audio, second_audio[:samples].numpy(), 16000, subtype="PCM_16")  # in place, same size
    os.utime(audio, ns=(status.st_atime_ns, status.st_mtime_ns))
    changed = audio.stat()
    assert (changed.st_size, changed.st_mtime_ns, changed.st_ino) == (status.st_size, status.st_mtime_ns, status.st_ino)
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)[0]
    direct = FilterbankExtractor(FeatureConfig())(load_audio(audio, 16000))
    torch.testing.assert_close(again, direct, atol=0.02, rtol=2e-3)
    assert not torch.allclose(first, again, atol=0.5)


def feature_folder(folder: Path, count: int = 5, dimension: int = 40) -> list[np.ndarray]:
    """HW4P2's layout, `folder/mfcc/<id>.npy`: float32 features of made-up sizes (not float16-exact)."""
    (folder / "mfcc").mkdir(parents=True)
    arrays = [
        np.random.default_rng(index).normal(size=(30 + index, dimension)).astype(np.float32) for index in range(count)
    ]
    for index, array in enumerate(arrays):
        np.save(folder / "mfcc" / f"utt{index}.npy", array)
    return arrays


def test_feature_files_are_copied_into_float32_shards_and_served_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A corpus of per-utterance `.npy` features is never held in memory: read once into shards,
    memory-mapped from there, and a second run neither reads nor rehashes the files."""
    arrays = feature_folder(tmp_path / "corpus")
    utterances = read_utterances(tmp_path / "corpus", require_text=False)
    assert all(utterance.features is None and utterance.feature_file is not None for utterance in utterances)
    features = FeatureCache(tmp_path / "cache", FeatureConfig(), workers=2).load(utterances)
    shards = sorted((tmp_path / "cache").rglob("shard-*.npy"))
    assert shards and all(np.load(shard, mmap_mode="r").dtype == np.float32 for shard in shards)
    assert all(torch.equal(stored, torch.from_numpy(array)) for stored, array in zip(features, arrays, strict=True))

    forbid(monkeypatch, "read_feature_file", "read_bytes")
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert all(torch.equal(a, b) for a, b in zip(features, again, strict=True))


def test_a_changed_feature_file_is_read_again(tmp_path: Path) -> None:
    feature_folder(tmp_path / "corpus", count=2)
    utterances = read_utterances(tmp_path / "corpus", require_text=False)
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    changed = np.full((31, 40), 2.5, np.float32)  # the same size as the file it replaces
    np.save(tmp_path / "corpus" / "mfcc" / "utt1.npy", changed)
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    assert torch.equal(again[1], torch.from_numpy(changed))


def test_bad_feature_files_are_one_line_each_or_left_out(tmp_path: Path) -> None:
    feature_folder(tmp_path / "corpus", count=3)
    broken = np.ones((20, 40), np.float32)
    broken[2, 3] = np.inf
    np.save(tmp_path / "corpus" / "mfcc" / "utt1.npy", broken)
    utterances = read_utterances(tmp_path / "corpus", require_text=False)
    with pytest.raises(LasError, match=r"utt1.npy: 1 feature values are not finite"):
        FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    kept = FeatureCache(tmp_path / "cache", FeatureConfig()).usable(utterances, "corpus")
    assert [utterance.id for utterance in kept] == ["utt0", "utt2"]
    np.save(tmp_path / "corpus" / "mfcc" / "utt1.npy", np.ones((20, 41), np.float32))
    with pytest.raises(LasError, match=r"utt1.npy: features of dimension 41, others 40"):
        FeatureCache(tmp_path / "other", FeatureConfig()).load(utterances)
    (tmp_path / "corpus" / "mfcc" / "utt1.npy").unlink()  # after the folder was read
    with pytest.raises(LasError, match=r"^feature file not found: .*utt1.npy$"):
        FeatureCache(tmp_path / "other", FeatureConfig()).load(utterances)


def test_an_index_that_is_not_one_is_set_aside_and_its_features_recomputed(
    tmp_path: Path, utterances: list, capsys: pytest.CaptureFixture
) -> None:
    first = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances[:2])
    index = next((tmp_path / "cache").rglob("index.sqlite"))
    index.write_bytes(b"damaged storage" * 300)
    capsys.readouterr()
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances[:2])
    assert "not a readable index" in capsys.readouterr().err and index.with_suffix(".damaged").exists()
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances[:2])
    assert "warning" not in capsys.readouterr().err


def test_an_index_damaged_at_any_page_in_its_middle_answers_truly_or_is_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """SQLite reads a page when a query needs it: a file whose first page is sound opens, and its
    damage surfaces at a later lookup, count or write ("database disk image is malformed"), which
    once ended `las decode` in a traceback. Each page past the first in turn is overwritten with
    garbage (a torn write, a bad sector): every lookup then answers with true entries only, or
    the index is set aside with one warning and the work goes on with a new one."""
    import shutil

    from las.data.cache.index import CacheIndex, Entry

    sound = tmp_path / "sound"
    sound.mkdir()
    index = CacheIndex(sound)
    keys = [f"{number:064x}@settings" for number in range(3000)]
    truth = {
        key: Entry(f"shard-{number // 512}.npy", number % 512, 10, 80, "0" * 32) for number, key in enumerate(keys)
    }
    index.add(truth, [((number, 1, 2, 3), "d" * 64, f"/audio/{number}.flac") for number in range(300)])
    index.close()
    page = 4096
    pages = (sound / "index.sqlite").stat().st_size // page
    assert pages >= 50, "the index needs pages for damage in its middle"
    set_aside = 0
    for damaged_page in range(1, pages):
        folder = tmp_path / f"page-{damaged_page}"
        shutil.copytree(sound, folder)
        with (folder / "index.sqlite").open("r+b") as file:
            file.seek(damaged_page * page)
            file.write(bytes(range(256)) * (page // 256))
        capsys.readouterr()
        reopened = CacheIndex(folder)
        found = reopened.entries(keys)
        assert all(truth[key] == entry for key, entry in found.items())
        assert reopened.digests([(number, 1, 2, 3) for number in range(300)]).keys() <= {
            (number, 1, 2, 3) for number in range(300)
        }
        reopened.summary()
        reopened.add({"new@settings": Entry("shard-9.npy", 0, 5, 80, "1" * 32)}, [])
        assert set(reopened.entries(["new@settings"])) == {"new@settings"}
        warning = capsys.readouterr().err
        if (folder / "index.damaged").exists():
            set_aside += 1
            assert warning.count("not a readable index") == 1 and "malformed" in warning
        reopened.close()
    assert set_aside >= pages // 2  # most pages are read by a lookup of every key


FILL_CACHE = """
import sys, torch
from las.core.config import FeatureConfig
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
features = FeatureCache(sys.argv[1], FeatureConfig()).load(read_utterances(sys.argv[2]))
torch.save([item.clone() for item in features], sys.argv[3])
"""


def test_processes_filling_one_cache_at_once_each_get_the_right_features(
    tmp_path: Path, utterances: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runs extract the same utterances into one empty cache at the same time: each gets
    every utterance's own features, and a later run finds them all, intact, without extracting."""
    import subprocess
    import sys

    manifest = write_manifest(tmp_path / "six.tsv", an4_rows("train", 6))
    outputs = [tmp_path / f"features-{index}.pt" for index in range(3)]
    children = [
        subprocess.Popen([sys.executable, "-c", FILL_CACHE, str(tmp_path / "cache"), str(manifest), str(output)])
        for output in outputs
    ]
    assert [child.wait(timeout=300) for child in children] == [0, 0, 0]
    extractor = FilterbankExtractor(FeatureConfig())
    expected = [extractor(load_audio(utterance.audio, 16000)) for utterance in utterances]
    for output in outputs:
        for served, direct in zip(torch.load(output), expected, strict=True):
            torch.testing.assert_close(served, direct, atol=0.02, rtol=2e-3)
    forbid(monkeypatch, "extract_chunk")
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    for served, direct in zip(again, expected, strict=True):
        torch.testing.assert_close(served, direct, atol=0.02, rtol=2e-3)


def test_streaming_statistics_equal_the_statistics_of_everything_at_once(tmp_path: Path, utterances: list) -> None:
    features = FeatureCache(tmp_path / "cache", FeatureConfig()).load(utterances)
    everything = torch.cat(list(features)).double()
    normalizer = Normalizer.fit(features)
    torch.testing.assert_close(normalizer.mean, everything.mean(0).float())
    torch.testing.assert_close(normalizer.std, everything.std(0, unbiased=False).float())


@pytest.mark.parametrize("workers", [0, 2])
def test_extraction_leaves_the_callers_threads_alone(tmp_path: Path, utterances: list, workers: int) -> None:
    threads = torch.get_num_threads()
    FeatureCache(tmp_path / "cache", FeatureConfig(), workers=workers).load(utterances)
    assert torch.get_num_threads() == threads


def test_cache_info_names_what_it_holds_and_prune_removes_orphans_and_old_folders(
    tmp_path: Path, utterances: list
) -> None:
    from .conftest import run

    root = tmp_path / "cache"
    cache = FeatureCache(root, FeatureConfig(), workers=0)
    cache.load(utterances)
    cache.in_use.close()  # this process is done with it
    folder = cache.directory
    (folder / "shard-0123456789abcdef.npy").write_bytes(b"\0" * 1000)  # an entry dropped as damaged left it
    old = root / "0000000000000000"  # the features of settings long gone
    old.mkdir()
    (old / "shard-aaaaaaaaaaaaaaaa.npy").write_bytes(b"\0" * 5000)
    (old / "last-used").write_text("0\n")
    code, stdout, _ = run("cache", "info", "--cache-dir", root)
    assert code == 0
    assert f"{folder.name}" in stdout and "6 entries in 2 shards, 1 orphan(s)" in stdout
    assert f"6 from {utterances[0].audio.parent}" in stdout and "last used 1970-01-01" in stdout
    code, stdout, _ = run("cache", "prune", "--older-than", "30", "--cache-dir", root)
    assert code == 0 and "unused for" in stdout and "no index row names it" in stdout
    assert not old.exists() and not (folder / "shard-0123456789abcdef.npy").exists()
    again = FeatureCache(root, FeatureConfig(), workers=0)
    assert again.pending(utterances, 1.0, again.identify(utterances))[2] == {}  # every entry kept: nothing to extract


def test_prune_leaves_a_folder_in_use_alone_so_a_reader_never_loses_an_entry(tmp_path: Path, utterances: list) -> None:
    from las.data.cache.usage import prune

    root = tmp_path / "cache"
    FeatureCache(root, FeatureConfig(), workers=0).load(utterances).frame_counts()
    reader = FeatureCache(root, FeatureConfig(), workers=0)  # has read the index, mapped nothing yet
    removed, busy = prune(root, older_than_days=0, max_bytes=0)
    assert removed == [] and busy == [reader.directory]
    features = reader.load(utterances)
    assert [len(item) for item in features] == features.frame_counts()  # every entry served
    reader.in_use.close()
    import gc

    gc.collect()  # the first cache object, unreferenced, lets go of its lock too
    removed, busy = prune(root, max_bytes=0)
    assert busy == [] and [removal.path for removal in removed] == [reader.directory]
