"""The single source of truth for every setting: frozen dataclasses, TOML files, `--set` overrides.

A `Config` is built from the defaults below, then a TOML file (`--config`), then `KEY=VALUE`
overrides (`--set model.attention=location`), each layer replacing only the fields it names.
It is saved inside every checkpoint, so decoding needs nothing but the checkpoint.

Every field declares what it accepts next to its default: a `Literal` of choices, or a `Range`
in its `Annotated` type. Sections check themselves when they are made, so an invalid config
cannot exist — whether it comes from the defaults, a TOML file, `--set` or a checkpoint — and
every command fails on a bad value before any work, naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from las.core.errors import LasError


@dataclass(frozen=True)
class Range:
    """The numbers a field accepts: from `minimum` (excluded when `open_minimum`) to `maximum`."""

    minimum: float | None = None
    maximum: float | None = None
    open_minimum: bool = False

    def check(self, value: float, key: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise LasError(f"config key {key!r}: expected a finite number, got {value}")
        low = self.minimum is None or value > self.minimum or (value == self.minimum and not self.open_minimum)
        high = self.maximum is None or value <= self.maximum
        if not (low and high):
            raise LasError(f"config key {key!r}: expected {self}, got {value}")

    def __str__(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.open_minimum else '>='} {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum:g}")
        return "a number " + " and ".join(parts)


@dataclass(frozen=True)
class NonEmpty:
    """A text field that must name something (an empty path would mean the current directory)."""

    def check(self, value: str, key: str) -> None:
        if not value.strip():
            raise LasError(f"config key {key!r}: must not be empty")


Count = Annotated[int, Range(1)]  # sizes and counts of at least one
NonNegative = Annotated[int, Range(0)]
Positive = Annotated[float, Range(0, open_minimum=True)]
Fraction = Annotated[float, Range(0, 1)]  # weights and rates in [0, 1]
PathText = Annotated[str, NonEmpty()]
Device = Literal["auto", "cpu", "cuda"]
# How to read an input: auto (by what the path is) or a reader of las.data.manifest.READERS.
InputFormat = Literal["auto", "tsv", "jsonl", "lhotse", "kaldi", "librispeech", "hw4", "hw4-folder", "audio"]
ListenerKind = Literal["pblstm", "plstm", "transformer", "conformer"]
SpellerKind = Literal["lstm", "transformer"]
Dereverberation = Literal["off", "decoding", "always"]  # las.data.dereverberation
TimeReduction = Literal["concat", "conv"]  # las.model.attention_listener
AttentionName = Literal["dot", "scaled_dot", "general", "additive", "location", "gmm", "monotonic", "monotonic_chunk"]
StrategyName = Literal["greedy", "sample", "beam", "ctc"]
# auto: bf16 where it runs, else fp16 on CUDA, else fp32 (las.core.device.resolve_precision).
Precision = Literal["fp32", "bf16", "fp16", "auto"]
WordTimes = Literal["ctc", "attention"]
ConfidenceMeasure = Literal["entropy", "probability"]  # las/recognition/confidence.py
ConfidenceSource = Literal["both", "speller", "ctc"]  # whose distributions (ctc: needs a CTC head)


class Section:
    """A config section: its fields are checked against their declared choices and ranges on creation."""

    name: ClassVar[str]

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):  # type: ignore[arg-type]
            check_value(getattr(self, item.name), field_hints(type(self))[item.name], f"{self.name}.{item.name}")


def field_hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind, include_extras=True)


def is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


def named_values(kind: Any) -> tuple[Any, ...]:
    """The values a field names: a Literal's, or the Literal's of a union such as
    `float | Literal["auto"]` (a number, or a value worked out from the other settings)."""
    if typing.get_origin(kind) is Literal:
        return typing.get_args(kind)
    members = typing.get_args(kind) if is_union(kind) else ()
    return tuple(
        value for member in members if typing.get_origin(member) is Literal for value in typing.get_args(member)
    )


def check_value(value: Any, hint: Any, key: str) -> None:
    """Refuse a value outside the field's choices or range (types are settled by `_coerce`)."""
    rules = hint.__metadata__ if typing.get_origin(hint) is Annotated else ()
    kind = typing.get_args(hint)[0] if rules else hint
    named = named_values(kind)
    if isinstance(value, str) and value in named:
        return  # a number's "auto" is resolved where it is read
    if typing.get_origin(kind) is Literal or named and (isinstance(value, bool) or not isinstance(value, (int, float))):
        choices = ", ".join(map(str, named)) + (", or a number" if is_union(kind) else "")
        raise LasError(f"config key {key!r}: {value!r} is not one of {choices}")
    for rule in rules:
        if isinstance(rule, (Range, NonEmpty)):
            rule.check(value, key)


@dataclass(frozen=True)
class Flag:
    """A field that `las decode` also takes as a command-line option (`--set` takes them all)."""

    option: str  # e.g. "--beam-size"
    help: str


