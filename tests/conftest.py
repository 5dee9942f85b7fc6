"""Shared fixtures: small manifests of real AN4 utterances, and a tiny model configuration."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from las.cli import app
from las.core import threads
from las.core.config import Config, load_config

AN4 = Path(__file__).resolve().parent.parent / "data" / "an4"
# The measurement programs import each other and their harness as they run (`python scripts/X.py`,
# the folder first on the path); the tests that import them find them the same way.
sys.path.insert(0, str(AN4.parent.parent / "scripts"))


@pytest.fixture(autouse=True)
def fixed_threads() -> Iterator[None]:
    """Each test starts on one thread: the tiny models' operations are too small to share, and on
    2 cores two threads took 4.7x as long (the pieces' tiny model: 180 s against 38 s), most of it
    waiting on each other; a command run through the CLI sets its own (`--threads`) and leaves them
    and its load follower (las.core.threads) behind, so tests that train in-process, bit-exactness
    among them, run on the threads they start with."""
    torch.set_num_threads(1)
    yield
    threads.follower = None


# A model small enough to train in seconds: what the tests need is behaviour, not accuracy.
TINY = [
    "model.listener_hidden=48",
    "model.pyramid_layers=2",
    "model.key_dim=48",
    "model.value_dim=48",
    "model.embedding_dim=32",
    "model.speller_hidden=96",
    "model.dropout=0.0",
    "model.ctc_weight=0.3",
    "model.location_channels=4",
    "model.location_kernel=5",
    "train.warmup_steps=5",
    "train.label_smoothing=0.0",
    "train.specaugment_start_epoch=1000",
    "train.speed_perturbation=0",  # the waveform effects: three times the features, a babble pool
    "train.augment.noise=0",
    "train.augment.telephone=0",
    "train.augment.reverberation=0",
    "train.augment.gain_db=0",
    "train.augment.crop=0",
    "train.augment.words=0",
    "train.augment.nonspeech=0",
    "train.teacher_forcing_final=1.0",
    "train.device=cpu",
    "data.workers=0",  # no worker processes to start in every test (one test uses them)
]


def an4_rows(split: str, count: int, longest_seconds: float = 10.0) -> list[list[str]]:
    """The first `count` rows of an AN4 manifest no longer than `longest_seconds`, audio paths absolute."""
    lines = (AN4 / f"{split}.tsv").read_text().splitlines()[1:]
    rows = [line.split("\t") for line in lines]
    rows = [row for row in rows if float(row[2]) <= longest_seconds][:count]
    return [[identifier, str(AN4 / audio), duration, text] for identifier, audio, duration, text in rows]


def write_manifest(path: Path, rows: list[list[str]]) -> Path:
    path.write_text("id\tpath\tduration_s\ttext\n" + "".join("\t".join(row) + "\n" for row in rows))
    return path


def transcript_words(manifest: Path) -> set[str]:
    """The distinct words of a manifest's transcripts (a lexicon for `decode.lexicon`)."""
    from las.data.corpora.manifest import read_utterances

    return {word for text in read_utterances(manifest).texts for word in text.split()}


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny model trained for a few seconds on four real utterances, shared by the tests."""
    from las.training.train import train

    root = tmp_path_factory.mktemp("trained")
    rows = an4_rows("train", 4, longest_seconds=1.6)
    manifest = write_manifest(root / "train.tsv", rows)
    settings = TINY + [
        f"data.train={manifest}",
        f"data.dev={manifest}",
        f"data.cache_dir={root / 'cache'}",
        f"train.out={root / 'run'}",
        "data.batch_size=2",
        "train.epochs=12",
        "train.learning_rate=5e-3",
        "train.final_learning_rate_scale=0.2",
    ]
    train(load_config(None, settings))
    return {"root": root, "train": manifest, "run": root / "run"}


@pytest.fixture
def tiny_manifests(tmp_path: Path) -> tuple[Path, Path]:
    """Four short training utterances, and two dev utterances taken from them."""
    rows = an4_rows("train", 4, longest_seconds=1.6)
    return write_manifest(tmp_path / "train.tsv", rows), write_manifest(tmp_path / "dev.tsv", rows[:2])


@pytest.fixture
def tiny_config(tmp_path: Path, tiny_manifests: tuple[Path, Path]) -> Config:
    train, dev = tiny_manifests
    return load_config(
        None,
        TINY
        + [
            f"data.train={train}",
            f"data.dev={dev}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.out={tmp_path / 'run'}",
            "data.batch_size=4",
        ],
    )


def run(*arguments: object) -> tuple[int, str, str]:
    """`las ARGUMENTS...` through Typer's runner: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(app, [str(argument) for argument in arguments])
    return result.exit_code, result.stdout, result.stderr


def assert_clear_error(code: int, stderr: str, message: str) -> None:
    """A user mistake: exit code 1 and one line on stderr that says `message`, no traceback."""
    assert code == 1
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert message in lines[0], lines[0]
    assert "Traceback" not in stderr
