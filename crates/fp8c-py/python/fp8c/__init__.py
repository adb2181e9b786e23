"""fp8c: FP8 mixed precision for any ONNX model, from Python.

fp8c compiles an ONNX model (or a PyTorch module, through ``torch.onnx.export``) to an
FP8-rewritten program: matmuls in E4M3/E5M2 with per-tensor or per-tile scaling, norms and
softmax kept in high precision; it runs the program on a bit-exact CPU reference or an NVIDIA
GPU, calibrates it, profiles it, exports it as standard FP8 Q/DQ ONNX and trains it. This
package is a thin layer over the same library the ``fp8c`` command calls: the keywords are
the CLI's flags with underscores (``input_shapes``, ``keep_high``, ``amax_history``), and
results are the CLI's bit for bit.

    import fp8c, numpy as np
    model = fp8c.load("examples/models/mlp_digits.onnx")     # a path, bytes or onnx.ModelProto
    compiled = model.compile(precision="fp8", recipe="delayed", input_shapes={"x": [16, 64]})
    print(compiled.ir_text())
    report = compiled.report()                                # a dict
    runner = compiled.prepare(device="cpu")
    outputs = runner.run({"x": np.ones((16, 64), np.float32)})  # {"logits": ndarray}

What is here:

- ``load`` → ``Model`` → ``Model.compile`` → ``Compiled`` (IR text, JSON, report, MLIR,
  ``export_onnx`` on the model) → ``Compiled.prepare`` → ``Runner`` (``run``, ``profile``,
  ``calibrate``, ``state``).
- ``run``: a whole ``fp8c run`` (inputs, calibration, comparison with f32, statistics, profile).
- ``train`` and ``TrainRun``: a whole ``fp8c train`` (data from ``.npz``, text or arrays;
  a per-step callback; batches from an iterator; checkpoints, resume, the trained ONNX).
- ``from_torch``: export a ``torch.nn.Module`` with ``torch.onnx.export(dynamo=True)`` and
  compile it.
- ``errors``: ``Error`` and its subclasses, raised with the library's message.

Compiling, running and training release the GIL.
"""

from __future__ import annotations

import json as _json
import os as _os
import tempfile as _tempfile
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as _np

from . import _arrays
from . import _fp8c
from .errors import CompileError, Error, FileError, InvalidInputError, ModelError, RunError

__version__ = _fp8c.__version__

PathLike = Union[str, "_os.PathLike[str]"]

__all__ = [
    "load", "Model", "Compiled", "Runner", "Profile", "calibrate", "run", "RunResult",
    "train", "TrainRun", "from_torch", "pass_names", "has_ml_dtypes",
    "Error", "ModelError", "CompileError", "RunError", "InvalidInputError", "FileError",
]

Profile = _fp8c.Profile


def has_ml_dtypes() -> bool:
    """Whether bf16 and FP8 outputs come back as ml_dtypes arrays (else bf16 is widened to
    float32 and FP8 given as its uint8 codes, as ``fp8c run -o out.npz`` writes them)."""
    return _arrays.has_ml_dtypes()


def pass_names() -> List[Tuple[str, str]]:
    """The compiler's passes in pipeline order, ``(name, what it does)``: the names
    ``print_after`` and ``stop_after`` take."""
    return _fp8c.pass_names()


