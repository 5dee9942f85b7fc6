"""The single source of truth for every setting: each default, what it accepts, one line of what
it does. Why each default is what it is lives on the results pages (data/an4/RESULTS.md).

A `Config` is built from the defaults below, then a TOML file (`--config`), then `KEY=VALUE`
overrides (`--set model.attention=location`), each layer replacing only the fields it names.
It is saved inside every checkpoint, so decoding needs nothing but the checkpoint. Every field
declares what it accepts beside its default (las.core.settings), and sections check themselves
when made, so an invalid config cannot exist and every command fails on a bad value before any
work, naming the field.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from las.core.errors import LasError
from las.core.progress import say
from las.core.settings import (
    Count,
    Flag,
    Fraction,
    NonNegative,
    PathText,
    Positive,
    Range,
    Retired,
    Section,
    assignment_table,
    coerce,
    read_table,
)

Device = Literal["auto", "cpu", "cuda"]

# How to read an input: auto (by what the path is) or a reader of las.data.corpora.manifest.READERS.
InputFormat = Literal["auto", "tsv", "jsonl", "lhotse", "kaldi", "librispeech", "hw4", "hw4-folder", "audio"]
ListenerKind = Literal["pblstm", "plstm", "transformer", "conformer"]
SpellerKind = Literal["lstm", "transformer"]
Dereverberation = Literal["off", "decoding", "always"]  # las.data.front_end.dereverberation
TimeReduction = Literal["concat", "conv"]  # las.model.attention_listener
AttentionName = Literal["dot", "scaled_dot", "general", "additive", "location", "gmm", "monotonic", "monotonic_chunk"]
StrategyName = Literal["greedy", "sample", "beam", "ctc"]
# auto: bf16 where it runs, else fp16 on CUDA, else fp32 (las.core.device.resolve_precision).
Precision = Literal["fp32", "bf16", "fp16", "auto"]
WordTimes = Literal["ctc", "attention"]
ConfidenceMeasure = Literal["entropy", "probability"]  # las/recognition/confidence.py
ConfidenceSource = Literal["both", "speller", "ctc"]  # whose distributions (ctc: needs a CTC head)


@dataclass(frozen=True)
class FeatureConfig(Section):
    """Log-mel filterbank front end (computed once, cached on disk)."""

    name: ClassVar[str] = "features"
    sample_rate: Annotated[int, Range(1000)] = 16000
    mel_bins: Count = 80
    window_ms: Positive = 25.0
    hop_ms: Positive = 10.0
    # Each utterance's per-bin mean subtracted first: cancels a fixed channel (microphone, telephone line).
    utterance_mean: bool = True
    # ... counting the training frames' average as this many seconds of its own (a word alone keeps its spectrum).
    mean_prior_seconds: Annotated[float, Range(0, 60)] = 0.3
    # A recording that peaks under this level is raised to it before analysis (las/data/front_end/loudness.py).
    quiet_peak_dbfs: Annotated[float, Range(-60, 0)] = -20.0
    # Silence or background around the speech cut to at most this much in training (front_end/speech_margins.py).
    trim_surroundings: bool = True
    surroundings_seconds: Annotated[float, Range(0, 5)] = 0.3
    # Late reverberation removed (las/data/front_end/dereverberation.py): at decoding, always, or off.
    dereverberation: Dereverberation = "decoding"
    # Each frame from its past only (streaming models): zero padding, a running mean, nothing that reads ahead.
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
    # Word times (CTM) of the training utterances, for train.augment.words; auto: MANIFEST.ctm; "": none.
    train_alignment: str = "auto"
    input_format: InputFormat = "auto"
    # The feature cache shared by runs; auto: $XDG_CACHE_HOME/las/features, else ~/.cache/las/features.
    cache_dir: PathText = "auto"
    batch_size: Count = 16
    # Largest padded batch in input frames: long utterances come in smaller batches.
    max_batch_frames: Count = 8000
    # > 0: batches of similar lengths, as many utterances as fit this many padded frames (batch_size unused).
    batch_frames: NonNegative = 0
    # > 0, on CUDA: data.batch_frames sized to this share of the GPU's memory (las/training/batch_memory.py).
    batch_memory: Annotated[float, Range(0, 0.95)] = 0.0
    # A curriculum (SortaGrad): the first this many epochs take their batches shortest first.
    shortest_first_epochs: NonNegative = 0
    # Processes that extract features and load training batches (0: all in the main process).
    workers: NonNegative = 2
    # Corpora of up to this many utterances have their features computed before the first step.
    extract_ahead: NonNegative = 20_000
    # An unusable utterance: error stops naming it; skip leaves it out with a warning.
    bad_utterances: Literal["error", "skip"] = "error"


@dataclass(frozen=True)
class ModelConfig(Section):
    name: ClassVar[str] = "model"
    listener_hidden: Count = 160  # per direction
    # Each halves the time axis: 2**layers shorter (two: 40 ms encoder frames).
    pyramid_layers: NonNegative = 2
    # pblstm: this many input frames side by side as one frame of the first BLSTM (a further reduction).
    frame_stacking: Count = 1
    key_dim: Count = 128
    value_dim: Count = 128
    attention: AttentionName = "location"
    attention_heads: Count = 1  # > 1: multi-head attention of that kind (divides key_dim, value_dim)
    attention_temperature: Positive = 1.0  # > 1 smooths attention weights, < 1 sharpens them
    location_channels: Count = 10
    location_kernel: Count = 15
    cumulative_attention: bool = True  # location attention convolves the sum of all previous weights
    # gmm (Graves 2013): Gaussians moved forward each step; softplus: Battenberg et al.'s V2.
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
    # Self-attention listeners shorten time by 2**pyramid_layers, then run listener_layers layers.
    listener: ListenerKind = "pblstm"
    # plstm: a forward pyramid whose top layer hears this many encoder frames ahead (las/model/streaming_listener.py).
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
    def reduction(self) -> int:
        """Input frames per encoder frame."""
        return self.frame_stacking * 2**self.pyramid_layers

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
        if self.listener != "pblstm" and self.frame_stacking > 1:
            raise LasError(
                f"config key 'model.frame_stacking': stacks the pblstm listener's input; a {self.listener} has none"
            )
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
    """Waveform augmentation (las/data/augmentation/channel_effects.py): per utterance and epoch, each effect with its
    probability, drawn from a generator seeded by (seed, epoch, utterance) so a resumed run draws
    the same; featurised on the fly by the loader's workers. Off on precomputed features."""

    name: ClassVar[str] = "train.augment"
    reverberation: Fraction = 0.15  # a synthetic room, RT60 drawn from 0.2-0.8 s
    noise: Fraction = 0.5  # babble of other training utterances, white or pink noise ...
    snr_low: Annotated[float, Range(-10, 60)] = 0.0  # ... at an SNR drawn from snr_low-snr_high dB
    snr_high: Annotated[float, Range(-10, 60)] = 30.0
    telephone: Fraction = 0.3  # a narrowband line: band edges drawn near 300 and 3400 Hz, 8 kHz, mu-law
    gain_db: Annotated[float, Range(0, 40)] = 6.0  # a gain drawn from +-gain_db
    # A quiet microphone: the recording 20-40 dB quieter, in 16 bits.
    quiet: Fraction = 0.0
    # A microphone set too hot: driven 3-20 dB over full scale and cut flat, in 16 bits (front_end/declipping.py).
    clipping: Fraction = 0.0
    # A compressor, as a phone's automatic gain leaves speech: loud frames turned down 2-10 to 1.
    compression: Fraction = 0.0
    # A tight crop: the lead-in and the trail each cut to a random share of themselves.
    crop: Fraction = 0.25
    # Or up to a second more of the recording's own background before and after it.
    surroundings: Fraction = 0.0
    # Of the draws, this share becomes one word of its utterance, cut at its word times (data.train_alignment).
    words: Fraction = 0.1
    # Or all of its words cut at the first one's start and the last one's end, as an editor or aligner cuts a clip.
    tight: Fraction = 0.15
    # Of the draws, this share becomes a sound that is not speech (augmentation/nonspeech.py), transcribed as nothing.
    nonspeech: Fraction = 0.05
    # Of the batches, this share is heard as pairs of neighbouring utterances joined into one recording.
    joined: Fraction = 0.0
    # From this epoch (counted from 0) on: the attention learns to align on clean speech first.
    start_epoch: NonNegative = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.snr_low > self.snr_high:
            raise LasError(f"config key 'train.augment.snr_low': {self.snr_low} is above snr_high={self.snr_high}")

    # The effects made on the waveform (they need audio); words, tight and joined cut features.
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
    # Each utterance heard at speed 1-x, 1 or 1+x, drawn each epoch (Ko et al. 2015); 0: off.
    speed_perturbation: Annotated[float, Range(0, 0.5)] = 0.1
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    # Average the weights of this many epochs with the lowest dev CER into averaged.pt (< 2: off).
    average_best: NonNegative = 5
    # From this step on, a dev pass whose attention has not aligned says so once, with what to do (0: never).
    alignment_warning_steps: NonNegative = 1000
    # The CTC loss per character under which a batch's alignment is trusted to cut it into pieces.
    attention_pieces_trigger: Positive = 1.5
    # The median utterance length from which `attention_pieces=auto` turns the pieces on.
    attention_pieces_auto_seconds: Positive = 5.0
    # Long utterances from scratch cut into pieces at the CTC head's alignment (las/training/pieces.py).
    attention_pieces: Literal["auto", "on", "off"] = "auto"
    attention_pieces_seconds: Positive = 3.0
    attention_pieces_most_steps: Count = 500
    # With the pieces: the CTC head alone trains until the first cut, the speller waiting.
    attention_pieces_ctc_first: bool = True
    attention_pieces_ctc_first_steps: Count = 500
    # With the pieces: the run's learning rate is learning_rate times this.
    attention_pieces_learning_rate_scale: Positive = 1.5
    speller_init: str = ""  # a speller pre-trained by `las pretrain` to start from ("" for none)
    # Fine-tuning (las/training/initialisation.py): start from this checkpoint's weights, for every part that fits.
    init: str = ""
    # Parts (listener, speller, ctc_head) kept as they are for the first freeze_epochs epochs (0: all run).
    freeze: str = ""
    freeze_epochs: NonNegative = 0
    max_bad_batches: NonNegative = 20  # non-finite losses tolerated (skipped) before training stops
    seed: int = 1
    device: Device = "auto"
    # bf16/fp16: autocast and half-precision LSTMs, losses in float32; fp16 with a gradient scaler.
    precision: Precision = "fp32"
    compile: bool = False  # torch.compile the speller step, which runs once per output character
    # On CUDA, the speller's and the listener's passes as CUDA graphs, one per batch shape (las/model/graphs.py).
    cuda_graphs: bool = False
    # Also save last.pt mid-epoch every this many minutes (0: at epoch ends only).
    checkpoint_minutes: Annotated[float, Range(0)] = 10.0
    # TensorBoard event files in RUN/tensorboard (`tensorboard --logdir runs` compares runs).
    tensorboard: bool = True
    wandb_project: str = ""  # also log to this Weights & Biases project (needs `pip install wandb`)
    # Losses, learning rate and frames/s logged every this many steps.
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
    # beam (with the CTC prefix score), greedy, sample (random search), or ctc (the CTC head greedily).
    strategy: Annotated[StrategyName, Flag("--strategy", "Search strategy.")] = "beam"
    batch_size: Annotated[Count, Flag("--batch-size", "Utterances per batch.")] = 32
    # Recordings longer than this are cut at their pauses into pieces no longer (las/data/front_end/segmentation.py).
    segment_seconds: Annotated[float, Range(1)] = 10.0
    # Word times from the CTC head's forced alignment, or from each character's attention peak.
    word_times: WordTimes = "ctc"
    # Hypotheses end by this many characters per encoder frame, and by ctc_length_ratio x CTC's length.
    max_length_ratio: Positive = 1.5
    ctc_length_ratio: Annotated[float, Range(0)] = 1.5
    min_length_ratio: Annotated[float, Range(0)] = 0.0
    # Attention only from 2 frames behind its last peak to this many ahead, in every strategy (0: off).
    attention_window: NonNegative = 0
    # Per character, word and recording (las/recognition/confidence.py); words under min_confidence are left out.
    confidence: ConfidenceMeasure = "probability"
    confidence_from: ConfidenceSource = "both"
    # Subtitles: each cue's text followed by its confidence, e.g. "GO TO THE DOOR [0.83]".
    subtitle_confidence: Annotated[bool, Flag("--cue-confidence", "Subtitle cues end with their confidence.")] = False
    min_confidence: Annotated[Fraction, Flag("--min-confidence", "Leave out words less confident than this.")] = 0.0
    beam_size: Annotated[Count, Flag("--beam-size", "Beam width.")] = 8
    nbest: Annotated[Count, Flag("--nbest", "Hypotheses kept per utterance (JSONL).")] = 1
    # Rank by score / (characters + 1), plus length_penalty per character; scores stay log-likelihoods.
    length_normalize: bool = True
    length_penalty: Annotated[float, Flag("--length-penalty", "Score bonus per character.")] = 0.0
    # <eos> only where log p(eos) > eos_threshold * max log p(other); 0 turns the rule off.
    eos_threshold: Annotated[float, Range(0)] = 0.0
    # Every strategy but ctc scores (1 - ctc_weight) * speller + ctc_weight * CTC prefix score (0 without a CTC head).
    ctc_weight: Annotated[Fraction, Flag("--ctc-weight", "Weight of the CTC prefix score.")] = 0.5
    # The CTC prefix score sums over frames within this many nats of the best (las/search/ctc_prefix.py).
    ctc_window_nats: Annotated[float, Range(0)] = 30.0
    # Shallow fusion with a character LM from `las pretrain`: + lm_weight * log p_LM(next character).
    lm: Annotated[str, Flag("--lm", "Character LM (from las pretrain) for shallow fusion.")] = ""
    lm_weight: Annotated[float, Range(0), Flag("--lm-weight", "LM fusion weight.")] = 0.0
    # A closed vocabulary: every word spelled is one of this list's (las.search.lexicon).
    lexicon: Annotated[str, Flag("--lexicon", "Only spell the words of this list (one per line).")] = ""
    # Of what surrounds the speech, at most this much is heard at decoding and in the dev passes.
    surroundings_seconds: Annotated[float, Range(0, 5)] = 0.2
    # ... and of a recording's background no more than this share of the speech's length.
    surroundings_share: Annotated[float, Range(0)] = 0.25
    # Inside a recording shorter than a segment, only a pause this long is cut at (0: none).
    inner_pause_seconds: Annotated[float, Range(0)] = 1.0
    # A stream's segment ends once its best hypothesis has spelt nothing for this long and its audio has paused.
    stream_pause_seconds: Annotated[float, Range(0.05, 10)] = 1.0
    # A hypothesis this many nats under the best leaves a stream's beam (las.search.triggered).
    stream_beam_nats: Positive = 3.0
    # The speller reads this long past the CTC head's spike; auto: 0 with the second pass, else 0.16.
    stream_trigger_lookahead_seconds: Annotated[float | Literal["auto"], Range(0, 2)] = "auto"
    # Each stream segment decoded again whole once it ends, for its final words (las.recognition.second_pass).
    stream_second_pass: bool = True
    # Each word final once the first pass has begun the next: the segment so far decoded whole then.
    stream_second_pass_words: bool = False
    # Word by word, a word less confident than this waits to be decoded with the next one heard.
    stream_second_pass_words_hold: Fraction = 0.5
    # Segments decoded by this checkpoint's model (an offline pBLSTM reads both ways) instead of the stream's.
    stream_second_pass_model: str = ""
    # Audio played at this speed before its features; times stay on the recording's clock.
    speed: Annotated[float, Range(0.5, 2), Flag("--speed", "Play audio this many times faster before decoding.")] = 1.0
    # Each recording also decoded at this speed, the transcript the search ranks higher kept (0: one pass).
    other_speed: Annotated[
        float, Range(0, 2), Flag("--other-speed", "Also decode played at this speed and keep the better (0: off).")
    ] = 0.9
    # On CUDA, each search step one CUDA graph (las.search.graphs); the LSTM speller only.
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

    def check_language_model(self) -> None:
        """One clear error where the LM's weight asks for an LM that none names: checked where a
        decoding is built or exported, not as settings are read (a file's weight and a flag's LM
        meet only at the end)."""
        if self.lm_weight > 0 and not self.lm:
            raise LasError(
                "decode.lm_weight > 0 needs a language model: decode.lm=FILE (written by las pretrain), "
                "or decode.lm_weight=0"
            )

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
        # Training graphs the LSTM speller and the pBLSTM listener; decoding, the LSTM speller.
        if self.train.cuda_graphs and self.model.speller != "lstm" and self.model.listener != "pblstm":
            raise LasError(
                f"config key 'train.cuda_graphs': graphs the LSTM speller's loop and the pBLSTM listener's "
                f"pass; a {self.model.listener} listener with a {self.model.speller} speller has neither"
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


NO_HELP = "measured as no help (data/an4/RESULTS.md, 'Why these defaults')"
# Settings taken out: named at their old default they are ignored with a note, at another refused.
RETIRED = {
    "train.attention_guide": Retired("off", "the attention taught the CTC head's alignment; " + NO_HELP),
    "train.attention_guide_steps": Retired(2000, "a setting of train.attention_guide, " + NO_HELP),
    "train.attention_guide_width": Retired(0.02, "a setting of train.attention_guide, " + NO_HELP),
    "train.attention_pieces_ctc_weight": Retired(0.0, "a CTC weight of its own for pieces; " + NO_HELP),
    "train.attention_pieces_quiet_seconds": Retired(0.0, "cuts moved to the quietest frame; " + NO_HELP),
    "decode.stream_second_pass_reach_seconds": Retired(0.0, "segments decoded with those before; " + NO_HELP),
    "decode.stream_second_pass_words_beam_size": Retired(0, "a beam of its own for early words; " + NO_HELP),
    "decode.stream_second_pass_words_other_speed": Retired(True, "early words at one speed; " + NO_HELP),
}
RENAMED = {  # old key -> new key, in the same section
    "train.attention_guide_trigger": "train.attention_pieces_trigger",
    "train.attention_guide_seconds": "train.attention_pieces_auto_seconds",
}
_noted: set[str] = set()  # retired keys already noted by this process


def note_ignored(ignored: list[str]) -> None:
    """One line for the retired keys not noted yet by this process."""
    new = [key for key in ignored if key not in _noted]
    if new:
        _noted.update(new)
        say(f"note: no longer settings of las, ignored at their old defaults: {', '.join(new)}")


def override(instance: Any, values: dict[str, Any], prefix: str = "", ignored: list[str] | None = None) -> Any:
    """A copy of a (nested) frozen dataclass with `values` replacing the named fields; a retired
    key at its old default is ignored (in one note for all), a renamed one read under its new name."""
    top = ignored is None
    ignored = [] if ignored is None else ignored
    fields = {item.name: item for item in dataclasses.fields(instance)}
    hints = typing.get_type_hints(type(instance))
    changes = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if key in RENAMED:
            key = RENAMED[key]
            name = key.removeprefix(prefix)
        if name not in fields and key in RETIRED:
            RETIRED[key].check(key, value)  # refused unless at its old default
            ignored.append(key)
            continue
        if name not in fields:
            known = ", ".join(sorted(f"{prefix}{field}" for field in fields))
            raise LasError(f"unknown config key {key!r} (known: {known})")
        current = getattr(instance, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise LasError(f"config key {key!r} is a section; set its fields, e.g. {key}.<field>=...")
            changes[name] = override(current, value, f"{key}.", ignored)
        else:
            changes[name] = coerce(value, hints[name], key)
    if top:
        note_ignored(ignored)
    return dataclasses.replace(instance, **changes)
