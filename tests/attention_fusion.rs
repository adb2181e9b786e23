//! Fused attention (issue #43) against the unfused graph, as a user runs them: the committed
//! PyTorch exports (`examples/models/*-tiny.onnx`, `bert-tiny-enc.onnx` and the opset-23
//! `Attention` exports) compile with every attention chain fused into one `attention` node,
//! and `fp8c run` gives the outputs of `fp8c run --no-fuse-attention` within 1e-5 (relative to
//! the output's largest magnitude) on every backend (the CUDA backend, on the emulated device
//! in CI, with its own attention kernels: its program must hold the fused steps); 50 steps of
//! `fp8c train` give the same losses within 1e-4 relative on the Llama-, GPT-2-, Qwen2-,
//! Mistral-style and BERT exports, and a few steps on the emulated CUDA device follow the CPU's.

#[macro_use]
mod support;

use fp8c_ir::Tensor;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use support::TestDevice;

/// The exports and their attention count.
const MODELS: &[(&str, usize)] = &[
    ("llama-tiny", 2),
    ("gpt2-tiny", 2),
    ("qwen2-tiny", 2),
    ("mistral-tiny", 2),
    ("bert-tiny-enc", 2),
    ("llama-tiny-op23", 2),
    ("bert-tiny-enc-op23", 2),
];

const OUTPUTS: &[&str] = &["logits", "last_hidden_state"];

fn model(name: &str) -> PathBuf {
    support::repo_root().join(format!("examples/models/{name}.onnx"))
}

