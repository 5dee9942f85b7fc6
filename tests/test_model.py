import torch

from las.core.config import load_config
from las.core.text import Vocabulary
from las.model.las import LAS
from las.model.losses import attention_loss, ctc_loss, joint_loss
from las.search import GreedySearch, Rules, Symbols

from .conftest import TINY

VOCABULARY = Vocabulary.from_texts(["ABCDEFGH "])


def make_model(attention: str = "location", *settings: str) -> LAS:
    torch.manual_seed(0)
    config = load_config(None, TINY + [f"model.attention={attention}", *settings])
    return LAS.build(config.model, input_size=10, vocabulary_size=len(VOCABULARY)).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    lengths = torch.tensor([23, 14, 9])
    features = torch.randn(3, 23, 10)
    targets_in = torch.tensor([[1, 4, 5, 6, 7], [1, 8, 9, 0, 0], [1, 10, 0, 0, 0]])
    targets_out = torch.tensor([[4, 5, 6, 7, 2], [8, 9, 2, 0, 0], [10, 2, 0, 0, 0]])
    return features, lengths, targets_in, targets_out


def test_output_shapes() -> None:
    features, lengths, targets_in, _ = batch()
    output = make_model()(features, lengths, targets_in)
    assert output.logits.shape == (3, 5, len(VOCABULARY))
    assert output.attention.shape == (3, 5, 6)  # 23 frames -> 12 -> 6 with two pyramid layers
    assert output.ctc_log_probs.shape == (6, 3, len(VOCABULARY))
    assert output.memory.lengths.tolist() == [6, 4, 3]


def test_cumulative_attention_convolves_the_sum_of_previous_weights() -> None:
    features, lengths, targets_in, _ = batch()
    plain = make_model("location", "model.cumulative_attention=false")
    cumulative = make_model("location", "model.cumulative_attention=true")
    memory = plain.listener(features, lengths)
    state = cumulative.speller.initial_state(memory)
    total = state.history
    assert torch.equal(total, torch.zeros_like(total))  # no attention paid yet
    for step in range(3):
        _, state = cumulative.speller.step(targets_in[:, step], state, memory)
        total = total + state.weights
        torch.testing.assert_close(state.history, total)
    # Same weights, another location input: other alignments.
    first, second = plain(features, lengths, targets_in), cumulative(features, lengths, targets_in)
    assert not torch.allclose(first.attention, second.attention)


def test_padding_in_a_batch_does_not_change_an_utterance() -> None:
    model = make_model()
    features, lengths, targets_in, _ = batch()
    batched = model(features, lengths, targets_in)
    for row, (frames, steps) in enumerate([(23, 5), (14, 3), (9, 2)]):
        alone = model(features[row : row + 1, :frames], lengths[row : row + 1], targets_in[row : row + 1, :steps])
        torch.testing.assert_close(batched.logits[row, :steps], alone.logits[0], rtol=1e-4, atol=1e-5)
        encoder_frames = alone.memory.lengths.item()
        torch.testing.assert_close(
            batched.attention[row, :steps, :encoder_frames], alone.attention[0], rtol=1e-4, atol=1e-5
        )
        assert torch.all(batched.attention[row, :, encoder_frames:] == 0)


def test_attention_loss_ignores_padding() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 7)
    targets = torch.tensor([[3, 4, 2, 0], [5, 2, 0, 0]])
    changed = logits.clone()
    changed[0, 3] += 100.0  # values at padded positions must not matter
    changed[1, 2:] -= 50.0
    assert torch.equal(attention_loss(logits, targets, 0.1), attention_loss(changed, targets, 0.1))
    # ... and it is the mean over the five real targets.
    expected = torch.nn.functional.cross_entropy(logits[targets != 0], targets[targets != 0])
    torch.testing.assert_close(attention_loss(logits, targets, 0.0), expected)


def test_ctc_loss_ignores_padding() -> None:
    torch.manual_seed(0)
    log_probs = torch.randn(6, 2, 7).log_softmax(-1)
    lengths = torch.tensor([6, 3])
    targets = torch.tensor([[3, 4, 5], [6, 0, 0]])
    target_lengths = torch.tensor([3, 1])
    changed = log_probs.clone()
    changed[3:, 1] = torch.randn(3, 7).log_softmax(-1)  # frames past utterance 2's length
    loss = ctc_loss(log_probs, lengths, targets, target_lengths)
    assert torch.equal(loss, ctc_loss(changed, lengths, targets, target_lengths))


def test_joint_loss_mixes_ctc_and_attention() -> None:
    model = make_model()
    features, lengths, targets_in, targets_out = batch()
    output = model(features, lengths, targets_in)
    target_lengths = (targets_out != 0).sum(1)
    loss, parts = joint_loss(output, targets_in, targets_out, target_lengths, ctc_weight=0.3, label_smoothing=0.0)
    torch.testing.assert_close(loss.detach(), 0.3 * parts["ctc_loss"] + 0.7 * parts["attention_loss"])


def teacher_forced_log_likelihood(
    model: LAS, features: torch.Tensor, lengths: torch.Tensor, tokens: list[int]
) -> float:
    targets_in = torch.tensor([[VOCABULARY.sos, *tokens]])
    targets_out = torch.tensor([[*tokens, VOCABULARY.eos]])
    log_probs = model(features, lengths, targets_in).logits.log_softmax(-1)
    return log_probs.gather(2, targets_out[:, :, None]).sum().item()


def test_greedy_score_is_the_teacher_forced_log_likelihood_and_batching_changes_nothing() -> None:
    model = make_model()
    features, lengths, _, _ = batch()
    search = GreedySearch(Symbols.of(VOCABULARY), Rules(max_length_ratio=1.0))
    batched = search.search(model, model.listener(features, lengths))
    for row, length in enumerate(lengths.tolist()):
        single_features, single_lengths = features[row : row + 1, :length], lengths[row : row + 1]
        alone = search.search(model, model.listener(single_features, single_lengths))[0][0]
        hypothesis = batched[row][0]
        assert hypothesis.tokens == alone.tokens
        assert abs(hypothesis.score - alone.score) < 1e-4
        likelihood = teacher_forced_log_likelihood(model, single_features, single_lengths, hypothesis.tokens)
        assert abs(hypothesis.score - likelihood) < 1e-4
        assert hypothesis.attention.shape == (
            len(hypothesis.tokens) + 1,
            model.listener(single_features, single_lengths).lengths.item(),
        )
