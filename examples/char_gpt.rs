//! A character-level GPT trained on Shakespeare in f32, bf16 and FP8 (HYBRID, delayed
//! scaling), with the three loss curves on one plot.
//!
//! ```sh
//! cargo run --release --example char_gpt -- --steps 500
//! ```
//!
//! The model is built with fp8c's IR builder, as another compiler would hand fp8c a graph:
//! token and position embeddings, 2 pre-LN transformer blocks (d_model 128, 4 heads, causal
//! attention through a constant mask, tanh-GELU MLP of width 512), a final LayerNorm and an
//! untied LM head, context 64. Training uses `fp8c_session::Trainer` on the CPU
//! reference backend: AdamW with linear warmup and cosine decay, the same initial weights and
//! the same batches for every precision. The vocabulary (the text's characters) is padded to a
//! multiple of 16 so the LM head meets the FP8 GEMM shape rule.
//!
//! Options: `--steps N` (500), `--batch B` (16), `--lr X` (2e-3), `--seed S` (0),
//! `--precisions f32,bf16,fp8`, `--out DIR` (target/char_gpt): per-precision CSV logs and
//! `loss.svg`. The last line is `final_loss f32=… bf16=… fp8=…`, each the mean training loss
//! of the last 50 steps.

use fp8c_ir::{DType, GeluApprox, Graph, Op, Tensor, TensorType, Value};
use fp8c_passes::autodiff::{Loss, LrSchedule, Optimizer, OptimizerSpec, StateDtype, TrainSpec};
use fp8c_session::{CompileOptions, Device, Model, PrecisionMode, Recipe, Trainer, plot};
use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

type Res<T> = Result<T, Box<dyn Error>>;

/// The model's shape.
#[derive(Clone, Copy)]
struct Config {
    vocab: u64,
    context: u64,
    d_model: u64,
    heads: u64,
    layers: u64,
    batch: u64,
}

/// A deterministic xorshift generator (no dependency; reproducible across machines).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03 | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Builds the forward graph: input `tokens` i64[B, T] → output `logits` f32[B, T, V].
struct Builder {
    g: Graph,
    rng: Rng,
}

impl Builder {
    fn param(&mut self, name: &str, dims: &[u64], init: Init) -> Res<Value> {
        let n = dims.iter().product::<u64>() as usize;
        let v: Vec<f32> = match init {
            Init::Normal(std) => (0..n).map(|_| (self.rng.normal() * std) as f32).collect(),
            Init::Const(c) => vec![c; n],
        };
        let t = Tensor::from_f32(dims.to_vec(), &v);
        Ok(self.g.add_param(name, t.ty(), Some(t))?)
    }
    fn op(&mut self, name: &str, op: Op, ins: &[Value]) -> Res<Value> {
        Ok(self.g.add_node(name, op, ins)?[0])
    }
    fn constant(&mut self, name: &str, t: Tensor) -> Res<Value> {
        self.op(name, Op::Constant { value: t }, &[])
    }
    fn shape(&mut self, name: &str, dims: &[i64]) -> Res<Value> {
        self.constant(name, Tensor::from_i64(vec![dims.len() as u64], dims))
    }
    fn linear(&mut self, name: &str, x: Value, din: u64, dout: u64, std: f64) -> Res<Value> {
        let w = self.param(&format!("{name}.weight"), &[din, dout], Init::Normal(std))?;
        let b = self.param(&format!("{name}.bias"), &[dout], Init::Const(0.0))?;
        let y = self.op(name, Op::MatMul, &[x, w])?;
        self.op(&format!("{name}.add_bias"), Op::Add, &[y, b])
    }
    fn layer_norm(&mut self, name: &str, x: Value, d: u64) -> Res<Value> {
        let g = self.param(&format!("{name}.weight"), &[d], Init::Const(1.0))?;
        let b = self.param(&format!("{name}.bias"), &[d], Init::Const(0.0))?;
        self.op(
            name,
            Op::LayerNormalization {
                axis: -1,
                epsilon: 1e-5,
            },
            &[x, g, b],
        )
    }
}

