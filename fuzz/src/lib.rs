//! Mutation fuzzing of fp8c's parsers of untrusted files, in process: every target takes
//! bytes, feeds them to one parser through its public API, and must return (an `Ok` or an
//! `Err`), never panic or hang. Seeds are small valid inputs built here plus the corpus in
//! `fuzz/corpus/<target>/` (regressions: every input that once broke a parser is kept there).
//!
//! `cargo test -p fp8c-fuzz` runs the corpus and a few thousand mutations per target;
//! `cargo run --release -p fp8c-fuzz -- --runs 100000` is the long run (BENCHMARKS.md).

use std::io::Cursor;
use std::path::Path;
use std::time::{Duration, Instant};

/// One parser under test.
pub struct Target {
    /// Its name (and its corpus folder).
    pub name: &'static str,
    /// Valid inputs to mutate from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Parses the bytes; the result is ignored (only panics and hangs count).
    pub run: fn(&[u8]),
}

/// Every target.
pub fn targets() -> Vec<Target> {
    vec![
        Target {
            name: "onnx",
            seeds: onnx_seeds,
            run: run_onnx,
        },
        Target {
            name: "ir",
            seeds: ir_seeds,
            run: run_ir,
        },
        Target {
            name: "sidecar",
            seeds: sidecar_seeds,
            run: run_sidecar,
        },
        Target {
            name: "npy",
            seeds: npy_seeds,
            run: run_npy,
        },
        Target {
            name: "npz",
            seeds: npz_seeds,
            run: run_npz,
        },
        Target {
            name: "toml",
            seeds: toml_seeds,
            run: run_toml,
        },
        Target {
            name: "safetensors",
            seeds: safetensors_seeds,
            run: run_safetensors,
        },
        Target {
            name: "checkpoint-meta",
            seeds: meta_seeds,
            run: run_meta,
        },
        Target {
            name: "checkpoint-lock",
            seeds: lock_seeds,
            run: run_lock,
        },
    ]
}

const IR: &str = "graph @mlp(%x: f32[batch,4]) params(%w: f32[4,3], %b: f32[3]) {\n  \
%0: f32[batch,3] = matmul %x, %w  # fc\n  \
%1: f32[batch,3] = add %0, %b  # bias\n  \
%2: f32[batch,3] = gelu %1 approximate=tanh  # act\n  \
%3: f32[batch,3] = softmax %2 axis=-1  # sm\n  \
return %3 as \"y\"\n}\n";

fn ir_graph() -> fp8c_ir::Graph {
    let mut g = fp8c_ir::text::parse(IR).expect("the seed IR parses");
    let w = fp8c_ir::Tensor::from_f32(vec![4, 3], &[0.5; 12]);
    let b = fp8c_ir::Tensor::from_f32(vec![3], &[0.25; 3]);
    g.set_weight("w", w).expect("w");
    g.set_weight("b", b).expect("b");
    g
}

fn onnx_seeds() -> Vec<Vec<u8>> {
    use fp8c_ir::DType;
    use fp8c_onnx::builder::ModelBuilder;
    let mlp = ModelBuilder::new()
        .input(
            "x",
            DType::F32,
            &[fp8c_onnx::builder::dim("batch"), 4.into()],
        )
        .initializer_f32("w", &[4, 3], &[0.5; 12])
        .initializer_f32("b", &[3], &[0.25; 3])
        .node("Gemm", &["x", "w", "b"], &["h"])
        .node("Relu", &["h"], &["r"])
        .node("Softmax", &["r"], &["y"])
        .attr_int("axis", -1)
        .output_untyped("y");
    let reshape = ModelBuilder::new()
        .opset(18)
        .input("x", DType::F32, &[2.into(), 6.into()])
        .input("s", DType::I64, &[2.into()])
        .node("Reshape", &["x", "s"], &["y"])
        .node("ReduceSum", &["y"], &["z"])
        .output_untyped("z");
    vec![mlp.to_bytes(), reshape.to_bytes()]
}

