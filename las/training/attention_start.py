"""How the attention starts: whether this run cuts its long utterances into pieces at the CTC
head's alignment (las.training.pieces), and how long they are at each step.

For training from scratch on long utterances, where attention does not find its place by itself;
`auto` turns the pieces on by what the training data is (its median utterance length), not by a
flag a user must know of.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.data.dataset import Batch
from las.model.las import LAS
from las.training.pieces import Cutting, InPieces, cut
from las.training.run_progress import Progress

# A moving average of the share of a step's pieces attended along a diagonal over which they are
# lengthened: most, as a run's dev pass judges its attention aligned (las.training.dev_evaluation).
ALIGNED_SHARE = 0.5


class AttentionStart:
    """The attention's start in a run: `cutting(longest)` is how a training step cuts its
    utterances (None where it does not); `learning_rate` the run's (train.learning_rate, scaled
    where the pieces are on)."""

    def __init__(self, config: Config, frame_counts: Sequence[int], spaced: bool = True) -> None:
        """For training utterances of `frame_counts` frames whose transcripts are `spaced` (words
        between spaces: where pieces are cut)."""
        settings = config.train
        self.trigger = settings.attention_pieces_trigger
        self.frames_per_second = frames_per_second = 1000 / config.features.hop_ms
        self.median_seconds = statistics.median(frame_counts) / frames_per_second if frame_counts else 0.0
        self.longest_frames = max(frame_counts, default=0)
        long = self.median_seconds >= settings.attention_pieces_auto_seconds and not settings.init
        if settings.attention_pieces == "auto":
            self.pieces = long and config.model.ctc_weight > 0 and spaced
        else:
            self.pieces = settings.attention_pieces == "on"
        if self.pieces and not spaced:
            raise LasError(
                "config key 'train.attention_pieces': cuts utterances into words at the spaces between them; "
                "these transcripts have no space"
            )
        self.first_piece_frames = round(settings.attention_pieces_seconds * frames_per_second)
        # Pieces grow no longer than decoding reads (it cuts recordings at their pauses to this
        # length): whole long utterances only pull the listener the CTC head shares towards a
        # speller that cannot attend to them.
        self.longest_piece_frames = max(
            self.first_piece_frames, round(config.decode.segment_seconds * frames_per_second)
        )
        self.most_steps = settings.attention_pieces_most_steps
        self.ctc_first = self.pieces and settings.attention_pieces_ctc_first
        self.ctc_first_steps = settings.attention_pieces_ctc_first_steps
        self.learning_rate_scale = settings.attention_pieces_learning_rate_scale if self.pieces else 1.0
        self.learning_rate = settings.learning_rate * self.learning_rate_scale  # the run's

    def cutting(self, longest: int | None) -> Cutting | None:
        """How a training step cuts its utterances: pieces at most `longest` frames (None: the
        first length, `train.attention_pieces_seconds`), and never longer than decoding reads
        (`decode.segment_seconds`); None once they are longer than every training utterance (or
        were never on)."""
        if not self.pieces:
            return None
        longest = min(longest or self.first_piece_frames, self.longest_piece_frames)
        return Cutting(longest, self.trigger) if longest < self.longest_frames else None

    def lengthened(self, aligned: float, steps: int) -> bool:
        """Whether pieces that have been cut at one length for `steps` steps, with a moving
        average `aligned` of the share of each step's pieces attended along a diagonal, are now
        to be twice as long: most are, or they have waited `train.attention_pieces_most_steps`."""
        return aligned >= ALIGNED_SHARE or steps >= self.most_steps

    def in_pieces(
        self, progress: Progress, model: LAS, batch: Batch, vocabulary: Vocabulary, seed: int
    ) -> tuple[bool, InPieces | None]:
        """Whether the step after `progress` is one of pieces, and `batch` in pieces where it was
        cut: not while the last step's CTC loss is over the trigger, before the first cut."""
        cutting = self.cutting(progress.piece_frames)
        if cutting is None:
            return False, None
        if progress.alignment_start is None and progress.ctc_loss is not None and progress.ctc_loss >= cutting.trigger:
            return True, None
        generator = torch.Generator().manual_seed(seed * 1_000_003 + progress.step)
        return True, cut(model, batch, cutting, vocabulary, generator)

    def follow(self, progress: Progress, diagonal: float) -> None:
        """After a step in pieces of which a share `diagonal` was attended along a diagonal: the
        pieces twice as long once most are, over the last ten steps or so."""
        now = self.cutting(progress.piece_frames)
        if progress.pieces_since is None:
            progress.pieces_since, progress.piece_frames = progress.step, now.longest if now else None
        progress.pieces_aligned = 0.9 * progress.pieces_aligned + 0.1 * diagonal
        longer = now is not None and now.longest < self.longest_piece_frames
        if longer and self.lengthened(progress.pieces_aligned, progress.step - progress.pieces_since):
            progress.piece_frames = min(2 * now.longest, self.longest_piece_frames)
            progress.pieces_since, progress.pieces_aligned = progress.step, 0.0

    def ctc_alone(self, step: int, start: int | None) -> bool:
        """Whether training step `step` trains the listener by its CTC head alone, its speller as
        it is: with `train.attention_pieces_ctc_first`, before the first cut (`start` None), for
        at most `train.attention_pieces_ctc_first_steps` steps (a head that has not learnt by then
        may never: the speller learns from whole utterances as without pieces). A speller trained on
        whole long recordings it cannot attend to learns to spell without reading them."""
        return self.ctc_first and start is None and step < self.ctc_first_steps and self.cutting(None) is not None

    def active(self, longest: int | None) -> bool:
        """Whether pieces (now at most `longest` frames) are still to come or under way."""
        return self.cutting(longest) is not None

    def describe(self) -> list[str]:
        """Lines for the log: what is on, and why."""
        why = f"the training utterances last {self.median_seconds:.1f} s at the median"
        lines = []
        if self.pieces:
            seconds = self.first_piece_frames / self.frames_per_second
            lines.append(
                f"utterances cut into pieces at the CTC head's alignment once it has learnt, at most {seconds:.1f} s "
                "long at first, twice as long once their attention runs along a diagonal (train.attention_pieces), "
                f"up to the {self.longest_piece_frames / self.frames_per_second:g} s decoding reads "
                "(decode.segment_seconds): " + why
            )
        if self.ctc_first:
            lines.append(
                f"until the first cut (or step {self.ctc_first_steps}), the CTC head alone trains; the speller waits "
                "(train.attention_pieces_ctc_first)"
            )
        if self.learning_rate_scale != 1:
            lines.append(
                f"learning rate {self.learning_rate:g}: train.learning_rate x {self.learning_rate_scale:g} "
                "with the pieces (train.attention_pieces_learning_rate_scale)"
            )
        return lines

    def advice(self) -> str:
        """What to do where the attention has not aligned (las.training.train's warning)."""
        if self.pieces:
            first = (
                ""
                if self.ctc_first
                else "train the CTC head alone until the first cut (train.attention_pieces_ctc_first=true), "
            )
            return (
                "Its utterances were cut into pieces at the CTC head's alignment: "
                + first
                + "let them wait longer to grow (train.attention_pieces_most_steps), or train on short "
                "utterances first and start from that run with --init"
            )
        return (
            "Attention aligns slowly on long utterances from scratch: cut them into pieces at the CTC head's "
            "alignment (train.attention_pieces=on, with model.ctc_weight > 0), or train on short utterances "
            "first and start from that run with --init (data/recipes/hw4p2.toml)"
        )