#[derive(Clone, Copy)]
enum Init {
    Normal(f64),
    Const(f32),
}

fn build_gpt(c: Config, seed: u64) -> Res<Graph> {
    let (b, t, d, h) = (c.batch, c.context, c.d_model, c.heads);
    let dh = d / h;
    let mut m = Builder {
        g: Graph::new("char_gpt"),
        rng: Rng::new(seed),
    };
    let std = 0.02;
    let proj_std = 0.02 / (2.0 * c.layers as f64).sqrt();
    let tokens =
        m.g.add_input("tokens", TensorType::fixed(DType::I64, &[b, t]))?;
    let wte = m.param("wte", &[c.vocab, d], Init::Normal(std))?;
    let wpe = m.param("wpe", &[t, d], Init::Normal(std))?;
    let tok = m.op("embed", Op::Gather { axis: 0 }, &[wte, tokens])?;
    let mut x = m.op("embed.pos", Op::Add, &[tok, wpe])?;
    // Causal mask: position i attends to j ≤ i.
    let causal: Vec<bool> = (0..t * t).map(|k| k % t <= k / t).collect();
    let mask = m.constant("causal_mask", Tensor::from_bool(vec![t, t], &causal))?;
    let neg = m.constant("mask_value", Tensor::scalar_f32(-1e9))?;
    let inv_sqrt = m.constant("attn_scale", Tensor::scalar_f32(1.0 / (dh as f32).sqrt()))?;
    let heads_shape = m.shape("heads_shape", &[b as i64, t as i64, h as i64, dh as i64])?;
    let merge_shape = m.shape("merge_shape", &[b as i64, t as i64, d as i64])?;
    for l in 0..c.layers {
        let p = format!("h{l}");
        let hn = m.layer_norm(&format!("{p}.ln_1"), x, d)?;
        let qkv = m.linear(&format!("{p}.attn.c_attn"), hn, d, 3 * d, std)?;
        let parts = m.g.add_node(
            &format!("{p}.attn.split"),
            Op::Split {
                axis: 2,
                split: vec![d as i64; 3],
            },
            &[qkv],
        )?;
        let split_heads = |m: &mut Builder, v: Value, which: &str, perm: Vec<i64>| -> Res<Value> {
            let r = m.op(
                &format!("{p}.attn.{which}.heads"),
                Op::Reshape { allowzero: false },
                &[v, heads_shape],
            )?;
            m.op(&format!("{p}.attn.{which}.t"), Op::Transpose { perm }, &[r])
        };
        let q = split_heads(&mut m, parts[0], "q", vec![0, 2, 1, 3])?; // [B, H, T, dh]
        let k = split_heads(&mut m, parts[1], "k", vec![0, 2, 3, 1])?; // [B, H, dh, T]
        let v = split_heads(&mut m, parts[2], "v", vec![0, 2, 1, 3])?;
        let s = m.op(&format!("{p}.attn.scores"), Op::MatMul, &[q, k])?;
        let s = m.op(&format!("{p}.attn.scaled"), Op::Mul, &[s, inv_sqrt])?;
        let s = m.op(&format!("{p}.attn.masked"), Op::Where, &[mask, s, neg])?;
        let a = m.op(&format!("{p}.attn.softmax"), Op::Softmax { axis: -1 }, &[s])?;
        let y = m.op(&format!("{p}.attn.pv"), Op::MatMul, &[a, v])?;
        let y = m.op(
            &format!("{p}.attn.merge.t"),
            Op::Transpose {
                perm: vec![0, 2, 1, 3],
            },
            &[y],
        )?;
        let y = m.op(
            &format!("{p}.attn.merge"),
            Op::Reshape { allowzero: false },
            &[y, merge_shape],
        )?;
        let y = m.linear(&format!("{p}.attn.c_proj"), y, d, d, proj_std)?;
        x = m.op(&format!("{p}.attn.residual"), Op::Add, &[x, y])?;
        let hn = m.layer_norm(&format!("{p}.ln_2"), x, d)?;
        let f = m.linear(&format!("{p}.mlp.c_fc"), hn, d, 4 * d, std)?;
        let f = m.op(
            &format!("{p}.mlp.gelu"),
            Op::Gelu {
                approximate: GeluApprox::Tanh,
            },
            &[f],
        )?;
        let f = m.linear(&format!("{p}.mlp.c_proj"), f, 4 * d, d, proj_std)?;
        x = m.op(&format!("{p}.mlp.residual"), Op::Add, &[x, f])?;
    }
    let x = m.layer_norm("ln_f", x, d)?;
    let w = m.param("lm_head.weight", &[d, c.vocab], Init::Normal(std))?;
    let logits = m.op("lm_head", Op::MatMul, &[x, w])?;
    m.g.set_output("logits", logits)?;
    Ok(m.g)
}

