"""Long utterances cut into pieces of whole words at the CTC head's alignment in the first steps
of training from scratch (las/training/pieces.py), and when a run cuts them
(las/training/attention_start.py)."""

import pytest
import torch

from las.core.config import load_config
from las.core.errors import LasError
from las.core.text import PAD_INDEX, Vocabulary
from las.data.dataset import Batch, speller_targets
from las.model.las import LAS
from las.model.losses import joint_loss
from las.training.attention_start import AttentionStart
from las.training.distributed import Distributed
from las.training.optimisation import Optimisation
from las.training.pieces import Cutting, Piece, cut, pieces_of, word_spans
from las.training.run_progress import Progress

from .conftest import TINY

VOCABULARY = Vocabulary.from_texts(["ABCDEFGH "])
SPACE = VOCABULARY.index[" "]  # 4, the letters from 5


def test_words_take_their_characters_frames_and_leave_the_spaces_out() -> None:
    a, b = VOCABULARY.index["A"], VOCABULARY.index["B"]
    tokens = [a, b, SPACE, b, SPACE, SPACE, a]  # two spaces in a row make no empty word
    spans = [(2, 3), (4, 6), (8, 9), (12, 13), (15, 16), (16, 17), (20, 22)]
    assert word_spans(tokens, spans, SPACE) == [((0, 2), (2, 6)), ((3, 4), (12, 13)), ((6, 7), (20, 22))]
    assert word_spans([], [], SPACE) == []


def test_pieces_are_whole_words_cut_at_the_middle_of_the_pauses_between_them() -> None:
    # Three words at encoder frames [2, 6), [12, 13), [20, 22) of 25; four input frames to one.
    words = [((0, 2), (2, 6)), ((3, 4), (12, 13)), ((5, 7), (20, 22))]
    # Cuts at input frames 0, 36 (between 6 and 12), 66 (between 13 and 20), 100.
    assert pieces_of(words, 25, 100, [70]) == [Piece((0, 66), (0, 4)), Piece((66, 100), (5, 7))]
    assert pieces_of(words, 25, 100, [100]) == [Piece((0, 100), (0, 7))]
    # A word longer than its piece may be is a piece alone; each piece its own longest.
    assert pieces_of(words, 25, 100, [10, 70]) == [Piece((0, 36), (0, 2)), Piece((36, 100), (3, 7))]
    assert pieces_of([], 25, 100, [10]) == [Piece((0, 100), (0, 0))]


def batch_of(texts: list[str], frames: list[int]) -> Batch:
    tokens = [torch.tensor(VOCABULARY.encode(text)) for text in texts]
    targets_in, targets_out, target_lengths = speller_targets(tokens, VOCABULARY)
    features = torch.nn.utils.rnn.pad_sequence(
        [torch.randn(count, 40, generator=torch.Generator().manual_seed(count)) for count in frames], batch_first=True
    )
    ids = [f"u{row}" for row in range(len(texts))]
    return Batch(ids, features, torch.tensor(frames), targets_in, targets_out, target_lengths, list(texts))


def test_a_batch_is_cut_into_pieces_that_make_up_each_utterance() -> None:
    torch.manual_seed(0)
    model = LAS.build(load_config(None, TINY).model, 40, len(VOCABULARY))
    batch = batch_of(["AB CD ABC D CA", "AB", "DC BA"], [400, 400, 60])
    generator = torch.Generator().manual_seed(1)
    # An untrained head is trusted only with a trigger above any loss: under a lower one, the
    # utterances longer than a piece are the head's alone, and only the short one is spelt.
    unaligned = cut(model, batch, Cutting(longest=100, trigger=1e-3), VOCABULARY, generator)
    assert unaligned is not None and unaligned.pieces.ids == ["u2"] and unaligned.heard.ids == ["u0", "u1"]
    assert not unaligned.divided  # a step that says nothing of the attention on pieces
    step = cut(model, batch, Cutting(longest=100, trigger=1e6), VOCABULARY, generator)
    assert step is not None and step.heard is None and step.divided  # every utterance aligned
    pieces = step.pieces
    # The first utterance in pieces; the second, one word, whole; the third shorter than a piece.
    firsts = [position for position, name in enumerate(pieces.ids) if name.startswith("u0")]
    assert len(firsts) > 1 and pieces.ids[firsts[-1] + 1 :] == ["u1", "u2"]
    assert [name for name in pieces.ids if name.startswith("u0")] == [f"u0#{n + 1}" for n in range(len(firsts))]
    lengths = pieces.feature_lengths.tolist()
    heard = torch.cat([pieces.features[row, : lengths[row]] for row in firsts])
    torch.testing.assert_close(heard, batch.features[0, :400])  # every frame once, in order
    spelt = [VOCABULARY.decode(pieces.targets_out[row].tolist()) for row in firsts]
    assert " ".join(spelt) == "AB CD ABC D CA" and all(text and text.strip() == text for text in spelt)
    assert pieces.targets_in[:, 0].eq(VOCABULARY.sos).all()
    assert pieces.target_lengths.tolist() == [len(text) + 1 for text in spelt] + [3, 6]
    # Every utterance no longer than a piece: nothing to cut.
    assert cut(model, batch, Cutting(longest=400, trigger=1e6), VOCABULARY, generator) is None


