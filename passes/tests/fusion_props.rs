//! Property: for random MLP-like graphs (random shapes, activations, biases, residuals,
//! LayerNorms, MatMul or Gemm with transposed weights), compiling with and without fusion
//! gives bit-identical outputs and scaling state on the CPU backend, step after step.

mod fusion_common;

use fp8c_ir::{DType, GeluApprox, Graph, Op, Tensor, TensorType, Value};
use fusion_common::{Rng, assert_bit_identical, compile, current, delayed, fill_weights, run};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug)]
enum Act {
    None,
    Relu,
    Gelu,
    GeluTanh,
    Sigmoid,
    Tanh,
    LeakyRelu,
    /// erf-GELU spelled out as ONNX exporters do: x * (erf(x / √2) + 1) * 0.5.
    ErfGelu,
}

#[derive(Clone, Debug)]
struct Layer {
    n: u64,
    /// Gemm with a transposed weight (trans_b) instead of MatMul.
    gemm: bool,
    alpha: f32,
    bias: bool,
    act: Act,
    residual: bool,
    layer_norm: bool,
}

#[derive(Clone, Debug)]
struct Spec {
    m: u64,
    k: u64,
    layers: Vec<Layer>,
    current: bool,
}

fn dim() -> impl Strategy<Value = u64> {
    prop::sample::select(vec![16u64, 32, 48, 64])
}

fn act() -> impl Strategy<Value = Act> {
    prop::sample::select(vec![
        Act::None,
        Act::Relu,
        Act::Gelu,
        Act::GeluTanh,
        Act::Sigmoid,
        Act::Tanh,
        Act::LeakyRelu,
        Act::ErfGelu,
    ])
}

fn layer() -> impl Strategy<Value = Layer> {
    (
        dim(),
        any::<bool>(),
        prop::sample::select(vec![1.0f32, 0.5]),
        any::<bool>(),
        act(),
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(n, gemm, alpha, bias, act, residual, layer_norm)| Layer {
            n,
            gemm,
            alpha: if gemm { alpha } else { 1.0 },
            bias,
            act,
            residual,
            layer_norm,
        })
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::sample::select(vec![16u64, 32]),
        dim(),
        prop::collection::vec(layer(), 1..4),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(m, k, layers, current)| Spec {
            m,
            k,
            layers,
            current,
        })
}

fn constant(g: &mut Graph, name: &str, v: f32) -> Value {
    g.add_node(
        name,
        Op::Constant {
            value: Tensor::scalar_f32(v),
        },
        &[],
    )
    .unwrap()[0]
}

fn node(g: &mut Graph, name: &str, op: Op, inputs: &[Value]) -> Value {
    g.add_node(name, op, inputs).unwrap()[0]
}

fn build(s: &Spec, rng: &mut Rng) -> Graph {
    let f32s = |d: &[u64]| TensorType::fixed(DType::F32, d);
    let mut g = Graph::new("mlp");
    let mut h = g.add_input("x", f32s(&[s.m, s.k])).unwrap();
    let mut k = s.k;
    for (i, l) in s.layers.iter().enumerate() {
        let fc = format!("fc{i}");
        let mut y = if l.gemm {
            let w = g
                .add_param(&format!("{fc}.w"), f32s(&[l.n, k]), None)
                .unwrap();
            let mut ins = vec![h, w];
            if l.bias {
                ins.push(g.add_param(&format!("{fc}.b"), f32s(&[l.n]), None).unwrap());
            }
            let op = Op::Gemm {
                alpha: l.alpha,
                beta: 1.0,
                trans_a: false,
                trans_b: true,
            };
            node(&mut g, &fc, op, &ins)
        } else {
            let w = g
                .add_param(&format!("{fc}.w"), f32s(&[k, l.n]), None)
                .unwrap();
            let y = node(&mut g, &fc, Op::MatMul, &[h, w]);
            if l.bias {
                let b = g.add_param(&format!("{fc}.b"), f32s(&[l.n]), None).unwrap();
                node(&mut g, &format!("{fc}.bias"), Op::Add, &[y, b])
            } else {
                y
            }
        };
        let a = format!("{fc}.act");
        y = match l.act {
            Act::None => y,
            Act::Relu => node(&mut g, &a, Op::Relu, &[y]),
            Act::Sigmoid => node(&mut g, &a, Op::Sigmoid, &[y]),
            Act::Tanh => node(&mut g, &a, Op::Tanh, &[y]),
            Act::LeakyRelu => node(&mut g, &a, Op::LeakyRelu { alpha: 0.01 }, &[y]),
            Act::Gelu | Act::GeluTanh => {
                let approximate = if matches!(l.act, Act::Gelu) {
                    GeluApprox::None
                } else {
                    GeluApprox::Tanh
                };
                node(&mut g, &a, Op::Gelu { approximate }, &[y])
            }
            Act::ErfGelu => {
                let c = constant(&mut g, &format!("{a}.sqrt2"), std::f32::consts::SQRT_2);
                let d = node(&mut g, &format!("{a}.div"), Op::Div, &[y, c]);
                let e = node(&mut g, &format!("{a}.erf"), Op::Erf, &[d]);
                let one = constant(&mut g, &format!("{a}.one"), 1.0);
                let p = node(&mut g, &format!("{a}.add"), Op::Add, &[e, one]);
                let m = node(&mut g, &format!("{a}.mul"), Op::Mul, &[y, p]);
                let half = constant(&mut g, &format!("{a}.half"), 0.5);
                node(&mut g, &a, Op::Mul, &[m, half])
            }
        };
        if l.residual && l.n == k {
            y = node(&mut g, &format!("{fc}.residual"), Op::Add, &[y, h]);
        }
        if l.layer_norm {
            let gamma = g
                .add_param(&format!("{fc}.ln.g"), f32s(&[l.n]), None)
                .unwrap();
            let beta = g
                .add_param(&format!("{fc}.ln.b"), f32s(&[l.n]), None)
                .unwrap();
            let op = Op::LayerNormalization {
                axis: -1,
                epsilon: 1e-5,
            };
            y = node(&mut g, &format!("{fc}.ln"), op, &[y, gamma, beta]);
        }
        h = y;
        k = l.n;
    }
    g.set_output("y", h).unwrap();
    fill_weights(&mut g, rng);
    g
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn fused_and_unfused_agree_bit_for_bit(s in spec(), seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let g = build(&s, &mut rng);
        let recipe = if s.current { current() } else { delayed() };
        let (fused, _) = compile(&g, recipe, true);
        let (unfused, _) = compile(&g, recipe, false);
        let steps: Vec<BTreeMap<String, Tensor>> = (0..3)
            .map(|_| BTreeMap::from([("x".to_string(), rng.tensor(&[s.m, s.k], 3.0))]))
            .collect();
        assert_bit_identical(&format!("{s:?}"), &run(&fused, &steps), &run(&unfused, &steps));
    }
}

