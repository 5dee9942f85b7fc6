"""The data a run trains on: both manifests read and checked, their features fetched (cached), the
normaliser and vocabulary fitted when new, and the training set's augmentation built."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np

from las.core.config import AugmentConfig, Config, TrainConfig
from las.core.errors import LasError
from las.core.progress import warn
from las.core.text import Vocabulary, characters_of
from las.data.augmentation.augmenter import WaveformAugmentation
from las.data.augmentation.nonspeech import NonSpeech
from las.data.augmentation.word_excerpts import WordExcerpts
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import check_characters, read_utterances, warn_about_audio
from las.data.dataset import Sources, SpeechDataset
from las.data.front_end.features import Normalizer, feature_dimension
from las.data.front_end.speech_margins import Surroundings
from las.training.initialisation import check_shared_characters


@dataclass
class Corpus:
    train: SpeechDataset
    dev: SpeechDataset
    normalizer: Normalizer
    config: Config  # the settings trained with: without audio-only effects on precomputed features


def load_corpus(
    config: Config, vocabulary: Vocabulary | None, normalizer: Normalizer | None, extend_vocabulary: bool = False
) -> Corpus:
    """Read both manifests, fetch features (cached), fit the normaliser and vocabulary if new;
    with `extend_vocabulary` (fine-tuning), `vocabulary` gains the training texts' new characters."""
    data = config.data
    skip = data.bad_utterances == "skip"
    train_utterances = read_utterances(data.train, input_format=data.input_format, skip_bad=skip)
    dev_utterances = read_utterances(data.dev, input_format=data.input_format, skip_bad=skip)
    characters = characters_of(train_utterances.texts)
    if vocabulary is None:
        vocabulary = Vocabulary.from_texts(characters)
    elif extend_vocabulary:
        check_shared_characters(characters, vocabulary, data.train, config.train.init)
        vocabulary = vocabulary.extended(characters)
    train_utterances = check_characters(train_utterances, vocabulary, data.train, skip)
    dev_utterances = check_characters(dev_utterances, vocabulary, data.dev, skip)
    for utterances, source in ((train_utterances, data.train), (dev_utterances, data.dev)):
        rows = sampled_rows(len(utterances), AUDIO_CHECKS, config.train.seed)
        warn_about_audio([utterances[row] for row in rows], source, len(utterances))
    if not all(train_utterances.is_audio):
        config = without_audio_effects(config)
    cache = FeatureCache(data.cache_dir, config.features, data.workers, data.extract_ahead)
    change = config.train.speed_perturbation
    speeds = [1 - change, 1 + change] if change else []
    if skip:  # only utterances whose features can be computed, at every speed
        train_utterances = cache.usable(train_utterances, data.train, [1.0, *speeds])
        dev_utterances = cache.usable(dev_utterances, data.dev)
    sample = normalizer_sample(len(train_utterances), config.train.seed) if normalizer is None else []
    train_features, *perturbed = cache.load_at_speeds(train_utterances, "train features", [1.0, *speeds], sample)
    dev_features = cache.load(dev_utterances, "dev features")
    if feature_dimension(train_features, config.data.train) != feature_dimension(dev_features, config.data.dev):
        raise LasError(f"{config.data.train} and {config.data.dev} have features of different dimensions")
    surroundings = Surroundings.of(config)
    if normalizer is None:  # from the features as the model hears them
        heard = (train_features[index] for index in sample)
        if surroundings is not None:
            heard = map(surroundings.trim, heard)
        features = config.features
        normalizer = Normalizer.fit(
            heard, features.utterance_mean, features.frames(features.mean_prior_seconds), features.causal
        )
    augment = config.train.augment
    augmentation = None
    if augment.enabled:
        # The sources only while the babble pool is drawn from them: the dataset keeps its own.
        sources = Sources(train_utterances)
        augmentation = WaveformAugmentation.of(augment, config.features, sources, config.train.seed)
        del sources
    train_set = SpeechDataset.from_utterances(
        train_utterances,
        train_features,
        normalizer,
        vocabulary,
        True,
        perturbed,
        augmentation,
        [1.0, *speeds],
        surroundings,
        WordExcerpts.of(config, train_utterances, lambda: cache.identify(train_utterances)),
        NonSpeech.of(config, augmentation.pool if augmentation else []),
    )
    if config.model.ctc_weight > 0:
        warn_about_ctc_alignments(train_set, config.model.reduction, config.data.train)
    dev_set = SpeechDataset.from_utterances(
        dev_utterances,
        dev_features,
        normalizer,
        vocabulary,
        with_targets=False,
        surroundings=Surroundings.of(config, decoding=True),
    )
    return Corpus(train_set, dev_set, normalizer, config)


