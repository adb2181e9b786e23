"""Loading, compiling, the report, running (f32 and FP8 against onnxruntime on the committed
LLM and CNN exports), calibration, profiling and the FP8 ONNX export, each checked against
onnxruntime or against the `fp8c` CLI bit for bit."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import fp8c
from conftest import MODELS, cosine, rel_l2


def ort_run(path, feed, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def digits_x(n=16, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 64)).astype(np.float32)


def test_load_from_a_path_bytes_and_a_model_proto_gives_one_model():
    path = MODELS / "mlp_digits.onnx"
    irs = []
    for source in [path, str(path), path.read_bytes(), onnx.load(str(path))]:
        m = fp8c.load(source)
        assert m.inputs == [("x", "float32", ["batch", 64])]
        assert m.outputs == ["logits"]
        irs.append(m.compile(input_shapes={"x": [16, 64]}, min_fp8_flops=0).ir_text())
    assert all(ir == irs[0] for ir in irs)


def test_compile_gives_fp8_ir_and_a_report_dict(cli):
    model = fp8c.load(MODELS / "mlp_digits.onnx")
    c = model.compile(precision="fp8", recipe="delayed", input_shapes={"x": [16, 64]},
                      min_fp8_flops=0)
    ir = c.ir_text()
    assert "f8e4m3" in ir and "scaled_matmul" in ir
    assert "delayed" in c.recipe
    report = c.report()
    assert isinstance(report, dict)
    # fc1 and fc2 go to FP8; fc3 (N=10) stays f32 for want of --pad-to-16, as the CLI says.
    rows = {r["name"]: r for r in report["nodes"]}
    assert [rows[n]["precision"] for n in ("fc1", "fc2", "fc3")] == ["fp8", "fp8", "f32"], rows
    assert "pad-to-16" in rows["fc3"]["reason"]
    assert "totals" in report
    want = cli("compile", MODELS / "mlp_digits.onnx", "--input-shape", "x=16x64", "--recipe",
               "delayed", "--min-fp8-flops", "0", "--report=json").stdout
    assert report == json.loads(want)
    padded = model.compile(input_shapes={"x": [16, 64]}, min_fp8_flops=0, pad_to_16=True)
    assert all(r["precision"] == "fp8" for r in padded.report()["nodes"])
    assert "fp8" in c.report_text()
    # The same settings under the CLI's names give the same IR as `fp8c compile`.
    same = model.compile(precision="fp8", recipe="DelayedScaling", input_shapes="x=16x64",
                         min_fp8_flops=0)
    assert same.ir_text() == ir
    f32 = model.compile(precision="f32", input_shapes={"x": [16, 64]})
    assert "f8e4m3" not in f32.ir_text()
    kept = model.compile(input_shapes={"x": [16, 64]}, min_fp8_flops=0, keep_high="*")
    assert all(r["precision"] != "fp8" for r in kept.report()["nodes"])


def test_compile_ir_matches_the_cli(cli, tmp_path):
    out = tmp_path / "m.fp8ir"
    cli("compile", MODELS / "mlp_digits.onnx", "--input-shape", "x=16x64", "--recipe", "block",
        "--min-fp8-flops", "0", "-o", out)
    c = fp8c.load(MODELS / "mlp_digits.onnx").compile(
        input_shapes={"x": [16, 64]}, recipe="block", min_fp8_flops=0)
    assert c.ir_text() == out.read_text()


CONFIG = """[recipe]
kind = "delayed"
amax_history_len = 16

