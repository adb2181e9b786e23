"""Bad input raises the documented exceptions (fp8c.errors), carrying the library's message
(the file, the node, the input or the flag at fault); nothing crashes."""

import numpy as np
import pytest

import fp8c
from conftest import DATA, MODELS


def test_the_exception_classes():
    assert issubclass(fp8c.InvalidInputError, fp8c.Error)
    assert issubclass(fp8c.InvalidInputError, ValueError)
    assert issubclass(fp8c.FileError, OSError)
    for c in [fp8c.ModelError, fp8c.CompileError, fp8c.RunError]:
        assert issubclass(c, fp8c.Error)


def test_a_missing_file_and_a_corrupt_model(tmp_path):
    with pytest.raises(fp8c.Error, match="no such file"):
        fp8c.load(tmp_path / "nothing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf at all")
    with pytest.raises(fp8c.ModelError, match="bad.onnx"):
        fp8c.load(bad)
    with pytest.raises(fp8c.ModelError):
        fp8c.load(b"\x08\x07garbage")


def test_bad_settings_name_the_flag():
    m = fp8c.load(MODELS / "mlp_digits.onnx")
    with pytest.raises(fp8c.InvalidInputError, match="--recipe foo"):
        m.compile(recipe="foo", input_shapes={"x": [2, 64]})
    with pytest.raises(fp8c.InvalidInputError, match="--precision fp7"):
        m.compile(precision="fp7")
    with pytest.raises(fp8c.InvalidInputError, match="input-shape|x=2xq"):
        m.compile(input_shapes="x=2xq")
    with pytest.raises(TypeError, match="unexpected keyword argument 'recipie'"):
        m.compile(recipie="delayed")
    with pytest.raises(TypeError, match="amax_history"):
        m.compile(amax_history="long")
    with pytest.raises(fp8c.InvalidInputError, match="device"):
        m.compile(input_shapes={"x": [2, 64]}).prepare(device="tpu")


def test_bad_inputs_name_the_input():
    r = fp8c.load(MODELS / "mlp_digits.onnx").compile(input_shapes={"x": [2, 64]}).prepare()
    with pytest.raises(fp8c.InvalidInputError, match='"x".*missing|missing.*"x"'):
        r.run({})
    with pytest.raises(fp8c.InvalidInputError, match='"x".*f64|f64.*"x"|dtype'):
        r.run({"x": np.zeros((2, 64))})
    with pytest.raises(fp8c.Error, match='"x"'):
        r.run({"x": np.zeros((3, 64), np.float32)})
    with pytest.raises(fp8c.InvalidInputError, match="complex128"):
        r.run({"x": np.zeros((2, 64), complex)})
    with pytest.raises(TypeError):
        r.run([np.zeros((2, 64), np.float32)])


def test_bad_training_data_names_the_array(tmp_path):
    with pytest.raises(fp8c.InvalidInputError, match="labels|\"z\""):
        fp8c.TrainRun(MODELS / "mlp_digits.onnx", DATA / "digits_train.npz", "z", steps=1)
    with pytest.raises(fp8c.InvalidInputError, match="optimizer"):
        fp8c.TrainRun(MODELS / "mlp_digits.onnx", DATA / "digits_train.npz", "y", steps=1,
                      optimizer="adam")