/// Options from the command line.
struct Args {
    steps: u64,
    batch: u64,
    lr: f32,
    seed: u64,
    precisions: Vec<String>,
    out: PathBuf,
    data: PathBuf,
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        steps: 500,
        batch: 16,
        lr: 2e-3,
        seed: 0,
        precisions: vec!["f32".into(), "bf16".into(), "fp8".into()],
        out: PathBuf::from("target/char_gpt"),
        data: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/data/shakespeare.txt"
        )),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--steps" => a.steps = val()?.parse()?,
            "--batch" => a.batch = val()?.parse()?,
            "--lr" => a.lr = val()?.parse()?,
            "--seed" => a.seed = val()?.parse()?,
            "--precisions" => a.precisions = val()?.split(',').map(str::to_string).collect(),
            "--out" => a.out = val()?.into(),
            "--data" => a.data = val()?.into(),
            "-h" | "--help" => {
                println!(
                    "char_gpt [--steps N] [--batch B] [--lr X] [--seed S] [--precisions f32,bf16,fp8] [--out DIR] [--data FILE]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other} (try --help)").into()),
        }
    }
    if a.steps == 0 || a.batch == 0 {
        return Err("--steps and --batch must be ≥ 1".into());
    }
    Ok(a)
}

/// The batch of step `step`: `batch` random windows of the text, inputs and next characters.
fn batch_at(ids: &[i64], c: Config, seed: u64, step: u64) -> (Tensor, Tensor) {
    let mut rng = Rng::new(seed ^ (step + 1).wrapping_mul(0xA24B_AED4_963E_E407));
    let (b, t) = (c.batch as usize, c.context as usize);
    let mut x = Vec::with_capacity(b * t);
    let mut y = Vec::with_capacity(b * t);
    for _ in 0..b {
        let start = rng.below((ids.len() - t - 1) as u64) as usize;
        x.extend_from_slice(&ids[start..start + t]);
        y.extend_from_slice(&ids[start + 1..start + t + 1]);
    }
    let shape = vec![c.batch, c.context];
    (
        Tensor::from_i64(shape.clone(), &x),
        Tensor::from_i64(shape, &y),
    )
}

