"""The CUDA paths against the CPU ones. Skipped without a GPU (CI has none); run them where one is:
`python -m pytest tests/test_cuda.py` (scripts/gpu.sh does, with the GPU benchmarks)."""

import gc
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from las import Recognizer
from las.core.config import Config
from las.data.corpora.manifest import read_utterances
from las.data.front_end.audio import load_audio
from las.export.runtime import load_model
from las.model.listener import BidirectionalLSTM
from las.recognition.inference import transcribe
from las.search import build_strategy
from las.training.train import train

from .conftest import an4_rows

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("packed", [False, True])  # las's path (padded) and the packed one
def test_cuda_blstm_equals_the_cpu_one(packed: bool) -> None:
    torch.manual_seed(0)
    layer = BidirectionalLSTM(5, 7)
    features, lengths = torch.randn(3, 11, 5), torch.tensor([11, 6, 2])
    expected = layer(features, lengths)
    on_gpu = BidirectionalLSTM(5, 7).cuda()
    on_gpu.load_state_dict(layer.state_dict())
    on_gpu.packed = packed
    # cuDNN runs float32 RNNs in TF32 by default: ~3e-4 from the CPU's float32, measured on an H100.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        output = on_gpu(features.cuda(), lengths)
    mask = torch.arange(11)[None, :] < lengths[:, None]
    torch.testing.assert_close(output.cpu()[mask], expected[mask], rtol=1e-4, atol=1e-5)


def decode_on(device: str, trained_run: dict[str, Path], settings: list[str]) -> list:
    recognizer = Recognizer.load(trained_run["run"] / "last.pt", "cpu")
    checkpoint, manifest = recognizer.checkpoint, trained_run["train"]
    utterances, features = recognizer.utterance_features(read_utterances(manifest), manifest)
    dataset = recognizer.dataset([utterance.id for utterance in utterances], features)
    model = checkpoint.build_model(device)
    strategy = build_strategy(checkpoint.decoding_config(settings).decode, checkpoint.vocabulary, model)
    return transcribe(model, dataset, strategy, 8, 8000, torch.device(device))


@pytest.mark.parametrize(
    "settings",
    [
        ["decode.strategy=beam", "decode.beam_size=4", "decode.nbest=4"],  # with the CTC prefix scorer
        ["decode.strategy=beam", "decode.beam_size=4", "decode.ctc_weight=0"],
        ["decode.strategy=greedy"],
        ["decode.strategy=ctc"],
    ],
)
def test_every_search_on_cuda_finds_what_it_finds_on_the_cpu(trained_run: dict[str, Path], settings: list[str]) -> None:
    for cpu, cuda in zip(*(decode_on(device, trained_run, settings) for device in ("cpu", "cuda")), strict=True):
        assert [h.tokens for h in cuda] == [h.tokens for h in cpu]
        assert [h.score for h in cuda] == pytest.approx([h.score for h in cpu], abs=1e-3)


@pytest.mark.parametrize(
    "settings",
    [
        ["decode.strategy=beam", "decode.beam_size=4", "decode.nbest=4"],  # with the CTC prefix scorer
        ["decode.strategy=beam", "decode.beam_size=4", "decode.ctc_weight=0"],
        ["decode.strategy=greedy"],
        ["decode.strategy=sample", "decode.samples=8", "decode.nbest=3"],  # the same draws, as graph-safe ones
    ],
)
def test_searches_as_cuda_graphs_find_the_eager_hypotheses(trained_run: dict[str, Path], settings: list[str]) -> None:
    """Each step one CUDA graph (las.search.graphs): the same hypotheses as the eager GPU search."""
    eager = decode_on("cuda", trained_run, settings)
    for graphed, expected in zip(
        decode_on("cuda", trained_run, [*settings, "decode.cuda_graphs=true"]), eager, strict=True
    ):
        assert [h.tokens for h in graphed] == [h.tokens for h in expected]
        assert [h.score for h in graphed] == pytest.approx([h.score for h in expected], abs=1e-4)


def test_random_search_on_cuda_draws_valid_hypotheses(trained_run: dict[str, Path]) -> None:
    """Its draws come from the GPU's generator, not the CPU's: the same rules, not the same paths."""
    results = decode_on("cuda", trained_run, ["decode.strategy=sample", "decode.samples=8", "decode.nbest=3"])
    vocabulary = load_model(trained_run["run"] / "last.pt").vocabulary
    for hypotheses in results:
        assert 1 <= len(hypotheses) <= 3
        assert all(0 < token < len(vocabulary) and token != vocabulary.pad for h in hypotheses for token in h.tokens)


