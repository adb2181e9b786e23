"""``fp8c.from_torch``: a PyTorch module exported with ``torch.onnx.export(dynamo=True)``,
loaded and compiled. torch is imported only here, when asked for."""

from __future__ import annotations

import os
import tempfile


def from_torch(module, example_inputs, *, input_names=None, output_names=None, path=None,
               opset_version=None, dynamic_shapes=None, **settings):
    try:
        import torch
    except ImportError as e:  # the message says what to do
        raise ImportError(
            "fp8c.from_torch needs PyTorch: pip install torch onnxscript "
            "(or export the model with torch.onnx.export yourself and use fp8c.load)") from e
    import fp8c

    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if input_names is None:
        input_names = [f"input_{i}" for i in range(len(args))] if len(args) > 1 else ["x"]
    if "input_shapes" not in settings:
        settings["input_shapes"] = {
            n: list(a.shape) for n, a in zip(input_names, args) if isinstance(a, torch.Tensor)}
    kwargs = {"dynamo": True, "input_names": list(input_names)}
    if output_names is not None:
        kwargs["output_names"] = list(output_names)
    if opset_version is not None:
        kwargs["opset_version"] = opset_version
    if dynamic_shapes is not None:
        kwargs["dynamic_shapes"] = dynamic_shapes
    with tempfile.TemporaryDirectory(prefix="fp8c-torch-") as tmp:
        target = os.fspath(path) if path is not None else os.path.join(tmp, "model.onnx")
        module = module.eval()
        with torch.no_grad():
            program = torch.onnx.export(module, args, **kwargs)
        # The exporter's ONNXProgram writes the file (weights inline: fp8c reads them).
        program.save(target, external_data=False)
        model = fp8c.load(target if path is not None else open(target, "rb").read())
        return model.compile(**settings)
