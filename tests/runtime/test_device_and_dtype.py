import pytest
import torch

from ftune.runtime.device import default_dtype, get_device, get_dtype


def test_cpu_and_auto():
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    assert get_device("auto").type == expected


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on machines without CUDA")
def test_unavailable_cuda_is_explained():
    with pytest.raises(
        ValueError, match=r"device='cuda' was requested but CUDA is not available .*set device=cpu"
    ):
        get_device("cuda")


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="checks the error on machines without MPS")
def test_unavailable_mps_is_explained():
    with pytest.raises(ValueError, match="device='mps' was requested but MPS is not available"):
        get_device("mps")


@pytest.mark.parametrize("name", ["gpu", "cpu:0", "cuda:x", ""])
def test_unknown_device(name):
    with pytest.raises(ValueError, match=rf"Unknown device '{name}'. Accepted: 'cpu', 'cuda'"):
        get_device(name)


def test_dtypes():
    assert get_dtype("fp32") is torch.float32
    assert get_dtype("BF16") is torch.bfloat16
    assert get_dtype("float16") is torch.float16
    assert get_dtype(torch.bfloat16, device=torch.device("cpu")) is torch.bfloat16
    with pytest.raises(ValueError, match=r"Unknown dtype 'fp8'. Accepted: 'fp32', 'float32', 'bf16'"):
        get_dtype("fp8")
    with pytest.raises(ValueError, match=r"Unsupported dtype torch.int64. Accepted: fp32, bf16, fp16"):
        get_dtype(torch.int64)


def test_default_dtype_sets_and_restores():
    assert torch.get_default_dtype() is torch.float32
    with default_dtype("bf16") as dtype:
        assert dtype is torch.bfloat16
        assert torch.nn.Linear(2, 2).weight.dtype is torch.bfloat16
    assert torch.get_default_dtype() is torch.float32
    with pytest.raises(RuntimeError, match="boom"), default_dtype("fp16"):
        raise RuntimeError("boom")
    assert torch.get_default_dtype() is torch.float32