fn main() -> Res<()> {
    let a = parse_args()?;
    let text =
        std::fs::read_to_string(&a.data).map_err(|e| format!("{}: {e}", a.data.display()))?;
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    let ids: Vec<i64> = text
        .chars()
        .map(|ch| chars.binary_search(&ch).expect("in the vocabulary") as i64)
        .collect();
    let cfg = Config {
        vocab: (chars.len() as u64).div_ceil(16) * 16,
        context: 64,
        d_model: 128,
        heads: 4,
        layers: 2,
        batch: a.batch,
    };
    if ids.len() <= cfg.context as usize + 1 {
        return Err(format!("{}: the text is too short", a.data.display()).into());
    }
    std::fs::create_dir_all(&a.out)?;
    let forward = Model::from_graph(build_gpt(cfg, a.seed)?);
    println!(
        "char_gpt: {} characters, vocabulary {} (padded to {}), {} parameters, batch {}×{}, {} steps",
        ids.len(),
        chars.len(),
        cfg.vocab,
        forward
            .graph()
            .weights()
            .values()
            .map(|t| t.len())
            .sum::<usize>(),
        cfg.batch,
        cfg.context,
        a.steps
    );
    let warmup = (a.steps / 10).min(100);
    let mut spec = TrainSpec::new("logits", Loss::CrossEntropy);
    spec.optimizer = Some(OptimizerSpec {
        kind: Optimizer::AdamW {
            beta1: 0.9,
            beta2: 0.99,
            epsilon: 1e-8,
        },
        lr: a.lr,
        weight_decay: 0.1,
        schedule: LrSchedule::WarmupCosine {
            warmup,
            total: a.steps,
            min_lr: a.lr / 10.0,
        },
        decay_vectors: false,
        clip_grad_norm: None,
        state: StateDtype::F32,
    });

    let mut finals = Vec::new();
    let mut series = Vec::new();
    for p in &a.precisions {
        let mode: PrecisionMode = p.parse()?;
        let options = CompileOptions::precision(mode)
            // Every weight GEMM in FP8 (the default threshold keeps GEMMs this small high).
            .min_fp8_flops(0)
            .recipe(Recipe::default()); // delayed scaling, HYBRID, history 1024, max
        let t0 = Instant::now();
        let mut trainer = Trainer::for_model(&forward, &spec, &options, Device::Cpu)?;
        let log_path = a.out.join(format!("{p}.csv"));
        let mut log = std::io::BufWriter::new(std::fs::File::create(&log_path)?);
        writeln!(log, "step,loss,lr,applied,elapsed_s")?;
        let mut losses = Vec::with_capacity(a.steps as usize);
        let started = Instant::now();
        for step in 0..a.steps {
            let (x, y) = batch_at(&ids, cfg, a.seed, step);
            let inputs = BTreeMap::from([("tokens".to_string(), x), ("labels".to_string(), y)]);
            let r = trainer.step(&inputs)?;
            let el = started.elapsed().as_secs_f64();
            writeln!(
                log,
                "{step},{},{},{},{el:.3}",
                r.loss,
                r.lr,
                u8::from(r.applied)
            )?;
            losses.push(r.loss);
            if step % 50 == 0 || step + 1 == a.steps {
                println!(
                    "  {p:>4} step {step:>4}  loss {:.4}  lr {:.2e}  {:.2} steps/s",
                    r.loss,
                    r.lr,
                    (step + 1) as f64 / el
                );
            }
        }
        log.flush()?;
        let tail = losses.len().min(50);
        let fin = losses[losses.len() - tail..].iter().sum::<f64>() / tail as f64;
        println!(
            "  {p}: final loss {fin:.4} (mean of the last {tail} steps), {} skipped steps, {:.1} s ({:.1} s to compile)",
            trainer.skipped_steps(),
            t0.elapsed().as_secs_f64(),
            (started - t0).as_secs_f64()
        );
        finals.push((p.clone(), fin));
        series.push(plot::Series {
            label: match p.as_str() {
                "fp8" => "fp8 (HYBRID, delayed scaling)".to_string(),
                other => other.to_string(),
            },
            points: losses
                .iter()
                .enumerate()
                .map(|(i, &l)| (i as f64, l))
                .collect(),
        });
    }
    let svg = a.out.join("loss.svg");
    plot::plot(&series, "char GPT on Shakespeare: training loss", 10, &svg)?;
    println!("wrote {} and the per-precision CSV logs", svg.display());
    if let Some((_, base)) = finals.iter().find(|(p, _)| p == "f32") {
        for (p, l) in finals.iter().filter(|(p, _)| p != "f32") {
            println!("  {p} vs f32: {:+.2}%", (l - base) / base * 100.0);
        }
    }
    let line: Vec<String> = finals.iter().map(|(p, l)| format!("{p}={l:.4}")).collect();
    println!("final_loss {}", line.join(" "));
    Ok(())
}