@dataclass(frozen=True)
class FeatureConfig(Section):
    """Log-mel filterbank front end (computed once, cached on disk)."""

    name: ClassVar[str] = "features"
    sample_rate: Annotated[int, Range(1000)] = 16000
    mel_bins: Count = 80
    window_ms: Positive = 25.0
    hop_ms: Positive = 10.0
    # Subtract each utterance's per-bin mean before the global normalisation: cancels a fixed
    # channel response (microphone, telephone line), which adds a constant to each log-mel bin.
    utterance_mean: bool = True
    # ... counting the training frames' average as this many seconds of the utterance's own: a
    # word alone keeps the spectrum that tells it apart (single words cut from AN4 dev: 30% -> 45%
    # right, 3 seeds), a sentence's mean stays mostly its own (docs/archive/experiments.md, "A word alone").
    mean_prior_seconds: Annotated[float, Range(0, 60)] = 0.3
    # A recording that peaks under this level is raised to it before analysis (las/data/loudness.py):
    # log power's floor swallows the soft sounds of speech 30-60 dB down. AN4's quietest training
    # recording peaks at -23 dBFS; raised only to -30, dev 30 dB down read 1.25x worse.
    quiet_peak_dbfs: Annotated[float, Range(-60, 0)] = -20.0
    # Silence or background before and after the speech is cut to at most this much in training
    # (at decoding, to decode.surroundings_seconds; las/data/surroundings.py): AN4's utterances
    # open with about 0.33 s of lead-in, while padded exports and phone apps bring seconds of it,
    # which moved the per-utterance mean and misled the attention (docs/archive/experiments.md, "Surroundings").
    trim_surroundings: bool = True
    surroundings_seconds: Annotated[float, Range(0, 5)] = 0.3
    # Late reverberation removed from the waveform before analysis by single-channel weighted
    # prediction error, where that takes 0.3 dB or more of its energy away (las/data/dereverberation.py):
    # at decoding (the default; training's draws stay as they are, and as fast), in training too
    # ("always"), or not at all ("off"). A room of RT60 0.6 s decoded at 2.6x the clean CER, and at
    # 2.0x with it, every other condition as before (3 seeds; docs/archive/experiments.md, "Reverberation").
    dereverberation: Dereverberation = "decoding"
    # A front end that reads each frame's past only, as audio arriving can be read (streaming
    # models, las/recognition/streaming.py): frames padded with zeros rather than mirrored at the
    # ends, each utterance's mean a running one (with its prior), and nothing that reads the whole
    # recording first (declipping, its offset, its level, dereverberation at decoding).
    causal: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.causal and self.dereverberation == "always":
            raise LasError(
                "config key 'features.dereverberation': a causal front end cannot wait for the whole "
                "recording that dereverberation filters; set it to off"
            )

    def frames(self, seconds: float) -> int:
        """How many feature frames last `seconds`."""
        return round(seconds * 1000 / self.hop_ms)

    def extraction(self) -> dict[str, float | bool]:
        """The settings that decide the features themselves (and the cache's key), not what is
        done with them afterwards."""
        after = ("utterance_mean", "mean_prior_seconds", "trim_surroundings", "surroundings_seconds")
        settings = {key: value for key, value in dataclasses.asdict(self).items() if key not in after}
        return settings | {"dereverberation": self.dereverberates}

    @property
    def dereverberates(self) -> bool:
        """Whether the front end removes reverberation (`at_decoding` turns "decoding" on)."""
        return self.dereverberation == "always"

    def at_decoding(self) -> FeatureConfig:
        """The front end as decoding runs it (a causal one never dereverberates)."""
        if self.dereverberation == "decoding" and not self.causal:
            return dataclasses.replace(self, dereverberation="always")
        return self


@dataclass(frozen=True)
class DataConfig(Section):
    name: ClassVar[str] = "data"
    train: PathText = "data/an4/train.tsv"
    dev: PathText = "data/an4/dev.tsv"
    # Word times of the training utterances (CTM, from `las align`) for train.augment.words;
    # auto: the training manifest's name with .ctm (a data folder's words.ctm) where there is one;
    # "" for none.
    train_alignment: str = "auto"
    input_format: InputFormat = "auto"
    # Feature cache shared by all runs, keyed by audio content and feature settings; auto:
    # $XDG_CACHE_HOME/las/features, else ~/.cache/las/features.
    cache_dir: PathText = "auto"
    batch_size: Count = 16
    # Largest padded batch in input frames: long utterances come in smaller batches.
    max_batch_frames: Count = 8000
    # Batches by frames (> 0): utterances of similar length, as many as fit this many padded
    # input frames, so every batch costs about the same whatever the corpus's lengths (batch_size
    # and max_batch_frames then set nothing). 0: batches of batch_size utterances.
    batch_frames: NonNegative = 0
    # Batches by frames sized from the GPU (> 0): a new run on CUDA sets data.batch_frames to the
    # most padded frames whose training step peaks within this share of the GPU's memory, probed
    # on the corpus's longest utterances (las/training/batch_memory.py), and no more than a data.batch_frames
    # already set (a recipe's: its learning rate and schedule were found for it). The run's config
    # keeps the result, so a resumed run batches as it began. Leave room for what the probe does
    # not see: the allocator's slack, train.cuda_graphs' memory per bucket. On a CPU: no change.
    batch_memory: Annotated[float, Range(0, 0.95)] = 0.0
    # A curriculum (SortaGrad, Amodei et al. 2016; ESPnet's sortagrad): the first this many epochs
    # take their batches shortest first rather than shuffled, so that attention meets short
    # utterances, which it aligns sooner, before long ones. 0: every epoch shuffled.
    shortest_first_epochs: NonNegative = 0
    # Processes that extract features and load training batches (0: all in the main process).
    workers: NonNegative = 2
    # A training corpus of up to this many utterances (counted at each speed of
    # train.speed_perturbation) has its features computed before training starts, so that a file
    # that cannot be decoded stops the run before it begins. A larger one starts at once: each
    # file's header is read for its length, and its features are computed (and cached) by the
    # workers as the batches first need them; a file whose audio then cannot be decoded stops
    # training when it is reached (data.bad_utterances=skip checks every file first).
    extract_ahead: NonNegative = 20_000
    # An utterance that cannot be used — missing, unreadable, empty or non-finite audio or features,
    # audio shorter than one window, a segment outside its recording, an empty transcript,
    # characters outside the vocabulary: error stops naming it; skip leaves it out with a warning.
    bad_utterances: Literal["error", "skip"] = "error"


