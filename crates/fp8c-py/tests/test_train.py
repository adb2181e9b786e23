"""Training from Python: the losses are `fp8c train`'s bit for bit (same settings, same
code), checkpoints resume bit for bit, arrays in memory and an iterator of batches feed the
same steps, the per-step callback sees every report, and the trained ONNX runs."""

import csv

import numpy as np
import onnxruntime as ort

import fp8c
from conftest import DATA, MODELS

MLP = MODELS / "mlp_digits.onnx"
TRAIN = DATA / "digits_train.npz"
# lr 2**-8: exact in f32 and f64 alike, so the CLI parses what Python passes.
SETTINGS = dict(batch=32, lr=0.00390625, min_fp8_flops=0)


def csv_losses(path):
    with open(path) as f:
        return [(int(r["step"]), float(r["loss"])) for r in csv.DictReader(f)]


def test_losses_equal_the_clis_bit_for_bit(cli, tmp_path):
    cli("train", MLP, "--data", TRAIN, "--labels", "y", "--steps", 30, "--batch", 32, "--lr",
        "0.00390625", "--min-fp8-flops", 0, "--log", tmp_path / "cli.csv", "--quiet")
    want = csv_losses(tmp_path / "cli.csv")
    assert len(want) == 30
    seen = []
    got = fp8c.train(MLP, TRAIN, "y", steps=30, on_step=seen.append, **SETTINGS)
    assert got["history"]["losses"] == want
    assert [r["step"] for r in seen] == list(range(30))
    assert all(r["applied"] and r["lr"] > 0 for r in seen)
    assert seen[-1]["accuracy"] is not None
    # bf16 too (another precision, another program).
    cli("train", MLP, "--data", TRAIN, "--labels", "y", "--steps", 10, "--batch", 32,
        "--precision", "bf16", "--log", tmp_path / "bf16.csv", "--quiet")
    bf16 = fp8c.train(MLP, TRAIN, "y", steps=10, batch=32, precision="bf16")
    assert bf16["history"]["losses"] == csv_losses(tmp_path / "bf16.csv")


def test_checkpoint_and_resume_continue_bit_for_bit(cli, tmp_path):
    whole = fp8c.train(MLP, TRAIN, "y", steps=40, **SETTINGS)["history"]["losses"]
    ck = tmp_path / "ck"
    first = fp8c.TrainRun(MLP, TRAIN, "y", steps=20, checkpoint=ck, **SETTINGS)
    first.fit()
    done = first.finish()
    assert done["checkpoint"] == (ck, 20) or done["checkpoint"][1] == 20
    assert (ck / "state.safetensors").is_file() or any(ck.iterdir())
    again = fp8c.TrainRun(MLP, TRAIN, "y", steps=40, resume=ck, **SETTINGS)
    assert again.info["start_step"] == 20
    rest = again.fit()["losses"]
    assert first.history["losses"] + rest == whole
    # The CLI resumes the Python run's checkpoint to the same losses.
    cli("train", MLP, "--data", TRAIN, "--labels", "y", "--steps", 40, "--batch", 32, "--lr",
        "0.00390625", "--min-fp8-flops", 0, "--resume", ck, "--log", tmp_path / "r.csv", "--quiet")
    assert csv_losses(tmp_path / "r.csv") == rest


def test_arrays_and_an_iterator_feed_the_same_steps(tmp_path):
    d = np.load(TRAIN)
    x, y = d["x"], d["y"]
    from_file = fp8c.train(MLP, TRAIN, "y", steps=10, **SETTINGS)["history"]["losses"]
    from_arrays = fp8c.train(MLP, {"x": x, "y": y}, "y", steps=10, **SETTINGS)
    assert from_arrays["history"]["losses"] == from_file
    # An iterator of batches: one step per batch, in order.
    run = fp8c.TrainRun(MLP, {"x": x, "y": y}, "y", steps=5, save_onnx=tmp_path / "t.onnx",
                        **SETTINGS)
    batches = ({"x": x[i * 32:(i + 1) * 32], "y": y[i * 32:(i + 1) * 32]} for i in range(100))
    reports = []
    run.fit(on_step=reports.append, batches=batches)
    assert [r["step"] for r in reports] == [0, 1, 2, 3, 4]
    assert all(np.isfinite(r["loss"]) for r in reports)
    done = run.finish()
    assert done["saved_onnx"][0] == tmp_path / "t.onnx" or str(done["saved_onnx"][0]).endswith("t.onnx")
    s = ort.InferenceSession(str(tmp_path / "t.onnx"), providers=["CPUExecutionProvider"])
    logits = s.run(None, {"x": x[:8]})[0]
    assert logits.shape == (8, 10) and np.isfinite(logits).all()
    w = run.weights()
    trained = [k for k in w if w[k].dtype == np.float32]
    assert trained


def test_a_callback_returning_false_stops_with_the_state_saved(tmp_path):
    ck = tmp_path / "ck"
    run = fp8c.TrainRun(MLP, TRAIN, "y", steps=50, checkpoint=ck, **SETTINGS)
    fit = run.fit(on_step=lambda r: r["step"] < 4)
    assert [s for s, _ in fit["losses"]] == [0, 1, 2, 3, 4]
    assert str(fit["interrupted"]) == str(ck)
    again = fp8c.TrainRun(MLP, TRAIN, "y", steps=50, resume=ck, **SETTINGS)
    assert again.info["start_step"] == 5


def test_training_steps_release_the_gil():
    import threading
    import time
    d = np.load(TRAIN)
    batch = {"x": d["x"][:32], "y": d["y"][:32]}
    entered, ticks, counts = threading.Event(), [], []

    def work():  # a TrainRun stays on the thread that made it
        run = fp8c.TrainRun(MLP, TRAIN, "y", steps=60, **SETTINGS)
        entered.set()
        run.fit()
        for _ in range(20):
            run.step(batch)
        counts.append(run.step_count)

    t = threading.Thread(target=work)
    t.start()
    entered.wait()
    # Each tick needs the GIL back after a sleep: none could happen while the worker held it
    # through the steps.
    while t.is_alive():
        time.sleep(0.001)
        ticks.append(1)
    t.join()
    assert counts == [80]
    assert len(ticks) >= 10, f"{len(ticks)} ticks while training"
