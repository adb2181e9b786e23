"""fp8c.from_torch on a small module: exported with torch.onnx.export(dynamo=True), compiled,
run against PyTorch's own forward. Skipped, with the reason printed, where torch is not
installed (CI does not install it); the error without torch is checked either way."""

import importlib.util
import sys

import numpy as np
import pytest

import fp8c
from conftest import cosine, rel_l2

HAVE_TORCH = importlib.util.find_spec("torch") is not None and \
    importlib.util.find_spec("onnxscript") is not None


@pytest.mark.skipif(not HAVE_TORCH, reason="torch and onnxscript are not installed: "
                    "from_torch is not exercised (pip install torch onnxscript)")
def test_from_torch_compiles_a_module_that_matches_torch(tmp_path):
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10))
    x = torch.randn(16, 64)
    want = net(x).detach().numpy()
    f32 = fp8c.from_torch(net, (x,), precision="f32", path=tmp_path / "net.onnx")
    assert (tmp_path / "net.onnx").is_file()
    got = f32.prepare().run({"x": x.numpy()})
    (out,) = got.values()
    assert rel_l2(out, want) <= 1e-5
    fp8 = fp8c.from_torch(net, x, min_fp8_flops=0)
    assert "f8e4m3" in fp8.ir_text()
    (out8,) = fp8.prepare().run({"x": x.numpy()}).values()
    assert cosine(out8, want) >= 0.99


def test_from_torch_without_torch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(ImportError, match="pip install torch"):
        fp8c.from_torch(object(), np.zeros((1, 4), np.float32))