@dataclass(frozen=True)
class ModelConfig(Section):
    name: ClassVar[str] = "model"
    listener_hidden: Count = 160  # per direction
    # Each halves the time axis: 2**layers shorter. Two (40 ms frames): at 8x, 7% of AN4 training
    # utterances have fewer frames than CTC needs for their characters.
    pyramid_layers: NonNegative = 2
    key_dim: Count = 128
    value_dim: Count = 128
    attention: AttentionName = "location"
    attention_heads: Count = 1  # > 1: multi-head attention of that kind (divides key_dim, value_dim)
    attention_temperature: Positive = 1.0  # > 1 smooths attention weights, < 1 sharpens them
    location_channels: Count = 10
    location_kernel: Count = 15
    cumulative_attention: bool = True  # location attention convolves the sum of all previous weights
    # gmm (Graves 2013): this many Gaussians moved forward every step; softplus: Battenberg et
    # al.'s V2 (softplus offsets and widths, softmax mixture weights), else Graves's exponentials.
    gmm_mixtures: Count = 5
    gmm_softplus: bool = True
    chunk_size: Count = 4  # monotonic_chunk (MoChA): frames of the soft chunk ending at the selected one
    embedding_dim: Count = 128
    speller_hidden: Count = 256
    speller_layers: Count = 1
    dropout: Annotated[float, Range(0, 0.95)] = 0.2
    locked_dropout: bool = False  # listener: one dropout mask per utterance, shared by all frames
    tie_embedding: bool = False
    ctc_weight: Fraction = 0.5  # λ of the joint CTC-attention loss; 0 removes the CTC head
    # Self-attention (the seed lecture's last case study; las/model/attention_listener.py,
    # las/model/transformer_speller.py). A transformer or conformer listener shortens time by
    # 2**pyramid_layers (time_reduction: frames concatenated, or strided convolutions), then runs
    # listener_layers layers; a transformer speller has speller_layers layers. Both are
    # transformer_dim wide with transformer_heads heads unless speller_dim and speller_feedforward
    # give the speller sizes of its own (0: the listener's); model.dropout applies.
    listener: ListenerKind = "pblstm"
    # plstm: the pyramid's LSTMs read forwards only, and the top layer hears this many encoder
    # frames ahead (2**pyramid_layers input frames each): a listener for streaming
    # (las/model/streaming_listener.py), whose look-ahead is this, in seconds: lookahead x
    # 2**pyramid_layers x features.hop_ms.
    lookahead: NonNegative = 0
    speller: SpellerKind = "lstm"
    time_reduction: TimeReduction = "conv"
    listener_layers: Count = 6
    transformer_dim: Count = 256
    transformer_heads: Count = 4
    transformer_feedforward: Count = 1024
    conformer_kernel: Count = 15  # the Conformer's depthwise convolution over encoder frames (odd)
    speller_dim: NonNegative = 0
    speller_feedforward: NonNegative = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_self_attention()
        if self.attention_heads > 1 and self.attention in ("gmm", "monotonic", "monotonic_chunk"):
            raise LasError(f"config key 'model.attention_heads': {self.attention} attention has one head")
        if self.key_dim % self.attention_heads or self.value_dim % self.attention_heads:
            raise LasError(
                f"config key 'model.attention_heads': {self.attention_heads} must divide "
                f"model.key_dim={self.key_dim} and model.value_dim={self.value_dim}"
            )

    @property
    def guidable(self) -> bool:
        """Whether training can teach the attention the CTC head's alignment (las.model.guide): an
        LSTM speller, whose attention of any kind gives a distribution over the frames in training
        (a monotonic one's is its expected alignment), and a CTC head."""
        return self.speller == "lstm" and self.ctc_weight > 0

    @property
    def transformer_speller_dim(self) -> int:
        return self.speller_dim or self.transformer_dim

    @property
    def transformer_speller_feedforward(self) -> int:
        return self.speller_feedforward or self.transformer_feedforward

    def check_self_attention(self) -> None:
        """Refuse settings that the chosen listener or speller would not honour."""
        widths = {"transformer_dim": self.transformer_dim, "speller_dim": self.transformer_speller_dim}
        for key, width in widths.items():
            if width % self.transformer_heads:
                raise LasError(
                    f"config key 'model.transformer_heads': {self.transformer_heads} must divide model.{key}={width}"
                )
        for key in ("speller_dim", "speller_feedforward"):
            if self.speller != "transformer" and getattr(self, key):
                raise LasError(
                    f"config key 'model.{key}': sizes a transformer speller; the LSTM speller's "
                    "width is model.speller_hidden"
                )
        if self.conformer_kernel % 2 == 0:
            raise LasError(f"config key 'model.conformer_kernel': must be odd, got {self.conformer_kernel}")
        if self.listener not in ("pblstm", "plstm") and self.locked_dropout:
            raise LasError(f"config key 'model.locked_dropout': a {self.listener} listener has no recurrence to lock")
        if self.listener != "plstm" and self.lookahead:
            raise LasError(
                f"config key 'model.lookahead': bounds what a plstm listener hears ahead; a {self.listener} "
                "listener hears the whole recording"
            )
        if self.speller == "transformer":
            chosen = {"attention": "location", "attention_heads": 1, "attention_temperature": 1.0}
            for key, default in chosen.items():
                if getattr(self, key) != default:
                    raise LasError(
                        f"config key 'model.{key}': the transformer speller's cross-attention is scaled "
                        f"dot-product in model.transformer_heads heads; model.{key} is the LSTM speller's"
                    )


@dataclass(frozen=True)
class AugmentConfig(Section):
    """Waveform augmentation (las/data/channels.py): per utterance and epoch, each effect with its
    probability, drawn from a generator seeded by (seed, epoch, utterance) so a resumed run draws
    the same. Augmented utterances are read and featurised on the fly by the DataLoader workers.
    The defaults (with speed perturbation, per-utterance normalisation and 100 epochs) keep clean
    AN4 dev CER and hold it through a telephone line and noise (docs/archive/experiments.md, 3 seeds); on
    precomputed features they are off."""

    name: ClassVar[str] = "train.augment"
    reverberation: Fraction = 0.15  # a synthetic room, RT60 drawn from 0.2-0.8 s
    noise: Fraction = 0.5  # babble of other training utterances, white or pink noise ...
    snr_low: Annotated[float, Range(-10, 60)] = 0.0  # ... at an SNR drawn from snr_low-snr_high dB
    snr_high: Annotated[float, Range(-10, 60)] = 30.0
    telephone: Fraction = 0.3  # a narrowband line: band edges drawn near 300 and 3400 Hz, 8 kHz, mu-law
    gain_db: Annotated[float, Range(0, 40)] = 6.0  # a gain drawn from +-gain_db
    # A quiet microphone: the recording 20-40 dB quieter, in 16 bits, which the front end raises
    # back with the quantiser's noise and steps in its soft sounds (AN4 dev 40 dB down: 1.12x).
    quiet: Fraction = 0.0
    # A microphone set too hot: the peak driven 3-20 dB over full scale and cut flat there, in 16
    # bits, then filled in by the front end as decoding fills it (las/data/declipping.py; AN4 dev
    # so, +10 dB: 4% of samples cut, 1.49x the CER; +20 dB: 22%, 2.48x; 3 seeds, no training).
    clipping: Fraction = 0.0
    # A compressor, as a phone's automatic gain or a broadcast chain leaves speech: each frame
    # (5-30 ms) louder than a threshold 10-30 dB under the loudest one turned down 2-10 to 1, the
    # whole raised to a -1 dBFS peak, in 16 bits (AN4 dev through 4:1 at -40 dBFS: 1.32x the CER,
    # 3 seeds, no training).
    compression: Fraction = 0.0
    # A tight crop: the lead-in and the trail each cut to a random share of themselves, down to
    # none, as isolated words and clips cut at the speech arrive (with features.trim_surroundings).
    crop: Fraction = 0.25
    # Or, with this probability, up to a second more of the recording's own background before and
    # after it (features.trim_surroundings): what the front end keeps around the words of a
    # recording made with seconds of it.
    surroundings: Fraction = 0.0
    # Of the draws, this share becomes one word of its utterance cut at its word times
    # (data.train_alignment), as isolated words arrive; the rest keep the whole utterance.
    words: Fraction = 0.1
    # Or, with this probability, all of its words cut at the first one's start and the last one's
    # end (the same word times and margins): a clip cut at its words by an editor or an aligner
    # starts on the first sound of its first word, where the front end's crops above never start.
    # Dev utterances cut so decoded 1.21x -> 1.03x their CER whole, which stayed the same (3 seeds,
    # 40 epochs; docs/archive/experiments.md, "Clips cut at their words").
    tight: Fraction = 0.15
    # Of the draws, this share becomes a sound that is not speech (music, typing, knocks, a
    # ringtone, a crowd: las/data/sounds.py) with an empty transcript, so that the model learns
    # to say nothing about them: 3 seeds, the same dev CER, 21 -> 1.7 characters from such sounds
    # and 8.2 -> 5.8 from families it never heard (docs/archive/experiments.md, "Non-speech").
    nonspeech: Fraction = 0.05
    # Of the batches, this share is heard as pairs: each utterance followed by its neighbour in the
    # batch as one recording (each with what the front end keeps around its speech, so a short
    # pause between them; both at one speed, in one room, noise and line), as recordings of a few
    # sentences arrive; the same frames in half the rows. AN4 dev's utterances joined in pairs
    # read 1.56x their CER one by one (3 seeds).
    joined: Fraction = 0.0
    # From this epoch (counted from 0) on: the attention learns to align on clean speech first.
    start_epoch: NonNegative = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.snr_low > self.snr_high:
            raise LasError(f"config key 'train.augment.snr_low': {self.snr_low} is above snr_high={self.snr_high}")

    # The effects made on the waveform, which need audio; words, tight and joined draws cut and
    # join features, precomputed ones too.
    WAVEFORM_EFFECTS: ClassVar[tuple[str, ...]] = (
        "reverberation",
        "noise",
        "telephone",
        "gain_db",
        "quiet",
        "clipping",
        "compression",
        "crop",
        "surroundings",
        "nonspeech",
    )

    @property
    def enabled(self) -> bool:
        """Whether any waveform effect is drawn (the utterances are then read and featurised on the fly)."""
        return any(getattr(self, effect) for effect in self.WAVEFORM_EFFECTS)


