//! `fp8c train`'s memory options end to end (issue #43): `--activations`, `--recompute` and
//! `--optimizer-state` through the CLI on the committed Llama-style export, each with its
//! bit-identity claim (same losses, same final state) and its effect on the planned peak's
//! breakdown (`--report=json`'s `memory` section), the `[train]` table, checkpoints keeping
//! each moment in its own dtype, and the memory report of `--profile`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fp8c() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fp8c"))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn llama() -> String {
    root()
        .join("examples/models/llama-tiny.onnx")
        .display()
        .to_string()
}

fn text() -> String {
    root()
        .join("examples/data/shakespeare.txt")
        .display()
        .to_string()
}

/// What one run gave: its losses as logged (equal strings are equal f32 bits), the report's
/// memory rows, stderr, and the checkpoint's meta.json when one was asked for.
struct Run {
    losses: Vec<String>,
    memory: Value,
    stderr: String,
    meta: Option<Value>,
}

impl Run {
    /// Bytes of the role `name` at the planned peak.
    fn role(&self, name: &str) -> u64 {
        self.memory["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["role"] == name)
            .unwrap_or_else(|| panic!("no role {name} in {}", self.memory))["bytes"]
            .as_u64()
            .unwrap()
    }

    fn total(&self) -> u64 {
        self.memory["total_bytes"].as_u64().unwrap()
    }
}

/// `fp8c train llama-tiny --text … --seq-len 128 --batch 4 --steps 3 --report=json` with
/// `extra`, a log and a checkpoint in `dir/tag`. The planned peak is then in backward, where
/// the saved activations are.
fn train(dir: &Path, tag: &str, extra: &[&str]) -> Run {
    let log = dir.join(format!("{tag}.csv"));
    let ckpt = dir.join(tag);
    let out = fp8c()
        .args(["train", &llama(), "--text", &text()])
        .args([
            "--seq-len",
            "128",
            "--batch",
            "4",
            "--steps",
            "3",
            "--quiet",
        ])
        .args(["--report=json", "--log"])
        .arg(&log)
        .arg("--checkpoint")
        .arg(&ckpt)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{extra:?}: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut it = serde_json::Deserializer::from_str(&stdout).into_iter::<Value>();
    let report = it.next().unwrap().unwrap();
    let losses = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().to_string())
        .collect();
    let meta = std::fs::read_to_string(ckpt.join("meta.json"))
        .ok()
        .map(|m| serde_json::from_str(&m).unwrap());
    Run {
        losses,
        memory: report["memory"].clone(),
        stderr,
        meta,
    }
}

const FP8: [&str; 6] = [
    "--precision",
    "fp8",
    "--recipe",
    "delayed",
    "--min-fp8-flops",
    "0",
];

fn with<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    a.iter().chain(b).copied().collect()
}

