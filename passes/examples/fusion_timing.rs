//! Compile time of the fusion pass (a measurement, not a test; BENCHMARKS.md records the
//! numbers):
//!
//! ```sh
//! cargo run --release -p fp8c-passes --example fusion_timing
//! ```
//!
//! Times the fetched MiniLM-L3 BERT and a synthetic stack of transformer FFN blocks with
//! over 1,000 nodes after scaling, compiled with and without fusion (median of 7 runs), and
//! the fusion pass alone on the scaled graph.

use fp8c_core::Recipe;
use fp8c_ir::{DType, Graph, Op, Tensor, TensorType};
use fp8c_passes::fusion::{Limits, fuse};
use fp8c_passes::{PassCx, PassManager, PassOptions};
use std::time::Instant;

fn median_ms(mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..7)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[3]
}

fn options(fuse: bool, stop_after: Option<&str>) -> PassOptions {
    PassOptions {
        recipe: Recipe::default(),
        no_fuse: !fuse,
        stop_after: stop_after.map(String::from),
        skip_verify: false,
        ..Default::default()
    }
}

fn compile(g: &Graph, o: PassOptions) -> Graph {
    let mut g = g.clone();
    let mut cx = PassCx::new(o);
    PassManager::default().run(&mut g, &mut cx).unwrap();
    g
}

/// `blocks` post-LN transformer FFN blocks on x [128, 256]: fc1 (256→1024) + bias, erf-GELU
/// as exported (div, erf, add, mul, mul), fc2 (1024→256) + bias, residual, LayerNorm.
fn ffn_stack(blocks: usize) -> Graph {
    let f32s = |d: &[u64]| TensorType::fixed(DType::F32, d);
    let mut g = Graph::new("ffn_stack");
    let mut h = g.add_input("x", f32s(&[128, 256])).unwrap();
    let c = |g: &mut Graph, name: &str, v: f32| {
        g.add_node(
            name,
            Op::Constant {
                value: Tensor::scalar_f32(v),
            },
            &[],
        )
        .unwrap()[0]
    };
    for b in 0..blocks {
        let p = |n: &str| format!("b{b}.{n}");
        let w1 = g.add_param(&p("fc1.w"), f32s(&[256, 1024]), None).unwrap();
        let b1 = g.add_param(&p("fc1.b"), f32s(&[1024]), None).unwrap();
        let w2 = g.add_param(&p("fc2.w"), f32s(&[1024, 256]), None).unwrap();
        let b2 = g.add_param(&p("fc2.b"), f32s(&[256]), None).unwrap();
        let gamma = g.add_param(&p("ln.g"), f32s(&[256]), None).unwrap();
        let beta = g.add_param(&p("ln.b"), f32s(&[256]), None).unwrap();
        let n = |g: &mut Graph, name: &str, op: Op, ins: &[fp8c_ir::Value]| {
            g.add_node(&p(name), op, ins).unwrap()[0]
        };
        let y = n(&mut g, "fc1", Op::MatMul, &[h, w1]);
        let y = n(&mut g, "fc1.bias", Op::Add, &[y, b1]);
        let sqrt2 = c(&mut g, &p("sqrt2"), std::f32::consts::SQRT_2);
        let d = n(&mut g, "gelu.div", Op::Div, &[y, sqrt2]);
        let e = n(&mut g, "gelu.erf", Op::Erf, &[d]);
        let one = c(&mut g, &p("one"), 1.0);
        let a = n(&mut g, "gelu.add", Op::Add, &[e, one]);
        let m = n(&mut g, "gelu.mul", Op::Mul, &[y, a]);
        let half = c(&mut g, &p("half"), 0.5);
        let y = n(&mut g, "gelu", Op::Mul, &[m, half]);
        let y = n(&mut g, "fc2", Op::MatMul, &[y, w2]);
        let y = n(&mut g, "fc2.bias", Op::Add, &[y, b2]);
        let y = n(&mut g, "residual", Op::Add, &[y, h]);
        let ln = Op::LayerNormalization {
            axis: -1,
            epsilon: 1e-5,
        };
        h = n(&mut g, "ln", ln, &[y, gamma, beta]);
    }
    g.set_output("y", h).unwrap();
    // Deterministic weights (the timing does not depend on their values).
    for id in g.params().to_vec() {
        let name = fp8c_ir::interface_name(&g.node(id).op).to_string();
        let dims = g.node(id).outputs[0].known_dims().expect("static params");
        let n: u64 = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.37).sin() * 0.05).collect();
        g.set_weight(&name, Tensor::from_f32(dims, &v)).unwrap();
    }
    g
}

fn report(name: &str, g: &Graph) {
    let scaled = compile(g, options(false, Some("scaling")));
    let with = median_ms(|| drop(compile(g, options(true, None))));
    let without = median_ms(|| drop(compile(g, options(false, None))));
    let pass = median_ms(|| {
        let mut s = scaled.clone();
        fuse(&mut s, Limits::for_graph(&scaled)).unwrap();
    });
    let fused = compile(g, options(true, None));
    println!(
        "{name}: {} nodes after scaling, {} after fusion; compile {with:.1} ms with fusion, \
         {without:.1} ms without; fusion pass alone {pass:.1} ms",
        scaled.node_count(),
        fused.node_count()
    );
}

fn main() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.cache/models/minilm-l3-paraphrase.onnx");
    if path.exists() {
        let mut g = fp8c_onnx::load_model(&path, &Default::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .graph;
        let shapes = [("input_ids", vec![2, 64]), ("attention_mask", vec![2, 64])]
            .into_iter()
            .map(|(n, d)| (n.to_string(), d))
            .collect();
        fp8c_passes::shapes::bind_input_shapes(&mut g, &shapes).unwrap();
        report("minilm-l3 (2x64)", &g);
    } else {
        eprintln!(
            "skipped MiniLM: {} is not fetched (scripts/fetch-models.sh minilm-l3-paraphrase)",
            path.display()
        );
    }
    report("ffn stack (30 blocks)", &ffn_stack(30));
}
