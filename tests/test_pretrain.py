"""Speller pre-training as a character language model, and starting joint training from it."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from las.cli import app
from las.core.config import Config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.model.listener import ListenerOutput
from las.model.pretrained import load_language_model, silent_memory
from las.search import build_strategy
from las.training.corpus import load_corpus
from las.training.pretrain import held_out_loss, pretrain_speller
from las.training.train import Trainer

from .conftest import TINY


def test_language_model_loss_falls(tiny_config: Config, tmp_path: Path) -> None:
    texts = ["YES", "NO", "START", "X I SIXTY ONE"] * 4
    fit = pretrain_speller(tiny_config, texts, tmp_path / "speller.pt", epochs=30, batch_size=8)
    assert fit.losses[-1] < 0.5 * fit.losses[0]
    assert fit.held_out == [] and fit.saved_epoch == 30  # nothing held out: the last epoch
    assert (tmp_path / "speller.pt").is_file()


def test_the_epoch_that_predicts_held_out_sentences_best_is_saved(tiny_config: Config, tmp_path: Path) -> None:
    """Learning four sentences by heart, the model first gets better at a held-out one that
    shares their words, then worse; the weights saved are those of its best epoch."""
    texts = ["YES NO", "START STOP", "GO", "ONE TWO THREE"]
    held_out = ["NO STOP", "YES TWO"]
    fit = pretrain_speller(tiny_config, texts, tmp_path / "lm.pt", epochs=40, batch_size=4, held_out=held_out)
    assert len(fit.held_out) == 40
    assert fit.held_out[fit.saved_epoch - 1] == min(fit.held_out) < fit.held_out[0]
    vocabulary = Vocabulary.from_texts(texts)
    saved = load_language_model(tmp_path / "lm.pt", vocabulary).eval()
    batch = [torch.tensor(vocabulary.encode(text)) for text in held_out]
    assert held_out_loss(saved, [batch], vocabulary, tiny_config) == pytest.approx(min(fit.held_out), rel=1e-5)


def test_joint_training_starts_from_the_pretrained_speller(tiny_config: Config, tmp_path: Path) -> None:
    corpus = load_corpus(tiny_config, None, None)
    texts = corpus.train.texts
    pretrain_speller(tiny_config, texts, tmp_path / "speller.pt", epochs=2)
    saved = torch.load(tmp_path / "speller.pt", weights_only=True)["speller"]
    config = replace(tiny_config, train=replace(tiny_config.train, speller_init=str(tmp_path / "speller.pt")))
    trainer = Trainer(config, corpus, tmp_path / "run", None)
    loaded = trainer.model.speller.state_dict()
    assert loaded.keys() == saved.keys()
    for name, tensor in saved.items():
        assert torch.equal(loaded[name], tensor), name
    fresh = Trainer(tiny_config, corpus, tmp_path / "fresh", None).model.speller.state_dict()
    assert not torch.equal(fresh["embedding.weight"], saved["embedding.weight"])


def test_mismatched_or_missing_spellers_are_clear_errors(tiny_config: Config, tmp_path: Path) -> None:
    corpus = load_corpus(tiny_config, None, None)
    pretrain_speller(tiny_config, ["QUITE OTHER WORDS"], tmp_path / "other.pt", epochs=1)
    for path, message in [(tmp_path / "other.pt", "vocabulary differs"), (tmp_path / "absent.pt", "file not found")]:
        config = replace(tiny_config, train=replace(tiny_config.train, speller_init=str(path)))
        with pytest.raises(LasError, match=message):
            Trainer(config, corpus, tmp_path / "run", None)


def test_pretrain_command(tiny_manifests: tuple[Path, Path], tmp_path: Path) -> None:
    train, dev = tiny_manifests
    overrides = [item for assignment in TINY for item in ("--set", assignment)]
    arguments = [
        "pretrain",
        "--train",
        str(train),
        "--dev",
        str(dev),
        "--out",
        str(tmp_path / "sp.pt"),
        "--epochs",
        "3",
    ]
    arguments += overrides
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 0, result.stderr
    assert "language-model loss" in result.stdout and (tmp_path / "sp.pt").is_file()
    assert "held out" in result.stdout and "the one saved" in result.stdout  # the tiny dev manifest
    result = CliRunner().invoke(app, [*arguments, "--dev", ""])
    assert result.exit_code == 0, result.stderr
    assert "held out" not in result.stdout
    # Another corpus's transcripts are not held out against AN4's dev set, the default.
    result = CliRunner().invoke(app, [argument for argument in arguments if argument not in ("--dev", str(dev))])
    assert result.exit_code == 0, result.stderr
    assert "held out" not in result.stdout


def test_pretrain_learns_from_text_without_audio(tiny_manifests: tuple[Path, Path], tmp_path: Path) -> None:
    train, _ = tiny_manifests
    texts = [line.split("\t")[3] for line in train.read_text().splitlines()[1:]]
    vocabulary = Vocabulary.from_texts(texts)
    spellable = " ".join(sorted(set("".join(texts)) - {" "}))  # every character the model knows
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"\ufeff{spellable}\n\n  {texts[0]}  \nnot spellable: ü\n", encoding="utf-8")
    overrides = [item for assignment in TINY for item in ("--set", assignment)]
    arguments = [
        "pretrain",
        "--train",
        train,
        "--text",
        corpus,
        "--out",
        tmp_path / "lm.pt",
        "--epochs",
        "2",
        *overrides,
    ]
    result = CliRunner().invoke(app, [str(argument) for argument in arguments])
    assert result.exit_code == 0, result.stderr
    assert "left out 1 of 3 lines" in result.stderr
    language_model = load_language_model(tmp_path / "lm.pt", vocabulary)  # the model's vocabulary: fusable
    assert language_model.embedding.num_embeddings == len(vocabulary)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    for bad, message in ((tmp_path / "latin1.txt", "not UTF-8"), (tmp_path / "absent.txt", "file not found")):
        arguments[4] = bad
        result = CliRunner().invoke(app, [str(argument) for argument in arguments])
        assert result.exit_code == 1 and message in result.stderr


def sequence_log_likelihood(
    speller: torch.nn.Module, memory: ListenerOutput, tokens: list[int], vocabulary: Vocabulary
) -> float:
    """log p(tokens + <eos>) under teacher forcing."""
    targets_in = torch.tensor([[vocabulary.sos, *tokens]])
    targets_out = torch.tensor([[*tokens, vocabulary.eos]])
    logits, _ = speller(memory, targets_in)
    return logits.log_softmax(dim=-1).gather(2, targets_out[:, :, None]).sum().item()


def test_shallow_fusion_adds_the_weighted_language_model_score(tiny_config: Config, tmp_path: Path) -> None:
    corpus = load_corpus(tiny_config, None, None)
    pretrain_speller(tiny_config, corpus.train.texts, tmp_path / "lm.pt", epochs=5)
    model = Trainer(tiny_config, corpus, tmp_path / "run", None).model.eval()
    vocabulary = corpus.train.vocabulary
    batch = corpus.dev.collate(range(len(corpus.dev)))
    with torch.no_grad():
        memory = model.listener(batch.features, batch.feature_lengths)
        # Without the CTC prefix score, so that the score is attention + LM alone.
        settings = replace(tiny_config.decode, strategy="beam", beam_size=3, ctc_weight=0.0, lm=str(tmp_path / "lm.pt"))
        plain = build_strategy(settings, vocabulary, model).search(model, memory)
        unfused = build_strategy(replace(settings, lm_weight=0.0), vocabulary, model).search(model, memory)
        fused = build_strategy(replace(settings, lm_weight=0.5), vocabulary, model).search(model, memory)
        language_model = load_language_model(tmp_path / "lm.pt", vocabulary)
        for row, hypotheses in enumerate(fused):
            tokens = hypotheses[0].tokens
            own_memory = memory.select(torch.tensor([row]))
            acoustic = sequence_log_likelihood(model.speller, own_memory, tokens, vocabulary)
            text = sequence_log_likelihood(language_model, silent_memory(1, 48, 48), tokens, vocabulary)
            assert hypotheses[0].score == pytest.approx(acoustic + 0.5 * text, abs=1e-3)
    assert [[h.tokens for h in row] for row in unfused] == [[h.tokens for h in row] for row in plain]
    with pytest.raises(LasError, match="decode.lm_weight > 0 needs a language model"):
        build_strategy(replace(settings, lm="", lm_weight=0.5), vocabulary, model)
