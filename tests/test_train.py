import json
import math
import os
import signal
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from las.core.config import AugmentConfig, Config
from las.core.device import bf16_supported, resolve_precision
from las.core.errors import LasError
from las.export.runtime import load_model
from las.training import corpus as corpus_module
from las.training import optimisation as optimisation_module
from las.training.metrics_file import epoch_line
from las.training.optimisation import learning_rate_scale
from las.training.train import teacher_forcing_rate, train


def with_training(config: Config, **changes: object) -> Config:
    return replace(config, train=replace(config.train, **changes))


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_tiny_model_overfits_real_utterances(tiny_config: Config) -> None:
    config = with_training(tiny_config, epochs=150, learning_rate=5e-3, final_learning_rate_scale=0.2)
    # Without per-utterance normalisation: this tiny model memorises absolute levels faster
    # (train loss 0.29 vs 0.39 after 90 epochs, measured). 100 epochs were on the edge: at 1
    # thread seeds 1 and 2 ended at 13% and 17%, in this code and the code before the fused
    # speller alike (rounding alone moves the path); with 150 both reach 0%.
    features = replace(config.features, utterance_mean=False)
    config = replace(config, features=features, data=replace(config.data, batch_size=2, dev=config.data.train))
    run = train(config)
    records = metrics(run)
    assert [record["epoch"] for record in records] == list(range(1, 151))
    assert records[-1]["train_loss"] < 0.3 * records[0]["train_loss"]
    assert records[-1]["dev_speller_cer"] <= 5.0  # the speller alone, greedy, no teacher forcing
    # The kept models are chosen on the heads joined as decoding joins them (greedy, CTC at decode.ctc_weight).
    assert all(record["dev_cer"] == record["dev_joint_cer"] for record in records)
    assert records[-1]["dev_cer"] <= 5.0 and records[-1]["dev_reading"] == "speller + CTC, greedy"
    # Four memorised utterances need no alignment, so only the measurement itself is checked here.
    names = ("alignment_monotonic", "alignment_coverage", "diagonal_share")
    assert all(0 <= record[f"dev_{name}"] <= 1 for record in records for name in names)
    assert all(0 <= record["dev_ctc_cer"] <= 100 for record in records)  # the CTC head alone, beside
    assert (run / "best.pt").exists() and (run / "last.pt").exists()
    assert len(list((run / "attention").glob("epoch_*.png"))) == 150
    checkpoint = load_model(run / "best.pt")
    assert checkpoint.config == config and checkpoint.training_state["progress"]["best_cer"] == min(
        r["dev_cer"] for r in records
    )


def test_each_epochs_log_line_says_what_its_dev_pass_read() -> None:
    record = {
        "epoch": 3, "train_loss": 1.2346, "dev_cer": 40.0, "dev_wer": 80.5, "dev_reading": "speller + CTC, greedy",
        "dev_joint_cer": 40.0, "dev_speller_cer": 70.0, "dev_ctc_cer": 42.0, "seconds": 355.4,
    }  # fmt: skip
    assert epoch_line(record, 39.0) == (
        "epoch   3  loss 1.235  dev CER  40.00% WER 80.50% (speller + CTC, greedy; best CER 39.00%)"
        "  speller alone 70.00%  CTC head alone 42.00%  355s"
    )
    speller_only = record | {"dev_reading": "speller, greedy", "dev_joint_cer": None, "dev_ctc_cer": None}
    assert epoch_line(speller_only, 39.0).endswith("(speller, greedy; best CER 39.00%)  355s")