def test_an_utterance_the_head_cannot_align_is_left_out_of_a_step_in_pieces() -> None:
    torch.manual_seed(0)
    model = LAS.build(load_config(None, TINY).model, 40, len(VOCABULARY))
    # The second: 27 characters in 40 frames, 10 encoder frames: no CTC path spells them.
    batch = batch_of(["AB CD ABC D CA", "ABCDEFGH ABCDEFGH ABCDEFGH", "A"], [400, 40, 20])
    step = cut(model, batch, Cutting(longest=30, trigger=1e6), VOCABULARY, torch.Generator().manual_seed(1))
    assert step is not None and step.heard is None  # not heard by the head either
    pieces = step.pieces
    assert "u1" not in pieces.ids and pieces.ids[-1] == "u2"
    assert {name.split("#")[0] for name in pieces.ids} == {"u0", "u2"}
    # Nothing cut: the batch as it is, the unaligned utterance in it.
    assert (
        cut(
            model,
            batch_of(["AB", "ABCDEFGH ABCDEFGH ABCDEFGH"], [400, 40]),
            Cutting(30, 1e6),
            VOCABULARY,
            torch.Generator(),
        )
        is None
    )


def test_an_utterance_the_head_does_not_yet_align_is_heard_whole_by_the_head_alone() -> None:
    torch.manual_seed(0)
    model = LAS.build(load_config(None, TINY).model, 40, len(VOCABULARY)).eval()  # no dropout
    batch = batch_of(["AB CD ABC D CA", "DC BA DC BA", "A"], [400, 400, 20])
    # Each utterance's CTC loss per character, as the head reads it now: a trigger between the two.
    with torch.no_grad():
        memory = model.listener(batch.features, batch.feature_lengths)
        log_probs = model.ctc_head(memory.hidden).log_softmax(dim=-1)
    counts = batch.target_lengths - 1
    losses = torch.nn.functional.ctc_loss(
        log_probs.transpose(0, 1), batch.targets_in[:, 1:], memory.lengths, counts, reduction="none"
    )
    per_character = (losses / counts).tolist()
    aligned, unaligned = (0, 1) if per_character[0] < per_character[1] else (1, 0)
    trigger = sum(per_character[:2]) / 2
    step = cut(model, batch, Cutting(longest=100, trigger=trigger), VOCABULARY, torch.Generator().manual_seed(1))
    assert step is not None and step.heard is not None
    pieces, heard = step.pieces, step.heard
    assert sum(name.startswith(f"u{aligned}#") for name in pieces.ids) > 1 and pieces.ids[-1] == "u2"
    # Heard whole, every frame and character, apart from the pieces (not padded to its length).
    assert heard.ids == [f"u{unaligned}"] and heard.feature_lengths.tolist() == [400]
    assert pieces.features.shape[1] == int(pieces.feature_lengths.max()) < 400
    torch.testing.assert_close(heard.features[0], batch.features[unaligned])
    characters = int(counts[unaligned])
    assert heard.target_lengths.tolist() == [characters + 1]
    assert heard.targets_in[0].tolist() == batch.targets_in[unaligned, : characters + 1].tolist()
    assert heard.targets_out.eq(PAD_INDEX).all() and heard.speller_steps == 1  # nothing for the speller
    # Its loss adds to the pieces' as if all were one batch: CTC over every character, the
    # attention over the pieces' alone (its characters counted: the step leans on CTC).
    optimisation = Optimisation(load_config(None, TINY), model, torch.device("cpu"), Distributed(), 10)
    lengths = torch.cat([pieces.target_lengths, heard.target_lengths])
    apart, apart_parts = optimisation.loss(pieces, lengths, 1.0, False)
    heard_loss, heard_parts = optimisation.loss(heard, lengths, 1.0, False)
    rows = [
        (name, pieces.features[row, :length], pieces.targets_in[row], pieces.targets_out[row])
        for row, (name, length) in enumerate(zip(pieces.ids, pieces.feature_lengths.tolist(), strict=True))
    ] + [(heard.ids[0], heard.features[0], heard.targets_in[0], heard.targets_out[0])]
    pad = torch.nn.utils.rnn.pad_sequence
    together = Batch(
        [name for name, _, _, _ in rows],
        pad([features for _, features, _, _ in rows], batch_first=True),
        torch.tensor([len(features) for _, features, _, _ in rows]),
        pad([targets for _, _, targets, _ in rows], batch_first=True, padding_value=PAD_INDEX),
        pad([targets for _, _, _, targets in rows], batch_first=True, padding_value=PAD_INDEX),
        lengths,
        [None] * len(rows),
    )
    whole, whole_parts = optimisation.loss(together, lengths, 1.0, False)
    torch.testing.assert_close(apart + heard_loss, whole)
    for name in ("ctc_loss", "attention_loss"):
        torch.testing.assert_close(apart_parts[name] + heard_parts[name], whole_parts[name])
    assert heard_parts["attention_loss"] == 0


