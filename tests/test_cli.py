"""Each command end to end through Typer's runner, and every bad input giving one clear line."""

import json
import shutil
from pathlib import Path

import pytest

from las.core.config import DecodeConfig
from las.export.runtime import load_model

from .conftest import AN4, TINY, an4_rows, assert_clear_error, run, transcript_words, write_manifest


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run trained through the CLI, shared by the tests below."""
    root = tmp_path_factory.mktemp("cli")
    manifest = write_manifest(root / "train.tsv", an4_rows("train", 4, longest_seconds=1.6))
    settings = TINY + [f"data.cache_dir={root / 'cache'}", "data.batch_size=2", "train.learning_rate=5e-3"]
    overrides = [item for assignment in settings for item in ("--set", assignment)]
    code, stdout, stderr = run(
        "train",
        "--train",
        manifest,
        "--dev",
        manifest,
        "--out",
        root / "run",
        "--epochs",
        "12",
        "--device",
        "cpu",
        *overrides,
    )
    assert code == 0, stderr
    assert "best model:" in stdout
    return {"root": root, "train": manifest, "run": root / "run"}


def test_train_writes_the_promised_files(trained: dict[str, Path]) -> None:
    run_directory = trained["run"]
    for name in ("best.pt", "last.pt", "averaged.pt", "averaged.json", "metrics.jsonl"):
        assert (run_directory / name).is_file()
    records = [json.loads(line) for line in (run_directory / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 12
    assert {"epoch", "train_loss", "dev_cer", "seconds"} <= records[0].keys()
    assert sorted(path.name for path in (run_directory / "attention").iterdir())[0] == "epoch_001.png"


def test_decode_and_eval_reproduce_the_training_cer(trained: dict[str, Path]) -> None:
    """The training's dev pass reads dev greedily with the heads joined as decoding joins them (the
    figure its kept models are chosen on) and with the speller alone; `las decode --strategy greedy`
    gives each, and `las eval` scores it the same."""
    run_directory, manifest = trained["run"], trained["train"]
    last_epoch = json.loads((run_directory / "metrics.jsonl").read_text().splitlines()[-1])
    assert last_epoch["dev_reading"] == "speller + CTC, greedy" and last_epoch["dev_cer"] == last_epoch["dev_joint_cer"]
    for ctc_weight, figure in (("0.5", "dev_cer"), ("0", "dev_speller_cer")):
        hypotheses = trained["root"] / f"hyp-{ctc_weight}.csv"
        code, _, stderr = run(
            "decode", run_directory / "last.pt", manifest, "--out", hypotheses, "--strategy", "greedy",
            "--ctc-weight", ctc_weight, "--device", "cpu",
        )  # fmt: skip
        assert code == 0, stderr
        assert "recordings/s" in stderr and "real-time factor" in stderr
        assert hypotheses.read_text().startswith("id,label\n")
        code, stdout, _ = run("eval", hypotheses, manifest, "--json")
        assert code == 0
        report = json.loads(stdout)
        assert {"utterances", "mean_distance", "cer", "wer", "substitutions", "deletions"} <= report.keys()
        assert report["utterances"] == 4
        assert report["cer"] == pytest.approx(last_epoch[figure])


@pytest.mark.parametrize("output_format", ["kaldi", "jsonl"])
def test_decode_formats_to_stdout(trained: dict[str, Path], output_format: str) -> None:
    code, stdout, _ = run(
        "decode", trained["run"] / "best.pt", AN4 / "audio" / "an102-mrcb-b.flac", "--format", output_format
    )
    assert code == 0
    line = stdout.strip()
    if output_format == "kaldi":
        assert line.startswith("an102-mrcb-b")
    else:
        record = json.loads(line)
        assert record["id"] == "an102-mrcb-b" and isinstance(record["score"], float)


def test_beam_and_random_search_with_nbest_and_attention_maps(trained: dict[str, Path], tmp_path: Path) -> None:
    manifest = trained["train"]
    output = tmp_path / "beam.jsonl"
    code, _, stderr = run(
        "decode", trained["run"] / "best.pt", manifest, "--strategy", "beam", "--beam-size", "4", "--nbest", "3",
        "--ctc-weight", "0.3", "--format", "jsonl", "--out", output, "--plot-attention", "2", "--device", "cpu",
    )  # fmt: skip
    assert code == 0, stderr
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(records) == 4
    for record in records:
        assert 1 <= len(record["nbest"]) <= 3
        assert record["nbest"][0] == {"text": record["text"], "score": record["score"]}
        # Ranked by log-likelihood per output symbol (decode.length_normalize, the default).
        per_symbol = [item["score"] / (len(item["text"]) + 1) for item in record["nbest"]]
        assert per_symbol == sorted(per_symbol, reverse=True)
    assert sorted(path.suffix for path in (tmp_path / "beam_attention").iterdir()) == [".png", ".png"]
    code, stdout, stderr = run(
        "decode", trained["run"] / "best.pt", manifest, "--strategy", "sample", "--samples", "8", "--temperature", "0.7"
    )
    assert code == 0, stderr
    assert stdout.startswith("id,label\n") and len(stdout.strip().splitlines()) == 5


def test_ctc_weight_needs_a_ctc_head(trained: dict[str, Path], tmp_path: Path) -> None:
    import torch

    payload = torch.load(trained["run"] / "best.pt", weights_only=True)
    payload["config"]["model"]["ctc_weight"] = 0.0
    payload["model"] = {key: value for key, value in payload["model"].items() if not key.startswith("ctc_head")}
    without_ctc = tmp_path / "no_ctc.pt"
    torch.save(payload, without_ctc)
    code, _, stderr = run("decode", without_ctc, trained["train"], "--strategy", "beam", "--ctc-weight", "0.5")
    assert_clear_error(code, stderr, "needs a model trained with a CTC head")
    # The default joint CTC weight applies only to models that have the head.
    assert load_model(without_ctc).decoding_config().decode.ctc_weight == 0.0
    assert load_model(trained["run"] / "best.pt").decoding_config().decode.ctc_weight > 0
    code, stdout, stderr = run("decode", without_ctc, trained["train"], "--strategy", "beam")
    assert code == 0 and stdout.startswith("id,label\n"), stderr


def test_a_model_decodes_whole_the_lengths_its_recipe_trained_on(trained: dict[str, Path], tmp_path: Path) -> None:
    import torch

    payload = torch.load(trained["run"] / "best.pt", weights_only=True)
    payload["config"]["decode"]["segment_seconds"] = 30.0  # as data/recipes/hw4p2.toml sets
    payload["config"]["decode"]["beam_size"] = 3  # a run's other decoding settings give way to today's
    long_recipe = tmp_path / "long.pt"
    torch.save(payload, long_recipe)
    decoding = load_model(long_recipe).decoding_config().decode
    assert decoding.segment_seconds == 30.0 and decoding.beam_size == DecodeConfig().beam_size
    assert load_model(long_recipe).decoding_config(["decode.segment_seconds=12"]).decode.segment_seconds == 12


def test_decode_with_a_lexicon_spells_only_its_words(trained: dict[str, Path], tmp_path: Path) -> None:
    words = sorted(transcript_words(trained["train"]))
    lexicon = tmp_path / "words.txt"
    lexicon.write_text("".join(f"{word}\n" for word in words[1:]))  # all the transcripts' words but one
    for strategy in ("beam", "greedy"):
        code, stdout, stderr = run(
            "decode", trained["run"] / "best.pt", trained["train"], "--strategy", strategy, "--lexicon", lexicon
        )
        assert code == 0, stderr
        spelled = [word for line in stdout.splitlines()[1:] for word in line.split(",", 1)[1].split()]
        assert spelled and set(spelled) <= set(words[1:]), stdout

    lexicon.write_text("hello\nworld\n")  # the model spells upper case
    assert_clear_error(
        *run("decode", trained["run"] / "best.pt", trained["train"], "--lexicon", lexicon)[::2],
        "none of its 2 words can be spelled with the model's characters",
    )
    assert_clear_error(
        *run("decode", trained["run"] / "best.pt", trained["train"], "--lexicon", tmp_path / "absent.txt")[::2],
        "decode.lexicon: file not found",
    )


def test_eval_text_report(trained: dict[str, Path], tmp_path: Path) -> None:
    hypotheses = tmp_path / "hyp.txt"
    hypotheses.write_text("".join(f"{row[0]} {row[3]}\n" for row in an4_rows("train", 4, longest_seconds=1.6)))
    code, stdout, _ = run("eval", hypotheses, trained["train"])
    assert code == 0
    assert "CER                   0.00%" in stdout and "mean distance         0.000" in stdout


def test_bad_inputs_give_one_clear_line(trained: dict[str, Path], tmp_path: Path) -> None:
    checkpoint = trained["run"] / "best.pt"
    good = an4_rows("train", 1)[0]

    malformed = tmp_path / "malformed.tsv"
    malformed.write_text("id\tpath\tduration_s\ttext\n" + "\t".join(good) + "\nbroken line\n")
    assert_clear_error(
        *run("train", "--train", malformed, "--out", tmp_path / "r1")[::2],
        f"{malformed}:3: expected 4 tab-separated fields",
    )

    empty_text = write_manifest(tmp_path / "empty_text.tsv", [good[:3] + [" "]])
    assert_clear_error(*run("train", "--train", empty_text, "--out", tmp_path / "r2")[::2], "empty transcript")

    missing_audio = write_manifest(tmp_path / "missing_audio.tsv", [[good[0], "absent.flac", "1.0", "YES"]])
    assert_clear_error(*run("decode", checkpoint, missing_audio)[::2], "audio file not found")
    (tmp_path / "audio").mkdir()
    shutil.copy(good[1], tmp_path / "audio" / "one.flac")  # a manifest written on Windows
    windows = write_manifest(tmp_path / "windows.tsv", [[good[0], "audio\\one.flac", "1.0", "YES"]])
    assert_clear_error(*run("decode", checkpoint, windows)[::2], "audio/one.flac exists: write paths with '/'")

    (tmp_path / "empty.flac").write_bytes(b"")
    assert_clear_error(*run("decode", checkpoint, tmp_path / "empty.flac")[::2], "empty.flac")

    unknown = write_manifest(tmp_path / "unknown.tsv", [good[:3] + ["HELLO wörld"]])
    code, _, stderr = run("decode", checkpoint, unknown)  # only references: decoded, with a warning
    assert code == 0 and "outside the vocabulary: 'H', 'L', 'd', 'l', 'r', 'w', 'ö'" in stderr

    assert_clear_error(*run("decode", tmp_path / "absent.pt", trained["train"])[::2], "checkpoint not found")
    not_checkpoint = tmp_path / "junk.pt"
    not_checkpoint.write_text("junk")
    assert_clear_error(*run("decode", not_checkpoint, trained["train"])[::2], "junk.pt: not a checkpoint: not a file")
    cut_short = tmp_path / "cut.pt"  # a copy interrupted: the archive's directory at its end is missing
    cut_short.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 2])
    code, _, stderr = run("decode", cut_short, trained["train"])
    assert_clear_error(code, stderr, "cut.pt: a damaged or cut-short checkpoint (an interrupted copy?)")
    assert "weights_only" not in stderr and "miniz" not in stderr  # PyTorch's advice, which misleads here

    hypotheses = tmp_path / "hyp.txt"
    hypotheses.write_text(f"{good[0]} YES\nextra-id NO\n")
    assert_clear_error(*run("eval", hypotheses, trained["train"])[::2], "id mismatch")

    assert_clear_error(
        *run("train", "--set", "model.colour=blue", "--out", tmp_path / "r3")[::2], "unknown config key 'model.colour'"
    )
    assert_clear_error(
        *run(
            "train",
            "--set",
            "model.attention=bogus",
            "--train",
            trained["train"],
            "--dev",
            trained["train"],
            "--out",
            tmp_path / "r4",
            "--set",
            f"data.cache_dir={trained['root'] / 'cache'}",
        )[::2],
        "'model.attention': 'bogus' is not one of dot",
    )


def test_checkpoint_from_another_version_is_refused(trained: dict[str, Path], tmp_path: Path) -> None:
    import torch

    payload = torch.load(trained["run"] / "best.pt", weights_only=True)
    payload["version"] = 999
    old = tmp_path / "old.pt"
    torch.save(payload, old)
    assert_clear_error(*run("decode", old, trained["train"])[::2], "checkpoint format version 999 is not supported")


def test_info_describes_a_checkpoint(trained: dict[str, Path]) -> None:
    code, stdout, _ = run("info", trained["run"] / "last.pt")
    assert code == 0
    assert "epochs        12 (step 24)" in stdout
    assert '"ctc_weight": 0.3' in stdout and "<pad>, <sos>, <eos>, <unk>" in stdout


def test_decode_options_are_the_config_fields_that_declare_them(trained: dict[str, Path], tmp_path: Path) -> None:
    """Every `Flag` of DecodeConfig is an option of las decode, with the field's default, and an
    option sets what `--set decode.FIELD=...` sets."""
    from las.core.config import DecodeConfig
    from las.core.settings import Flag, field_hints

    code, stdout, _ = run("decode", "--help")
    flags = [rule for hint in field_hints(DecodeConfig).values() for rule in getattr(hint, "__metadata__", ())]
    flags = [flag for flag in flags if isinstance(flag, Flag)]
    assert code == 0 and {"--beam-size", "--ctc-weight", "--lm", "--strategy", "--samples"} <= {f.option for f in flags}
    assert all(flag.option in stdout for flag in flags)
    assert "Beam width. (default: 8)" in " ".join(stdout.split())
    outputs = []
    for arguments in (
        ["--strategy", "sample", "--samples", "3", "--temperature", "0.5", "--ctc-weight", "0.2", "--nbest", "2"],
        ["--set", "decode.strategy=sample", "--set", "decode.samples=3", "--set", "decode.temperature=0.5"]
        + ["--set", "decode.ctc_weight=0.2", "--set", "decode.nbest=2"],
    ):
        code, stdout, stderr = run(
            "decode", trained["run"] / "best.pt", trained["train"], "--format", "jsonl", *arguments
        )
        assert code == 0, stderr
        outputs.append(stdout)
    assert outputs[0] == outputs[1] and all(len(json.loads(line)["nbest"]) <= 2 for line in outputs[0].splitlines())


def test_help_shows_defaults() -> None:
    code, stdout, _ = run("train", "--help")
    assert code == 0
    assert "data/an4/train.tsv" in stdout and "runs/an4" in stdout
    code, stdout, _ = run("decode", "--help")
    assert code == 0 and "--strategy" in stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["decode", "model.pt", ".", "--format", "xml"], "Invalid value for '--format'"),
        (["decode", "model.pt", ".", "--beam-size", "many"], "Invalid value for '--beam-size'"),
        (["decode", "model.pt", ".", "--no-such-option"], "No such option: --no-such-option"),
        (["decode", "model.pt"], "Missing argument 'INPUT'"),
        (["--threads", "0", "info", "model.pt"], "Invalid value for '--threads'"),
        (["decod"], "No such command 'decod'"),
        (["train", "--set"], "Option '--set' requires an argument"),
    ],
)
def test_usage_errors_are_one_line_too(arguments: list[str], message: str) -> None:
    """Click's own usage errors read as las's: one `error:` line, exit code 2 (click's for usage)."""
    code, stdout, stderr = run(*arguments)
    assert code == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], stderr


def test_version_and_bare_commands() -> None:
    from las import __version__

    assert run("--version") == (0, f"{__version__}\n", "")
    code, stdout, stderr = run()  # a bare `las` prints its help, as click does, with exit code 2
    assert code == 2 and "decode" in stdout + stderr and "error:" not in stderr
