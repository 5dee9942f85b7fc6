"""In-memory dataset of normalised features and character ids, length buckets, and collation."""

from __future__ import annotations

import array
import copy
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from las.core.config import DataConfig
from las.core.text import PAD_INDEX, Vocabulary
from las.data.augmentation.augmenter import Source, WaveformAugmentation
from las.data.augmentation.nonspeech import NonSpeech
from las.data.augmentation.word_excerpts import WordExcerpts
from las.data.corpora.utterances import Utterance, Utterances
from las.data.front_end.features import FeatureSet, InMemoryFeatures, Normalizer
from las.data.front_end.segmentation import Levels, frame_energy
from las.data.front_end.signal import POWER_FLOOR
from las.data.front_end.speech_margins import SharedEdges, Surroundings


@dataclass(frozen=True)
class Batch:
    ids: list[str]
    features: torch.Tensor  # (batch, frames, mel_bins), zero (the mean) on padding
    feature_lengths: torch.Tensor  # (batch,) int64, on the CPU as pack_padded_sequence wants
    targets_in: torch.Tensor  # (batch, characters + 1): <sos> c1 ... cn, then <pad>
    targets_out: torch.Tensor  # (batch, characters + 1): c1 ... cn <eos>, then <pad>
    target_lengths: torch.Tensor  # (batch,) characters + 1 (the <eos>)
    texts: list[str | None]
    # How many steps of its targets the speller reads (None: all). A batch in pieces holds rows for
    # the CTC head alone, whose characters the speller would otherwise read to no purpose.
    speller_steps: int | None = None

    def unspelt(self) -> Batch:
        """This batch for the CTC head alone: the speller reads one step of it and has no target
        to learn (its loop is most of a step's time on long utterances)."""
        return dataclasses.replace(self, targets_out=torch.full_like(self.targets_out, PAD_INDEX), speller_steps=1)

    def pin_memory(self) -> Batch:
        """Page-locked copies, so that `to(cuda, non_blocking=True)` overlaps the copy (DataLoader
        calls this with `pin_memory=True`)."""
        return dataclasses.replace(
            self,
            features=self.features.pin_memory(),
            targets_in=self.targets_in.pin_memory(),
            targets_out=self.targets_out.pin_memory(),
            target_lengths=self.target_lengths.pin_memory(),
        )

    def to(self, device: torch.device) -> Batch:
        move = dict(non_blocking=True)
        return dataclasses.replace(
            self,
            features=self.features.to(device, **move),
            targets_in=self.targets_in.to(device, **move),
            targets_out=self.targets_out.to(device, **move),
            target_lengths=self.target_lengths.to(device, **move),
        )


@dataclass(frozen=True)
class Example:
    id: str
    features: torch.Tensor  # (frames, dim), normalised
    tokens: torch.Tensor  # (characters,) int64
    text: str | None


class Draw(NamedTuple):
    """A training item: utterance `index` in `variant` (0: as recorded, k: the k-th perturbed
    speed), augmented as `seed` draws (see `WaveformAugmentation` and `Surroundings`; None: not
    augmented), and `then` another draw heard right after it, as one recording (joined batches)."""

    index: int
    variant: int
    seed: int | None = None
    then: Draw | None = None


# Each batch's joining is drawn from the epoch's seed plus this plus the batch's position: apart
# from every utterance's own draw (the seed plus its index, below a million million).
JOINING_SEED = 2**40