@pytest.mark.parametrize("strategy", ["beam", "greedy", "sample", "ctc"])
def test_a_25_second_recording_decodes_whole_on_cuda(trained_run: dict[str, Path], strategy: str) -> None:
    """The scale corpus's longest utterances, one piece (decode.segment_seconds above them)."""
    audio = torch.cat([load_audio(Path(row[1]), 16000) for row in an4_rows("train", 20)])[: 25 * 16000]
    recognizer = Recognizer.load(trained_run["run"] / "last.pt", "cuda", strategy=strategy, segment_seconds=30)
    result = recognizer.transcribe(audio.numpy(), 16000)
    assert len(result.segments) <= 1  # one piece (none when this tiny model spells nothing)
    assert all(segment.end == pytest.approx(25.0, abs=0.02) for segment in result.segments)


@pytest.mark.parametrize(
    ("precision", "graphs", "speller"),
    [
        ("fp32", False, "lstm"),
        ("bf16", False, "lstm"),
        ("fp16", False, "lstm"),
        ("auto", False, "lstm"),
        ("fp16", True, "lstm"),
        ("bf16", True, "transformer"),  # the pyramid alone as graphs
    ],
)
def test_training_on_cuda(tiny_config: Config, precision: str, graphs: bool, speller: str) -> None:
    settings = replace(tiny_config.train, device="cuda", epochs=3, precision=precision, cuda_graphs=graphs)
    config = replace(tiny_config, train=settings, model=replace(tiny_config.model, speller=speller))
    config = replace(config, data=replace(config.data, workers=2))
    run = train(config)
    assert load_model(run / "last.pt").training_state["progress"]["epoch"] == 3
    captured = [record.get("captured_graphs") for record in map(json.loads, (run / "metrics.jsonl").open())]
    assert all(captured) if graphs else not any(captured)


@pytest.mark.parametrize("graphs", [False, True])
def test_training_in_pieces_on_cuda(tiny_config: Config, graphs: bool) -> None:
    """Utterances cut at the CTC head's alignment on the GPU (las.training.pieces), those it does
    not yet align heard whole, in bf16, and with the passes as CUDA graphs: the pieces' shapes are
    new buckets, each captured as it comes."""
    settings = dict(attention_pieces="on", attention_pieces_seconds=0.5, attention_pieces_trigger=7.0)
    settings = replace(tiny_config.train, device="cuda", epochs=3, precision="bf16", cuda_graphs=graphs, **settings)
    run = train(replace(tiny_config, train=settings))
    records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert [record["epoch"] for record in records] == [1, 2, 3]
    assert any(record.get("train_cut", 0) > 0 for record in records)
    assert all(0 <= record.get("train_heard", 0) <= 1 for record in records)