def test_a_batch_of_long_utterances_none_aligned_is_heard_by_the_head_alone() -> None:
    """Not spelt whole by the speller: it cannot attend to them yet, and learning to spell
    without reading them would pull the listener from what the head has learnt."""
    torch.manual_seed(0)
    config = load_config(None, TINY)
    model = LAS.build(config.model, 40, len(VOCABULARY))
    batch = batch_of(["AB CD ABC D CA", "DC BA DC BA"], [400, 300])
    step = cut(model, batch, Cutting(longest=100, trigger=1e-3), VOCABULARY, torch.Generator().manual_seed(1))
    assert step is not None and step.heard is None and not step.divided
    heard = step.pieces
    assert heard.ids == ["u0", "u1"] and heard.feature_lengths.tolist() == [400, 300]
    assert heard.speller_steps == 1 and heard.targets_out.eq(PAD_INDEX).all()
    # Its step measures the attention as a step in pieces does: nothing spelt, nothing along a diagonal.
    optimisation = Optimisation(config, model, torch.device("cpu"), Distributed(), 10)
    _, parts = optimisation.loss(heard, heard.target_lengths, 1.0, False, alignment=True)
    assert parts["attention_loss"] == 0 and parts["ctc_loss"] > 0 and parts["diagonal_share"] == 0


def starts(frame_counts: list[int], *settings: str) -> AttentionStart:
    return AttentionStart(load_config(None, ["train.attention_pieces=auto", *settings]), frame_counts)


def test_a_run_in_pieces_learns_at_a_higher_rate_and_says_so() -> None:
    long, short = [1300, 1100, 900], [270, 300, 250]  # frames of 10 ms: 11 s and 2.7 s at the median
    assert AttentionStart(load_config(None, []), long).learning_rate == pytest.approx(3e-3)  # 2e-3 x 1.5
    assert AttentionStart(load_config(None, []), short).learning_rate == pytest.approx(2e-3)  # AN4's, as it was
    assert starts(long, "train.init=runs/an4/averaged.pt").learning_rate == pytest.approx(2e-3)  # no pieces
    assert starts(long, "train.learning_rate=1e-3").learning_rate == pytest.approx(1.5e-3)
    assert starts(long, "train.attention_pieces_learning_rate_scale=1").learning_rate == pytest.approx(2e-3)
    assert starts(short, "train.attention_pieces=on").learning_rate == pytest.approx(3e-3)
    said = "\n".join(starts(long).describe())
    assert "learning rate 0.003: train.learning_rate x 1.5 with the pieces" in said
    assert "learning rate" not in "\n".join(starts(long, "train.attention_pieces_learning_rate_scale=1").describe())


