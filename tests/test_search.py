"""Decoding strategies: beam 1 is greedy, batching changes nothing, scores are log-likelihoods."""

import typing
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from las import Recognizer
from las.core.config import DecodeConfig, StrategyName, load_config
from las.data.corpora.manifest import read_utterances
from las.data.dataset import Batch
from las.model.las import LAS
from las.model.speller import Speller
from las.search import (
    STRATEGIES,
    BeamSearch,
    CTCGreedySearch,
    GreedySearch,
    Hypothesis,
    Rules,
    SamplingSearch,
    Scoring,
    Symbols,
    build_strategy,
)
from las.search.common import WINDOW_BACK_FRAMES, Heard, ctc_greedy_lengths
from las.search.ctc_prefix import CTCPrefixScorer
from scripts.reference_beam import reference_beam_search

from .conftest import TINY
from .test_model import VOCABULARY, batch, make_model, teacher_forced_log_likelihood

SYMBOLS = Symbols.of(VOCABULARY)


RULES = Rules(length_normalize=False)


def with_rules(settings: dict, changes: dict) -> dict:
    """`settings` with `changes`, those that name a rule or a scorer applied to the rules or the scoring."""
    parts = {"rules": {item.name for item in fields(Rules)}, "scoring": {item.name for item in fields(Scoring)}}
    made = {
        part: replace(settings.get(part, Scoring()), **{k: v for k, v in changes.items() if k in names})
        for part, names in parts.items()
    }
    others = {key: value for key, value in changes.items() if not any(key in names for names in parts.values())}
    return {**settings, **others, **made}


def beam(symbols: Symbols, **changes: object) -> BeamSearch:
    return BeamSearch(**with_rules(dict(symbols=symbols, rules=RULES, beam_size=4, nbest=4), changes))


def greedy(symbols: Symbols, **changes: object) -> GreedySearch:
    return GreedySearch(**with_rules(dict(symbols=symbols, rules=RULES), changes))


def language_model(model: LAS) -> Speller:
    """A character LM for `model`'s vocabulary: any speller, heard through one silent frame."""
    torch.manual_seed(2)
    config = load_config(None, TINY + ["model.speller_hidden=32"])
    return LAS.build(config.model, input_size=10, vocabulary_size=model.speller.output.out_features).speller.eval()


@pytest.fixture(scope="module", params=["untrained", "trained"])
def model_and_memory(request: pytest.FixtureRequest, trained_run: dict[str, Path]):
    """An untrained model, whose hypotheses run to the length limit, and a briefly trained one on
    real utterances, whose hypotheses end on their own and compete: between them every rule of
    the search is exercised."""
    if request.param == "untrained":
        model = make_model()
        features, lengths, _, _ = batch()
        return model, features, lengths, model.listener(features, lengths), SYMBOLS
    recognizer, utterances = trained_batch(trained_run)
    model = recognizer.model
    memory = model.listener(utterances.features, utterances.feature_lengths)
    return model, utterances.features, utterances.feature_lengths, memory, Symbols.of(recognizer.vocabulary)


def trained_batch(trained_run: dict[str, Path]) -> tuple[Recognizer, Batch]:
    """The briefly trained model, and its training utterances in one batch, normalised."""
    recognizer = Recognizer.load(trained_run["run"] / "last.pt", "cpu")
    manifest = trained_run["train"]
    utterances, features = recognizer.utterance_features(read_utterances(manifest), manifest)
    dataset = recognizer.dataset([utterance.id for utterance in utterances], features)
    return recognizer, dataset.collate(list(range(len(dataset))))