/// The dtype of every tensor of a checkpoint's state file, from its safetensors header.
fn state_dtypes(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let bytes = std::fs::read(dir.join("state.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| (k.clone(), v["dtype"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn fp8_inputs_kept_as_codes_or_in_high_precision_train_bit_for_bit_alike() {
    let dir = tempfile::tempdir().unwrap();
    let codes = train(dir.path(), "fp8", &with(&FP8, &["--activations", "fp8"]));
    let high = train(dir.path(), "high", &with(&FP8, &["--activations", "high"]));
    assert_eq!(codes.losses, high.losses);
    // The same step, state included (delayed scaling histories and scales too).
    assert_eq!(
        codes.meta.as_ref().unwrap()["state_sha256"],
        high.meta.as_ref().unwrap()["state_sha256"]
    );
    // Four bytes an element kept instead of one for every FP8 GEMM's input.
    assert!(
        high.total() > codes.total(),
        "high {} vs codes {}",
        high.total(),
        codes.total()
    );
}

#[test]
fn bf16_saved_activations_halve_what_backward_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let codes = train(dir.path(), "fp8", &FP8);
    let bf16 = train(dir.path(), "bf16", &with(&FP8, &["--activations", "bf16"]));
    assert!(
        bf16.stderr.contains("saved activations kept in bf16"),
        "{}",
        bf16.stderr
    );
    let (a, b) = (
        codes.role("saved activations"),
        bf16.role("saved activations"),
    );
    assert!(b * 10 < a * 8, "bf16 {b} vs {a}");
    // Rounded, so not the same losses, but the same training.
    assert_ne!(codes.losses, bf16.losses);
    for (x, y) in codes.losses.iter().zip(&bf16.losses) {
        let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
        assert!((x - y).abs() < 0.01 * x, "{x} vs {y}");
    }
    // f32 training keeps everything in f32.
    let out = fp8c()
        .args(["train", &llama(), "--text", &text(), "--steps", "1"])
        .args(["--precision", "f32", "--activations", "bf16"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--activations bf16") && err.contains("--precision f32"),
        "{err}"
    );
}

#[test]
fn recomputing_layers_or_attention_keeps_the_step_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    // Attention is recomputed where it is spelled out (matmul, softmax, matmul); a fused
    // `attention` op recomputes its probabilities anyway, so that run says there is nothing to do.
    let unfused = ["--no-fuse-attention"];
    for (prec, tag) in [(&["--precision", "f32"][..], "f32"), (&FP8[..], "fp8")] {
        let none = train(dir.path(), &format!("{tag}-none"), prec);
        let layer = train(
            dir.path(),
            &format!("{tag}-layer"),
            &with(prec, &["--recompute", "layer"]),
        );
        let fused = train(
            dir.path(),
            &format!("{tag}-fused-attention"),
            &with(prec, &["--recompute", "attention"]),
        );
        let none_unfused = train(
            dir.path(),
            &format!("{tag}-none-unfused"),
            &with(prec, &unfused),
        );
        let attention = train(
            dir.path(),
            &format!("{tag}-attention"),
            &with(prec, &with(&unfused, &["--recompute", "attention"])),
        );
        for (r, base) in [
            (&layer, &none),
            (&fused, &none),
            (&attention, &none_unfused),
        ] {
            assert_eq!(r.losses, base.losses, "{tag}");
            // The delayed-scaling state is read, not rolled, by the recomputation: the same
            // histories and scales after the steps.
            assert_eq!(
                r.meta.as_ref().unwrap()["state_sha256"],
                base.meta.as_ref().unwrap()["state_sha256"],
                "{tag}"
            );
        }
        assert!(
            layer.stderr.contains("--recompute layer: 2 regions"),
            "{}",
            layer.stderr
        );
        assert!(
            attention
                .stderr
                .contains("--recompute attention: 2 regions"),
            "{}",
            attention.stderr
        );
        assert!(
            fused
                .stderr
                .contains("2 fused attention op(s) already recompute"),
            "{}",
            fused.stderr
        );
        let saved = |r: &Run| r.role("saved activations");
        assert!(
            saved(&layer) * 4 < saved(&none),
            "{tag}: layer {} vs none {}",
            saved(&layer),
            saved(&none)
        );
        assert!(
            saved(&attention) < saved(&none_unfused),
            "{tag}: attention {} vs none {}",
            saved(&attention),
            saved(&none_unfused)
        );
    }
}

#[test]
fn the_train_table_takes_the_memory_options() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("run.toml");
    std::fs::write(
        &cfg,
        "[train]\nrecompute = \"layer\"\noptimizer_state = \"bf16\"\nactivations = \"high\"\n",
    )
    .unwrap();
    let table = train(dir.path(), "table", &["--config", cfg.to_str().unwrap()]);
    let flags = train(
        dir.path(),
        "flags",
        &[
            "--recompute",
            "layer",
            "--optimizer-state",
            "bf16",
            "--activations",
            "high",
        ],
    );
    assert_eq!(table.losses, flags.losses);
    assert_eq!(table.memory, flags.memory);
    std::fs::write(&cfg, "[train]\nrecompute = \"layers\"\n").unwrap();
    let out = fp8c()
        .args(["train", &llama(), "--text", &text(), "--steps", "1"])
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("recompute = \"layers\": expected none or attention or layer"),
        "{err}"
    );
}

#[test]
fn bf16_optimizer_state_halves_the_moments_and_checkpoints_keep_them_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let f32s = train(dir.path(), "f32", &[]);
    let bf16 = train(dir.path(), "bf16", &["--optimizer-state", "bf16"]);
    let (a, b) = (f32s.role("optimizer state"), bf16.role("optimizer state"));
    assert!(b * 100 <= a * 55, "bf16 {b} vs f32 {a}");
    for (x, y) in f32s.losses.iter().zip(&bf16.losses) {
        let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
        assert!((x - y).abs() < 0.01 * x, "{x} vs {y}");
    }
    let dtypes = state_dtypes(&dir.path().join("bf16"));
    let moments: Vec<_> = dtypes
        .iter()
        .filter(|(k, _)| k.ends_with(".m") || k.ends_with(".v"))
        .collect();
    assert!(!moments.is_empty());
    assert!(moments.iter().all(|(_, d)| *d == "BF16"), "{moments:?}");
    // Master weights stay f32.
    assert_eq!(dtypes["val_456"], "F32");
    // A bf16-state checkpoint resumes with f32 state (widened exactly), and continues.
    let out = fp8c()
        .args(["train", &llama(), "--text", &text()])
        .args([
            "--seq-len",
            "128",
            "--batch",
            "4",
            "--steps",
            "5",
            "--quiet",
        ])
        .arg("--resume")
        .arg(dir.path().join("bf16"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("saved in another dtype and converted"),
        "{err}"
    );
}