FREEZABLE = ("listener", "speller", "ctc_head")  # the model's parts, as its weights' names begin


@dataclass(frozen=True)
class TrainConfig(Section):
    name: ClassVar[str] = "train"
    epochs: Count = 100
    learning_rate: Positive = 2e-3
    warmup_steps: NonNegative = 300
    final_learning_rate_scale: Fraction = 0.05  # cosine decay ends at learning_rate * this
    weight_decay: Annotated[float, Range(0)] = 0.0
    gradient_clip: Positive = 5.0
    label_smoothing: Annotated[float, Range(0, 0.99)] = 0.1
    # Teacher forcing rate falls linearly from 1 to `teacher_forcing_final` over these epochs.
    teacher_forcing_final: Fraction = 0.9
    teacher_forcing_decay_epochs: NonNegative = 30
    # SpecAugment (Park et al. 2019): masks on the normalised features of training batches.
    frequency_masks: NonNegative = 2
    frequency_mask_width: NonNegative = 15
    time_masks: NonNegative = 2
    time_mask_width: NonNegative = 30
    specaugment_start_epoch: NonNegative = 5
    # Speed perturbation (Ko et al. 2015): each utterance is heard at speed 1-x, 1 or 1+x, drawn
    # anew every epoch (features of all three cached). 0 turns it off; needs audio, not features.
    speed_perturbation: Annotated[float, Range(0, 0.5)] = 0.1
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    # Average the weights of this many epochs with the lowest dev CER into averaged.pt (< 2: off).
    average_best: NonNegative = 5
    # From this many steps on, a dev pass whose attention has not aligned while the CTC head has
    # learnt (las.training.dev_evaluation) says so once, with what to do (0: never).
    alignment_warning_steps: NonNegative = 1000
    # From scratch on long utterances (las/model/guide.py): once a batch's CTC loss is under
    # attention_guide_trigger nats a character, each character's attention is also trained
    # towards where the CTC head's forced alignment puts it (a Gaussian of attention_guide_width
    # of the recording) for attention_guide_steps steps counted from that first batch, the loss's
    # weight whole for half of them and then falling linearly to nothing. auto: on when the training utterances last
    # attention_guide_seconds or more at the median, the model has a CTC head and the run does
    # not start from trained weights (train.init). Off by default: it makes a tiny model's
    # attention find its place on long synthetic utterances where it does not alone, but on AN4
    # utterances joined to 11 s it did not align AN4's model within 1,500 steps either
    # (docs/archive/experiments.md, "Long utterances from scratch").
    attention_guide: Literal["auto", "on", "off"] = "off"
    attention_guide_steps: Count = 2000
    attention_guide_width: Annotated[float, Range(0, 1, open_minimum=True)] = 0.02
    # The CTC loss per character under which a batch's alignment is trusted (the guide, the pieces).
    attention_guide_trigger: Positive = 1.5
    # The median utterance length from which `auto` turns the guide and the pieces on.
    attention_guide_seconds: Positive = 5.0
    # From scratch on long utterances (las/training/pieces.py): once a batch's CTC loss is under
    # attention_guide_trigger, its utterances are cut into pieces of whole words at most
    # attention_pieces_seconds long at the CTC head's alignment, and the step trains on those;
    # the pieces grow twice as long once most of the steps' pieces are attended along a
    # diagonal (or after attention_pieces_most_steps steps at one length), until none is cut.
    # auto (the default): on where the guide's auto would be (long utterances from scratch), for
    # any speller with a CTC head and transcripts with spaces. AN4's model on 400 recordings of
    # 13 s read dev at 17% (16.4-17.7%, 3 seeds; speller alone, the CTC head first, the learning
    # rate below) after 2,000 steps in pieces where whole ones stayed at 70% (docs/archive/experiments.md,
    # "Long utterances in pieces", "A listener that starts faster"); AN4's own 2.7 s utterances are not cut.
    attention_pieces: Literal["auto", "on", "off"] = "auto"
    attention_pieces_seconds: Positive = 3.0
    attention_pieces_most_steps: Count = 500
    # Each cut between two words moved to the quietest frame within this many seconds of the
    # middle of their pause on the alignment (0: left there): a head that places its characters
    # early (one seed in three, by 140 ms) cuts into the words, so that a piece's transcript and
    # its sound disagree at its edges. Off: at 0.2 that seed's speller alone still read dev at
    # 34% after 2,000 steps (docs/archive/experiments.md, "Cuts at the quietest frame").
    attention_pieces_quiet_seconds: Annotated[float, Range(0, 1)] = 0.0
    # With the pieces: until the first cut (for at most attention_pieces_ctc_first_steps steps:
    # a head that has not learnt by then may never), the CTC loss alone trains the listener and
    # the speller keeps its first weights (on whole long recordings it learns to spell without
    # reading them).
    # On 13 s recordings, 3 seeds, 2,000 steps: the speller alone reads dev at 21.4% on the mean
    # (16-30%; pieces alone: 30.7%), and decoded by default 12.95% (pieces alone: 13.01%)
    # (docs/archive/experiments.md, "Long utterances in pieces").
    attention_pieces_ctc_first: bool = True
    attention_pieces_ctc_first_steps: Count = 500
    # With the pieces: the CTC loss's weight in the steps while they are under way, where more
    # than model.ctc_weight (theirs after). The listener then learns mostly from its CTC head
    # while the speller's attention, not yet aligned, would pull it about; the speller's own
    # updates hardly change (Adam scales each weight's by its gradient's size). At 0.8 (13 s
    # recordings, 3 seeds, 2,000 steps) the default decoding read dev at 12.40% against 12.95, but
    # the speller alone at 24.3% against 21.4 (docs/archive/experiments.md, "A listener led by its CTC head").
    attention_pieces_ctc_weight: Fraction = 0.0
    # With the pieces: the run's learning rate is learning_rate times this, for the whole run (its
    # warm-up and decay as they are). Its CTC head, training the listener alone until the first cut,
    # learns sooner, so the pieces and the speller begin sooner: on 13 s recordings, 3 seeds, at 1.5
    # (3e-3) the speller alone read dev at 17.1% after 2,000 steps (16.4-17.7, 0.91 along a diagonal)
    # against 21.4 (16-30) at 1, decoded by default 10.71% against 12.95, the long-form holdout 8.69%
    # against the warm start's 8.74 (docs/archive/experiments.md, "A listener that starts faster"). AN4's
    # short utterances, never cut, train at learning_rate.
    attention_pieces_learning_rate_scale: Positive = 1.5
    speller_init: str = ""  # a speller pre-trained by `las pretrain` to start from ("" for none)
    # Fine-tuning (las/training/initialisation.py): start from the weights of this trained checkpoint, for
    # every part that fits; its normalisation is kept, its characters too (new ones are added).
    init: str = ""
    # Parts whose weights stay as they are for the first `freeze_epochs` epochs (0: the whole run):
    # any of listener, speller, ctc_head, comma-separated.
    freeze: str = ""
    freeze_epochs: NonNegative = 0
    max_bad_batches: NonNegative = 20  # non-finite losses tolerated (skipped) before training stops
    seed: int = 1
    device: Device = "auto"
    # bf16/fp16: autocast, LSTMs and matmuls in half precision, losses in float32; fp16 with a
    # gradient scaler (saved in checkpoints) for GPUs without bfloat16 (T4, P100).
    precision: Precision = "fp32"
    compile: bool = False  # torch.compile the speller step, which runs once per output character
    # On CUDA, the LSTM speller's and the pyramid listener's forward and backward as CUDA graphs,
    # one per bucket of batch shapes (las/model/graphs.py): the speller's per-character kernels and
    # cuDNN's per-frame backward kernels launched at once; the dev pass's greedy steps too
    # (las/search/graphs.py). One process, not with train.compile.
    cuda_graphs: bool = False
    # Also save last.pt mid-epoch every this many minutes (0: at epoch ends only), so that a
    # preempted job loses minutes, not an epoch.
    checkpoint_minutes: Annotated[float, Range(0)] = 10.0
    # TensorBoard event files in RUN/tensorboard (`tensorboard --logdir runs` compares runs).
    tensorboard: bool = True
    wandb_project: str = ""  # also log to this Weights & Biases project (needs `pip install wandb`)
    # Losses, learning rate, gradient norm, frames/s every this many steps (and, when stderr is not
    # a terminal, a progress line: logs of batch jobs show signs of life between epochs).
    log_every: Count = 50
    out: PathText = "runs/an4"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = set(self.frozen_parts) - set(FREEZABLE)
        if unknown:
            raise LasError(
                f"config key 'train.freeze': {', '.join(sorted(unknown))} is not one of {', '.join(FREEZABLE)}"
            )
        if self.init and self.speller_init:
            raise LasError("config keys 'train.init' and 'train.speller_init': choose one place to start from")
        if self.cuda_graphs and self.compile:
            raise LasError(
                "config keys 'train.cuda_graphs' and 'train.compile': choose one way to speed up the speller"
            )
        if self.cuda_graphs and self.device == "cpu":
            raise LasError("config key 'train.cuda_graphs': needs a CUDA device, not train.device=cpu")

    @property
    def frozen_parts(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.freeze.split(",") if part.strip())

    def frozen_in(self, epoch: int) -> tuple[str, ...]:
        """The parts whose weights stay as they are in epoch `epoch` (from 0): those of `freeze`
        for its first `freeze_epochs` epochs (all of them at 0)."""
        return () if self.freeze_epochs and epoch >= self.freeze_epochs else self.frozen_parts