def test_attention_that_has_not_aligned_where_ctc_has_learnt_is_said_once(
    tiny_config: Config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from las.training.dev_evaluation import DevResult

    said = DevResult(70.0, 90.0, None, 0.1, [], ctc_cer=20.0).unaligned()
    assert said.startswith("attention has not aligned") and "70.0%" in said and "20.0%" in said
    assert DevResult(70.0, 90.0, None, 0.9, [], ctc_cer=20.0).unaligned() == ""  # aligned
    assert DevResult(70.0, 90.0, None, 0.1, [], ctc_cer=60.0).unaligned() == ""  # neither has learnt yet
    assert DevResult(70.0, 90.0, None, 0.1, []).unaligned() == ""  # no CTC head to compare with
    monkeypatch.setattr(DevResult, "unaligned", lambda self: "attention has not aligned: as if")
    run = train(with_training(tiny_config, epochs=3, alignment_warning_steps=1))
    lines = [line for line in capsys.readouterr().err.splitlines() if "attention has not aligned" in line]
    assert len(lines) == 1 and lines[0].startswith("warning:") and "--init" in lines[0]  # once, with what to do
    assert any(b"warnings/alignment" in path.read_bytes() for path in (run / "tensorboard").iterdir())
    capsys.readouterr()
    train(with_training(tiny_config, epochs=1, alignment_warning_steps=0, out=str(run.parent / "off")))
    assert "attention has not aligned" not in capsys.readouterr().err


def test_a_run_in_pieces_trains_on_its_utterances_cut_at_the_ctc_alignment_and_says_so(
    tiny_config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    # AN4's short utterances are not cut by default; on, in pieces of at most a second, every alignment trusted.
    settings = dict(attention_pieces="on", attention_pieces_seconds=1.0, attention_pieces_trigger=1e6)
    run = train(with_training(tiny_config, epochs=2, **settings))
    records = metrics(run)  # one step an epoch
    assert [record["train_cut"] for record in records] == [1.0, 1.0]
    assert [record["train_piece_frames"] for record in records] == [100, 100]  # not attended along a diagonal yet
    assert all(0 <= record["train_diagonal_share"] <= 1 for record in records)
    progress = load_model(run / "last.pt").training_state["progress"]
    assert progress["alignment_start"] == 0 and progress["pieces_since"] == 0 and progress["pieces_aligned"] < 0.5
    assert progress["ctc_loss"] == pytest.approx(records[-1]["train_ctc_loss"])  # a resume knows whether to align
    said = capsys.readouterr()
    assert "utterances cut into pieces at the CTC head's alignment once it has learnt, at most 1.0 s" in said.out
    # The run's learning rate, train.learning_rate x attention_pieces_learning_rate_scale, on its schedule.
    settings_of_run = with_training(tiny_config, epochs=2, **settings).train
    scale = learning_rate_scale(2, settings_of_run.warmup_steps, 2, settings_of_run.final_learning_rate_scale)
    expected = settings_of_run.learning_rate * settings_of_run.attention_pieces_learning_rate_scale * scale
    assert records[-1]["learning_rate"] == pytest.approx(expected)
    # A head no alignment is trusted from: no step is one in pieces, whatever it hears whole,
    # and the run has not begun to align (the speller waits: train.attention_pieces_ctc_first).
    unaligned = train(
        with_training(tiny_config, epochs=2, **(settings | dict(attention_pieces_trigger=1e-6)), out=str(run) + "-u")
    )
    assert [record["train_cut"] for record in metrics(unaligned)] == [0.0, 0.0]
    assert load_model(unaligned / "last.pt").training_state["progress"]["alignment_start"] is None
    # A step at each length (attention_pieces_most_steps): 1 s, then 2 s, longer than every utterance.
    settings |= dict(attention_pieces_most_steps=1, out=str(run) + "-1")
    records = metrics(train(with_training(tiny_config, epochs=3, **settings)))
    assert [record.get("train_cut") for record in records] == [1.0, 1.0, None]
    assert [record["train_piece_frames"] for record in records] == [100, 200, 200]


# Pieces under way on the tiny corpus, none ever cut: the trigger is out of reach of any CTC loss.
UNCUT_PIECES = dict(attention_pieces="on", attention_pieces_seconds=0.2, attention_pieces_trigger=1e-6)


def test_with_ctc_first_the_ctc_head_alone_trains_until_the_first_cut(
    tiny_config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A head that never learns enough to cut at: the speller waits as it began, for
    # attention_pieces_ctc_first_steps steps, reading one step of each batch (nothing to learn from).
    speller_steps = []
    real_loss = optimisation_module.Optimisation.loss

    def counted(self, batch, *args, **kwargs):
        speller_steps.append(batch.speller_steps or batch.targets_in.shape[1])
        return real_loss(self, batch, *args, **kwargs)

    monkeypatch.setattr(optimisation_module.Optimisation, "loss", counted)
    settings = UNCUT_PIECES | dict(attention_pieces_ctc_first=True, attention_pieces_ctc_first_steps=2)
    first = train(with_training(tiny_config, epochs=1, out=str(tmp_path / "one"), **settings))
    assert speller_steps == [1]
    second = train(with_training(tiny_config, epochs=2, out=str(tmp_path / "two"), **settings))
    before, after = (load_model(run / "last.pt").model_state for run in (first, second))
    assert all(torch.equal(before[name], after[name]) for name in before if name.startswith("speller."))
    lstm = "listener.input_layer.forward_lstm.weight_ih_l0"
    assert not torch.equal(before[lstm], after[lstm])
    record = metrics(second)[-1]
    assert record["train_loss"] == pytest.approx(record["train_ctc_loss"]) and record["train_attention_loss"] == 0
    assert "train_cut" not in record or record["train_cut"] == 0
    assert "until the first cut (or step 2), the CTC head alone trains; the speller waits" in capsys.readouterr().out
    speller_steps.clear()
    third = train(with_training(tiny_config, epochs=3, out=str(tmp_path / "three"), **settings))
    weights = "speller.cells.0.weight_hh"
    assert not torch.equal(after[weights], load_model(third / "last.pt").model_state[weights])  # from step 2 on
    assert speller_steps[:2] == [1, 1] and min(speller_steps[2:]) > 1  # then it spells whole transcripts


def without_timings(records: list[dict]) -> list[dict]:
    return [
        {key: value for key, value in record.items() if "second" not in key and key != "peak_memory_mb"}
        for record in records
    ]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_model(run / "last.pt").model_state


def assert_identical_runs(expected: Path, resumed: Path) -> None:
    """Bit-identical final weights, and the same metrics but for timings."""
    expected_weights, resumed_weights = final_weights(expected), final_weights(resumed)
    for name in expected_weights:
        torch.testing.assert_close(resumed_weights[name], expected_weights[name], rtol=0, atol=0)
    assert without_timings(metrics(resumed)) == without_timings(metrics(expected))


def test_resume_continues_exactly(tiny_config: Config, tmp_path: Path) -> None:
    # A constant learning rate, so that extending the run from 2 to 3 epochs leaves the schedule
    # alone: what must carry over is the optimizer, random state and sampler position.
    straight = with_training(
        tiny_config,
        epochs=3,
        out=str(tmp_path / "straight"),
        specaugment_start_epoch=1,
        warmup_steps=1,
        final_learning_rate_scale=1.0,
    )
    train(straight)
    split = with_training(straight, epochs=2, out=str(tmp_path / "split"))
    train(split)
    train(split, resume=True, assignments=["train.epochs=3"])
    assert_identical_runs(tmp_path / "straight", tmp_path / "split")


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_saves_at_a_batch_boundary_and_resumes_bit_exactly(
    tiny_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_signal: int
) -> None:
    # Batches loaded by worker processes, utterances at perturbed speeds and augmented (drawn per
    # utterance and epoch in those workers), dropout and sampled teacher forcing drawing from the
    # random state: a signal in the middle of a batch stops training after that batch, and
    # resuming replays the rest of the run bit-exactly.
    augment = AugmentConfig(noise=0.5, telephone=0.5, reverberation=0.3, gain_db=0.0, start_epoch=0)
    training = dict(speed_perturbation=0.1, teacher_forcing_final=0.5, teacher_forcing_decay_epochs=1, augment=augment)
    config = replace(
        with_training(tiny_config, epochs=2, out=str(tmp_path / "straight"), **training),
        data=replace(tiny_config.data, batch_size=1, workers=2),
        model=replace(tiny_config.model, dropout=0.2),
    )
    train(config)
    interrupted = with_training(config, out=str(tmp_path / "interrupted"))
    original = optimisation_module.clip_gradients
    calls = {"count": 0}

    def signal_during_sixth_step(*arguments: object) -> bool:
        calls["count"] += 1
        if calls["count"] == 6:  # in the second epoch (four batches per epoch): seen as that batch ends
            os.kill(os.getpid(), stop_signal)
        return original(*arguments)

    monkeypatch.setattr(optimisation_module, "clip_gradients", signal_during_sixth_step)
    name = signal.Signals(stop_signal).name
    with pytest.raises(
        LasError, match=f"stopped by {name}: saved .*last.pt at epoch 2, batch 2; continue with --resume"
    ):
        train(interrupted)
    progress = load_model(tmp_path / "interrupted" / "last.pt").training_state["progress"]
    assert (progress["epoch"], progress["batch_in_epoch"], progress["step"]) == (1, 2, 6)
    monkeypatch.setattr(optimisation_module, "clip_gradients", original)
    train(interrupted, resume=True)
    assert_identical_runs(tmp_path / "straight", tmp_path / "interrupted")


def test_joined_batches_train_and_resume_exactly(tiny_config: Config, tmp_path: Path) -> None:
    """Every batch heard as pairs of utterances joined into one recording: the run trains (a finite
    loss, not the one without joining) and, stopped after an epoch, resumes to the same weights."""
    augment = AugmentConfig(
        noise=0.0, telephone=0.0, reverberation=0.0, gain_db=0.0, crop=0.0, words=0.0, tight=0.0, nonspeech=0.0,
        joined=1.0, start_epoch=0,
    )  # fmt: skip
    straight = with_training(
        tiny_config, epochs=2, out=str(tmp_path / "straight"), augment=augment, warmup_steps=1,
        final_learning_rate_scale=1.0,
    )  # fmt: skip
    straight = replace(straight, data=replace(straight.data, batch_size=2))
    train(straight)
    plain = with_training(straight, out=str(tmp_path / "plain"), augment=replace(augment, joined=0.0))
    train(plain)
    joined_records, plain_records = metrics(tmp_path / "straight"), metrics(tmp_path / "plain")
    assert all(math.isfinite(record["train_loss"]) for record in joined_records)
    assert [record["train_loss"] for record in joined_records] != [record["train_loss"] for record in plain_records]
    split = with_training(straight, epochs=1, out=str(tmp_path / "split"))
    train(split)
    train(split, resume=True, assignments=["train.epochs=2"])
    assert_identical_runs(tmp_path / "straight", tmp_path / "split")


def test_refuses_to_overwrite_a_run_and_to_resume_nothing(tiny_config: Config) -> None:
    with pytest.raises(LasError, match="no checkpoint to resume from"):
        train(tiny_config, resume=True)
    config = with_training(tiny_config, epochs=1)
    train(config)
    with pytest.raises(LasError, match="already holds a run; continue it with --resume"):
        train(config)


def test_non_finite_losses_are_skipped_then_stop_training(tiny_config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    real_loss = optimisation_module.joint_loss
    monkeypatch.setattr(optimisation_module, "joint_loss", lambda *a, **k: (real_loss(*a, **k)[0] * float("nan"), {}))
    config = with_training(tiny_config, epochs=5, max_bad_batches=2)
    with pytest.raises(LasError, match="training diverged: 3 batches with a non-finite loss"):
        train(config)


def test_schedules() -> None:
    assert learning_rate_scale(0, 10, 100, 0.1) == pytest.approx(0.1)
    assert learning_rate_scale(9, 10, 100, 0.1) == pytest.approx(1.0)
    assert learning_rate_scale(100, 10, 100, 0.1) == pytest.approx(0.1)
    assert learning_rate_scale(55, 10, 100, 0.1) == pytest.approx(0.55)
    assert teacher_forcing_rate(0, 0.8, 10) == 1.0
    assert teacher_forcing_rate(5, 0.8, 10) == pytest.approx(0.9)
    assert teacher_forcing_rate(50, 0.8, 10) == pytest.approx(0.8)


def test_bf16_trains_where_it_runs_and_is_one_clear_error_where_it_cannot(tiny_config: Config) -> None:
    config = with_training(tiny_config, epochs=2, precision="bf16")
    if not bf16_supported(torch.device("cpu")):  # oneDNN has no bfloat16 LSTM without AVX512-BF16/AMX
        with pytest.raises(LasError, match="--precision bf16: bfloat16 LSTMs do not run on this CPU"):
            train(config)
        return
    records = metrics(train(config))
    assert all(torch.isfinite(torch.tensor(record["train_loss"])) for record in records)
    assert records[1]["train_loss"] < records[0]["train_loss"]


def test_precision_on_a_cpu(tiny_config: Config) -> None:
    cpu = torch.device("cpu")
    assert resolve_precision(cpu, "auto") == "fp32"
    assert resolve_precision(cpu, "fp32") == "fp32"
    with pytest.raises(LasError, match="--precision fp16 needs a CUDA device"):
        train(with_training(tiny_config, precision="fp16"))
    with pytest.raises(LasError, match="'train.precision': 'fp8' is not one of fp32, bf16, fp16, auto"):
        with_training(tiny_config, precision="fp8")


def test_the_gradient_scaler_round_trips_through_a_checkpoint(
    tiny_config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An enabled scaler on the CPU stands in for fp16 on a GPU (tests/test_cuda.py trains that):
    # its scale and growth tracker must come back on --resume, or an fp16 run resumes differently.
    scalers: list[torch.amp.GradScaler] = []

    def enabled_scaler(device: str, enabled: bool = True) -> torch.amp.GradScaler:
        scalers.append(real_scaler("cpu", init_scale=2.0**12, growth_interval=1))
        return scalers[-1]

    real_scaler = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", enabled_scaler)
    run = train(with_training(tiny_config, epochs=1))
    saved = load_model(run / "last.pt").training_state["scaler"]
    assert saved["scale"] == scalers[0].get_scale() and saved["_growth_tracker"] == scalers[0]._get_growth_tracker()
    assert saved["scale"] > 2.0**12  # doubled after every step with finite gradients
    train(with_training(tiny_config, epochs=1), resume=True, assignments=["train.epochs=2"])
    resumed = load_model(run / "last.pt").training_state["scaler"]
    assert resumed["scale"] == saved["scale"] ** 2 / 2.0**12  # grew on from the saved scale, not from 2**12


def test_compiled_speller_step_trains_like_the_eager_one(
    tiny_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Dynamo's graph capture, without inductor's minute of C++ compilation on a CPU.
    compiled_functions = []
    real_compile = torch.compile

    def compile_eagerly(function: object, **options: object) -> object:
        compiled_functions.append(function)
        return real_compile(function, backend="eager", **options)

    monkeypatch.setattr(torch, "compile", compile_eagerly)
    eager = train(with_training(tiny_config, epochs=1, out=str(tmp_path / "eager")))
    compiled = train(with_training(tiny_config, epochs=1, out=str(tmp_path / "compiled"), compile=True))
    assert [function.__name__ for function in compiled_functions] == ["advance"]
    assert metrics(compiled)[0]["train_loss"] == pytest.approx(metrics(eager)[0]["train_loss"], rel=1e-5)


def test_utterances_too_short_for_ctc_are_named(tiny_config: Config, tmp_path: Path, capsys) -> None:
    from las.model.ctc_path import ctc_frames_needed
    from las.training.corpus import load_corpus

    from .conftest import an4_rows, write_manifest

    assert ctc_frames_needed([5, 5, 6, 6, 6]) == 8  # a blank between each repeat
    rows = an4_rows("train", 2, longest_seconds=1.6)
    rows[1][3] = " ".join(["EIGHT"] * 12)  # 71 characters in about 1.5 s: 40 encoder frames at 4x
    manifest = write_manifest(tmp_path / "train.tsv", rows)
    config = replace(tiny_config, data=replace(tiny_config.data, train=str(manifest), dev=str(manifest)))
    load_corpus(config, None, None)
    assert f"1 utterances have fewer encoder frames than CTC needs for their transcripts (e.g. {rows[1][0]!r})" in (
        capsys.readouterr().err
    )


def test_the_normaliser_reads_a_seeded_sample_of_a_large_corpus_and_all_of_a_small_one() -> None:
    limit = corpus_module.NORMALIZER_UTTERANCES
    assert corpus_module.normalizer_sample(848, seed=1) == list(range(848))  # AN4: every utterance
    sample = corpus_module.normalizer_sample(1_000_000, seed=1)
    assert len(set(sample)) == limit and sample == sorted(sample) and 0 <= sample[0] and sample[-1] < 1_000_000
    assert sample == corpus_module.normalizer_sample(1_000_000, seed=1)  # the same on resume and on every rank
    assert sample != corpus_module.normalizer_sample(1_000_000, seed=2)