class BatchDraws(Sequence[list[Draw]]):
    """An epoch's `batches` of utterance indices as the DataLoader reads them: each utterance in
    its `variants[index]`, drawn with `seed + index` (None: not augmented), only this rank's
    `shard` of each batch. With augmentation, a `joined` share of the batches is heard as pairs:
    each utterance followed by its neighbour in the batch, as one recording (`in_pairs`: the same
    frames in half the rows); `first` is the first batch's position in its epoch (a resumed
    epoch's). Made as they are read: an epoch's draws made at once are 0.1 GB at a million
    utterances (a tuple and a large integer each), held for the whole epoch."""

    def __init__(
        self,
        batches: Sequence[list[int]],
        variants: Sequence[int],
        seed: int | None,
        shard: Callable[[list[Draw]], list[Draw]],
        joined: float = 0.0,
        first: int = 0,
    ) -> None:
        self.batches, self.variants, self.seed, self.shard = batches, variants, seed, shard
        self.joined, self.first = joined, first

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, position: int) -> list[Draw]:  # type: ignore[override]
        seed = self.seed
        draws = [
            Draw(index, self.variants[index], None if seed is None else seed + index)
            for index in self.batches[position]
        ]
        if seed is not None and self.joined > 0:
            generator = torch.Generator().manual_seed(seed + JOINING_SEED + self.first + position)
            if torch.rand((), generator=generator).item() < self.joined:
                draws = in_pairs(draws)
        return self.shard(draws)