def load(source: Union[PathLike, bytes, Any], outputs: Optional[List[str]] = None) -> "Model":
    """Loads a model: an ONNX file or fp8c IR text (``.fp8ir``) by path, a serialized ONNX
    model as ``bytes``, or an ``onnx.ModelProto``. ``outputs`` keeps only those outputs (a
    graph output or any intermediate value by name); unused branches are pruned first.

    Raises ``ModelError`` for a file that is not a model or uses an unsupported op,
    ``InvalidInputError`` for a path that does not exist.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Model(_fp8c.Model.load_bytes(bytes(source), outputs))
    if hasattr(source, "SerializeToString"):
        return Model(_fp8c.Model.load_bytes(source.SerializeToString(), outputs))
    return Model(_fp8c.Model.load(_os.fspath(source), outputs))


class Model:
    """A loaded model: its interface, and ``compile``. Made by ``fp8c.load``."""

    def __init__(self, native: "_fp8c.Model"):
        self._native = native

    @property
    def inputs(self) -> List[Tuple[str, str, List[Union[int, str]]]]:
        """The declared inputs: ``(name, numpy dtype name, dims)``; a dim is an int or the
        name of a symbol (``batch``) that ``input_shapes`` binds."""
        return self._native.inputs

    @property
    def outputs(self) -> List[str]:
        """The output names."""
        return self._native.outputs

    @property
    def warnings(self) -> List[str]:
        """What loading warned about."""
        return self._native.warnings

    @property
    def path(self) -> Optional[str]:
        """The file the model was read from (a temporary ``model.onnx`` for bytes)."""
        p = self._native.path
        return None if p is None else str(p)

    def compile(self, purpose: str = "inference", **settings: Any) -> "Compiled":
        """Compiles the model with ``fp8c compile``'s settings as keywords, by the flags'
        names with underscores:

        - ``precision``: ``"fp8"`` (default), ``"bf16"`` or ``"f32"``;
        - ``recipe``: ``"current"``, ``"delayed"``, ``"rowwise"``, ``"block"``, ``"mxfp8"``
          or TransformerEngine's / torchao's names (``"DelayedScaling"``,
          ``"Float8BlockScaling"``, ``"MXFP8BlockScaling"``, ``"rowwise_with_gw_hp"``, ...);
          ``format`` (``"hybrid"``, ``"e4m3"``), ``amax_history``, ``amax_algo``, ``margin``,
          ``amax_epsilon``, ``power_2_scale``, ``fast_accum``;
        - ``input_shapes``: ``{"x": [16, 64]}`` (or ``"x=16x64"``); symbols they bind apply to
          every input;
        - ``keep_high`` / ``force_fp8``: a glob or a list of globs over node names;
          ``granularity``: ``{"*mlp*": "block"}``; ``keep_first_last``, ``fp8_attention``,
          ``pad_to_16``, ``min_fp8_flops``, ``no_fuse``, ``hopper_accum``;
        - ``config``: a TOML file with ``[recipe]`` and ``[[gemms]]`` tables (keywords win);
        - ``print_after``, ``stop_after``, ``verify``.

        ``purpose`` picks the default recipe as the CLI does: ``"inference"`` (current
        scaling), ``"calibrated"`` (delayed: ``Runner.calibrate`` fills the histories) or
        ``"training"`` (delayed). Raises ``InvalidInputError`` for a bad setting (the message
        names the flag), ``CompileError`` when a pass fails.
        """
        return Compiled(self._native.compile(purpose, **settings), self)

    def export_onnx(self, path: PathLike, calibrate: Union[None, PathLike, Mapping[str, Any]] = None,
                    **settings: Any) -> Dict[str, Any]:
        """Writes the model as standard FP8 Q/DQ ONNX to ``path`` (``fp8c compile --emit
        onnx``): under delayed scaling the activation scales are frozen from ``calibrate``
        (an ``.npz`` path or a dict of input arrays), under a current-scaling recipe
        (``recipe="current"``, ``"block"``, ...) the exported graph computes them. Returns
        what was exported (``weights``, ``activations``, ``calibrated``, ``how``, ...)."""
        with _tempfile.TemporaryDirectory(prefix="fp8c-calibration-") as tmp:
            cal = None
            if calibrate is not None and hasattr(calibrate, "items"):
                cal = _os.path.join(tmp, "calibration.npz")
                _np.savez(cal, **{k: _arrays.as_input(v) for k, v in calibrate.items()})
            elif calibrate is not None:
                cal = _os.fspath(calibrate)
            return self._native.export_onnx(_os.fspath(path), cal, **settings)

    def __repr__(self) -> str:
        return f"<fp8c.Model {self.path!r}: inputs {[i[0] for i in self.inputs]}, outputs {self.outputs}>"


class Compiled:
    """A compiled model: the FP8-rewritten graph and what the passes recorded. Made by
    ``Model.compile``."""

    def __init__(self, native: "_fp8c.Compiled", model: Model):
        self._native = native
        self.model = model
        """The model it was compiled from."""

    def ir_text(self) -> str:
        """The IR text: one node per line, every value typed (``fp8c compile``'s output)."""
        return self._native.ir_text()

    def json(self) -> str:
        """The IR as JSON text (``--emit json``)."""
        return self._native.json()

    def report(self, all: bool = False) -> Dict[str, Any]:
        """The explain report as a dict (``--report=json``): one row per GEMM (every node with
        ``all``) with its precision and the reason, then totals (FLOP share, bytes)."""
        return _json.loads(self._native.report_json(all))

    def report_text(self, all: bool = False) -> str:
        """The explain report as the table ``fp8c compile --report`` prints."""
        return self._native.report_text(all)

    def mlir_text(self) -> str:
        """The graph as an MLIR module (``--emit mlir``); needs a build with the ``mlir``
        feature, else raises ``InvalidInputError`` saying so."""
        return self._native.mlir_text()

    def write_ir(self, path: PathLike) -> None:
        """Writes the IR text to ``path`` and the weights to ``path + ".safetensors"``."""
        self._native.write_ir(_os.fspath(path))

    @property
    def notes(self) -> List[str]:
        """Notes the passes left (what ``fp8c -v`` logs)."""
        return self._native.notes

    @property
    def dumps(self) -> List[Tuple[str, str]]:
        """``(pass, IR text)`` after each pass named in ``print_after``."""
        return self._native.dumps

    @property
    def recipe(self) -> str:
        """The scaling recipe in words."""
        return self._native.recipe

    def high_precision_summary(self) -> List[str]:
        """The GEMMs that stay in high precision although FP8 was asked for, one line per
        reason (what ``fp8c run`` prints)."""
        return self._native.high_precision_summary()

    def prepare(self, device: str = "cpu") -> "Runner":
        """Lowers the graph and loads it on ``device``: ``"cpu"`` (the bit-exact reference),
        ``"cuda"`` (an NVIDIA GPU), ``"cuda-emulated"`` (the CUDA backend on host-compiled
        kernels) or ``"mlir"``. Raises ``RunError`` when the device is not there."""
        return Runner(self._native.prepare(device))


class Runner:
    """A compiled model loaded on a device; it keeps its scaling state between runs. Made by
    ``Compiled.prepare``. Not thread-safe: use it from the thread that made it."""

    def __init__(self, native: "_fp8c.Runner"):
        self._native = native

    def run(self, inputs: Mapping[str, Any]) -> Dict[str, _np.ndarray]:
        """Runs on ``inputs`` (every graph input by name, exact dtypes; an f32 array for a
        bf16 input is rounded to bf16) and returns the outputs by name, in program order.
        Contiguous arrays are read in place, not copied. Raises ``InvalidInputError`` for a
        missing input or a wrong dtype or shape (naming the input)."""
        return _arrays.outputs(self._native.run(_arrays.inputs(inputs)))

    def profile(self, inputs: Mapping[str, Any], repeat: int = 1) -> Tuple[Dict[str, _np.ndarray], "Profile"]:
        """Runs ``repeat`` times, timing every step; returns the first run's outputs and the
        ``Profile`` (``report()`` is the table ``fp8c run --profile`` prints)."""
        outs, prof = self._native.run_profiled(_arrays.inputs(inputs), repeat)
        return _arrays.outputs(outs), prof

    def calibrate(self, reference: "Runner", inputs: Mapping[str, Any]) -> Tuple[int, int]:
        """Fills the delayed-scaling state (amax histories, scales) from ``inputs`` run
        through ``reference``, the same model compiled with ``precision="f32"``, as ``fp8c run
        --calibrate`` does. Returns ``(calibrated, total)`` FP8 tensors."""
        return self._native.calibrate(reference._native, _arrays.inputs(inputs))

    def state(self) -> Dict[str, _np.ndarray]:
        """Every state entry by name (amax histories, scales)."""
        return _arrays.outputs(self._native.state())

    def set_state(self, name: str, value: Any) -> None:
        """Replaces a state entry (same dtype and shape as declared)."""
        self._native.set_state(name, _arrays.as_input(value))

    @property
    def device(self) -> str:
        """The device it runs on."""
        return self._native.device

    @property
    def output_names(self) -> List[str]:
        """The outputs, in program order."""
        return self._native.output_names


def calibrate(runner: Runner, reference: Runner, inputs: Mapping[str, Any]) -> Tuple[int, int]:
    """``runner.calibrate(reference, inputs)``: fills an FP8 delayed-scaling runner's state
    from ``inputs`` run through the f32 ``reference``."""
    return runner.calibrate(reference, inputs)


class RunResult:
    """What ``fp8c.run`` gives: ``outputs`` (dict of arrays), ``times`` (seconds per run,
    fastest first), ``profile`` (a ``Profile`` or None), ``stats`` (one dict per FP8
    quantization), ``comparison`` (per output: ``rel_l2``, ``max_abs``, ``cosine`` against
    the f32 path), ``messages`` (the warnings and notes ``fp8c run`` prints),
    ``high_precision``, ``recipe`` and ``compile_s``."""

    def __init__(self, d: Dict[str, Any]):
        self.outputs: Dict[str, _np.ndarray] = _arrays.outputs(d["outputs"])
        self.times: List[float] = d["times"]
        self.profile: Optional[Profile] = d["profile"]
        self.stats: List[Dict[str, Any]] = _json.loads(d["stats_json"])
        self.comparison: Dict[str, Dict[str, Any]] = {n: _json.loads(c) for n, c in d["comparison_json"]}
        self.messages: List[str] = d["messages"]
        self.high_precision: List[str] = d["high_precision"]
        self.recipe: str = d["recipe"]
        self.compile_s: float = d["compile_s"]

    def __repr__(self) -> str:
        return f"<fp8c.RunResult outputs {list(self.outputs)}, recipe {self.recipe}>"


def run(model: PathLike, inputs: Union[PathLike, Mapping[str, Any]], *, device: str = "cpu",
        calibrate: Union[None, PathLike, Mapping[str, Any]] = None, compare: bool = False,
        stats: bool = False, repeat: int = 1, profile: bool = False,
        outputs: Optional[List[str]] = None, **settings: Any) -> RunResult:
    """A whole ``fp8c run MODEL --inputs in.npz``: load, specialise on the inputs, compile
    (``settings`` as in ``Model.compile``), calibrate on ``calibrate`` (an ``.npz`` path or a
    dict of arrays), run ``repeat`` times (profiled with ``profile``), compare every output
    with the f32 path (``compare``), measure every FP8 quantization (``stats``). ``inputs`` is
    an ``.npz`` path or a dict of arrays."""
    with _tempfile.TemporaryDirectory(prefix="fp8c-run-") as tmp:
        def npz(d, name):
            if d is None or not hasattr(d, "items"):
                return None if d is None else _os.fspath(d)
            p = _os.path.join(tmp, name)
            _np.savez(p, **{k: _arrays.as_input(v) for k, v in d.items()})
            return p
        d = _fp8c.run_job(_os.fspath(model), npz(inputs, "inputs.npz"), None, None, outputs,
                          device, npz(calibrate, "calibration.npz"), compare, stats, repeat,
                          profile, **settings)
    return RunResult(d)


class TrainRun:
    """A whole ``fp8c train`` run, prepared: the same loop, checkpoints and files, so the
    losses are the CLI's bit for bit.

        run = fp8c.TrainRun("mlp.onnx", data="train.npz", labels="y", steps=100, batch=32,
                            checkpoint="ck", precision="fp8")
        run.fit(on_step=lambda r: print(r["step"], r["loss"]))
        run.finish()                       # final checkpoint, plot, trained ONNX (save_onnx=)

    ``data`` is an ``.npz`` path or a dict of arrays (one sample per row; ``labels`` names
    the labels' array); ``text`` a file whose bytes are a language model's tokens
    (``seq_len``). ``input_map`` maps graph inputs to array names where they differ. Every
    other keyword is an ``fp8c train`` flag by its name with underscores: ``steps``,
    ``batch``, ``lr``, ``optimizer``, ``loss``, ``schedule``, ``warmup``, ``min_lr``,
    ``weight_decay``, ``clip_grad_norm``, ``accumulate``, ``wgrad_high_precision``,
    ``momentum``, ``seed``, ``freeze``, ``seq_len``, plus ``Model.compile``'s settings
    (``config`` also reads its ``[train]`` table). Files: ``checkpoint`` (a folder, written at
    the end and every ``checkpoint_every`` steps), ``resume`` (continue from a checkpoint, bit
    for bit), ``log`` (CSV), ``plot`` (.svg/.png), ``save_onnx`` (the trained model).
    """

    def __init__(self, model: PathLike, data: Union[None, PathLike, Mapping[str, Any]] = None,
                 labels: Optional[str] = None, *, text: Optional[PathLike] = None,
                 input_map: Optional[Mapping[str, str]] = None, output: Optional[str] = None,
                 device: str = "cpu", checkpoint: Optional[PathLike] = None,
                 checkpoint_every: int = 0, resume: Optional[PathLike] = None,
                 log: Optional[PathLike] = None, plot: Optional[PathLike] = None,
                 save_onnx: Optional[PathLike] = None, profile: bool = False, **settings: Any):
        fs = lambda p: None if p is None else _os.fspath(p)  # noqa: E731
        if data is not None and hasattr(data, "items"):
            data = _arrays.inputs(data)
        elif data is not None:
            data = _os.fspath(data)
        self._native = _fp8c.TrainRun(
            _os.fspath(model), data, labels, fs(text), dict(input_map) if input_map else None,
            output, device, fs(checkpoint), checkpoint_every, fs(resume), fs(log), fs(plot),
            fs(save_onnx), profile, **settings)

    @property
    def info(self) -> Dict[str, Any]:
        """What the run is about to do: rows, batch, output, loss, optimizer, lr, precision,
        trained parameters, start and end step, warnings, GEMMs kept high."""
        return self._native.info

    @property
    def step_count(self) -> int:
        """Steps run so far (a resumed run's included)."""
        return self._native.step_count

    def fit(self, on_step: Optional[Callable[[Dict[str, Any]], Any]] = None,
            batches: Optional[Iterable[Mapping[str, Any]]] = None) -> Dict[str, Any]:
        """Trains. Without ``batches``: the library's loop over the data up to ``steps``,
        checkpointing every ``checkpoint_every``. With ``batches`` (an iterable of dicts:
        the model's inputs and the labels array, one batch of rows each): one step per
        batch until it ends or ``steps`` is reached (no ``log`` rows or periodic checkpoints
        then: ``finish`` writes the final checkpoint). ``on_step(report)`` gets each step's
        report (``step``, ``loss``, ``lr``, ``applied``, ``grad_norm``, ``accuracy``,
        ``elapsed_s``); returning False stops (the library's loop saves the state first).
        Ctrl-C stops after the step in flight, saves the state and raises
        KeyboardInterrupt naming the folder. Returns this call's ``losses`` and timings."""
        if batches is None:
            return self._native.fit(on_step)
        losses = []
        start = self.step_count
        for batch in batches:
            if self.step_count >= self.info["steps"]:
                break
            report = self.step(batch)
            losses.append((report["step"], report["loss"]))
            if on_step is not None and on_step(report) is False:
                break
        return {"start_step": start, "losses": losses}

    def step(self, batch: Mapping[str, Any]) -> Dict[str, Any]:
        """One training step on ``batch`` (the model's inputs and the labels array, exactly
        one batch of rows); returns its report."""
        return self._native.step(_arrays.inputs(batch))

    def finish(self) -> Dict[str, Any]:
        """Writes the final checkpoint, the plot and the trained ONNX model (those asked
        for); raises the first failure after trying the rest (a run whose every step was
        skipped fails and writes no model)."""
        return self._native.finish()

    @property
    def history(self) -> Dict[str, Any]:
        """Every step run so far: ``losses`` as ``(step, loss)`` pairs, ``seconds``,
        ``skipped``, ``last_accuracy``."""
        return self._native.history

    def state(self) -> Dict[str, _np.ndarray]:
        """The whole training state: weights, optimizer moments, scaling state, counters."""
        return _arrays.outputs(self._native.state())

    def weights(self) -> Dict[str, _np.ndarray]:
        """Every parameter of the model, trained ones as they are now."""
        return _arrays.outputs(self._native.weights())

    def report(self, all: bool = False) -> Dict[str, Any]:
        """The training graph's explain report as a dict."""
        return _json.loads(self._native.report_json(all))

    def profile(self) -> Optional[Profile]:
        """Step times of a run made with ``profile=True``."""
        return self._native.profile()


def train(model: PathLike, data: Union[None, PathLike, Mapping[str, Any]] = None,
          labels: Optional[str] = None, *, on_step: Optional[Callable[[Dict[str, Any]], Any]] = None,
          **options: Any) -> Dict[str, Any]:
    """A whole ``fp8c train`` in one call: ``TrainRun(model, data, labels, **options)``,
    ``fit(on_step)``, ``finish()``. Returns ``history`` (losses, timings) and what
    ``finish`` wrote."""
    r = TrainRun(model, data, labels, **options)
    r.fit(on_step)
    done = r.finish()
    return {"history": r.history, **done}


def from_torch(module: Any, example_inputs: Union[Tuple[Any, ...], Any], *,
               input_names: Optional[List[str]] = None, output_names: Optional[List[str]] = None,
               path: Optional[PathLike] = None, opset_version: Optional[int] = None,
               dynamic_shapes: Any = None, **settings: Any) -> Compiled:
    """Exports a ``torch.nn.Module`` with ``torch.onnx.export(dynamo=True)`` and compiles it
    (``settings`` as in ``Model.compile``; ``input_shapes`` defaults to the example inputs'
    shapes). ``path`` keeps the ONNX file (else a temporary one is used and removed after
    loading). Needs torch (and onnxscript, which its exporter uses): without them raises
    ``ImportError`` saying what to install. ``compiled.model`` is the loaded ONNX model."""
    from . import _torch
    return _torch.from_torch(module, example_inputs, input_names=input_names,
                             output_names=output_names, path=path, opset_version=opset_version,
                             dynamic_shapes=dynamic_shapes, **settings)
