"""The CUDA paths against the CPU ones. Skipped without a GPU (CI has none); run them where one is:
`python -m pytest tests/test_cuda.py` (scripts/gpu.sh does, with the GPU benchmarks)."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from las import Recognizer
from las.checkpoint import load_checkpoint
from las.config import Config
from las.data.manifest import read_utterances
from las.inference import transcribe
from las.model.listener import BidirectionalLSTM
from las.search import build_strategy
from las.train import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_packed_cuda_blstm_equals_the_padded_cpu_one() -> None:
    torch.manual_seed(0)
    layer = BidirectionalLSTM(5, 7)
    features, lengths = torch.randn(3, 11, 5), torch.tensor([11, 6, 2])
    layer.packed = False
    expected = layer(features, lengths)
    on_gpu = BidirectionalLSTM(5, 7).cuda()
    on_gpu.load_state_dict(layer.state_dict())
    on_gpu.packed = None  # las's choice: packed on CUDA
    # cuDNN runs float32 RNNs in TF32 by default: ~3e-4 from the CPU's float32, measured on an H100.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        output = on_gpu(features.cuda(), lengths)
    mask = torch.arange(11)[None, :] < lengths[:, None]
    torch.testing.assert_close(output.cpu()[mask], expected[mask], rtol=1e-4, atol=1e-5)


def test_beam_search_on_cuda_finds_what_it_finds_on_the_cpu(trained_run: dict[str, Path]) -> None:
    recognizer = Recognizer.load(trained_run["run"] / "last.pt", "cpu")
    checkpoint, manifest = recognizer.checkpoint, trained_run["train"]
    utterances, features = recognizer.utterance_features(read_utterances(manifest), manifest)
    dataset = recognizer.dataset([utterance.id for utterance in utterances], features)
    settings = checkpoint.decoding_config(["decode.strategy=beam", "decode.beam_size=4", "decode.nbest=4"]).decode
    results = {}
    for device in ("cpu", "cuda"):
        model = checkpoint.build_model(device)
        strategy = build_strategy(settings, checkpoint.vocabulary, model)
        results[device] = transcribe(model, dataset, strategy, 8, 8000, torch.device(device))
    for cpu, cuda in zip(results["cpu"], results["cuda"], strict=True):
        assert [h.tokens for h in cuda] == [h.tokens for h in cpu]
        assert [h.score for h in cuda] == pytest.approx([h.score for h in cpu], abs=1e-3)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "auto"])
def test_training_on_cuda(tiny_config: Config, precision: str) -> None:
    config = replace(tiny_config, train=replace(tiny_config.train, device="cuda", epochs=3, precision=precision))
    config = replace(config, data=replace(config.data, workers=2))
    run = train(config)
    assert load_checkpoint(run / "last.pt").training_state["progress"]["epoch"] == 3


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_nccl_processes_follow_the_single_process_trajectory(tmp_path: Path) -> None:
    from .test_distributed import metrics, run_training

    single, double = (run_training(tmp_path, count, ("train.device=cuda",)) for count in (1, 2))
    for one, two in zip(metrics(single), metrics(double), strict=True):
        assert two["train_loss"] == pytest.approx(one["train_loss"], rel=1e-3)