def at_level_of(features: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Log-mel `features` `(frames, mel_bins)` of audio with the gain that brings their loud frames
    (the 90th percentile of frame energy) to `reference`'s: one speaker's sentences in one
    recording are at one level, where two speakers' recordings differ by 10 dB and more, and a
    quieter second voice is what babble sounds like."""
    if not len(features) or not len(reference):
        return features
    gain = float(frame_energy(reference).quantile(0.9) - frame_energy(features).quantile(0.9))  # of power, in nats
    power = (features.exp() - POWER_FLOOR).clamp_min(0)
    return torch.log(power * math.exp(gain) + POWER_FLOOR)


def in_pairs(draws: list[Draw]) -> list[Draw]:
    """Each of `draws` followed by the next as one recording (an odd last one alone), heard as the
    first is: at its speed, with its draws of room, noise, line and surroundings."""
    pairs = [
        first._replace(then=second._replace(variant=first.variant, seed=first.seed))
        for first, second in zip(draws[::2], draws[1::2], strict=False)
    ]
    return pairs + draws[len(pairs) * 2 :]


class PackedTokens(Sequence[torch.Tensor]):
    """Each utterance's character ids `(characters,)` int64, kept end to end in one small-integer
    tensor with offsets: a tensor per utterance costs about 0.9 KB of overhead, 0.9 GB at a million
    utterances, copied again into every DataLoader worker that touches them."""

    def __init__(self, sequences: Iterable[Sequence[int]]) -> None:
        values, lengths = array.array("i"), array.array("q")
        for sequence in sequences:
            values.extend(sequence)
            lengths.append(len(sequence))
        # Character ids fit 16 bits in any vocabulary of characters: half the memory of 32.
        ids = np.frombuffer(values, dtype=np.int32) if values else np.zeros(0, dtype=np.int32)
        narrow = np.iinfo(np.int16)
        fits = not len(ids) or (narrow.min <= ids.min() and ids.max() <= narrow.max)
        self.values = torch.from_numpy(ids.astype(np.int16) if fits else ids.copy())
        self.lengths = (
            torch.frombuffer(lengths, dtype=torch.int64).clone() if lengths else torch.zeros(0, dtype=torch.int64)
        )
        # A column, not a list: a million Python ints are another 36 MB in every process.
        self.offsets = np.concatenate([[0], self.lengths.cumsum(0).numpy()])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> torch.Tensor:  # type: ignore[override]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        return self.values[self.offsets[index] : self.offsets[index + 1]].long()

    def subset(self, indices: Sequence[int]) -> PackedTokens:
        return PackedTokens(self[index].tolist() for index in indices)

    def repeats(self) -> np.ndarray:
        """`(utterances,)` how many characters of each equal the one before it, in one pass over
        the column (CTC needs a blank between repeats)."""
        values = self.values.numpy()
        # Where a character equals the one before it: few, so counted by position (an integer
        # per character of a million transcripts would be a quarter of a gigabyte).
        positions = np.flatnonzero(values[1:] == values[:-1]) + 1
        owners = np.searchsorted(self.offsets, positions, side="right") - 1
        owners = owners[self.offsets[owners] != positions]  # a first character repeats nothing
        return np.bincount(owners, minlength=len(self))


class Sources(Sequence[Source]):
    """Where the audio of each utterance read from audio is, for features computed anew: a view
    of the corpus's columns, not a tuple per utterance (60 MB at a million)."""

    def __init__(self, utterances: Sequence[Utterance]) -> None:
        columns = Utterances.of(utterances)
        self.utterances = columns if all(columns.is_audio) else Utterances(u for u in columns if u.audio_location)

    def __len__(self) -> int:
        return len(self.utterances)

    def __getitem__(self, index: int) -> Source:  # type: ignore[override]
        index = range(len(self))[index]  # negative indices as a list's
        return Source(self.utterances.locations[index], self.utterances.segments.get(index))  # type: ignore[arg-type]


class SpeechDataset(torch.utils.data.Dataset[Example]):
    """Utterances and their features (in memory or memory-mapped), normalised as they are read.

    An item is an utterance index or a `Draw`. With an `augmentation`, a draw may compute the
    features anew from the augmented audio at `sources[index]`, at speed `speeds[variant]`. With
    `surroundings` (features from audio), what surrounds the speech is cut to its margin, found in
    the features as recorded, so that noise drawn into a draw cannot move its edges. With
    `excerpts`, a draw may instead be one word of its utterance; with `nonspeech`, a sound that
    is not speech, with an empty transcript. A draw may be followed by another (`Draw.then`) as
    one recording, the second brought to the first's level.
    """

    def __init__(
        self,
        ids: Sequence[str],
        features: Sequence[torch.Tensor],
        texts: Sequence[str | None],
        vocabulary: Vocabulary,
        with_targets: bool = True,
        perturbed: Sequence[Sequence[torch.Tensor]] = (),
        normalizer: Normalizer | None = None,
        augmentation: WaveformAugmentation | None = None,
        sources: Sequence[Source] = (),
        speeds: Sequence[float] = (1.0,),
        surroundings: Surroundings | None = None,
        excerpts: WordExcerpts | None = None,
        nonspeech: NonSpeech | None = None,
        log_mel: bool = False,
    ) -> None:
        """`with_targets=False` for decoding, where transcripts are references at most. `log_mel`:
        the features are las's log-mel of audio, where a gain is known (not precomputed ones)."""
        self.log_mel = log_mel
        self.augmentation = augmentation
        self.surroundings = surroundings
        self.excerpts = excerpts
        self.nonspeech = nonspeech
        self.sources = sources
        self.speeds = list(speeds)  # per variant
        self.ids = ids
        self.features = as_feature_set(features)
        self.texts = texts
        self.vocabulary = vocabulary
        self.perturbed = [as_feature_set(variant) for variant in perturbed]
        self.edges = SharedEdges(surroundings, 1 + len(self.perturbed), len(self.ids)) if surroundings else None
        self.normalizer = normalizer
        # Encoded once here, not in every batch.
        self.tokens = PackedTokens(vocabulary.encode(text) if with_targets else [] for text in self.texts)

    @classmethod
    def from_utterances(
        cls,
        utterances: Sequence[Utterance],
        features: Sequence[torch.Tensor],
        normalizer: Normalizer,
        vocabulary: Vocabulary,
        with_targets: bool = True,
        perturbed: Sequence[Sequence[torch.Tensor]] = (),
        augmentation: WaveformAugmentation | None = None,
        speeds: Sequence[float] = (1.0,),
        surroundings: Surroundings | None = None,
        excerpts: WordExcerpts | None = None,
        nonspeech: NonSpeech | None = None,
    ) -> SpeechDataset:
        columns = Utterances.of(utterances)
        return cls(
            columns.ids,  # type: ignore[arg-type]
            features,
            columns.texts,
            vocabulary,
            with_targets,
            perturbed,
            normalizer,
            augmentation,
            Sources(columns),
            speeds,
            surroundings,
            excerpts,
            nonspeech,
            log_mel=all(columns.is_audio),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, item: int | Draw) -> Example:
        draw = item if isinstance(item, Draw) else Draw(item, 0)
        features, tokens, text = self.heard(draw)
        if draw.then is not None:  # one recording: this utterance, then the next, normalised whole
            later, later_tokens, later_text = self.heard(draw.then)
            features = torch.cat([features, at_level_of(later, features) if self.log_mel else later])
            if text and later_text:
                text = f"{text}{self.vocabulary.word_separator}{later_text}"
                tokens = torch.tensor(self.vocabulary.encode(text), dtype=torch.long)
            elif later_text:
                text, tokens = later_text, later_tokens
        if self.normalizer is not None:
            features = self.normalizer(features)
        return Example(self.ids[draw.index], features, tokens, text)

    def heard(self, draw: Draw) -> tuple[torch.Tensor, torch.Tensor, str | None]:
        """The features `(frames, dim)` of `draw` as training hears them (not yet normalised), its
        tokens and its text."""
        index, variant, seed, _ = draw
        recorded = (self.features if variant == 0 else self.perturbed[variant - 1])[index]
        features = None
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        if self.augmentation is not None and generator is not None:
            features = self.augmentation.features(self.sources[index], self.speeds[variant], generator)
        if features is None:
            features = recorded
        whole, tokens, text = features, self.tokens[index], self.texts[index]
        if self.edges is not None:
            features = self.edges.heard(variant, index, recorded, features, generator)
        # Drawn last, so that the draws before it are the same with or without it.
        if self.excerpts is not None and generator is not None:
            excerpt = self.excerpts.draw(index, self.speeds[variant], len(whole), generator)
            if excerpt is not None:
                features, text = whole[excerpt.start : excerpt.end], excerpt.text
                tokens = torch.tensor(self.vocabulary.encode(text), dtype=torch.long)
        if self.nonspeech is not None and generator is not None:
            sound = self.nonspeech.draw(len(whole), generator)
            if sound is not None:  # heard as decoding hears it: trimmed to where it rises
                start, end = self.surroundings.span(Levels.of(sound)) if self.surroundings else (0, len(sound))
                features, text, tokens = sound[start:end], "", torch.zeros(0, dtype=torch.long)
        return features, tokens, text

    def subset(self, indices: Sequence[int]) -> SpeechDataset:
        """The utterances at `indices`, in that order (a rank's share of the dev set)."""
        part = copy.copy(self)
        part.ids = [self.ids[index] for index in indices]
        part.features = InMemoryFeatures([self.features[index] for index in indices])
        part.texts = [self.texts[index] for index in indices]
        part.tokens = self.tokens.subset(indices)
        part.perturbed = [InMemoryFeatures([variant[index] for index in indices]) for variant in self.perturbed]
        part.edges = self.edges.subset(indices) if self.edges else None
        return part

    def frame_counts(self) -> list[int]:
        return self.features.frame_counts()

    def target_lengths(self, indices: Sequence[int]) -> torch.Tensor:
        """`(len(indices),)` characters + 1 (the <eos>) of each utterance."""
        return self.tokens.lengths[list(indices)] + 1

    def variants(self, epoch: int, seed: int) -> list[int]:
        """Which variant of each utterance to train on in `epoch`: uniform over the original and
        its perturbed copies, seeded by (seed, epoch) so that a resumed epoch draws the same."""
        generator = torch.Generator().manual_seed(seed * 100_019 + epoch)
        return torch.randint(1 + len(self.perturbed), (len(self),), generator=generator).tolist()

    def collate(self, items: Sequence[int | Draw]) -> Batch:
        return self.batch([self[item] for item in items])

    def batch(self, examples: Sequence[Example]) -> Batch:
        """Padded batch of examples (the DataLoader's collate function)."""
        targets_in, targets_out, target_lengths = speller_targets(
            [example.tokens for example in examples], self.vocabulary
        )
        return Batch(
            ids=[example.id for example in examples],
            features=pad_sequence([example.features for example in examples], batch_first=True),
            feature_lengths=torch.tensor([example.features.shape[0] for example in examples]),
            targets_in=targets_in,
            targets_out=targets_out,
            target_lengths=target_lengths,
            texts=[example.text for example in examples],
        )


def as_feature_set(features: Sequence[torch.Tensor]) -> FeatureSet:
    return features if isinstance(features, FeatureSet) else InMemoryFeatures(features)


def speller_targets(
    tokens: Sequence[torch.Tensor], vocabulary: Vocabulary
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher-forcing inputs `<sos> c1..cn` and targets `c1..cn <eos>`, PAD-padded to
    `(batch, longest + 1)`, and their lengths `(batch,)` (characters + 1)."""
    sos, eos = torch.tensor([vocabulary.sos]), torch.tensor([vocabulary.eos])
    targets_in = pad_sequence([torch.cat([sos, item]) for item in tokens], True, vocabulary.pad)
    targets_out = pad_sequence([torch.cat([item, eos]) for item in tokens], True, vocabulary.pad)
    return targets_in, targets_out, torch.tensor([len(item) + 1 for item in tokens])


class BucketBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of utterances of similar length, so that little of each batch is padding.

    Lengths are jittered by a few percent before sorting so that batches differ between epochs;
    the batch order is shuffled, but for the first `shortest_first_epochs` (a curriculum: shortest
    first). Both are seeded by (seed, epoch), so an epoch can be replayed exactly when training
    resumes in its middle.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        max_batch_frames: int,
        shuffle: bool = True,
        seed: int = 0,
        shortest_first_epochs: int = 0,
    ) -> None:
        self.lengths = torch.tensor(lengths, dtype=torch.float64)
        self.batch_size = batch_size
        self.max_batch_frames = max_batch_frames
        self.shuffle = shuffle
        self.seed = seed
        self.shortest_first_epochs = shortest_first_epochs  # data.shortest_first_epochs
        self.epoch = 0
        self.composed: tuple[int, list[list[int]]] | None = None  # (epoch, its batches)

    @classmethod
    def for_training(cls, lengths: Sequence[int], data: DataConfig, seed: int) -> BucketBatchSampler:
        """By `data.batch_frames` where it is set, else by `data.batch_size` (within `max_batch_frames`)."""
        if data.batch_frames:
            rows, frames = max(1, len(lengths)), data.batch_frames
        else:
            rows, frames = data.batch_size, data.max_batch_frames
        return cls(lengths, rows, frames, seed=seed, shortest_first_epochs=data.shortest_first_epochs)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def batches(self) -> list[list[int]]:
        """This epoch's batches; composed once per epoch (at a million utterances, seconds)."""
        if self.composed is None or self.composed[0] != self.epoch:
            self.composed = (self.epoch, self.compose())
        return self.composed[1]

    def compose(self) -> list[list[int]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        keys = self.lengths
        if self.shuffle:
            keys = keys * (1 + 0.1 * (torch.rand(len(keys), generator=generator, dtype=torch.float64) - 0.5))
        lengths = self.lengths.tolist()
        batches: list[list[int]] = []
        current: list[int] = []
        longest = 0.0
        for index in torch.argsort(keys).tolist():
            length = lengths[index]
            too_many = max(longest, length) * (len(current) + 1) > self.max_batch_frames
            if current and (len(current) == self.batch_size or too_many):
                batches.append(current)
                current, longest = [], 0.0
            current.append(index)
            longest = max(longest, length)
        if current:
            batches.append(current)
        if self.shuffle and self.epoch >= self.shortest_first_epochs:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())

    def __len__(self) -> int:
        return len(self.batches())