def test_pieces_double_in_length_once_attended_along_a_diagonal_up_to_what_decoding_reads() -> None:
    long, short = [1300, 1100, 900, 2000], [270, 300, 250]  # frames of 10 ms: 12 s and 2.7 s at the median
    assert starts(long).cutting(None) == Cutting(300, 1.5)  # 3 s at first
    assert starts(long).cutting(600) == Cutting(600, 1.5)
    # Never longer than decoding reads (decode.segment_seconds, 10 s): 20 s utterances stay in pieces.
    assert starts(long).cutting(1200) == starts(long).cutting(2400) == Cutting(1000, 1.5)
    assert starts(long).active(2400)
    decoded_whole = starts(long, "decode.segment_seconds=30")
    assert decoded_whole.cutting(1200) == Cutting(1200, 1.5)
    assert decoded_whole.cutting(2400) is None and not decoded_whole.active(2400)  # 24 s: longer than any
    assert "up to the 10 s decoding reads" in starts(long).describe()[0]
    # Twice as long when most of a length's pieces are attended along a diagonal, at most to 10 s.
    progress = Progress(step=20, piece_frames=600, pieces_since=10, pieces_aligned=0.9)
    starts(long).follow(progress, 1.0)
    assert (progress.piece_frames, progress.pieces_since, progress.pieces_aligned) == (1000, 20, 0.0)
    progress = Progress(step=20, piece_frames=1000, pieces_since=10, pieces_aligned=0.9)
    starts(long).follow(progress, 1.0)
    assert (progress.piece_frames, progress.pieces_since) == (1000, 10)
    # Most of the last steps' pieces along a diagonal, or 500 steps at one length: twice as long.
    assert starts(long).lengthened(0.5, 10) and not starts(long).lengthened(0.4, 499)
    assert starts(long).lengthened(0.0, 500)
    assert starts(short).cutting(None) is None
    assert starts(long, "train.init=runs/an4/averaged.pt").cutting(None) is None  # aligned already
    assert starts(long, "model.ctc_weight=0").cutting(None) is None  # no alignment to cut at
    assert starts(long, "model.speller=transformer").cutting(None) is not None  # any speller
    # On by default for long utterances from scratch, off for AN4's: its results are as they were.
    assert AttentionStart(load_config(None, []), long).cutting(None) == Cutting(300, 1.5)
    assert AttentionStart(load_config(None, []), short).cutting(None) is None
    assert starts(short, "train.attention_pieces=on").cutting(None) is None  # none longer than 3 s
    assert starts(long, "train.attention_pieces_auto_seconds=15").cutting(None) is None  # 12 s: not long
    on = starts(short, "train.attention_pieces=on", "train.attention_pieces_seconds=2")
    assert on.cutting(None) == Cutting(200, 1.5)
    # Transcripts with no space (Chinese, Japanese) have no words to cut at: auto is off, on refused.
    assert AttentionStart(load_config(None, ["train.attention_pieces=auto"]), long, spaced=False).cutting(None) is None
    with pytest.raises(LasError, match="train.attention_pieces.*no space"):
        AttentionStart(load_config(None, ["train.attention_pieces=on"]), long, spaced=False)
    assert "cut into pieces" in starts(long).describe()[0] and "12.0 s at the median" in starts(long).describe()[0]
    # The warning of an unaligned run says what is left to try.
    assert "ctc_first" not in starts(long).advice()  # on by default
    assert "train.attention_pieces_ctc_first=true" in starts(long, "train.attention_pieces_ctc_first=false").advice()


DIMENSIONS = 10