fn run_onnx(b: &[u8]) {
    let _ = fp8c_onnx::inspect_bytes(b);
    let _ = fp8c_onnx::import_bytes(b, None, &Default::default());
    // The streaming reader of `load_model` works from a file.
    let dir = tempfile::tempdir().expect("a temporary folder");
    let p = dir.path().join("m.onnx");
    if std::fs::write(&p, b).is_ok() {
        let _ = fp8c_onnx::load_model(&p, &Default::default());
    }
}

fn ir_seeds() -> Vec<Vec<u8>> {
    vec![IR.as_bytes().to_vec()]
}

fn run_ir(b: &[u8]) {
    if let Ok(text) = std::str::from_utf8(b)
        && let Ok(g) = fp8c_ir::text::parse(text)
    {
        let _ = fp8c_ir::verify(&g);
        let _ = fp8c_ir::text::print(&g);
    }
}

fn sidecar_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    fp8c_ir::text::write_weights(&ir_graph(), &mut out).expect("weights write");
    vec![out]
}

fn run_sidecar(b: &[u8]) {
    let mut g = fp8c_ir::text::parse(IR).expect("the seed IR parses");
    let _ = fp8c_ir::text::read_weights(&mut g, &mut Cursor::new(b));
}

fn npy_seeds() -> Vec<Vec<u8>> {
    let t = fp8c_ir::Tensor::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let (b, _) = fp8c_session::npy::npy_bytes(&t).expect("npy");
    let i = fp8c_ir::Tensor::from_i64(vec![3], &[1, -2, 3]);
    let (c, _) = fp8c_session::npy::npy_bytes(&i).expect("npy");
    vec![b, c]
}

fn run_npy(b: &[u8]) {
    let _ = fp8c_session::npy::tensor_from_npy(b);
}

fn npz_seeds() -> Vec<Vec<u8>> {
    let t = fp8c_ir::Tensor::from_f32(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let i = fp8c_ir::Tensor::from_i64(vec![2], &[7, 8]);
    let (b, _) = fp8c_session::npy::npz_bytes(&[("x", &t), ("y", &i)]).expect("npz");
    vec![b]
}

fn run_npz(b: &[u8]) {
    let _ = fp8c_session::npy::read_npz_from(Cursor::new(b), Path::new("fuzz.npz"));
}

fn toml_seeds() -> Vec<Vec<u8>> {
    vec![
        b"[recipe]\nkind = \"delayed\"\namax_history_len = 16\namax_compute_algo = \"max\"\nmargin = 0.0\nfp8_format = \"HYBRID\"\n".to_vec(),
        b"[recipe]\nkind = \"current\"\nfp8_format = \"E4M3\"\n".to_vec(),
    ]
}

fn run_toml(b: &[u8]) {
    if let Ok(text) = std::str::from_utf8(b) {
        let _ = fp8c_session::parse_recipe_config(text);
    }
}

fn safetensors_seeds() -> Vec<Vec<u8>> {
    let mut m = std::collections::BTreeMap::new();
    m.insert(
        "a".to_string(),
        fp8c_ir::Tensor::from_f32(vec![2], &[1.0, 2.0]),
    );
    m.insert(
        "q".to_string(),
        fp8c_ir::Tensor::from_bytes(fp8c_ir::DType::F8E4M3, vec![3], vec![0x38, 0x40, 0x7e])
            .expect("fp8"),
    );
    vec![fp8c_session::safetensors_io::to_bytes(&m, Default::default()).expect("safetensors")]
}

fn run_safetensors(b: &[u8]) {
    let _ = fp8c_session::safetensors_io::parse(b);
}

fn meta_seeds() -> Vec<Vec<u8>> {
    let m = fp8c_session::train::checkpoint::Meta::new("m.onnx", "fp8", "ce:y", 0, 16);
    vec![serde_json::to_vec_pretty(&m).expect("json")]
}

fn run_meta(b: &[u8]) {
    let _ = serde_json::from_slice::<fp8c_session::train::checkpoint::Meta>(b);
}

fn lock_seeds() -> Vec<Vec<u8>> {
    let me = fp8c_session::train::checkpoint::LockInfo::current();
    vec![
        me.text().into_bytes(),
        br#"{"format":"fp8c-checkpoint-lock","pid":1}"#.to_vec(),
    ]
}

/// A checkpoint directory's lock file, as another process reads it to say who holds it.
fn run_lock(b: &[u8]) {
    let _ = fp8c_session::train::checkpoint::LockInfo::parse(&String::from_utf8_lossy(b));
}

/// A deterministic xorshift generator.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// One mutation of `input`: bit flips, interesting bytes, insertions, deletions, truncation,
/// duplication, or a splice with `other`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let n = b.len();
        match rng.below(8) {
            0 if n > 0 => {
                let i = rng.below(n);
                b[i] ^= 1 << rng.below(8);
            }
            1 if n > 0 => {
                let i = rng.below(n);
                b[i] = [0u8, 0xff, 0x7f, 0x80, 0x01, b'9', b'-', b'\n'][rng.below(8)];
            }
            2 => {
                let i = rng.below(n + 1);
                let k = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..k).map(|_| rng.next_u64() as u8).collect();
                b.splice(i..i, bytes);
            }
            3 if n > 0 => {
                let i = rng.below(n);
                let k = 1 + rng.below((n - i).min(64));
                b.drain(i..i + k);
            }
            4 => b.truncate(rng.below(n + 1)),
            5 if n > 0 => {
                let i = rng.below(n);
                let k = 1 + rng.below((n - i).min(64));
                let piece = b[i..i + k].to_vec();
                let j = rng.below(n + 1);
                b.splice(j..j, piece);
            }
            6 if !other.is_empty() => {
                let cut = rng.below(n + 1);
                let from = rng.below(other.len());
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            _ => {
                // A varint-like large number, where length fields live.
                let i = rng.below(n + 1);
                b.splice(i..i, [0xff, 0xff, 0xff, 0xff, 0x0f]);
            }
        }
    }
    b
}

