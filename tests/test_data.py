import random
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from las.core.config import Config, DataConfig, FeatureConfig
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.data.augmentation.augmenter import spec_augment
from las.data.cache import extraction
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
from las.data.dataset import BatchDraws, BucketBatchSampler, Draw, SpeechDataset
from las.data.front_end.features import BLOCK_FRAMES, FilterbankExtractor, Normalizer, analysis_sizes, without_offset
from las.data.front_end.loudness import LOUD_LEVEL_DB, mean_level_db

from .conftest import AN4, an4_rows, write_manifest


def test_reads_the_an4_manifest() -> None:
    utterances = read_utterances(AN4 / "dev.tsv")
    assert len(utterances) == 100
    assert utterances[0].id == "an10-fjmd-b" and utterances[0].text == "G TWO EIGHTY NINE"
    assert utterances[0].audio == AN4 / "audio" / "an10-fjmd-b.flac"


def test_reads_an_audio_file_and_a_folder(tmp_path: Path) -> None:
    single = read_utterances(AN4 / "audio" / "an10-fjmd-b.flac", require_text=False)
    assert [(u.id, u.text) for u in single] == [("an10-fjmd-b", None)]
    for name in ("b", "a"):
        (tmp_path / f"{name}.flac").write_bytes(single[0].audio.read_bytes())
    assert [u.id for u in read_utterances(tmp_path, require_text=False)] == ["a", "b"]
    with pytest.raises(LasError, match="has no transcripts"):
        read_utterances(tmp_path, require_text=True)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("x\taudio.flac\t1.0", r"train.tsv:3: expected 4 tab-separated fields"),
        ("an10-fjmd-b\t{audio}\t1.0\tAGAIN", r"train.tsv:3: duplicate id 'an10-fjmd-b' \(first at .*train.tsv:2\)"),
        ("y\t{audio}\t1.0\t  ", r"train.tsv:3: empty transcript for 'y'"),
        ("z\tmissing.flac\t1.0\tHELLO", r"train.tsv:3: audio file not found: .*missing.flac"),
        ("w\t{audio}\tlong\tHELLO", r"train.tsv:3: duration_s 'long' is not a number"),
        ("v\t{audio}\tnan\tHELLO", r"train.tsv:3: duration_s 'nan' is not a length in seconds"),
        ("u\t{audio}\t-1\tHELLO", r"train.tsv:3: duration_s '-1' is not a length in seconds"),
    ],
)
def test_malformed_manifest_lines_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    first = an4_rows("dev", 1)[0]
    path = write_manifest(tmp_path / "train.tsv", [first])
    with open(path, "a") as file:
        file.write(line.format(audio=first[1]) + "\n")
    with pytest.raises(LasError, match=message):
        read_utterances(path)


def test_an_empty_transcript_is_refused_for_training_and_read_for_decoding(tmp_path: Path) -> None:
    first = an4_rows("dev", 1)[0]
    path = write_manifest(tmp_path / "sounds.tsv", [first[:3] + [""]])
    with pytest.raises(LasError, match="empty transcript"):
        read_utterances(path)
    assert [utterance.text for utterance in read_utterances(path, require_text=False)] == [""]