def spoken_sentences(count: int, seed: int) -> list[tuple[torch.Tensor, list[int], list[int]]]:
    """Long utterances whose characters are known to the frame: 6-8 words of a lexicon of six, each
    letter 8-15 frames of its own noisy spectrum, a pause of 6-12 frames of another between words
    (the space). Features `(frames, 10)`, characters, and each character's frames."""
    spectra = torch.randn(len(VOCABULARY), DIMENSIONS, generator=torch.Generator().manual_seed(0)) * 2
    shapes = torch.Generator().manual_seed(7)
    sizes = [int(torch.randint(2, 5, (1,), generator=shapes)) for _ in range(6)]
    lexicon = [torch.randint(SPACE + 1, len(VOCABULARY), (size,), generator=shapes) for size in sizes]
    draws = torch.Generator().manual_seed(seed)
    utterances = []
    for _ in range(count):
        words = torch.randint(0, len(lexicon), (int(torch.randint(6, 9, (1,), generator=draws)),), generator=draws)
        characters: list[int] = []
        for word in words.tolist():
            characters += ([SPACE] if characters else []) + lexicon[word].tolist()
        durations = [
            int(torch.randint(*((6, 13) if character == SPACE else (8, 16)), (1,), generator=draws))
            for character in characters
        ]
        frames = spectra[characters].repeat_interleave(torch.tensor(durations), dim=0)
        utterances.append((frames + 0.7 * torch.randn(frames.shape, generator=draws), characters, durations))
    return utterances


def batch_of_sentences(utterances: list) -> Batch:
    tokens = [torch.tensor(characters) for _, characters, _ in utterances]
    targets_in, targets_out, target_lengths = speller_targets(tokens, VOCABULARY)
    features = torch.nn.utils.rnn.pad_sequence([features for features, _, _ in utterances], batch_first=True)
    lengths = torch.tensor([len(features) for features, _, _ in utterances])
    ids = [str(row) for row in range(len(utterances))]
    return Batch(ids, features, lengths, targets_in, targets_out, target_lengths, [None] * len(ids))


def attention_on_own_character(model: LAS, utterances: list) -> float:
    """The mean share of each character's attention, teacher-forced over the whole utterance, on
    its own frames (give or take an encoder frame of 4)."""
    batch = batch_of_sentences(utterances)
    with torch.no_grad():
        attention = model.eval()(batch.features, batch.feature_lengths, batch.targets_in).attention
    shares = []
    for row, (_, _, durations) in enumerate(utterances):
        ends = torch.tensor(durations).cumsum(dim=0).tolist()
        for step, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
            shares.append(float(attention[row, step, max(0, start // 4 - 1) : (end - 1) // 4 + 2].sum()))
    return sum(shares) / len(shares)


def test_a_tiny_models_attention_finds_its_place_on_long_utterances_when_trained_on_pieces() -> None:
    """Where whole utterances of 190-290 frames leave a tiny model's attention spread over the
    recording, pieces at the CTC head's alignment that grow from 60 frames to whole make it find
    its place on whole utterances it never heard."""
    train, held_out, steps = spoken_sentences(64, seed=1), spoken_sentences(16, seed=999), 200
    shares = []
    for in_pieces in (False, True):
        torch.manual_seed(1)
        model = LAS.build(load_config(None, TINY).model, DIMENSIONS, len(VOCABULARY))
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        generator = torch.Generator().manual_seed(2)
        for step in range(steps):
            batch = batch_of_sentences(train[step * 8 % 64 :][:8])
            # Twice as long every 60 steps (the CTC head learns to align by step 25 or so).
            cutting = Cutting(longest=round(60 * 2 ** (step / 60)), trigger=1.5)
            step_in_pieces = cut(model, batch, cutting, VOCABULARY, generator) if in_pieces else None
            batch = step_in_pieces.pieces if step_in_pieces else batch  # those heard whole left out here
            output = model(batch.features, batch.feature_lengths, batch.targets_in)
            loss, _ = joint_loss(output, batch.targets_in, batch.targets_out, batch.target_lengths, 0.3, 0.0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        shares.append(attention_on_own_character(model, held_out))
    # Measured, seeds 1 / 2 / 3: 0.12 / 0.08 / 0.09 whole, 0.28 / 0.18 / 0.17 in pieces (each
    # character's attention on its own frames; 0.29-0.37 / 0.43-0.52 on the first two words alone).
    alone, in_pieces = shares
    assert alone < 0.15 and in_pieces > 1.6 * alone