@dataclass(frozen=True)
class DecodeConfig(Section):
    """How `las decode` searches; its `Flag`s are the command's options, and every search
    strategy takes its settings from the fields of the same names (las.search.build_strategy)."""

    name: ClassVar[str] = "decode"
    # Beam search joined with the CTC head's prefix score is the most accurate (docs/archive/experiments.md);
    # greedy is the fast choice; ctc: CTC greedy, needs a CTC head.
    strategy: Annotated[StrategyName, Flag("--strategy", "Search strategy.")] = "beam"
    batch_size: Annotated[Count, Flag("--batch-size", "Utterances per batch.")] = 32
    # Recordings longer than this are cut at their pauses into pieces no longer (las/data/segmentation.py):
    # attention trained on utterances of seconds loses its place on minutes.
    segment_seconds: Annotated[float, Range(1)] = 10.0
    # Word times from CTC forced alignment of the decoded text (attention peaks for a model without
    # a CTC head), or from the attention peak of each character (las/recognition/timing.py).
    word_times: WordTimes = "ctc"
    # Hypotheses end by this many characters per encoder frame (plus 5), and not before `min_`;
    # with a CTC head, also by ctc_length_ratio times its greedy transcript's length (plus 5: 0 off),
    # so that attention which loops or wanders on noise cannot run on (las.search.common.Rules).
    max_length_ratio: Positive = 1.5
    ctc_length_ratio: Annotated[float, Range(0)] = 1.5
    min_length_ratio: Annotated[float, Range(0)] = 0.0
    # Attention only from 2 frames behind its last peak to this many ahead, in every strategy (0: off).
    attention_window: NonNegative = 0
    # Per character, word and recording, from the speller's and the CTC head's distributions
    # (las/recognition/confidence.py); words below min_confidence are left out, with a count on stderr. The
    # probability flagged AN4 dev's wrong words better than the entropy (AUC 0.805 against 0.774,
    # 3 seeds; docs/archive/experiments.md, "Confidence"), and its scale reads as a probability.
    confidence: ConfidenceMeasure = "probability"
    confidence_from: ConfidenceSource = "both"
    # Subtitles: each cue's text followed by its confidence, e.g. "GO TO THE DOOR [0.83]".
    subtitle_confidence: Annotated[bool, Flag("--cue-confidence", "Subtitle cues end with their confidence.")] = False
    min_confidence: Annotated[Fraction, Flag("--min-confidence", "Leave out words less confident than this.")] = 0.0
    beam_size: Annotated[Count, Flag("--beam-size", "Beam width.")] = 8
    nbest: Annotated[Count, Flag("--nbest", "Hypotheses kept per utterance (JSONL).")] = 1
    # Ranking: score / (characters + 1) when normalising (without it, short hypotheses win), plus
    # length_penalty per character. Scores themselves stay log-likelihoods.
    length_normalize: bool = True
    length_penalty: Annotated[float, Flag("--length-penalty", "Score bonus per character.")] = 0.0
    # <eos> only where log p(eos) > eos_threshold * max log p(other); 0 turns the rule off.
    eos_threshold: Annotated[float, Range(0)] = 0.0
    # Every strategy but ctc scores (1 - ctc_weight) * speller + ctc_weight * CTC prefix score;
    # 0 for models without a CTC head unless set explicitly. 0.5 beat 0.3 and 0.7 on all four
    # AN4 checkpoints measured (docs/archive/experiments.md).
    ctc_weight: Annotated[Fraction, Flag("--ctc-weight", "Weight of the CTC prefix score.")] = 0.5
    # The CTC prefix score of a next character sums only over frames where the prefix so far is
    # within this many nats of the likeliest extension (las/search/ctc_prefix.py): a step costs a
    # window, not the recording. Same n-best on AN4 dev and on 10-60 s recordings as 0 (every frame).
    ctc_window_nats: Annotated[float, Range(0)] = 30.0
    # Shallow fusion: + lm_weight * log p_LM(next character), with the character LM written by
    # `las pretrain` (same vocabulary).
    lm: Annotated[str, Flag("--lm", "Character LM (from las pretrain) for shallow fusion.")] = ""
    lm_weight: Annotated[float, Range(0), Flag("--lm-weight", "LM fusion weight.")] = 0.0
    # A closed vocabulary: every word spelled is one of this list's (one per line, or a Kaldi
    # lexicon's first column), for commands, digits or a domain's terms (las.search.lexicon).
    lexicon: Annotated[str, Flag("--lexicon", "Only spell the words of this list (one per line).")] = ""
    # Of what surrounds the speech, at most this much is heard at decoding (and in training's dev
    # passes), within features.surroundings_seconds: training utterances often end sooner after
    # their words than the training margin (AN4: 0.2 s at the median), and a padded recording
    # heard with the whole margin ended in more background than the model knew (3 seeds: its own
    # background around the words 1.02-1.11x -> 0.99-1.03x the unpadded CER; docs/archive/experiments.md,
    # "What surrounds the speech at decoding").
    surroundings_seconds: Annotated[float, Range(0, 5)] = 0.2
    # ... and of a recording's background (more of it than the margin) no more than this share of
    # the speech's own length: around a word alone a sentence's margin is more background than
    # word (docs/archive/experiments.md, "A word's margin in proportion to the word").
    surroundings_share: Annotated[float, Range(0)] = 0.25
    # Inside a recording shorter than a segment, only a pause this long is cut at (0: none): at
    # 0.5 s the gaps between babbling talkers at 10 dB read as pauses too, and cut there, AN4 dev
    # lost 1.0 point of CER (3 seeds); at 1 s every channel set reads as it did uncut.
    inner_pause_seconds: Annotated[float, Range(0)] = 1.0
    # A stream's segment ends once its best hypothesis has had no character for this long (with
    # the second pass, and its audio has paused since): its last words are final then (the words
    # before them, as soon as the beam agrees on them).
    # At 0.5 s, AN4's spelt letters end segments between them; with the second pass, 0.5 / 0.75 /
    # 1 / 1.5 s read the choosing speakers at 14.03 / 13.07 / 12.97 / 12.99% (3 streaming seeds,
    # docs/archive/experiments.md "A second pass at each pause").
    stream_pause_seconds: Annotated[float, Range(0.05, 10)] = 1.0
    # ... and a hypothesis this many nats under the best leaves a stream's beam: the sooner rivals
    # go, the sooner the beam agrees on a word, which is then final (las.search.triggered). Chosen
    # on the tuning speakers (one streaming model, docs/archive/experiments.md "Streaming"): at 10, 5, 3,
    # 2, 1 the joint search read 17.5, 16.4, 16.0, 17.8, 24.0% CER; the CTC head alone 13.5, 12.0,
    # 12.0, 12.0, 12.0%, with its median word final 0.72, 0.72, 0.57, 0.37, 0.24 s after its end.
    stream_beam_nats: Positive = 3.0
    # ... and the speller scores a character over the frames heard this long after the CTC head
    # first emitted it (the head's spike comes before the character's sound): each frame is
    # searched this much later, and each word ended that much later. auto (`stream_lookahead`):
    # 0.16 s where the search's words are final (stream_second_pass=false), 0 where the second
    # pass gives them. The search's words final, chosen on the tuning speakers (3 streaming seeds,
    # docs/archive/experiments.md "Three seeds with location-aware attention"): at 0, 0.08, 0.16, 0.32 s
    # it read 18.5, 16.2, 15.9, 16.5% CER; on dev 16.4% at 0 and 14.9% at 0.16. The second pass's,
    # live on the choosing speakers (3 seeds): at 1 s pauses 13.31% at 0 and at 0.16 s, words
    # final 1.84 / 3.62 s after their end (median / 90th percentile) against 2.03 / 3.83; word by
    # word at 0.5 s pauses 13.95 / 13.94 / 13.86% at 0 / 0.08 / 0.16 s, words final 0.33 / 0.41 /
    # 0.48 s after their end at the median, 0.68 / 0.77 / 0.84 s at the 90th percentile (docs/
    # BENCHMARKS.md, "The trigger on time where the second pass gives the words").
    stream_trigger_lookahead_seconds: Annotated[float | Literal["auto"], Range(0, 2)] = "auto"
    # A stream's segment is decoded whole once it has ended, as `las decode` decodes a piece of a
    # recording: its words are final then, not one by one as the beam agrees on them, and the
    # search's words are partial (las.recognition.second_pass; the CTC head's search only). Chosen
    # on the choosing speakers (3 streaming seeds): 12.97% against 15.87 without; on dev 10.34
    # against 14.87, its words final 1.04 s after their end at the median against 0.57 (docs/
    # BENCHMARKS.md "A second pass at each pause"). Off, with the CTC head alone, for latency.
    stream_second_pass: bool = True
    # ... reading again the segments that began within this many seconds before the one that
    # ended (their words, given already, are not given again): segments ended at short pauses
    # then have each word final at the first pause after it, spelt with the words before it in
    # view as a segment ended at a long pause spells them. 0: the segment alone (and 0.5 s before
    # it, las.data.segmentation.CONTEXT_SECONDS). A segment's decoding then costs up to this much
    # more audio; state stays bounded by it. Off: with 0.2 s pauses a 3 s reach read the choosing
    # speakers at 18.2% against 19.5 without (0.3 s: 15.6 against 15.2; the default 1 s pauses
    # 13.3), words final 0.49 / 1.09 s after their end (median / 90th percentile), live: a pause
    # that short ends segments inside words, and words wait for the next pause however short
    # (docs/archive/experiments.md, "Shorter pauses with the segments before in view"). Not with
    # stream_second_pass_words: it reads the choosing speakers' long recordings at 14.72% with 3 s
    # against 10.39 with none (3 seeds; "The recipe as written").
    stream_second_pass_reach_seconds: Annotated[float, Range(0, 30)] = 0.0
    # ... and each word final as soon as the first pass has begun the next (spelt the space
    # after it): the segment so far is decoded whole then and its words centred before that
    # space given, without waiting for a pause; the segment's last words at its end, as before.
    # Each segment is then decoded once per word. Off: with 0.5 s pauses (chosen live on the
    # choosing speakers, 3 seeds of the streaming recipe) it streams dev at 7.52% with words final
    # 0.34 / 0.73 s after their end (median / 90th percentile, each word waiting for the decoding
    # that gives it), where the default reads 7.55% with words final at the pause, 2.00 / 3.57 s
    # after their end (docs/archive/experiments.md, "A wider streaming listener"), and reads the choosing
    # speakers 0.5 points better (9.15 against 9.65%): the setting for a stream that must keep up
    # with the speech.
    stream_second_pass_words: bool = False
    # ... word by word, a word whose confidence (its least confident character's) is under this
    # waits for the next word to be begun, decoded again with it heard: right context for the
    # words the model is unsure of, one word's delay for those alone. 0: none waits. Chosen live
    # on the choosing speakers with 0.5 s pauses (3 streaming seeds): 0 / 0.5 read them at 14.15 /
    # 13.86% with words final 0.37 / 0.40 s after their end at the median, 0.66 / 0.73 s at the
    # 90th percentile (docs/archive/experiments.md, "Words given where the words before were given").
    stream_second_pass_words_hold: Fraction = 0.5
    # ... word by word, the early decodings (each word's, not the segment's last at its pause)
    # search with this beam (0: beam_size) and play at other_speed too where this is true: each
    # is a burst of computing that the words it gives wait for. Not what they wait for most:
    # live on the choosing speakers (one streaming seed, 0.5 s pauses), as the segment's (beam 8,
    # two speeds) 12.42% with words final 0.53 / 0.92 s after their end (median / 90th pct); beam
    # 4: 12.37% at 0.50 / 0.89; one speed 12.95% at 0.48 / 0.90; both 13.34% at 0.47 / 0.88
    # (those with the trigger 0.16 s late; on time, as now: 12.76% at 0.35 / 0.70; docs/archive/experiments.md,
    # "What a word waits for"). As the segment's by default: one seed's difference.
    stream_second_pass_words_beam_size: NonNegative = 0
    stream_second_pass_words_other_speed: bool = True
    # ... each segment decoded by this checkpoint's model instead of the stream's, from the
    # segment's audio through that model's own front end (its speech and margin, as `las decode`
    # hears a recording): a pBLSTM (the offline default) reads an ended segment both ways, where
    # the stream's model reads forwards only. It must spell the same characters on encoder
    # frames as long. With words at 1 s pauses (3 seeds of each, paired; the stream as of
    # 2026-12-03), the choosing speakers read 11.38% against 11.57 over clean, telephone, white
    # noise and long recordings (3 of the 4 better), and dev's speakers within 1.2x of the
    # offline default on every set (dev 6.72% against 8.15, white noise 10.27 against 12.20,
    # long recordings 7.67 against 8.65), at 1.14x the CPU time (docs/archive/experiments.md, "A second
    # pass that reads both ways"). Not word by word: a pBLSTM misreads a segment cut inside the
    # next word (the choosing speakers 11.70% against 10.84 with the stream's own).
    stream_second_pass_model: str = ""
    # Audio is played at this speed before its features (tempo and pitch, as training's speed
    # perturbation plays it), and times are read back on the recording's own clock. As said by
    # default. Chosen on 8 training speakers held out of training, reported on dev (scripts/tuning.py,
    # 3 seeds): 0.95 read them best (15.97% over clean, telephone, noise, babble and a room) but
    # lets 3 s of mains hum pass the no-speech rule; 0.9 and 1 tie (16.59, 16.63), 1 better for 6 of
    # the 8. Slower lowers pitch and formants too: women's voices (AN4 trains on 53 men, 13 women)
    # gain most (docs/archive/experiments.md, "Choosing on held-out speakers"). Precomputed features are
    # decoded as they are; training's dev passes and `las align` read at 1.
    speed: Annotated[float, Range(0.5, 2), Flag("--speed", "Play audio this many times faster before decoding.")] = 1.0
    # Each recording (each piece of a long one) is also decoded played at this speed, and the
    # transcript the search ranks higher (`length_normalize`, `length_penalty`) kept: slower lowers
    # pitch and formants, and which voices gain by it is the voice's own (women's in AN4, trained on
    # 53 men and 13 women), so no one speed suits all. Chosen on 8 held-out training speakers,
    # reported on dev (3 seeds): 15.8% against 16.6 at 1 alone or 0.9 alone over clean, telephone,
    # noise, babble and a room; dev 13.1 against 15.1 at 1 (docs/archive/experiments.md, "A speed for each
    # recording"). Twice the decoding time; 0 (or the speed itself): one pass.
    other_speed: Annotated[
        float, Range(0, 2), Flag("--other-speed", "Also decode played at this speed and keep the better (0: off).")
    ] = 0.9
    # Beam, greedy and random search on a GPU with each step one CUDA graph (las.search.graphs): one
    # launch per step, not one per kernel. CUDA and the LSTM speller only.
    cuda_graphs: bool = False
    samples: Annotated[Count, Flag("--samples", "Random search: paths per utterance.")] = 32
    temperature: Annotated[Positive, Flag("--temperature", "Random search: softmax temperature.")] = 1.0
    seed: int = 0

    @property
    def stream_lookahead(self) -> float:
        """`stream_trigger_lookahead_seconds`, auto resolved: the search's look-ahead past its
        trigger, in seconds."""
        if isinstance(self.stream_trigger_lookahead_seconds, str):  # auto
            return 0.0 if self.stream_second_pass else 0.16
        return self.stream_trigger_lookahead_seconds

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("stream_second_pass_words", "stream_second_pass_model"):
            if getattr(self, key) and not self.stream_second_pass:
                raise LasError(
                    f"config key 'decode.{key}': a setting of the second pass; set decode.stream_second_pass=true"
                )