def test_bad_header_and_unknown_input(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("id\tfile\ttext\n")
    with pytest.raises(LasError, match="bad.tsv:1: expected the header"):
        read_utterances(path)
    with pytest.raises(LasError, match="input not found"):
        read_utterances(tmp_path / "absent.tsv")
    for link, target in [("dangling.tsv", "moved.tsv"), ("loop.wav", "loop.wav")]:
        (tmp_path / link).symlink_to(target)
        with pytest.raises(LasError, match=f"{link} is a symbolic link to {target}, which does not resolve"):
            read_utterances(tmp_path / link)
    for empty in ("", "  "):  # not the current directory, whatever it holds
        with pytest.raises(LasError, match="input path is empty"):
            read_utterances(empty)


def test_unreadable_and_empty_audio_are_named(tmp_path: Path) -> None:
    cache = FeatureCache(tmp_path / "cache", FeatureConfig())
    broken = tmp_path / "broken.flac"
    broken.write_bytes(b"not audio at all")
    empty = tmp_path / "empty.wav"
    soundfile.write(empty, np.zeros(0, dtype=np.float32), 16000)
    for path, message in [
        (broken, "cannot read audio file .*broken.flac"),
        (empty, "audio file is empty: .*empty.wav"),
    ]:
        utterance = read_utterances(path, require_text=False)[0]
        with pytest.raises(LasError, match=message):
            cache.features(utterance)


def test_features_are_log_mel_and_cached_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    utterance = read_utterances(AN4 / "audio" / "an10-fjmd-b.flac", require_text=False)[0]
    cache = FeatureCache(tmp_path / "cache", FeatureConfig())
    first = cache.features(utterance)
    assert first.shape == (161, 80)  # 1.6 s at a 10 ms hop (centred frames), 80 mel bins
    # A second lookup, even of a renamed copy, decodes no audio.
    copy = tmp_path / "renamed.flac"
    copy.write_bytes(utterance.audio.read_bytes())

    def fail(*_: object) -> None:
        raise AssertionError("audio decoded despite the cache")

    monkeypatch.setattr(extraction, "load_audio", fail)
    again = FeatureCache(tmp_path / "cache", FeatureConfig()).features(read_utterances(copy, require_text=False)[0])
    assert torch.equal(first, again)
    # How features are normalised is no part of the entry; other feature settings are another one.
    normalised_per_utterance = FeatureConfig(utterance_mean=True)
    assert torch.equal(FeatureCache(tmp_path / "cache", normalised_per_utterance).features(utterance), first)
    with pytest.raises(AssertionError, match="despite the cache"):
        FeatureCache(tmp_path / "cache", FeatureConfig(mel_bins=40)).features(utterance)


def test_normalizer_gives_zero_mean_unit_variance() -> None:
    torch.manual_seed(0)
    features = [torch.randn(n, 4) * 3 + 5 for n in (10, 20, 30)]
    normalizer = Normalizer.fit(features)
    normalized = torch.cat([normalizer(item) for item in features])
    torch.testing.assert_close(normalized.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(normalized.std(0, unbiased=False), torch.ones(4), atol=1e-5, rtol=0)
    restored = Normalizer.from_dict(normalizer.to_dict())
    assert torch.equal(restored.mean, normalizer.mean)


def test_long_recordings_are_analysed_in_blocks_giving_the_same_frames_bit_for_bit() -> None:
    from las.data.front_end.signal import MelPowerSpectrum

    config = FeatureConfig()
    whole = MelPowerSpectrum(16000, 400, 160, config.mel_bins)

    def centred(waveform: torch.Tensor) -> torch.Tensor:  # one pass over it all, padded as a centred STFT pads
        return whole(torch.nn.functional.pad(waveform[None], (200, 200), mode="reflect")[0])

    # Noise at -40 dB with a peak of 0.5: levels training has heard (`within_training_levels` leaves it).
    waveform = 0.01 * torch.randn(160 * (2 * BLOCK_FRAMES + 123), generator=torch.Generator().manual_seed(0))
    waveform[1000] = 0.5
    features = FilterbankExtractor(config)(waveform)  # three blocks
    without_offset = waveform - waveform.mean(dtype=torch.float64).float()
    assert torch.equal(features, torch.log(centred(without_offset) + 1e-6).T)


def test_a_dc_offset_on_the_samples_changes_no_feature() -> None:
    """A biased sound card adds a constant to every sample: as loud as speech in the lowest bins,
    it made real speech look like steady noise (no text) before it was removed."""
    speech = torch.from_numpy(soundfile.read(AN4 / "audio" / "an10-fjmd-b.flac", dtype="float32")[0])
    extractor = FilterbankExtractor(FeatureConfig())
    assert torch.allclose(extractor(0.5 * speech + 0.4), extractor(0.5 * speech), atol=1e-3)


def test_recordings_quieter_than_any_training_audio_are_analysed_at_its_level() -> None:
    """Log power's floor would swallow speech 40-60 dB down (no text at all at -60 dB); below
    `features.quiet_peak_dbfs` the level no longer matters, above it nothing changes. That peak is a
    level training has heard: raised only to -30 dBFS, under AN4's quietest (-23), dev 30 dB down read
    1.25x worse, even in floating point (docs/archive/experiments.md, "A quiet microphone")."""
    rows = [line.split("\t") for line in (AN4 / "train.tsv").read_text().splitlines()[1:]]
    quietest = min(float(np.abs(soundfile.read(AN4 / row[1], dtype="float32")[0]).max()) for row in rows)
    quiet_peak = 10 ** (FeatureConfig().quiet_peak_dbfs / 20)
    assert quietest <= quiet_peak <= 2 * quietest
    speech = torch.from_numpy(soundfile.read(AN4 / "audio" / "an10-fjmd-b.flac", dtype="float32")[0])
    extractor = FilterbankExtractor(FeatureConfig())
    quiet = speech * (quiet_peak / speech.abs().max())
    assert torch.allclose(extractor(quiet * 1e-2), extractor(quiet), atol=1e-3)
    assert torch.allclose(extractor(quiet * 1e-3), extractor(quiet), atol=1e-3)
    assert not torch.allclose(extractor(speech), extractor(quiet), atol=1.0)  # louder: its own level


def test_recordings_louder_than_any_training_audio_are_analysed_at_its_level() -> None:
    """The mirror of the quiet side: AN4's loudest training recording stays under LOUD_LEVEL_DB
    (its frames' mean power in dB), and a recording louder than that (AN4 dev 20 dB up, in floating
    point: 1.24x its CER) is analysed at that level, whatever more it had; padding does not hide it."""
    rows = [line.split("\t") for line in (AN4 / "train.tsv").read_text().splitlines()[1:]]
    hop = analysis_sizes(FeatureConfig())[1]
    levels = [mean_level_db(torch.from_numpy(soundfile.read(AN4 / row[1], dtype="float32")[0]), hop) for row in rows]
    assert max(levels) <= LOUD_LEVEL_DB <= max(levels) + 3  # within 3 dB of what training heard
    speech = torch.from_numpy(soundfile.read(AN4 / "audio" / "an10-fjmd-b.flac", dtype="float32")[0])
    extractor = FilterbankExtractor(FeatureConfig())
    loud = speech * 10 ** ((LOUD_LEVEL_DB - mean_level_db(speech, hop)) / 20)
    assert torch.allclose(extractor(loud * 10), extractor(loud), atol=1e-3)
    assert torch.allclose(extractor(loud * 100), extractor(loud), atol=1e-3)
    silence = torch.zeros(16000)
    padded = extractor(torch.cat([silence, loud * 10, silence]))
    assert torch.allclose(padded, extractor(torch.cat([silence, loud, silence])), atol=1e-3)
    assert torch.equal(extractor(speech), extractor.log_mel(without_offset(speech, extractor.window)))  # as it is


def test_utterance_mean_cancels_a_fixed_channel_response() -> None:
    """A channel (microphone, telephone line) multiplies power per bin by a constant: log-mel
    features shift by a constant per bin, which per-utterance normalisation takes away."""
    torch.manual_seed(0)
    features = [torch.randn(n, 4) * 3 + 5 for n in (10, 20, 30)]
    channel = torch.tensor([0.0, -2.0, -6.0, 3.0])  # (mel_bins,)
    normalizer = Normalizer.fit(features, utterance_mean=True)
    torch.testing.assert_close(normalizer(features[0] + channel), normalizer(features[0]), atol=1e-5, rtol=0)
    assert not torch.allclose(Normalizer.fit(features)(features[0] + channel), Normalizer.fit(features)(features[0]))
    normalized = torch.cat([normalizer(item) for item in features])
    torch.testing.assert_close(normalized.std(0, unbiased=False), torch.ones(4), atol=1e-5, rtol=0)
    assert Normalizer.from_dict(normalizer.to_dict()).utterance_mean
    older = {"mean": [0.0] * 4, "std": [1.0] * 4}  # a checkpoint from before the option
    assert not Normalizer.from_dict(older).utterance_mean


def test_a_mean_prior_keeps_a_short_utterance_its_spectrum_and_the_statistics_exact() -> None:
    """With mean_prior_frames, each utterance's mean counts the corpus's average frame as that many
    frames: the normalised training frames still have zero mean and unit variance (the streaming
    fit's terms in the prior are exact), a long utterance is normalised almost as by its own mean,
    and a short one keeps most of what sets it apart from the corpus."""
    generator = torch.Generator().manual_seed(0)
    features = [torch.randn(n, 4, generator=generator) * 3 + 5 for n in (10, 20, 30, 400)]
    normalizer = Normalizer.fit(features, utterance_mean=True, prior_frames=50)
    normalized = torch.cat([normalizer(item) for item in features])
    torch.testing.assert_close(normalized.mean(0), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(normalized.std(0, unbiased=False), torch.ones(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(normalizer.prior, torch.cat(features).mean(0))
    own_mean = Normalizer.fit(features, utterance_mean=True)
    vowel = torch.tensor([4.0, 0.0, -4.0, 0.0])  # a spectrum unlike the corpus's average
    short = torch.randn(20, 4, generator=generator) + 5 + vowel
    assert own_mean(short).mean(0).abs().max() < 1e-5  # its own mean takes the spectrum away ...
    assert (normalizer(short).mean(0) * vowel).sum() > 0.5 * (vowel / normalizer.std).pow(2).sum()  # ... the prior not
    long = features[3]
    assert (normalizer(long) - own_mean(long)).abs().max() < 0.5
    restored = Normalizer.from_dict(normalizer.to_dict())
    assert restored.prior_frames == 50 and torch.equal(restored.prior, normalizer.prior)
    assert torch.equal(restored(short), normalizer(short))
    assert Normalizer.from_dict(own_mean.to_dict()).prior is None


def test_training_fits_the_mean_prior_of_its_setting_and_the_datasets_use_it(tiny_config: Config) -> None:
    from las.training.corpus import load_corpus

    corpus = load_corpus(tiny_config, None, None)
    assert corpus.normalizer.prior_frames == 30 and corpus.normalizer.prior is not None  # 0.3 s by default
    assert corpus.train.normalizer is corpus.normalizer and corpus.dev.normalizer is corpus.normalizer
    config = replace(tiny_config, features=replace(tiny_config.features, mean_prior_seconds=0.0))
    assert load_corpus(config, None, None).normalizer.prior is None


def test_bucket_sampler_covers_everything_once_with_little_padding() -> None:
    lengths = torch.randint(50, 700, (300,), generator=torch.Generator().manual_seed(0)).tolist()
    sampler = BucketBatchSampler(lengths, batch_size=16, max_batch_frames=4000, seed=3)
    batches = sampler.batches()
    assert sorted(index for batch in batches for index in batch) == list(range(300))
    assert all(len(batch) <= 16 and max(lengths[i] for i in batch) * len(batch) <= 4000 for batch in batches)
    padded = sum(max(lengths[i] for i in batch) * len(batch) for batch in batches)
    assert padded < 1.1 * sum(lengths)  # random batches would pad far more
    assert sampler.batches() == batches  # same epoch, same batches (resumable)
    sampler.set_epoch(1)
    assert sampler.batches() != batches


def test_batches_by_frames_stay_near_their_budget_whatever_the_lengths() -> None:
    generator = torch.Generator().manual_seed(0)
    short = torch.randint(60, 300, (3000,), generator=generator).tolist()  # AN4-like
    long = torch.randint(100, 2500, (3000,), generator=generator).tolist()  # 1-25 s, HW4P2-like
    data = DataConfig(batch_size=16, batch_frames=20_000)
    for lengths in (short, long):
        batches = BucketBatchSampler.for_training(lengths, data, seed=1).batches()
        assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
        padded = [max(lengths[i] for i in batch) * len(batch) for batch in batches]
        assert all(frames <= 20_000 for frames in padded)
        # Every batch but the last closes near the budget: the next utterance would not fit.
        full = sorted(padded)[1:]
        assert min(full) > 0.8 * 20_000 and statistics.mean(full) > 0.9 * 20_000
        assert sum(padded) < 1.1 * sum(lengths)
        assert BucketBatchSampler.for_training(lengths, data, seed=1).batches() == batches  # resumable
    # By count, the long corpus's batches hold 16 whatever their frames: a 16x spread in cost.
    by_count = BucketBatchSampler.for_training(long, DataConfig(batch_size=16, max_batch_frames=10**9), 1).batches()
    assert {len(batch) for batch in by_count} <= {16, 3000 % 16}


def test_a_curriculum_takes_its_first_epochs_shortest_first_then_shuffles() -> None:
    lengths = torch.randint(100, 2500, (600,), generator=torch.Generator().manual_seed(0)).tolist()
    data = DataConfig(batch_frames=20_000, shortest_first_epochs=2)
    sampler = BucketBatchSampler.for_training(lengths, data, seed=1)
    for epoch in (0, 1, 2):
        sampler.set_epoch(epoch)
        longest = [max(lengths[i] for i in batch) for batch in sampler.batches()]
        assert sorted(index for batch in sampler.batches() for index in batch) == list(range(600))
        # Sorted up to the lengths' jitter (5% either way) while the curriculum lasts, then shuffled.
        in_order = all(later >= 0.9 * earlier for earlier, later in zip(longest, longest[1:], strict=False))
        assert in_order == (epoch < 2)
    # The same batches as a run without the curriculum once it is over; each epoch replays (resume).
    plain = BucketBatchSampler.for_training(lengths, DataConfig(batch_frames=20_000), seed=1)
    plain.set_epoch(2)
    assert sampler.batches() == plain.batches()
    sampler.set_epoch(1)
    resumed = BucketBatchSampler.for_training(lengths, data, seed=1)
    resumed.set_epoch(1)
    assert sampler.batches() == resumed.batches()


def test_collate_pads_features_and_targets() -> None:
    vocabulary = Vocabulary.from_texts(["AB"])
    dataset = SpeechDataset(["x", "y"], [torch.ones(3, 2), torch.ones(5, 2)], ["AB", "B"], vocabulary)
    batch = dataset.collate([0, 1])
    assert batch.features.shape == (2, 5, 2) and batch.feature_lengths.tolist() == [3, 5]
    assert torch.all(batch.features[0, 3:] == 0)
    a, b = vocabulary.encode("AB")
    assert batch.targets_in.tolist() == [[1, a, b], [1, b, 0]]
    assert batch.targets_out.tolist() == [[a, b, 2], [b, 2, 0]]
    assert batch.target_lengths.tolist() == [3, 2]


def test_spec_augment_masks_only_inside_utterances() -> None:
    features = torch.ones(4, 50, 20)
    lengths = torch.tensor([50, 40, 25, 10])
    masked = spec_augment(features, lengths, 2, 5, 2, 10, torch.Generator().manual_seed(0))
    assert masked.shape == features.shape
    assert (masked == 0).any()
    for row, length in enumerate(lengths.tolist()):
        # Frequency masks never cover all 20 bins, so whole zero frames come from time masks,
        # which stay inside the utterance and cover at most a fifth of it each.
        silenced = (masked[row] == 0).all(dim=1)
        assert silenced.sum() <= 2 * (length // 5)
        assert not silenced[length:].any()


def test_speed_perturbation_changes_duration_and_is_cached_apart(tmp_path: Path) -> None:
    utterance = read_utterances(AN4 / "audio" / "an10-fjmd-b.flac", require_text=False)[0]
    cache = FeatureCache(tmp_path / "cache", FeatureConfig())
    frames = {speed: cache.features(utterance, speed).shape[0] for speed in (0.9, 1.0, 1.1)}
    assert frames == {0.9: 178, 1.0: 161, 1.1: 146}  # 25,600 samples -> 28,444 and 23,273
    assert len(list((tmp_path / "cache").rglob("*.npy"))) == 3


def test_variants_pick_perturbed_copies_reproducibly() -> None:
    vocabulary = Vocabulary.from_texts(["A"])
    original = [torch.zeros(4, 2) for _ in range(8)]
    faster = [torch.ones(3, 2) for _ in range(8)]
    dataset = SpeechDataset([str(i) for i in range(8)], original, ["A"] * 8, vocabulary, perturbed=[faster])
    assert dataset.collate(range(8)).feature_lengths.tolist() == [4] * 8
    variants = dataset.variants(epoch=0, seed=1)
    assert set(variants) == {0, 1} and dataset.variants(epoch=0, seed=1) == variants  # resumable
    assert dataset.variants(epoch=1, seed=1) != variants
    batch = dataset.collate([Draw(index, variant, seed=index) for index, variant in enumerate(variants)])
    assert batch.feature_lengths.tolist() == [3 if variant else 4 for variant in variants]


def flattened(draws: list[Draw]) -> list[int]:
    """The utterances of `draws`, each joined one after the one it follows."""
    return [index for draw in draws for index in (draw.index, *([draw.then.index] if draw.then else []))]


def test_a_joined_share_of_batches_pairs_each_utterance_with_its_neighbour_the_same_on_resume() -> None:
    batches = [list(range(start, start + 5)) for start in range(0, 1000, 5)]
    variants = [index % 3 for index in range(1000)]
    every = list

    def draws(joined: float, seed: int | None = 11, first: int = 0, shard=every) -> BatchDraws:
        return BatchDraws(batches[first:], variants, seed, shard, joined, first)

    epoch = [draws(0.5)[position] for position in range(len(batches))]
    joined = [batch for batch in epoch if batch[0].then is not None]
    assert 0.35 < len(joined) / len(batches) < 0.65
    for batch, indices in zip(epoch, batches, strict=True):
        assert flattened(batch) == indices  # every utterance once; those alone in their own variant and seed
        assert all(draw.variant == variants[draw.index] and draw.seed == 11 + draw.index for draw in batch)
    for batch in joined:  # pairs of neighbours, the odd last one alone
        assert [(draw.index, draw.then.index if draw.then else None) for draw in batch] == [
            (batch[0].index, batch[0].index + 1),
            (batch[0].index + 2, batch[0].index + 3),
            (batch[0].index + 4, None),
        ]
        # The second heard as the first: at its speed, with its room, noise, line and surroundings.
        assert batch[0].then == Draw(batch[0].index + 1, batch[0].variant, batch[0].seed)
    resumed = draws(0.5, first=37)
    assert [resumed[position] for position in range(len(batches) - 37)] == epoch[37:]
    assert [draws(0.5, seed=12)[position][0].then is None for position in range(len(batches))] != [
        batch[0].then is None for batch in epoch
    ]  # drawn anew each epoch
    assert all(draws(1.0, seed=None)[position][0].then is None for position in range(len(batches)))  # not augmenting
    assert all(draws(0.0)[position][0].then is None for position in range(len(batches)))
    # A rank's shard takes whole pairs: every utterance is in one recording, on one rank.
    ranks = [draws(1.0, shard=lambda items, rank=rank: items[rank::2])[0] for rank in (0, 1)]
    assert sorted(flattened(ranks[0]) + flattened(ranks[1])) == batches[0]


def test_a_joined_draw_is_one_recording_of_both_normalised_whole() -> None:
    vocabulary = Vocabulary.from_texts(["A B", "C"])
    features = [torch.randn(6, 2) + 3, torch.randn(4, 2) - 1, torch.randn(5, 2)]
    normalizer = Normalizer.fit(features, utterance_mean=True)
    dataset = SpeechDataset(["a", "c", "silent"], features, ["A B", "C", ""], vocabulary, normalizer=normalizer)
    example = dataset[Draw(0, 0, then=Draw(1, 0))]
    assert example.id == "a" and example.text == "A B C"
    assert example.tokens.tolist() == vocabulary.encode("A B C")
    torch.testing.assert_close(example.features, normalizer(torch.cat(features[:2])))  # one mean, of both
    assert dataset[Draw(2, 0, then=Draw(1, 0))].text == "C"  # nothing said, then a word: the word
    assert dataset[Draw(1, 0, then=Draw(2, 0))].tokens.tolist() == vocabulary.encode("C")
    batch = dataset.collate([Draw(0, 0, then=Draw(1, 0)), Draw(2, 0)])
    assert batch.feature_lengths.tolist() == [10, 5] and batch.target_lengths.tolist() == [6, 1]
    unspaced = Vocabulary.from_texts(["AB", "C"])  # a script written without spaces is joined without one
    dataset = SpeechDataset(["a", "c"], features[:2], ["AB", "C"], unspaced)
    assert dataset[Draw(0, 0, then=Draw(1, 0))].text == "ABC"


def test_a_joined_second_utterance_is_brought_to_the_first_ones_level() -> None:
    """Log-mel of audio: the second recording 20 dB quieter (a second voice as babble would be)
    joins at the first's level, its digital silence still silence; precomputed features of
    unknown scale are joined as they are."""
    from las.data.front_end.segmentation import frame_energy
    from las.data.front_end.signal import POWER_FLOOR

    generator = torch.Generator().manual_seed(0)
    loud = torch.rand(50, 8, generator=generator) + 0.1
    quiet = torch.cat([torch.zeros(5, 8), 0.01 * (torch.rand(40, 8, generator=generator) + 0.1)])
    features = [torch.log(power + POWER_FLOOR) for power in (loud, quiet)]
    vocabulary = Vocabulary.from_texts(["A", "B"])
    for log_mel in (True, False):
        dataset = SpeechDataset(["loud", "quiet"], features, ["A", "B"], vocabulary, log_mel=log_mel)
        joined = dataset[Draw(0, 0, then=Draw(1, 0))].features
        torch.testing.assert_close(joined[:50], features[0])
        if not log_mel:
            torch.testing.assert_close(joined[50:], features[1])
            continue
        levels = [frame_energy(part).quantile(0.9) for part in (joined[:50], joined[50:])]
        torch.testing.assert_close(levels[0], levels[1], rtol=0, atol=1e-3)
        torch.testing.assert_close(joined[55:], torch.log(100 * quiet[5:] + POWER_FLOOR), rtol=0, atol=0.05)
        assert torch.equal(joined[50:55], features[1][:5])  # zeros stay at the floor


def test_repeated_characters_are_counted_per_utterance_as_ctc_needs_them() -> None:
    from las.data.dataset import PackedTokens
    from las.model.ctc_path import ctc_frames_needed

    draw = random.Random(0)
    for _ in range(200):
        sequences = [
            [draw.randint(0, 3) for _ in range(draw.choice([0, 1, 2, 5, 9]))] for _ in range(draw.randint(0, 8))
        ]
        repeats = PackedTokens(sequences).repeats().tolist()
        assert repeats == [ctc_frames_needed(sequence) - len(sequence) for sequence in sequences]