[[gemms]]
match = "fc2"
granularity = "block"
"""


@pytest.mark.parametrize("flags, kw", [
    (["--recipe", "rowwise_with_gw_hp"], dict(recipe="rowwise_with_gw_hp")),  # torchao's name
    (["--recipe", "Float8BlockScaling"], dict(recipe="Float8BlockScaling")),  # TE's
    # (only training graphs differ under e4m3; an inference graph is the default's)
    (["--format", "e4m3", "--margin", "1", "--recipe", "delayed", "--amax-algo", "most-recent"],
     dict(format="e4m3", margin=1, recipe="delayed", amax_algo="most-recent")),
    (["--keep-high", "fc1", "--keep-high", "fc2*"], dict(keep_high=["fc1", "fc2*"])),
    (["--force-fp8", "fc3"], dict(force_fp8="fc3")),
    (["--granularity", "fc1=rowwise", "--amax-history", "8", "--recipe", "delayed"],
     dict(granularity={"fc1": "rowwise"}, amax_history=8, recipe="delayed")),
    (["--config", "CONFIG"], dict(config="CONFIG")),
])
def test_compile_settings_are_the_clis_flags(cli, tmp_path, flags, kw):
    config = tmp_path / "fp8c.toml"
    config.write_text(CONFIG)
    flags = [str(config) if f == "CONFIG" else f for f in flags]
    kw = {k: (config if v == "CONFIG" else v) for k, v in kw.items()}
    out = tmp_path / "m.fp8ir"
    cli("compile", MODELS / "mlp_digits.onnx", "--input-shape", "x=16x64", "--min-fp8-flops",
        "0", *flags, "-o", out)
    c = fp8c.load(MODELS / "mlp_digits.onnx").compile(input_shapes={"x": [16, 64]},
                                                      min_fp8_flops=0, **kw)
    assert c.ir_text() == out.read_text()
    # Each setting changes the program (so the comparison above means something).
    default = fp8c.load(MODELS / "mlp_digits.onnx").compile(input_shapes={"x": [16, 64]},
                                                            min_fp8_flops=0)
    assert c.ir_text() != default.ir_text()


def test_llama_f32_and_fp8_against_onnxruntime():
    ref = np.load(MODELS / "llama-tiny.ref.npz")  # onnxruntime's logits, with their inputs
    ids = ref["input_ids"]
    model = fp8c.load(MODELS / "llama-tiny.onnx")
    shapes = {"input_ids": list(ids.shape)}
    f32 = model.compile(precision="f32", input_shapes=shapes).prepare().run({"input_ids": ids})
    assert f32["logits"].dtype == np.float32 and f32["logits"].shape == ref["logits"].shape
    assert rel_l2(f32["logits"], ref["logits"]) <= 1e-4
    fp8 = model.compile(precision="fp8", input_shapes=shapes, min_fp8_flops=0)
    assert "f8e4m3" in fp8.ir_text()
    out = fp8.prepare().run({"input_ids": ids})
    assert cosine(out["logits"], ref["logits"]) >= 0.99


@pytest.mark.parametrize("name", ["cnn_digits", "light_resnet50"])
def test_cnn_f32_and_fp8_against_onnxruntime(name):
    path = MODELS / f"{name}.onnx"
    model = fp8c.load(path)
    (iname, _, dims), = [i for i in model.inputs]
    shape = [2 if isinstance(d, str) else d for d in dims]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    ref = ort_run(path, {iname: x})
    out_name = model.outputs[0]
    f32 = model.compile(precision="f32", input_shapes={iname: shape}).prepare().run({iname: x})
    assert rel_l2(f32[out_name], ref[out_name]) <= 1e-5
    fp8 = model.compile(input_shapes={iname: shape}, min_fp8_flops=0).prepare().run({iname: x})
    assert cosine(fp8[out_name], ref[out_name]) >= 0.99


def test_runner_outputs_are_the_clis_bit_for_bit(cli, tmp_path):
    x = digits_x()
    np.savez(tmp_path / "in.npz", x=x)
    cli("run", MODELS / "cnn_digits.onnx", "--inputs", tmp_path / "in.npz", "--min-fp8-flops", "0",
        "-o", tmp_path / "out.npz")
    want = np.load(tmp_path / "out.npz")["logits"]
    got = fp8c.load(MODELS / "cnn_digits.onnx").compile(
        input_shapes={"x": [16, 64]}, min_fp8_flops=0).prepare().run({"x": x})["logits"]
    assert got.tobytes() == want.tobytes()
    # fp8c.run is the whole `fp8c run`: the same bits, and its messages.
    r = fp8c.run(MODELS / "cnn_digits.onnx", {"x": x}, min_fp8_flops=0, compare=True)
    assert r.outputs["logits"].tobytes() == want.tobytes()
    assert r.comparison["logits"]["cosine"] >= 0.99


def test_non_contiguous_and_f32_for_bf16_inputs_are_converted():
    x = digits_x(32)[::2]  # a strided view: copied to a contiguous array first
    assert not x.flags.c_contiguous
    runner = fp8c.load(MODELS / "mlp_digits.onnx").compile(
        input_shapes={"x": [16, 64]}).prepare()
    a = runner.run({"x": x})["logits"]
    b = runner.run({"x": np.ascontiguousarray(x)})["logits"]
    assert a.tobytes() == b.tobytes()
    assert a.flags.writeable


def test_contiguous_inputs_are_read_in_place():
    from fp8c import _arrays
    runner = fp8c.load(MODELS / "mlp_digits.onnx").compile(
        input_shapes={"x": [16, 64]}).prepare()
    x = digits_x()
    assert runner._native._reads_in_place(_arrays.inputs({"x": x})) == {"x": True}
    assert _arrays.inputs({"x": x})["x"] is x  # handed over as it is
    # A strided view is made contiguous first (a copy, then read in place), and an array
    # misaligned for float32 is copied by the native side.
    view = _arrays.inputs({"x": digits_x(32)[::2]})
    assert runner._native._reads_in_place(view) == {"x": True}
    raw = np.zeros(16 * 64 * 4 + 1, np.uint8)
    odd = raw[1:].view(np.float32).reshape(16, 64)
    odd[...] = x
    assert runner._native._reads_in_place({"x": odd}) == {"x": False}
    assert runner.run({"x": odd})["logits"].tobytes() == runner.run({"x": x})["logits"].tobytes()


def test_calibration_matches_the_cli(cli, tmp_path):
    x, cal = digits_x(16, 2), digits_x(16, 3)
    np.savez(tmp_path / "in.npz", x=x)
    np.savez(tmp_path / "cal.npz", x=cal)
    cli("run", MODELS / "mlp_digits.onnx", "--inputs", tmp_path / "in.npz", "--calibrate",
        tmp_path / "cal.npz", "--min-fp8-flops", "0", "-o", tmp_path / "out.npz")
    want = np.load(tmp_path / "out.npz")["logits"]
    model = fp8c.load(MODELS / "mlp_digits.onnx")
    kw = dict(input_shapes={"x": [16, 64]}, min_fp8_flops=0)
    target = model.compile(purpose="calibrated", **kw).prepare()
    reference = model.compile(precision="f32", **kw).prepare()
    calibrated, total = fp8c.calibrate(target, reference, {"x": cal})
    assert calibrated == total > 0
    assert any(k.endswith(".amax_history") and v.max() > 0 for k, v in target.state().items())
    assert target.run({"x": x})["logits"].tobytes() == want.tobytes()
    r = fp8c.run(MODELS / "mlp_digits.onnx", {"x": x}, calibrate={"x": cal}, min_fp8_flops=0)
    assert r.outputs["logits"].tobytes() == want.tobytes()
    assert any("calibrated" in m for m in r.messages)


def test_profile():
    runner = fp8c.load(MODELS / "cnn_digits.onnx").compile(
        input_shapes={"x": [16, 64]}).prepare()
    outs, prof = runner.profile({"x": digits_x()}, repeat=3)
    assert outs["logits"].shape == (16, 10)
    assert prof.runs == 3 and prof.total_s > 0
    ops = prof.by_op()
    assert ops and {"name", "seconds", "share", "calls"} <= set(ops[0])
    assert prof.by_node() and "ms" in prof.report(5)
    r = fp8c.run(MODELS / "cnn_digits.onnx", {"x": digits_x()}, profile=True, repeat=2)
    assert r.profile.runs == 2 and len(r.times) == 2


def test_fp8_onnx_export_is_the_clis_and_runs_in_onnxruntime(cli, tmp_path):
    cal = digits_x(16, 4)
    np.savez(tmp_path / "cal.npz", x=cal)
    cli("compile", MODELS / "mlp_digits.onnx", "--emit", "onnx", "--calibrate",
        tmp_path / "cal.npz", "--min-fp8-flops", "0", "-o", tmp_path / "cli.onnx")
    model = fp8c.load(MODELS / "mlp_digits.onnx")
    done = model.export_onnx(tmp_path / "py.onnx", calibrate={"x": cal}, min_fp8_flops=0)
    assert done["weights"] > 0 and done["calibrated"][0] == done["calibrated"][1] > 0
    assert (tmp_path / "py.onnx").read_bytes() == (tmp_path / "cli.onnx").read_bytes()
    ops = {n.op_type for n in onnx.load(str(tmp_path / "py.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    x = digits_x(16, 5)
    q = ort_run(tmp_path / "py.onnx", {"x": x}, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    f = ort_run(MODELS / "mlp_digits.onnx", {"x": x})
    assert cosine(q["logits"], f["logits"]) >= 0.99
    # A current-scaling recipe needs no calibration: the graph computes its scales.
    done = model.export_onnx(tmp_path / "cur.onnx", recipe="current", min_fp8_flops=0)
    assert "current" in done["how"]


def test_mlir_text_says_what_it_needs():
    c = fp8c.load(MODELS / "mlp_digits.onnx").compile(input_shapes={"x": [2, 64]})
    try:
        text = c.mlir_text()
    except fp8c.Error as e:  # a build without the mlir feature says so
        assert "mlir" in str(e)
    else:
        assert "func.func" in text


def test_outputs_of_bf16_and_fp8_types(monkeypatch):
    from fp8c import _arrays
    bits = np.array([0x3F80, 0xC000], dtype="<u2")  # bf16 1.0, -2.0
    codes = np.array([0x38, 0xC0], dtype=np.uint8)  # e4m3 1.0, -2.0
    if fp8c.has_ml_dtypes():
        import ml_dtypes
        b = _arrays.to_numpy(("bfloat16", [2], bytearray(bits.tobytes())))
        assert b.dtype == ml_dtypes.bfloat16 and b.astype(np.float32).tolist() == [1.0, -2.0]
        f = _arrays.to_numpy(("float8_e4m3fn", [2], bytearray(codes.tobytes())))
        assert f.dtype == ml_dtypes.float8_e4m3fn and f.astype(np.float32).tolist() == [1.0, -2.0]
    # Without ml_dtypes: as `fp8c run -o out.npz` writes them (bf16 widened, FP8 codes).
    monkeypatch.setattr(_arrays, "_ml", None)
    b = _arrays.to_numpy(("bfloat16", [2], bytearray(bits.tobytes())))
    assert b.dtype == np.float32 and b.tolist() == [1.0, -2.0]
    f = _arrays.to_numpy(("float8_e4m3fn", [2], bytearray(codes.tobytes())))
    assert f.dtype == np.uint8 and f.tolist() == [0x38, 0xC0]


def test_help_describes_the_package():
    import pydoc
    text = pydoc.render_doc(fp8c)
    for word in ["load", "Model", "compile", "prepare", "Runner", "TrainRun", "from_torch",
                 "InvalidInputError"]:
        assert word in text
    assert "precision" in pydoc.render_doc(fp8c.Model.compile)


def test_compile_and_run_release_the_gil():
    import threading
    import time
    entered, ticks = threading.Event(), []
    model = fp8c.load(MODELS / "llama-tiny.onnx")
    ids = np.load(MODELS / "llama-tiny.ref.npz")["input_ids"]

    def work():
        entered.set()
        c = model.compile(input_shapes={"input_ids": list(ids.shape)}, min_fp8_flops=0)
        c.prepare().run({"input_ids": ids})

    t = threading.Thread(target=work)
    t.start()
    entered.wait()
    # Each tick needs the GIL back after a sleep: while the worker holds it inside a native
    # call none could happen.
    while t.is_alive():
        time.sleep(0.001)
        ticks.append(1)
    t.join()
    assert len(ticks) >= 10, f"{len(ticks)} ticks while compiling and running"