def test_a_model_on_cuda_starts_from_a_checkpoints_weights(trained_run: dict[str, Path]) -> None:
    """`las train --init` on a GPU: the model is there before the checkpoint's weights (on the
    CPU) are copied in, rows of shared characters included."""
    from las.model.las import LAS
    from las.training.initialisation import initialise

    trained = load_model(trained_run["run"] / "best.pt")
    vocabulary = trained.vocabulary.extended(["QZ9"])
    models = [LAS.build(trained.config.model, trained.input_size, len(vocabulary)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())  # the same rows for the new characters
    models[1].cuda()
    for model in models:
        initialise(model, trained.config.model, vocabulary, trained, "best.pt")
    on_gpu = models[1].state_dict()
    for name, weight in models[0].state_dict().items():
        assert torch.equal(on_gpu[name].cpu(), weight)


@pytest.mark.parametrize("case", ["location", "location_sampled", "monotonic_chunk"])
def test_the_speller_and_listener_captured_as_cuda_graphs_give_the_eager_loss_and_gradients(case: str) -> None:
    from .test_graphs import assert_bucketed_pass_is_the_plain_one

    for forcing in (1.0, 0.0):  # two buckets of rows in turn, sharing each module's memory pool
        assert_bucketed_pass_is_the_plain_one(case, forcing, torch.device("cuda"), capture=True, rows=(4, 2))


def test_the_listener_captured_under_a_transformer_speller_gives_the_eager_loss_and_gradients() -> None:
    from .test_graphs import TRANSFORMER_SPELLER, assert_bucketed_pass_is_the_plain_one

    assert_bucketed_pass_is_the_plain_one(
        "location", 1.0, torch.device("cuda"), True, ("listener",), (4, 2), TRANSFORMER_SPELLER
    )


@pytest.mark.parametrize(
    ("precision", "graphs"), [("fp32", False), ("bf16", False), ("fp16", False), ("fp32", True), ("bf16", True)]
)
def test_a_resumed_cuda_run_continues_where_it_stopped(
    tiny_config: Config, tmp_path: Path, precision: str, graphs: bool
) -> None:
    """Weights, optimiser, loss scaler (fp16) and random state carry over, with the speller's
    CUDA graphs too (captured anew after the resume). Within a tolerance, not bit for bit: CUDA's
    embedding and attention gradients are summed with atomics, in any order."""
    from .test_train import final_weights, metrics, with_training

    straight = with_training(
        tiny_config,
        device="cuda",
        precision=precision,
        cuda_graphs=graphs,
        epochs=3,
        warmup_steps=1,
        final_learning_rate_scale=1.0,
    )
    train(with_training(straight, out=str(tmp_path / "straight")))
    split = with_training(straight, epochs=2, out=str(tmp_path / "split"))
    train(split)
    train(split, resume=True, assignments=["train.epochs=3"])
    expected, resumed = final_weights(tmp_path / "straight"), final_weights(tmp_path / "split")
    for name in expected:
        torch.testing.assert_close(resumed[name], expected[name], rtol=2e-2, atol=2e-3)
    losses = [[record["train_loss"] for record in metrics(tmp_path / run)] for run in ("straight", "split")]
    assert losses[1] == pytest.approx(losses[0], rel=2e-2)


def test_batches_sized_from_the_gpus_memory_fit_it_and_a_resumed_run_keeps_them(tiny_config: Config) -> None:
    from las.model.las import LAS
    from las.training.batch_memory import StepProbe
    from las.training.corpus import load_corpus

    from .test_train import with_training

    # The probe counts all the memory the process holds, as a run's model and state do; here also
    # what earlier tests left allocated (a fixed 2% of an H100 held a step alone, not after the
    # whole file). So the share is what is held now and 1 GiB more.
    gc.collect()
    share = (torch.cuda.memory_allocated() + 2**30) / torch.cuda.mem_get_info()[1]
    config = with_training(tiny_config, device="cuda", epochs=1)
    config = replace(config, data=replace(config.data, batch_memory=share))
    run = train(config)
    budget = load_model(run / "last.pt").config.data.batch_frames
    assert budget > 0 and budget % 1000 == 0
    train(config, resume=True, assignments=["train.epochs=2"])
    assert load_model(run / "last.pt").config.data.batch_frames == budget  # not probed again

    corpus = load_corpus(config, None, None)
    device = torch.device("cuda")
    model = LAS.build(config.model, corpus.train.features[0].shape[1], len(corpus.train.vocabulary)).to(device)
    probe = StepProbe(corpus.config, model, corpus.train, device)
    limit = share * torch.cuda.mem_get_info(device)[1]
    assert probe(budget) <= limit < probe(int(1.25 * budget))  # within the share, and near its edge


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_nccl_processes_follow_the_single_process_trajectory(tmp_path: Path) -> None:
    from .test_distributed import metrics, run_training

    single, double = (run_training(tmp_path, count, ("train.device=cuda",)) for count in (1, 2))
    for one, two in zip(metrics(single), metrics(double), strict=True):
        assert two["train_loss"] == pytest.approx(one["train_loss"], rel=1e-3)


def test_the_front_end_on_cuda_tensors_computes_what_it_computes_on_the_cpu() -> None:
    """las.data.front_end.signal and the CTC Viterbi take CUDA tensors as they are (torchaudio's did, and a
    caller on a GPU need not move them back first)."""
    from las.data.augmentation.channel_effects import telephone
    from las.data.front_end.signal import MelPowerSpectrum, resample
    from las.model.ctc_path import viterbi_path

    waveform = load_audio(Path(an4_rows("dev", 1)[0][1]), 16000)
    for rate, new_rate in ((16000, 14400), (44100, 16000), (16000, 8000)):
        on_gpu = resample(waveform.cuda(), rate, new_rate)
        assert on_gpu.is_cuda
        torch.testing.assert_close(on_gpu.cpu(), resample(waveform, rate, new_rate), rtol=0, atol=1e-6)
    spectrum = MelPowerSpectrum(16000, 400, 160, 80)
    torch.testing.assert_close(spectrum(waveform.cuda()).cpu(), spectrum(waveform), rtol=1e-4, atol=1e-6)
    line = telephone(waveform.cuda(), 16000).cpu() - telephone(waveform, 16000)
    assert int((line.abs() > 1e-5).sum()) <= len(waveform) // 1000  # a mu-law code's edge, a step apart
    log_probs = torch.randn(60, 8, generator=torch.Generator().manual_seed(0)).log_softmax(-1)
    tokens = [3, 3, 5, 1, 7]
    assert viterbi_path(log_probs.cuda(), tokens, 0) == viterbi_path(log_probs, tokens, 0)