@dataclass(frozen=True)
class Config:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def __post_init__(self) -> None:
        # Training graphs the LSTM speller's loop and the pBLSTM listener's pass, whichever the
        # model has; decoding graphs the LSTM speller's steps.
        if self.train.cuda_graphs and self.model.speller != "lstm" and self.model.listener != "pblstm":
            raise LasError(
                f"config key 'train.cuda_graphs': graphs the LSTM speller's loop and the pBLSTM listener's "
                f"pass; a {self.model.listener} listener with a {self.model.speller} speller has neither"
            )
        if self.train.attention_guide == "on" and not self.model.guidable:
            raise LasError(
                "config key 'train.attention_guide': teaches the LSTM speller's attention where the CTC "
                f"head aligns each character; a {self.model.speller} speller with "
                f"model.ctc_weight={self.model.ctc_weight} has none"
            )
        if self.decode.cuda_graphs and self.model.speller != "lstm":
            raise LasError(
                f"config key 'decode.cuda_graphs': graphs the LSTM speller's steps; a {self.model.speller} "
                "speller has none (it spells every character in one pass)"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        return override(cls(), values)

    def replace(self, assignments: list[str]) -> Config:
        """Apply `section.field=value` strings, each value parsed to the field's type."""
        return override(self, assignment_table(assignments))


def assignment_table(assignments: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`section.field=value` strings as the nested table a TOML file gives, values unparsed."""
    values: dict[str, Any] = {}
    for assignment in assignments:
        key, separator, text = assignment.partition("=")
        if not separator:
            raise LasError(f"--set {assignment!r}: expected KEY=VALUE, e.g. model.attention=dot")
        *sections, name = key.strip().split(".")
        target = values
        for section in sections:  # train.augment.noise -> {"train": {"augment": {"noise": ...}}}
            target = target.setdefault(section, {})
            if not isinstance(target, dict):
                raise LasError(f"--set {assignment!r}: {key.strip()} is set twice, as a field and a section")
        target[name] = text.strip()
    return values


def read_table(path: str | Path) -> dict[str, Any]:
    """A TOML settings file as its nested table, or one clear error."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise LasError(f"config file not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise LasError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise LasError(f"cannot read config file {path}: {error.strerror or error}") from None


def load_config(
    path: str | Path | None = None, assignments: list[str] | tuple[str, ...] = (), base: Config | None = None
) -> Config:
    """The defaults (or `base`), then the TOML file, then the `--set` assignments."""
    config = base or Config()
    if path is not None:
        config = override(config, read_table(path))
    return config.replace(list(assignments))


def named_setting(path: str | Path | None, assignments: list[str] | tuple[str, ...], key: str) -> Any:
    """What the TOML file and then the assignments say of `key`, unparsed (None: nothing), before
    any settings are built: for a setting that decides what the others apply to (train.init
    decides the model that model.* settings change)."""
    value = None
    for table in (read_table(path) if path is not None else {}, assignment_table(assignments)):
        found: Any = table
        for part in key.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if found is not None:
            value = found
    return value


def override(instance: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """A copy of a (nested) frozen dataclass with `values` replacing the named fields."""
    fields = {item.name: item for item in dataclasses.fields(instance)}
    hints = typing.get_type_hints(type(instance))
    changes = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if name not in fields:
            known = ", ".join(sorted(f"{prefix}{field}" for field in fields))
            raise LasError(f"unknown config key {key!r} (known: {known})")
        current = getattr(instance, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise LasError(f"config key {key!r} is a section; set its fields, e.g. {key}.<field>=...")
            changes[name] = override(current, value, f"{key}.")
        else:
            changes[name] = _coerce(value, hints[name], key)
    return dataclasses.replace(instance, **changes)


def _coerce(value: Any, kind: Any, key: str) -> Any:
    """Parse a `--set` string (or check a TOML value) against the field's declared type."""
    if typing.get_origin(kind) is Literal:  # a choice, checked by its section
        return str(value)
    if is_union(kind):  # a number or a named value: float | Literal["auto"]
        if str(value) in named_values(kind):
            return str(value)
        number = next(member for member in typing.get_args(kind) if typing.get_origin(member) is not Literal)
        if not isinstance(value, bool) and isinstance(value, (str, int, float)):
            try:
                return number(value)
            except ValueError:
                pass
        names = " or ".join(map(repr, named_values(kind)))
        raise LasError(f"config key {key!r}: expected a number or {names}, got {value!r}")
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if kind in (int, float) and isinstance(value, bool) or kind is int and isinstance(value, float):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise LasError(f"config key {key!r}: expected {kind.__name__}, got {value!r}") from None


def flat_settings(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"train": {"augment": {"noise": 0.4}}}` -> `{"train.augment.noise": 0.4}`: a config as
    `--set` keys name its settings."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