/// The `.ref.npz` inputs of `name` as an npz of their own.
fn inputs(name: &str, dir: &Path) -> PathBuf {
    let root = support::repo_root().join("examples/models");
    let all = support::read_npz(&root.join(format!("{name}.ref.npz")));
    let list: Vec<(&str, &Tensor)> = all
        .iter()
        .filter(|(k, _)| !OUTPUTS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let path = dir.join("inputs.npz");
    fp8c_session::npy::write_npz(&path, &list).unwrap();
    path
}

/// The output of `fp8c run` and its stderr.
fn run(name: &str, dir: &Path, dev: TestDevice, extra: &[&str]) -> (Vec<f64>, String) {
    let out = dir.join(format!("{}{}.npz", dev.flag(), extra.join("")));
    let ins = inputs(name, dir);
    let m = model(name);
    let mut args: Vec<&OsStr> = vec![
        "run".as_ref(),
        m.as_os_str(),
        "--inputs".as_ref(),
        ins.as_os_str(),
        "--precision".as_ref(),
        "f32".as_ref(),
        "--device".as_ref(),
        dev.flag().as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let r = support::run_fp8c(args);
    assert!(r.ok, "{name} {extra:?} on {dev:?}: {}", r.stderr);
    let got = support::read_npz(&out);
    let key = OUTPUTS.iter().find(|k| got.contains_key(**k)).unwrap();
    (got[*key].to_f64_vec().unwrap(), r.stderr)
}

/// max |a − b| / max |b|.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(b)
        .fold(0f64, |m, (x, y)| m.max((x - y).abs() / scale))
}

#[test]
fn every_committed_export_compiles_with_its_attention_fused() {
    for &(name, count) in MODELS {
        let ir = support::scratch(&format!("attn_ir_{name}")).join("canon.fp8ir");
        let r = support::run_fp8c([
            "compile".as_ref(),
            model(name).as_os_str(),
            "--input-shape".as_ref(),
            "input_ids=2x16".as_ref(),
            "--stop-after".as_ref(),
            "canonicalize".as_ref(),
            "-o".as_ref(),
            ir.as_os_str(),
        ]);
        assert!(r.ok, "{name}: {}", r.stderr);
        let text = std::fs::read_to_string(&ir).unwrap();
        let fused = text.lines().filter(|l| l.contains("= attention ")).count();
        assert_eq!(fused, count, "{name}: {fused} attention nodes");
        assert!(!text.contains("= softmax "), "{name}: a softmax is left");
        // The causal decoders need no mask tensor: the causal flag replaces it. (Mistral's
        // sliding window and BERT's padding keep a mask; BERT's is [B, 1, 1, T].)
        if ["llama-tiny", "gpt2-tiny", "qwen2-tiny", "llama-tiny-op23"].contains(&name) {
            assert!(
                text.lines()
                    .filter(|l| l.contains("= attention "))
                    .all(|l| l.contains("causal=true") && l.matches('%').count() == 4),
                "{name}:\n{text}"
            );
        }
    }
}

test_backends! {
    fn fused_attention_runs_like_the_unfused_graph(dev) {
        for &(name, count) in MODELS {
            let dir = support::scratch(&format!("attn_run_{name}_{}", dev.flag()));
            let (unfused, _) = run(name, &dir, TestDevice::Cpu, &["--no-fuse-attention"]);
            let (fused, log) = run(name, &dir, dev, &["--print-program"]);
            // The device's program runs the fused op, not its decomposition.
            let steps = log.lines().filter(|l| l.contains(" = attention(")).count();
            assert_eq!(steps, count, "{name} on {dev:?}: {steps} attention steps\n{log}");
            assert!(!log.contains(" = softmax("), "{name} on {dev:?}: a softmax step\n{log}");
            let r = rel(&fused, &unfused);
            eprintln!("{name} on {dev:?}: fused vs unfused {r:.3e}");
            assert!(r <= 1e-5, "{name} on {dev:?}: {r:.3e}");
        }
    }
}

/// The losses of `steps` training steps (f32, AdamW) of `model` on `data` (`--text` or
/// `--data` arguments).
fn losses(name: &str, data: &[&OsStr], steps: usize, dev: TestDevice, extra: &[&str]) -> Vec<f64> {
    train(name, data, steps, dev, extra).0
}

/// [`losses`] and the run's stderr.
fn train(
    name: &str,
    data: &[&OsStr],
    steps: usize,
    dev: TestDevice,
    extra: &[&str],
) -> (Vec<f64>, String) {
    let dir = support::scratch(&format!(
        "attn_train_{name}_{}{}",
        dev.flag(),
        extra.join("")
    ));
    let log = dir.join("log.csv");
    let steps = steps.to_string();
    let m = model(name);
    let mut args: Vec<&OsStr> = vec!["train".as_ref(), m.as_os_str()];
    args.extend(data);
    args.extend([
        OsStr::new("--batch"),
        "2".as_ref(),
        "--steps".as_ref(),
        steps.as_ref(),
        "--precision".as_ref(),
        "f32".as_ref(),
        "--device".as_ref(),
        dev.flag().as_ref(),
        "--log".as_ref(),
        log.as_os_str(),
        "--quiet".as_ref(),
    ]);
    args.extend(extra.iter().map(OsStr::new));
    let r = support::run_fp8c(args);
    assert!(r.ok, "{name} {extra:?}: {}", r.stderr);
    let losses = support::csv_column(&log, "loss")
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    (losses, r.stderr)
}

/// A token-classification set for the BERT encoder: ids, a padding mask (the last positions
/// of every other row), token types, and per-token labels among its 128 hidden features.
fn bert_data(dir: &Path) -> PathBuf {
    let (n, t) = (16u64, 16u64);
    let mut state = 12345u64;
    let mut next = |m: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % m
    };
    let len = (n * t) as usize;
    let ids: Vec<i64> = (0..len).map(|_| next(256) as i64).collect();
    let labels: Vec<i64> = (0..len).map(|_| next(128) as i64).collect();
    let mask: Vec<i64> = (0..len)
        .map(|i| {
            let (row, col) = (i as u64 / t, i as u64 % t);
            i64::from(row % 2 == 0 || col < t - 4)
        })
        .collect();
    let types: Vec<i64> = (0..len).map(|i| i64::from(i as u64 % t >= t / 2)).collect();
    let shape = vec![n, t];
    let arrays = [
        ("input_ids", Tensor::from_i64(shape.clone(), &ids)),
        ("attention_mask", Tensor::from_i64(shape.clone(), &mask)),
        ("token_type_ids", Tensor::from_i64(shape.clone(), &types)),
        ("labels", Tensor::from_i64(shape, &labels)),
    ];
    let list: Vec<(&str, &Tensor)> = arrays.iter().map(|(k, v)| (*k, v)).collect();
    let path = dir.join("bert.npz");
    fp8c_session::npy::write_npz(&path, &list).unwrap();
    path
}