/// A fused op with random attributes (programs from a small pool, valid or not).
fn fused_op() -> impl Strategy<Value = Op> {
    let fp8 = prop::sample::select(vec![DType::F8E4M3, DType::F8E5M2, DType::F32]);
    let expr = prop::sample::select(vec![
        "",
        "relu[a0]",
        "add[a0,a1]",
        "add[a1,a0];gelu{approximate=none}[t0]",
        "div[a0,a1];erf[t0];add[t1,a2];mul[a0,t2];mul[t3,a3]",
        "mul[a5,a0]",
    ])
    .prop_map(|t| fp8c_ir::EwExpr::parse(t).unwrap());
    (
        0..6usize,
        fp8,
        expr,
        any::<bool>(),
        prop::collection::vec(-3i64..4, 0..4),
    )
        .prop_map(|(k, to, expr, flag, perm)| match k {
            0 => Op::QuantizeAmax { to, saturate: flag },
            1 => Op::CastTranspose {
                perm,
                to,
                saturate: flag,
            },
            2 => Op::LayerNormQuantize {
                axis: perm.first().copied().unwrap_or(-1),
                epsilon: 1e-5,
                to,
                saturate: flag,
            },
            3 => Op::ElementwiseQuantize {
                expr,
                to,
                saturate: flag,
            },
            4 => Op::ScaledMatMulEpilogue {
                out: DType::F32,
                fast_accum: false,
                expr,
                to: flag.then_some(to),
                saturate: flag,
            },
            _ => Op::BatchedScaleUpdate {
                fmt: to,
                margin: 0.0,
                source: if flag {
                    fp8c_ir::AmaxSource::HistoryMax
                } else {
                    fp8c_ir::AmaxSource::Current
                },
                epsilon: 0.0,
                power_2: false,
            },
        })
}

/// Small random tensors: f32, FP8 or i64, rank 0 to 3.
fn small_tensor() -> impl Strategy<Value = Tensor> {
    (
        prop::collection::vec(1u64..4, 0..4),
        0..3usize,
        any::<u64>(),
    )
        .prop_map(|(dims, kind, seed)| {
            let mut rng = Rng::new(seed);
            let t = rng.tensor(&dims, 4.0);
            match kind {
                0 => t,
                1 => fp8c_eval::eval_op(
                    &Op::Quantize {
                        to: DType::F8E4M3,
                        saturate: true,
                    },
                    &[&t, &Tensor::scalar_f32(1.0)],
                )
                .map(|mut v| v.remove(0))
                .unwrap_or(t),
                _ => {
                    let n: u64 = dims.iter().product();
                    Tensor::from_i64(dims, &vec![1; n as usize])
                }
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// `infer` and the CPU kernel of every fused op answer any inputs with a result or an
    /// error, never a panic, and agree on the output types when both succeed.
    #[test]
    fn fused_ops_never_panic(op in fused_op(), inputs in prop::collection::vec(small_tensor(), 0..8)) {
        let types: Vec<TensorType> = inputs.iter().map(Tensor::ty).collect();
        let ins: Vec<fp8c_ir::infer::InferInput<'_>> =
            types.iter().map(fp8c_ir::infer::InferInput::new).collect();
        let inferred = fp8c_ir::infer::infer(&op, &ins);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let evaluated = fp8c_eval::eval_op(&op, &refs);
        if let (Ok(t), Ok(v)) = (&inferred, &evaluated) {
            let got: Vec<TensorType> = v.iter().map(Tensor::ty).collect();
            prop_assert_eq!(t, &got);
        }
    }
}