NORMALIZER_UTTERANCES = 2000  # statistics of 80 means and deviations: settled long before this
# Training reads the headers of this many files of each manifest for `warn_about_audio` (a corpus
# recorded below a telephone line's rate, or cut short): all of AN4's, a sample of a million.
AUDIO_CHECKS = 500


def normalizer_sample(count: int, seed: int) -> list[int]:
    """The training utterances the normaliser is fitted on: all of a corpus up to
    NORMALIZER_UTTERANCES, else that many drawn with the run's seed, in corpus order (reads
    stay sequential). Reading every feature of a large corpus once per run is minutes at 1,000 hours."""
    return sampled_rows(count, NORMALIZER_UTTERANCES, seed)


def sampled_rows(count: int, limit: int, seed: int) -> list[int]:
    """All rows of a corpus of `count` up to `limit`, else `limit` of them drawn with `seed`, in order."""
    if count <= limit:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), limit))


def without_audio_effects(config: Config) -> Config:
    """Speed perturbation, waveform augmentation and trimming what surrounds the speech need
    audio (features of unknown scale tell no pauses). For precomputed features the defaults' are
    turned off, with a warning; settings a user chose are refused. Draws made of features (single
    words, tight clips, joined pairs) stay."""
    train, defaults = config.train, TrainConfig()
    settings = {"train.speed_perturbation": (train.speed_perturbation, defaults.speed_perturbation)}
    for name in (*AugmentConfig.WAVEFORM_EFFECTS, "snr_low", "snr_high"):
        settings[f"train.augment.{name}"] = (getattr(train.augment, name), getattr(defaults.augment, name))
    chosen = [setting for setting, (value, default) in settings.items() if value and value != default]
    if chosen:
        raise LasError(f"{config.data.train}: {chosen[0]} needs audio, not precomputed features")
    if train.speed_perturbation or train.augment.enabled:
        warn(f"{config.data.train}: precomputed features: no speed perturbation or waveform augmentation (need audio)")
    off = replace(train.augment, **dict.fromkeys(AugmentConfig.WAVEFORM_EFFECTS, 0.0))
    features = replace(config.features, trim_surroundings=False)
    return replace(config, features=features, train=replace(train, speed_perturbation=0.0, augment=off))


def warn_about_ctc_alignments(dataset: SpeechDataset, reduction: int, source: str) -> None:
    """Name the utterances too short for their transcripts under CTC: its loss cannot align them
    and counts them as zero (zero_infinity), so they would otherwise be dropped from it silently.
    `reduction`: input frames per encoder frame."""
    tokens = dataset.tokens
    needed = tokens.lengths.numpy() + tokens.repeats()  # as ctc_frames_needed counts, for all at once
    frames = -(-np.asarray(dataset.frame_counts()) // reduction)
    short = [dataset.ids[index] for index in np.flatnonzero(frames < needed)]
    if short:
        warn(
            f"{source}: {len(short)} utterances have fewer encoder frames than CTC needs for their transcripts "
            f"(e.g. {short[0]!r}); the CTC loss ignores them "
            "(a smaller model.pyramid_layers or model.frame_stacking would not)"
        )