#[test]
fn fifty_training_steps_give_the_unfused_losses() {
    let text = support::repo_root().join("examples/data/shakespeare.txt");
    let dir = support::scratch("attn_train_data");
    let bert = bert_data(&dir);
    let text_args: Vec<&OsStr> = vec![
        "--text".as_ref(),
        text.as_os_str(),
        "--seq-len".as_ref(),
        "32".as_ref(),
    ];
    let bert_args: Vec<&OsStr> = vec![
        "--data".as_ref(),
        bert.as_os_str(),
        "--labels".as_ref(),
        "labels".as_ref(),
    ];
    for (name, data) in [
        ("llama-tiny", &text_args),
        ("gpt2-tiny", &text_args),
        ("qwen2-tiny", &text_args),
        ("mistral-tiny", &text_args),
        ("bert-tiny-enc", &bert_args),
    ] {
        let fused = losses(name, data, 50, TestDevice::Cpu, &[]);
        let unfused = losses(name, data, 50, TestDevice::Cpu, &["--no-fuse-attention"]);
        assert_eq!(fused.len(), 50);
        let worst = fused
            .iter()
            .zip(&unfused)
            .fold(0f64, |m, (a, b)| m.max(((a - b) / b).abs()));
        eprintln!(
            "{name}: 50 steps, losses {:.4} → {:.4}, fused vs unfused {worst:.2e}",
            fused[0], fused[49]
        );
        assert!(worst <= 1e-4, "{name}: {worst:.3e}");
        assert!(fused[49] < fused[0], "{name} does not learn: {fused:?}");
    }
}

/// The training steps on the emulated CUDA device (its `attention` and `attention_grad`
/// kernels: the profile lists them, and no softmax) follow the CPU's fused steps, on the causal
/// Llama-style decoder and the BERT encoder with its padding mask.
#[test]
fn training_on_the_emulated_device_follows_the_cpu() {
    let text = support::repo_root().join("examples/data/shakespeare.txt");
    let dir = support::scratch("attn_train_emu_data");
    let bert = bert_data(&dir);
    let text_args: Vec<&OsStr> = vec![
        "--text".as_ref(),
        text.as_os_str(),
        "--seq-len".as_ref(),
        "16".as_ref(),
    ];
    let bert_args: Vec<&OsStr> = vec![
        "--data".as_ref(),
        bert.as_os_str(),
        "--labels".as_ref(),
        "labels".as_ref(),
    ];
    for (name, data, steps) in [
        ("llama-tiny", &text_args, 4),
        ("bert-tiny-enc", &bert_args, 3),
    ] {
        let cpu = losses(name, data, steps, TestDevice::Cpu, &[]);
        let (emu, log) = train(name, data, steps, TestDevice::CudaEmulated, &["--profile"]);
        let ran = |op: &str| {
            log.lines()
                .any(|l| l.trim_start().starts_with(&format!("{op} ")))
        };
        assert!(
            ran("attention") && ran("attention_grad") && !ran("softmax") && !ran("softmax_grad"),
            "{name}: the emulated device did not run the fused kernels:\n{log}"
        );
        assert_eq!(emu.len(), steps, "{name}");
        let worst = cpu
            .iter()
            .zip(&emu)
            .fold(0f64, |m, (a, b)| m.max(((a - b) / b).abs()));
        eprintln!("{name}: {steps} steps on the emulated device, losses vs the CPU {worst:.2e}");
        assert!(worst <= 1e-4, "{name}: cpu {cpu:?} vs emulated {emu:?}");
    }
}