@pytest.mark.parametrize("scorers", ["speller", "ctc", "lm", "ctc+lm"])
def test_beam_size_one_equals_greedy_with_every_scorer(model_and_memory, scorers: str) -> None:
    model, _, _, memory, symbols = model_and_memory
    joined = {
        "ctc_weight": 0.4 if "ctc" in scorers else 0.0,
        "language_model": language_model(model) if "lm" in scorers else None,
        "lm_weight": 0.5 if "lm" in scorers else 0.0,
    }
    greedy_found = greedy(symbols, **joined).search(model, memory)
    beamed = beam(symbols, beam_size=1, nbest=1, **joined).search(model, memory)
    for greedy_hypotheses, beam_hypotheses in zip(greedy_found, beamed, strict=True):
        assert beam_hypotheses[0].tokens == greedy_hypotheses[0].tokens
        assert beam_hypotheses[0].score == pytest.approx(greedy_hypotheses[0].score, abs=1e-4)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"length_normalize": True},
        {"length_penalty": 0.5, "min_length_ratio": 0.2},
        {"eos_threshold": 1.5},
        {"ctc_weight": 0.3},
        {"ctc_weight": 0.3, "lm_weight": 0.4},
        {"attention_window": 3},
        {"ctc_length_ratio": 0.5},
        {"ctc_weight": 0.3, "beam_size": 40},  # wider than the vocabulary: some rows hold no prefix
    ],
)
def test_batched_beam_search_equals_the_per_utterance_reference(model_and_memory, changes: dict) -> None:
    model, _, _, memory, symbols = model_and_memory
    if changes.get("lm_weight"):
        changes = {**changes, "language_model": language_model(model)}
    search = beam(symbols, **changes)
    batched = search.search(model, memory)
    for row in range(memory.values.shape[0]):
        single = memory.select(torch.tensor([row]))
        single = single._replace(
            keys=single.keys[:, : single.lengths[0]],
            values=single.values[:, : single.lengths[0]],
            mask=single.mask[:, : single.lengths[0]],
            hidden=single.hidden[:, : single.lengths[0]],
        )
        reference = reference_beam_search(model, single, search)
        assert [h.tokens for h in batched[row]] == [h.tokens for h in reference]
        for ours, theirs in zip(batched[row], reference, strict=True):
            assert ours.score == pytest.approx(theirs.score, abs=1e-4)
            torch.testing.assert_close(ours.attention, theirs.attention, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("every", [3, 8])
def test_decoding_as_on_an_accelerator_finds_the_same_hypotheses(
    model_and_memory, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on an accelerator, where a read from the host waits for the device
    (las.search.common.reads_are_free): utterances that are done search on until the next check
    and end nothing more, and CTC prefix scores are masked to their window, not sliced to it."""
    model, _, _, memory, symbols = model_and_memory
    strategies = [beam(symbols, ctc_weight=0.3, length_normalize=True), greedy(symbols, ctc_weight=0.3)]
    each_step = [strategy.search(model, memory) for strategy in strategies]
    for module in ("las.search.beam", "las.search.paths"):
        monkeypatch.setattr(f"{module}.steps_between_checks", lambda device: every)
    monkeypatch.setattr("las.search.ctc_prefix.reads_are_free", lambda device: False)
    for strategy, expected in zip(strategies, each_step, strict=True):
        assert_same_hypotheses(strategy.search(model, memory), expected)


def assert_same_hypotheses(found: list[list[Hypothesis]], expected: list[list[Hypothesis]]) -> None:
    """Per utterance the same hypotheses in the same order, with their scores (1e-4) and attention (1e-5)."""
    for ours, theirs in zip(found, expected, strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        for mine, reference in zip(ours, theirs, strict=True):
            assert mine.score == pytest.approx(reference.score, abs=1e-4)
            assert mine.attention is not None and reference.attention is not None
            assert torch.allclose(mine.attention, reference.attention, atol=1e-5)


def test_beam_scores_are_teacher_forced_log_likelihoods_and_nbest_is_sorted_and_distinct(model_and_memory) -> None:
    model, features, lengths, memory, symbols = model_and_memory
    search = beam(symbols, beam_size=5, nbest=5)
    for row, hypotheses in enumerate(search.search(model, memory)):
        assert 1 < len(hypotheses) <= 5
        scores = [hypothesis.score for hypothesis in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(hypothesis.tokens) for hypothesis in hypotheses}) == len(hypotheses)
        single_features, single_lengths = features[row : row + 1, : lengths[row]], lengths[row : row + 1]
        for hypothesis in hypotheses:
            likelihood = teacher_forced_log_likelihood(model, single_features, single_lengths, hypothesis.tokens)
            assert hypothesis.score == pytest.approx(likelihood, abs=1e-4)


def test_wider_beams_never_find_less_likely_best_hypotheses(model_and_memory) -> None:
    model, _, _, memory, symbols = model_and_memory
    greedy = GreedySearch(symbols, RULES).search(model, memory)
    wide = beam(symbols, beam_size=8, nbest=1).search(model, memory)
    for greedy_hypotheses, beam_hypotheses in zip(greedy, wide, strict=True):
        assert beam_hypotheses[0].score >= greedy_hypotheses[0].score - 1e-5


def sampling(symbols: Symbols, **changes: object) -> SamplingSearch:
    settings = dict(symbols=symbols, rules=RULES, samples=16, temperature=1.5, nbest=3, seed=7)
    return SamplingSearch(**with_rules(settings, changes))


def test_sampling_is_reproducible_with_a_seed_and_scores_are_log_likelihoods(model_and_memory) -> None:
    model, features, lengths, memory, symbols = model_and_memory
    first = sampling(symbols).search(model, memory)
    again = sampling(symbols).search(model, memory)
    other = sampling(symbols, seed=8).search(model, memory)
    as_tokens = lambda results: [[h.tokens for h in hypotheses] for hypotheses in results]  # noqa: E731
    assert as_tokens(first) == as_tokens(again)
    assert as_tokens(first) != as_tokens(other)
    greedy = GreedySearch(symbols, RULES).search(model, memory)
    for row, hypotheses in enumerate(first):
        scores = [hypothesis.score for hypothesis in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in hypotheses}) == len(hypotheses)
        assert hypotheses[0].score >= greedy[row][0].score - 1e-5  # the greedy path is a candidate
        single_features, single_lengths = features[row : row + 1, : lengths[row]], lengths[row : row + 1]
        likelihood = teacher_forced_log_likelihood(model, single_features, single_lengths, hypotheses[0].tokens)
        assert hypotheses[0].score == pytest.approx(likelihood, abs=1e-4)


def test_build_strategy_from_config() -> None:
    model = make_model()
    assert isinstance(build_strategy(DecodeConfig(), VOCABULARY, model), BeamSearch)  # the most accurate
    assert isinstance(build_strategy(replace(DecodeConfig(), strategy="greedy"), VOCABULARY, model), GreedySearch)
    assert isinstance(build_strategy(replace(DecodeConfig(), strategy="sample"), VOCABULARY, model), SamplingSearch)
    strategy = build_strategy(replace(DecodeConfig(), strategy="beam", beam_size=3, ctc_weight=0.3), VOCABULARY, model)
    assert isinstance(strategy, BeamSearch) and strategy.beam_size == 3 and strategy.scoring.ctc_weight == 0.3
    sample = build_strategy(replace(DecodeConfig(), strategy="sample", samples=5, ctc_weight=0.2), VOCABULARY, model)
    assert sample.samples == 5 and sample.scoring.ctc_weight == 0.2  # every strategy joins the same scorers


def test_the_strategy_registry_and_the_config_name_the_same_strategies() -> None:
    assert set(typing.get_args(StrategyName)) == set(STRATEGIES)


def ctc_log_likelihood(log_probs: torch.Tensor, sequence: list[int], frames: int) -> float:
    """log P_ctc(sequence | log_probs[:frames]) from torch's CTC loss (blank 0)."""
    return -torch.nn.functional.ctc_loss(
        log_probs[:frames, None],  # (frames, 1, vocabulary)
        torch.tensor([sequence]),
        torch.tensor([frames]),
        torch.tensor([len(sequence)]),
        reduction="sum",
    ).item()


def prefix_score_totals(
    scorer: CTCPrefixScorer, log_probs: torch.Tensor, lengths: torch.Tensor, sequences: list[list[int]]
) -> torch.Tensor:
    """Per row, the sum of the prefix score increments along its sequence and then <eos>."""
    state = scorer.initial(log_probs, lengths)
    rows = len(sequences)
    totals = torch.zeros(rows)
    ended = torch.zeros(rows, dtype=torch.bool)
    for step in range(max(map(len, sequences)) + 1):
        tokens = torch.tensor([sequence[step] if step < len(sequence) else scorer.eos for sequence in sequences])
        increments, scored = scorer.score(state, tokens)
        if scorer.window_nats == 0:  # starting the sum at the prefix's length skips only impossible frames
            assert state.length == step
            torch.testing.assert_close(increments, scorer.score(state._replace(length=state.length * 0), tokens)[0])
        totals += increments[torch.arange(rows), tokens].masked_fill(ended, 0.0)
        ended |= tokens == scorer.eos
        state = scorer.advance(scored, torch.arange(rows), tokens)
    return totals


@pytest.mark.parametrize("window_nats", [0.0, 30.0])
def test_ctc_prefix_scores_add_up_to_the_ctc_likelihood(window_nats: float) -> None:
    """Increments along a sequence, <eos> included, sum to log P_ctc(sequence | audio)."""
    torch.manual_seed(0)
    log_probs = torch.randn(2, 9, 6).log_softmax(-1)  # (rows, frames, vocabulary); blank 0, <eos> 5
    lengths = torch.tensor([9, 6])
    sequences = [[1, 1, 3], [2, 4]]  # a repeated character needs a blank between: the hard case
    totals = prefix_score_totals(CTCPrefixScorer(0, 5, window_nats), log_probs, lengths, sequences)
    for row, sequence in enumerate(sequences):
        expected = ctc_log_likelihood(log_probs[row], sequence, int(lengths[row]))
        assert totals[row].item() == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("window_nats", [0.0, 3.0, 30.0])
def test_ctc_prefix_scores_over_every_frame_masked_equal_those_over_the_window(
    window_nats: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an accelerator the scorer never reads where its window is (las.search.common.reads_are_free):
    it masks every frame outside it instead of slicing to it, with the same scores."""
    torch.manual_seed(4)
    log_probs = (torch.randn(3, 40, 6) * 4).log_softmax(-1)
    lengths = torch.tensor([40, 23, 9])
    scorer = CTCPrefixScorer(0, 5, window_nats)
    state = scorer.initial(log_probs, lengths)
    for token in torch.randint(1, 5, (12,)).tolist():
        sliced = scorer.score(state, None)[0]
        monkeypatch.setattr("las.search.ctc_prefix.reads_are_free", lambda device: False)
        masked = scorer.score(state, None)[0]
        monkeypatch.undo()
        torch.testing.assert_close(masked, sliced, atol=1e-5, rtol=0, equal_nan=True)  # NaN: an impossible prefix
        state = scorer.advance((state, sliced), torch.arange(3), torch.full((3,), token))


def test_the_ctc_prefix_window_is_narrow_on_a_peaky_head_and_changes_nothing() -> None:
    """On a long, confident CTC output (as a trained head gives), each step sums over the frames
    around where the prefix was said, and the scores equal those over every frame."""
    torch.manual_seed(3)
    frames, vocabulary = 600, 8  # blank 0, <eos> 7
    sequence = torch.randint(1, 7, (90,)).tolist()
    logits = torch.randn(frames, vocabulary)
    logits[:, 0] += 6.0  # mostly blanks ...
    emitted = torch.linspace(5, frames - 10, len(sequence)).long()
    logits[emitted, torch.tensor(sequence)] += 12.0  # ... and each character at its frame
    log_probs, lengths = logits.log_softmax(-1)[None], torch.tensor([frames])
    windowed = CTCPrefixScorer(0, 7, window_nats=30.0)
    state, windows = windowed.initial(log_probs, lengths), []
    for token in sequence:
        total = torch.logaddexp(state.forward[:, 0], state.forward[:, 1])
        inside = windowed.window(state, total, total[-1])[0].nonzero().squeeze(1)
        windows.append((int(inside[0]), int(inside[-1]) + 1))
        assert len(inside) == windows[-1][1] - windows[-1][0]  # a run of frames
        state = windowed.advance(windowed.score(state, None)[1], torch.tensor([0]), torch.tensor([token]))
    starts = [start for start, _ in windows]
    assert starts[len(starts) // 2] > frames * 0.4 and starts[-1] > frames * 0.8  # the window follows the prefix ...
    assert max(end - start for start, end in windows) < frames / 6  # ... and does not grow with it
    exact = prefix_score_totals(CTCPrefixScorer(0, 7), log_probs, lengths, [sequence])
    assert prefix_score_totals(windowed, log_probs, lengths, [sequence]).item() == pytest.approx(exact.item(), abs=1e-3)
    assert exact.item() == pytest.approx(ctc_log_likelihood(log_probs[0], sequence, frames), abs=1e-2)


def test_ctc_greedy_merges_repeats_and_drops_blanks() -> None:
    # Frame-wise best symbols 5 5 0 5 6 6 0 | padding: "5 5 6" once repeats merge and blanks go.
    best = torch.tensor([[5, 5, 0, 5, 6, 6, 0, 7, 7]])
    logits = torch.full((1, 9, 8), -10.0).scatter(2, best[:, :, None], 10.0)
    model = SimpleNamespace(ctc_head=lambda hidden: logits)
    memory = SimpleNamespace(hidden=torch.zeros(1, 9, 4), lengths=torch.tensor([7]))
    symbols = Symbols(sos=1, eos=2, blank=0, forbidden=(0, 1))
    [[hypothesis]] = CTCGreedySearch(symbols).search(model, memory)
    assert hypothesis.tokens == [5, 5, 6]
    assert hypothesis.score == pytest.approx(7 * logits[0, 0].log_softmax(-1).max().item())
    assert hypothesis.attention is None


def test_ctc_greedy_decodes_a_trained_model(trained_run: dict[str, Path]) -> None:
    recognizer, batch = trained_batch(trained_run)
    model = recognizer.model
    strategy = build_strategy(replace(DecodeConfig(), strategy="ctc"), recognizer.vocabulary, model)
    results = strategy.search(model, model.listener(batch.features, batch.feature_lengths))
    assert len(results) == 4 and all(len(hypotheses) == 1 for hypotheses in results)
    assert all(recognizer.vocabulary.pad not in hypotheses[0].tokens for hypotheses in results)


@pytest.mark.parametrize("strategy", ["greedy", "sample", "beam"])
def test_every_strategy_ends_by_the_ctc_heads_length(model_and_memory, strategy: str) -> None:
    """No runaway transcripts: at most ctc_length_ratio times the CTC transcript's length (+ 5
    with <eos>), whatever the attention does — the untrained model runs to that limit."""
    model, _, _, memory, symbols = model_and_memory
    rules = Rules(ctc_length_ratio=1.0)
    heard = Heard.of(model, memory)
    search = {
        "greedy": GreedySearch(symbols, rules),
        "sample": sampling(symbols, ctc_length_ratio=1.0),
        "beam": beam(symbols, ctc_length_ratio=1.0),
    }[strategy]
    limits = rules.limits(heard).longest
    assert (limits <= (memory.lengths * 1.5).ceil().long() + 5).all()
    for hypotheses, limit in zip(search.search(model, memory), limits.tolist(), strict=True):
        assert all(len(hypothesis.tokens) + 1 <= limit for hypothesis in hypotheses)


def test_ctc_greedy_lengths_count_the_ctc_transcripts_characters(model_and_memory) -> None:
    model, _, _, memory, symbols = model_and_memory
    transcripts = CTCGreedySearch(symbols).search(model, memory)
    counted = ctc_greedy_lengths(model.ctc_head(memory.hidden), memory.mask).tolist()
    assert counted == [len(hypotheses[0].tokens) for hypotheses in transcripts]


def test_the_attention_window_keeps_attention_near_its_last_peak(model_and_memory) -> None:
    model, _, _, memory, symbols = model_and_memory
    window = 2
    [*results] = GreedySearch(symbols, Rules(attention_window=window)).search(model, memory)
    for (hypothesis,) in results:
        peaks = [0] + hypothesis.attention.argmax(dim=1).tolist()
        for step, weights in enumerate(hypothesis.attention):
            frames = torch.arange(len(weights))
            outside = (frames < peaks[step] - WINDOW_BACK_FRAMES) | (frames > peaks[step] + window)
            assert torch.all(weights[outside] == 0.0)
            assert weights.sum().item() == pytest.approx(1.0, abs=1e-5)


def test_greedy_and_sampling_obey_the_end_of_sentence_rules(model_and_memory) -> None:
    model, _, _, memory, symbols = model_and_memory
    rules = Rules(min_length_ratio=0.3, ctc_length_ratio=0.0)
    # At least the minimum, unless the length limit came first.
    limits = rules.limits(Heard.of(model, memory))
    least = torch.minimum(limits.shortest, limits.longest - 1).tolist()
    for search in (GreedySearch(symbols, rules), sampling(symbols, min_length_ratio=0.3, ctc_length_ratio=0.0)):
        for hypotheses, minimum in zip(search.search(model, memory), least, strict=True):
            assert all(len(hypothesis.tokens) >= minimum for hypothesis in hypotheses)


@pytest.mark.parametrize("temperature", [0.6, 1.5])
def test_random_search_with_the_ctc_prefix_scorer_draws_until_every_row_ends(model_and_memory, temperature) -> None:
    """Rows that ended keep stepping beside the others; their CTC prefix, impossible by then,
    must not turn the scores the draws come from into NaN."""
    model, _, _, memory, symbols = model_and_memory
    results = sampling(symbols, ctc_weight=0.5, temperature=temperature, samples=32).search(model, memory)
    greedy = GreedySearch(symbols, RULES, Scoring(ctc_weight=0.5)).search(model, memory)
    for hypotheses, best in zip(results, greedy, strict=True):
        assert all(torch.isfinite(torch.tensor(h.score)) for h in hypotheses)
        assert hypotheses[0].score >= best[0].score - 1e-4  # the greedy path is still a candidate
