//! Train an MLP classifier given as an ONNX file (`examples/models/mlp_digits.onnx`, made by
//! `scripts/fixtures/make_mlp_example.py`) on the handwritten-digits data in f32, bf16 and FP8
//! (HYBRID, delayed scaling), then measure test accuracy with the trained weights.
//!
//! ```sh
//! cargo run --release --example mlp_onnx -- --steps 1000
//! ```
//!
//! The same as `fp8c train examples/models/mlp_digits.onnx --data examples/data/digits_train.npz
//! --labels y --precision fp8 --min-fp8-flops 0 ...` (whose `--save-onnx` writes the trained
//! model back for `fp8c run` and onnxruntime), but through the library API, `fp8c_session`:
//! the same data checks, the same batches (they depend only on seed and step). The last lines
//! are `final_loss f32=… bf16=… fp8=…` (mean of the last 50 steps) and the test accuracies.

use fp8c_session::train::{DataOptions, Dataset, ScheduleKind, TrainOptions, accuracy};
use fp8c_session::{
    CompileOptions, Device, Model, PrecisionMode, Recipe, Trainer, npy, plot, precision_name,
};
use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

type Res<T> = Result<T, Box<dyn Error>>;

fn main() -> Res<()> {
    let mut steps = 1000u64;
    let mut out = PathBuf::from("target/mlp_onnx");
    let mut it = std::env::args().skip(1);
    while let Some(f) = it.next() {
        match f.as_str() {
            "--steps" => steps = it.next().ok_or("--steps N")?.parse()?,
            "--out" => out = it.next().ok_or("--out DIR")?.into(),
            other => return Err(format!("unknown option {other}").into()),
        }
    }
    let (batch, seed) = (32u64, 0u64);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = Model::load(root.join("examples/models/mlp_digits.onnx"))?;
    let mut options = TrainOptions::new("logits");
    options.lr = 2e-3;
    options.schedule = ScheduleKind::Cosine;
    options.warmup = 20;
    options.steps = steps;
    options.min_lr = Some(1e-4);
    let data_opts = DataOptions {
        inputs: BTreeMap::new(),
        labels: "y".into(),
        loss: options.loss,
        batch,
    };
    let data = Dataset::load(
        &root.join("examples/data/digits_train.npz"),
        &model,
        &data_opts,
    )?;
    let forward = data.forward_model(&model, batch, "logits")?;
    let spec = options.spec();
    let test_x = npy::read_npz(&root.join("examples/data/digits_test.npz"))?
        .remove(0)
        .1;
    let test_labels = npy::read_npy(&root.join("examples/data/digits_test_labels.npy"))?;
    std::fs::create_dir_all(&out)?;

    let mut finals = Vec::new();
    let mut series = Vec::new();
    let mut accuracies = Vec::new();
    for mode in [PrecisionMode::F32, PrecisionMode::Bf16, PrecisionMode::Fp8] {
        let p = precision_name(mode);
        // Training: delayed scaling (TransformerEngine's default recipe).
        let opts = CompileOptions::precision(mode)
            .recipe(fp8c_session::default_recipe(
                fp8c_session::Purpose::Training,
            ))
            .min_fp8_flops(0);
        let mut t = Trainer::for_model(&forward, &spec, &opts, Device::Cpu)?;
        let mut losses = Vec::new();
        for step in 0..steps {
            let feed = data.batch(batch, seed, step).feed(&spec);
            losses.push(t.step(&feed)?.loss);
        }
        let tail = losses.len().min(50);
        let fin = losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64;
        // Test accuracy: the model with the trained weights, in the same precision (FP8
        // inference with current scaling: a fresh model has no amax history).
        let mut trained = model.clone();
        for (k, w) in t.weights() {
            trained.graph_mut().set_weight(&k, w)?;
        }
        let eval = opts
            .input_shape("x", test_x.shape())
            .recipe(Recipe::Current(Default::default()));
        let mut runner = trained.compile(&eval)?.prepare(Device::Cpu)?;
        let logits = &runner.run(&BTreeMap::from([("x".to_string(), test_x.clone())]))?["logits"];
        let acc = accuracy(logits, &test_labels).ok_or("logits do not fit the labels")? * 100.0;
        println!(
            "  {p:>4}: final loss {fin:.4}, test accuracy {acc:.2}% ({} skipped steps)",
            t.skipped_steps()
        );
        finals.push(format!("{p}={fin:.4}"));
        accuracies.push(format!("{p}={acc:.2}%"));
        series.push(plot::Series {
            label: p.to_string(),
            points: losses
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as f64, l))
                .collect(),
        });
    }
    let svg = out.join("loss.svg");
    plot::plot(&series, "MLP (ONNX) on digits: training loss", 10, &svg)?;
    println!("wrote {}", svg.display());
    println!("final_loss {}", finals.join(" "));
    println!("test_accuracy {}", accuracies.join(" "));
    Ok(())
}
