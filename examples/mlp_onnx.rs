//! Train an MLP classifier given as an ONNX file (`examples/models/mlp_digits.onnx`, made by
//! `scripts/make_mlp_example.py`) on the handwritten-digits data in f32, bf16 and FP8 (HYBRID,
//! delayed scaling), then measure test accuracy with the trained weights.
//!
//! ```sh
//! cargo run --release --example mlp_onnx -- --steps 1000
//! ```
//!
//! The same as `fp8c train examples/models/mlp_digits.onnx --data examples/data/digits_train.npz
//! --labels y --precision fp8 --min-fp8-flops 0 ...` (whose `--save-onnx` writes the trained
//! model back for `fp8c run` and onnxruntime), but through the library API. The last line is
//! `final_loss f32=… bf16=… fp8=…` (mean of the last 50 steps), then the test accuracies.

use fp8c_session::plot;

use fp8c_ir::{Graph, Tensor};
use fp8c_passes::autodiff::{Loss, LrSchedule, OptimizerSpec, TrainSpec};
use fp8c_passes::precision::PrecisionMode;
use fp8c_passes::{PassCx, PassManager, PassOptions};
use fp8c_runtime::{Backend, CpuBackend};
use fp8c_session::Trainer;
use std::collections::BTreeMap;
use std::error::Error;
use std::io::Read;
use std::path::{Path, PathBuf};

type Res<T> = Result<T, Box<dyn Error>>;

/// Reads the arrays of an .npz written by NumPy (f32 / i64 little-endian, C order); a small
/// reader for this example's own files (`fp8c train` has the general one).
fn read_npz(path: &Path) -> Res<BTreeMap<String, Tensor>> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut zip = zip::ZipArchive::new(f)?;
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut e = zip.by_index(i)?;
        let key = e.name().trim_end_matches(".npy").to_string();
        let mut data = Vec::new();
        e.read_to_end(&mut data)?;
        out.insert(key, parse_npy(&data)?);
    }
    Ok(out)
}

fn parse_npy(b: &[u8]) -> Res<Tensor> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err("not a .npy array".into());
    }
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen])?;
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .ok_or("no shape")?;
    let shape: Vec<u64> = shape_txt
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let data = b[10 + hlen..].to_vec();
    let dtype = if header.contains("'<f4'") {
        fp8c_ir::DType::F32
    } else if header.contains("'<i8'") {
        fp8c_ir::DType::I64
    } else {
        return Err(format!("unsupported dtype in {header}").into());
    };
    Ok(Tensor::from_bytes(dtype, shape, data)?)
}

fn rows(t: &Tensor, idx: &[usize]) -> Tensor {
    let row = t.bytes().len() / t.shape()[0] as usize;
    let mut b = Vec::with_capacity(row * idx.len());
    for &i in idx {
        b.extend_from_slice(&t.bytes()[i * row..][..row]);
    }
    let mut shape = t.shape().to_vec();
    shape[0] = idx.len() as u64;
    Tensor::from_bytes(t.dtype(), shape, b).expect("rows")
}

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let train = read_npz(&root.join("examples/data/digits_train.npz"))?;
    let test = read_npz(&root.join("examples/data/digits_test.npz"))?;
    let test_labels = parse_npy(&std::fs::read(
        root.join("examples/data/digits_test_labels.npy"),
    )?)?;
    let (x, y) = (&train["x"], &train["y"]);
    let n = x.shape()[0] as usize;
    let batch = 32u64;
    std::fs::create_dir_all(&out)?;

    let model = root.join("examples/models/mlp_digits.onnx");
    let imported = fp8c_onnx::load_model(&model, &Default::default())?;
    let bind = |b: u64| -> Res<Graph> {
        let mut g = imported.graph.clone();
        let shapes = BTreeMap::from([("x".to_string(), vec![b, 64])]);
        fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes)?;
        g.reinfer()?;
        Ok(g)
    };
    let forward = bind(batch)?;
    let mut spec = TrainSpec::new("logits", Loss::CrossEntropy);
    spec.optimizer = Some(OptimizerSpec {
        schedule: LrSchedule::WarmupCosine {
            warmup: 20,
            total: steps,
            min_lr: 1e-4,
        },
        ..OptimizerSpec::adamw(2e-3)
    });

    let mut finals = Vec::new();
    let mut series = Vec::new();
    let mut accuracies = Vec::new();
    for p in ["f32", "bf16", "fp8"] {
        let mode: PrecisionMode = p.parse()?;
        let mut options = PassOptions::default();
        options.policy.mode = mode;
        options.policy.min_fp8_flops = 0;
        let mut t = Trainer::new(&forward, &spec, options.clone(), &CpuBackend)?;
        let mut losses = Vec::new();
        let mut order: Vec<usize> = (0..n).collect();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..steps {
            let start = (step * batch) as usize % n;
            if start < batch as usize {
                // A new epoch: reshuffle (xorshift Fisher–Yates; the same for every precision).
                for i in (1..n).rev() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    order.swap(i, (seed % (i as u64 + 1)) as usize);
                }
            }
            let idx: Vec<usize> = (0..batch as usize)
                .map(|k| order[(start + k) % n])
                .collect();
            let inputs = BTreeMap::from([
                ("x".to_string(), rows(x, &idx)),
                ("labels".to_string(), rows(y, &idx)),
            ]);
            losses.push(t.step(&inputs)?.loss);
        }
        let fin = losses[losses.len().saturating_sub(50)..]
            .iter()
            .sum::<f64>()
            / losses.len().min(50) as f64;
        // Test accuracy: the forward graph with the trained weights, in the same precision
        // (FP8 inference with current scaling: a fresh model has no amax history).
        let mut g = bind(test["x"].shape()[0])?;
        for (k, w) in t.weights() {
            g.set_weight(&k, w)?;
        }
        let mut eval_opts = options;
        eval_opts.recipe = fp8c_core::Recipe::Current(Default::default());
        PassManager::default().run(&mut g, &mut PassCx::new(eval_opts))?;
        let program = fp8c_runtime::lower(&g)?;
        let mut exe = CpuBackend.prepare(&program, g.weights())?;
        let logits = &exe.run(&BTreeMap::from([("x".to_string(), test["x"].clone())]))?["logits"];
        let lv = logits.to_f64_vec()?;
        let labels = test_labels.to_i64_vec()?;
        let hits = labels
            .iter()
            .enumerate()
            .filter(|&(r, &l)| {
                let row = &lv[r * 10..][..10];
                (0..10).fold(0, |b, j| if row[j] > row[b] { j } else { b }) as i64 == l
            })
            .count();
        let acc = hits as f64 / labels.len() as f64 * 100.0;
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
    plot::plot(
        &series,
        "MLP (ONNX) on digits: training loss",
        10,
        &out.join("loss.svg"),
    )?;
    println!("wrote {}", out.join("loss.svg").display());
    println!("final_loss {}", finals.join(" "));
    println!("test_accuracy {}", accuracies.join(" "));
    Ok(())
}
