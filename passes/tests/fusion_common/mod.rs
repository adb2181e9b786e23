//! Shared by the fusion tests: compile a graph with or without fusion, run it for a few steps
//! on the CPU backend, and compare results bit for bit.

#![allow(dead_code)]

use fp8c_core::{CurrentScaling, DelayedScaling, Recipe};
use fp8c_ir::{DType, Graph, Op, Tensor, interface_name};
use fp8c_passes::precision::PolicyOptions;
use fp8c_passes::{PassCx, PassManager, PassOptions};
use fp8c_runtime::{Backend, CpuBackend};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Delayed scaling with a short history (results do not depend on its length).
pub fn delayed() -> Recipe {
    Recipe::Delayed(DelayedScaling {
        amax_history_len: 16,
        ..Default::default()
    })
}

/// Current scaling.
pub fn current() -> Recipe {
    Recipe::Current(CurrentScaling::default())
}

/// Compiles `g` through the whole pipeline; every GEMM whose shapes allow it goes to FP8.
pub fn compile(g: &Graph, recipe: Recipe, fuse: bool) -> (Graph, PassCx) {
    let mut g = g.clone();
    let options = PassOptions {
        recipe,
        no_fuse: !fuse,
        policy: PolicyOptions {
            min_fp8_flops: Some(0),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut cx = PassCx::new(options);
    PassManager::default()
        .run(&mut g, &mut cx)
        .unwrap_or_else(|e| panic!("compile (fuse={fuse}): {e}"));
    (g, cx)
}

/// What one step gives: the outputs and the state after it.
pub type StepResult = (BTreeMap<String, Tensor>, BTreeMap<String, Tensor>);

/// Runs `g` on the CPU backend, one step per input set.
pub fn run(g: &Graph, steps: &[BTreeMap<String, Tensor>]) -> Vec<StepResult> {
    let program = fp8c_runtime::lower(g).unwrap_or_else(|e| panic!("lower: {e}"));
    let mut exe = CpuBackend
        .prepare(&program, g.weights())
        .unwrap_or_else(|e| panic!("prepare: {e}"));
    steps
        .iter()
        .map(|inputs| {
            let out = exe.run(inputs).unwrap_or_else(|e| panic!("run: {e}"));
            (out, exe.state())
        })
        .collect()
}

/// Panics unless both runs gave the same bits for every output and state entry.
pub fn assert_bit_identical(what: &str, fused: &[StepResult], unfused: &[StepResult]) {
    assert_eq!(fused.len(), unfused.len());
    for (step, ((fo, fs), (uo, us))) in fused.iter().zip(unfused).enumerate() {
        assert_eq!(fo.keys().collect::<Vec<_>>(), uo.keys().collect::<Vec<_>>());
        for (name, t) in fo {
            let u = &uo[name];
            assert!(
                t.dtype() == u.dtype() && t.shape() == u.shape() && t.bytes() == u.bytes(),
                "{what}: step {step}: output \"{name}\" differs between fused and unfused"
            );
        }
        assert_eq!(fs.keys().collect::<Vec<_>>(), us.keys().collect::<Vec<_>>());
        for (name, t) in fs {
            assert!(
                t.bytes() == us[name].bytes(),
                "{what}: step {step}: state \"{name}\" differs between fused and unfused"
            );
        }
    }
}

/// A small deterministic generator (xorshift64*), so tests need no seed files.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-scale, scale).
    pub fn f32(&mut self, scale: f32) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    pub fn tensor(&mut self, dims: &[u64], scale: f32) -> Tensor {
        let n: u64 = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.f32(scale)).collect();
        Tensor::from_f32(dims.to_vec(), &v)
    }
}

/// Gives every param without data random f32 data.
pub fn fill_weights(g: &mut Graph, rng: &mut Rng) {
    for id in g.params().to_vec() {
        let name = interface_name(&g.node(id).op).to_string();
        if g.weights().contains_key(&name) {
            continue;
        }
        let ty = g.node(id).outputs[0].clone();
        let dims = ty.known_dims().expect("static params");
        let fan_in = dims.first().copied().unwrap_or(1).max(1) as f32;
        g.set_weight(&name, rng.tensor(&dims, 1.0 / fan_in.sqrt()))
            .unwrap();
    }
}

/// Random inputs for every graph input: floats in [-2, 2), integers in [0, `int_max`).
pub fn random_inputs(g: &Graph, rng: &mut Rng, int_max: i64) -> BTreeMap<String, Tensor> {
    let mut out = BTreeMap::new();
    for &id in g.inputs() {
        let n = g.node(id);
        let Op::Input { name } = &n.op else { continue };
        let dims = n.outputs[0].known_dims().expect("static inputs");
        let t = match n.outputs[0].dtype {
            DType::I64 => {
                let count: u64 = dims.iter().product();
                let v: Vec<i64> = (0..count)
                    .map(|_| (rng.next_u64() % int_max as u64) as i64)
                    .collect();
                Tensor::from_i64(dims, &v)
            }
            _ => rng.tensor(&dims, 2.0),
        };
        out.insert(name.clone(), t);
    }
    out
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fetched model (`scripts/fetch-models.sh NAME`), if it is there.
pub fn cached_model(name: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("FP8C_MODEL_CACHE")
        .map_or_else(|| repo_root().join(".cache"), PathBuf::from);
    let path = cache.join("models").join(format!("{name}.onnx"));
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipped: {} is not fetched (scripts/fetch-models.sh {name})",
            path.display()
        );
        None
    }
}

/// Loads an ONNX model with the given input shapes bound.
pub fn load_onnx(path: &Path, shapes: &[(&str, &[u64])]) -> Graph {
    let mut g = fp8c_onnx::load_model(path, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .graph;
    let shapes: BTreeMap<String, Vec<u64>> = shapes
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect();
    fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes).unwrap();
    g
}

/// Loads an IR text file with the given input shapes bound.
pub fn load_ir(path: &Path, shapes: &[(&str, &[u64])]) -> Graph {
    let text = std::fs::read_to_string(path).unwrap();
    let mut g = fp8c_ir::text::parse(&text).unwrap();
    let shapes: BTreeMap<String, Vec<u64>> = shapes
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect();
    fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes).unwrap();
    g
}