/// What a fuzz run of one target saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Inputs run.
    pub runs: u64,
    /// Inputs that panicked (their index and message).
    pub panics: Vec<(u64, String)>,
    /// Inputs slower than the hang limit (index and time).
    pub slow: Vec<(u64, Duration)>,
    /// The slowest input.
    pub max_time: Duration,
}

/// The time one input may take before it counts as a hang.
pub const HANG: Duration = Duration::from_secs(2);

/// Runs `target` on its corpus (`corpus_dir/<name>/*`), its seeds and `runs` mutations.
pub fn fuzz(target: &Target, corpus_dir: &Path, runs: u64, seed: u64) -> Report {
    let mut inputs = (target.seeds)();
    if let Ok(rd) = std::fs::read_dir(corpus_dir.join(target.name)) {
        let mut files: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if let Ok(b) = std::fs::read(&f) {
                inputs.push(b);
            }
        }
    }
    let mut report = Report::default();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut rng = Rng::new(seed);
    let total = inputs.len() as u64 + runs;
    for k in 0..total {
        let case = if (k as usize) < inputs.len() {
            inputs[k as usize].clone()
        } else {
            let a = &inputs[rng.below(inputs.len())];
            let o = &inputs[rng.below(inputs.len())];
            mutate(&mut rng, a, o)
        };
        let start = Instant::now();
        let r = std::panic::catch_unwind(|| (target.run)(&case));
        let took = start.elapsed();
        report.runs += 1;
        report.max_time = report.max_time.max(took);
        if took > HANG {
            report.slow.push((k, took));
        }
        if let Err(p) = r {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            report.panics.push((k, msg));
            // Keep the input: a new regression case for the corpus.
            let dir = corpus_dir.join(target.name);
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(dir.join(format!("crash-{seed}-{k}")), &case);
        }
    }
    std::panic::set_hook(hook);
    report
}

/// Peak resident memory of this process so far, in KiB (Linux `VmHWM`).
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