#[test]
fn fp8_first_moments_are_codes_with_a_scale() {
    let dir = tempfile::tempdir().unwrap();
    let run = train(dir.path(), "fp8m", &["--optimizer-state", "fp8"]);
    let dtypes = state_dtypes(&dir.path().join("fp8m"));
    // The head's weight (the export names it val_456).
    let key = "val_456";
    assert_eq!(dtypes[&format!("{key}.m")], "F8_E4M3");
    assert_eq!(dtypes[&format!("{key}.m.scale_inv")], "F32");
    assert_eq!(dtypes[&format!("{key}.v")], "BF16");
    let first: f64 = run.losses[0].parse().unwrap();
    let last: f64 = run.losses[2].parse().unwrap();
    assert!(last < first, "{:?}", run.losses);
    // No conversion of FP8 codes without their scale: resuming with f32 state is refused.
    let out = fp8c()
        .args(["train", &llama(), "--text", &text()])
        .args([
            "--seq-len",
            "128",
            "--batch",
            "4",
            "--steps",
            "5",
            "--quiet",
        ])
        .args(["--optimizer-state", "f32"])
        .arg("--resume")
        .arg(dir.path().join("fp8m"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("resume with the --optimizer-state"),
        "{err}"
    );
}

#[test]
fn profile_prints_the_peak_by_role_and_the_process_peak() {
    let out = fp8c()
        .args(["train", &llama(), "--text", &text()])
        .args(["--seq-len", "32", "--batch", "2", "--steps", "2", "--quiet"])
        .args(["--profile", "--profile-nodes", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for role in [
        "memory at the planned peak",
        "weights",
        "gradients",
        "optimizer state",
        "saved activations",
        "workspace",
        "process peak RSS",
    ] {
        assert!(err.contains(role), "{role}: {err}");
    }
}

#[test]
fn recompute_attention_without_an_attention_says_so() {
    let model = root().join("examples/models/mlp_digits.onnx");
    let data = root().join("examples/data/digits_train.npz");
    let out = fp8c()
        .arg("train")
        .arg(&model)
        .arg("--data")
        .arg(&data)
        .args(["--labels", "y", "--steps", "1", "--quiet"])
        .args(["--recompute", "attention"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no unfused attention"), "{err}");
}

#[test]
fn compile_reports_the_memory_of_a_training_graph_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = fp8c()
        .args(["train", &llama(), "--text", &text()])
        .args(["--seq-len", "32", "--batch", "2", "--steps", "1", "--quiet"])
        .args(["--precision", "f32", "--print-after", "autodiff"])
        .output()
        .unwrap();
    assert!(out.status.success());
    // The IR printed after the autodiff pass: the training step as text.
    let err = String::from_utf8(out.stderr).unwrap();
    let ir: String = err
        .lines()
        .skip_while(|l| !l.starts_with("// ----- IR after autodiff"))
        .skip(1)
        .take_while(|l| !l.starts_with("fp8c train"))
        .map(|l| format!("{l}\n"))
        .collect();
    let step = dir.path().join("step.fp8ir");
    std::fs::write(&step, ir).unwrap();
    let report = |model: &Path, extra: &[&str]| -> Value {
        let out = fp8c()
            .arg("compile")
            .arg(model)
            .args(["--precision", "f32", "--report=json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let r = report(&step, &[]);
    let rows: Vec<&str> = r["memory"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        rows[..5],
        [
            "weights",
            "gradients",
            "optimizer state",
            "saved activations",
            "workspace"
        ]
    );
    assert!(r["memory"]["total_bytes"].as_u64().unwrap() > 0);
    // An inference graph's report is as it was: no memory section.
    let inference = report(Path::new(&llama()), &["--input-shape", "input_ids=1x8"]);
    assert!(inference.get("memory").is_none(), "{inference}");
}

#[test]
fn sharded_optimizer_with_narrow_moments_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = fp8c()
        .args(["train", &llama(), "--text", &text()])
        .args(["--seq-len", "32", "--steps", "1", "--quiet"])
        .args(["--shard", "optimizer", "--optimizer-state", "bf16"])
        .arg("--out")
        .arg(dir.path().join("out.onnx"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--shard optimizer") && err.contains("--optimizer-state bf16"),
        "{err}"
    );
}
