//! Attention recognition in canonicalize (`fp8c_passes::attention`): the chains exports spell
//! become one `attention` node computing the same values (within f32 rounding, checked by
//! evaluating both graphs), and the near-misses stay as they are. The committed exports are
//! checked end to end by `tests/attention_fusion.rs`; these are the spellings one by one.

mod autodiff_common;

use autodiff_common::{Rng, eval};
use fp8c_ir::{DType, Graph, Op, Tensor, TensorType, Value};
use fp8c_passes::{Pass, PassCx, PassOptions, canonicalize::Canonicalize};
use std::collections::BTreeMap;

const B: u64 = 2;
const H: u64 = 4;
const HKV: u64 = 2;
const T: u64 = 12;
const D: u64 = 8;

/// A graph under construction with f32 inputs q `[B, H, T, D]`, k and v `[B, HKV, T, D]`.
struct Chain {
    g: Graph,
    q: Value,
    k: Value,
    v: Value,
}

impl Chain {
    fn new() -> Chain {
        let mut g = Graph::new("attention");
        let t = |h| TensorType::fixed(DType::F32, &[B, h, T, D]);
        let q = g.add_input("q", t(H)).unwrap();
        let k = g.add_input("k", t(HKV)).unwrap();
        let v = g.add_input("v", t(HKV)).unwrap();
        Chain { g, q, k, v }
    }

    fn op(&mut self, op: Op, ins: &[Value]) -> Value {
        self.g.add_node("n", op, ins).unwrap()[0]
    }

    fn constant(&mut self, t: Tensor) -> Value {
        self.op(Op::Constant { value: t }, &[])
    }

    fn scalar(&mut self, x: f32) -> Value {
        self.constant(Tensor::scalar_f32(x))
    }

    fn shape(&mut self, dims: &[i64]) -> Value {
        self.constant(Tensor::from_i64(vec![dims.len() as u64], dims))
    }

    /// transformers' `repeat_kv`: `[B, HKV, T, D]` → `[B, H, T, D]`.
    fn repeat_kv(&mut self, x: Value) -> Value {
        let u = self.op(Op::Unsqueeze { axes: vec![2] }, &[x]);
        let s5 = self.shape(&[B as i64, HKV as i64, (H / HKV) as i64, T as i64, D as i64]);
        let e = self.op(Op::Expand, &[u, s5]);
        let s4 = self.shape(&[B as i64, H as i64, T as i64, D as i64]);
        self.op(Op::Reshape { allowzero: true }, &[e, s4])
    }

    /// dynamo's kᵀ: reshape to `[B·H, T, D]`, transpose, reshape to `[B, H, D, T]`.
    fn dynamo_kt(&mut self, k: Value) -> Value {
        let s3 = self.shape(&[-1, T as i64, D as i64]);
        let r = self.op(Op::Reshape { allowzero: false }, &[k, s3]);
        let t = self.op(
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            &[r],
        );
        let s4 = self.shape(&[B as i64, H as i64, D as i64, T as i64]);
        self.op(Op::Reshape { allowzero: false }, &[t, s4])
    }

    /// transformers' causal mask: `where(kv_idx ≤ q_idx, 0, −f32::MAX)` `[1, 1, T, T]`, from
    /// two `range`s.
    fn causal_mask(&mut self) -> Value {
        let zero = self.constant(Tensor::scalar_i64(0));
        let end = self.constant(Tensor::scalar_i64(T as i64));
        let one = self.constant(Tensor::scalar_i64(1));
        let r = self.op(Op::Range, &[zero, end, one]);
        let rows = self.op(
            Op::Unsqueeze {
                axes: vec![0, 1, 3],
            },
            &[r],
        );
        let cols = self.op(
            Op::Unsqueeze {
                axes: vec![0, 1, 2],
            },
            &[r],
        );
        let seen = self.op(Op::LessOrEqual, &[cols, rows]);
        let (z, neg) = (self.scalar(0.0), self.scalar(f32::MIN));
        self.op(Op::Where, &[seen, z, neg])
    }

    /// `where(is_nan(p), 0, p)` (PyTorch's `_safe_softmax`).
    fn safe(&mut self, p: Value) -> Value {
        let nan = self.op(Op::IsNaN, &[p]);
        let z = self.scalar(0.0);
        self.op(Op::Where, &[nan, z, p])
    }

    fn finish(mut self, o: Value) -> Graph {
        self.g.set_output("o", o).unwrap();
        self.g
    }
}

/// What dynamo exports for `scaled_dot_product_attention(q, k, v, is_causal)` with grouped
/// heads: √scale on q and on kᵀ, the mask added, softmax, the NaN guard, PV.
fn dynamo(mask: impl FnOnce(&mut Chain) -> Option<Value>) -> Graph {
    let mut c = Chain::new();
    let (q, k, v) = (c.q, c.k, c.v);
    let (kr, vr) = (c.repeat_kv(k), c.repeat_kv(v));
    let kt = c.dynamo_kt(kr);
    let root = c.scalar((1.0 / (D as f32).sqrt()).sqrt());
    let qs = c.op(Op::Mul, &[q, root]);
    let ks = c.op(Op::Mul, &[kt, root]);
    let s = c.op(Op::MatMul, &[qs, ks]);
    let s = match mask(&mut c) {
        Some(m) => c.op(Op::Add, &[s, m]),
        None => s,
    };
    let p = c.op(Op::Softmax { axis: -1 }, &[s]);
    let p = c.safe(p);
    let o = c.op(Op::MatMul, &[p, vr]);
    c.finish(o)
}

fn inputs(g: &Graph, seed: u64) -> BTreeMap<String, Tensor> {
    let mut r = Rng::new(seed);
    g.inputs()
        .iter()
        .map(|&id| {
            let n = g.node(id);
            let ty = &n.outputs[0];
            let t = r.tensor(&ty.known_dims().unwrap(), -2.0, 2.0);
            let t = fp8c_eval::eval_op(
                &Op::Cast {
                    to: ty.dtype,
                    saturate: false,
                },
                &[&t],
            )
            .unwrap()
            .remove(0);
            (fp8c_ir::interface_name(&n.op).to_string(), t)
        })
        .collect()
}

/// Canonicalizes `g`; returns the result, its attention nodes' ops and the largest relative
/// difference of its output from the original's.
fn fuse(g: &Graph) -> (Graph, Vec<Op>, f64) {
    let mut fused = g.clone();
    let mut cx = PassCx::new(PassOptions::default());
    Canonicalize.run(&mut fused, &mut cx).unwrap();
    fp8c_ir::verify(&fused).unwrap();
    let ops: Vec<Op> = fused
        .node_ids()
        .into_iter()
        .map(|id| fused.node(id).op.clone())
        .filter(|op| matches!(op, Op::Attention { .. }))
        .collect();
    let ins = inputs(g, 5);
    let none = BTreeMap::new();
    let want = eval(g, &ins, &none, &none).outputs["o"]
        .to_f64_vec()
        .unwrap();
    let got = eval(&fused, &ins, &none, &none).outputs["o"]
        .to_f64_vec()
        .unwrap();
    let scale = want.iter().fold(0f64, |a, x| a.max(x.abs()));
    let rel = got
        .iter()
        .zip(&want)
        .fold(0f64, |a, (x, y)| a.max((x - y).abs() / scale));
    (fused, ops, rel)
}

/// The inputs of the one attention node of `g`, by producer op name.
fn attention_inputs(g: &Graph) -> Vec<String> {
    let id = g
        .node_ids()
        .into_iter()
        .find(|&id| matches!(g.node(id).op, Op::Attention { .. }))
        .unwrap();
    g.node(id)
        .inputs()
        .iter()
        .map(|v| g.node(v.node).op.name().to_string())
        .collect()
}

#[test]
fn dynamo_causal_grouped_attention_becomes_one_op() {
    let g = dynamo(|c| Some(c.causal_mask()));
    let (fused, ops, rel) = fuse(&g);
    let scale = 1.0 / (D as f32).sqrt().sqrt();
    let want = f64::from(scale) * f64::from(scale);
    match ops.as_slice() {
        [Op::Attention { scale, causal }] => {
            assert!(*causal);
            assert!((scale - want).abs() <= 1e-15, "scale {scale}");
        }
        other => panic!("expected one attention, got {other:?}"),
    }
    // k and v are read unrepeated (grouped heads), and no mask is left.
    assert_eq!(attention_inputs(&fused), ["input", "input", "input"]);
    assert!(rel <= 1e-6, "fused vs unfused: {rel:.3e}");
    // Nothing of the chain is left: no softmax, no T×T value.
    for id in fused.node_ids() {
        let n = fused.node(id);
        assert!(
            !matches!(n.op, Op::Softmax { .. } | Op::MatMul),
            "{}",
            n.op.name()
        );
    }
}

#[test]
fn a_data_mask_and_a_scale_after_the_product_are_kept_exactly() {
    // scores / √D + a [B, 1, 1, T] padding bias from an input: the bias is the op's mask.
    let mut c = Chain::new();
    let (q, k, v) = (c.q, c.k, c.v);
    let bias =
        c.g.add_input("bias", TensorType::fixed(DType::F32, &[B, 1, 1, T]))
            .unwrap();
    let (kr, vr) = (c.repeat_kv(k), c.repeat_kv(v));
    let kt = c.op(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[kr],
    );
    let s = c.op(Op::MatMul, &[q, kt]);
    let root = c.scalar((D as f32).sqrt());
    let s = c.op(Op::Div, &[s, root]);
    let s = c.op(Op::Add, &[bias, s]);
    let p = c.op(Op::Softmax { axis: 3 }, &[s]);
    let o = c.op(Op::MatMul, &[p, vr]);
    let g = c.finish(o);
    let (fused, ops, rel) = fuse(&g);
    assert!(
        matches!(ops.as_slice(), [Op::Attention { causal: false, .. }]),
        "{ops:?}"
    );
    assert_eq!(
        attention_inputs(&fused),
        ["input", "input", "input", "input"]
    );
    assert!(rel <= 1e-6, "{rel:.3e}");
}

#[test]
fn a_sliding_window_keeps_its_mask_and_top_left_causal_is_not_the_flag() {
    // kv ≤ q and kv > q − 4: a band, not causal; the model's mask value is the op's mask.
    let g = dynamo(|c| {
        let zero = c.constant(Tensor::scalar_i64(0));
        let end = c.constant(Tensor::scalar_i64(T as i64));
        let one = c.constant(Tensor::scalar_i64(1));
        let r = c.op(Op::Range, &[zero, end, one]);
        let rows = c.op(
            Op::Unsqueeze {
                axes: vec![0, 1, 3],
            },
            &[r],
        );
        let cols = c.op(
            Op::Unsqueeze {
                axes: vec![0, 1, 2],
            },
            &[r],
        );
        let seen = c.op(Op::LessOrEqual, &[cols, rows]);
        let w = c.constant(Tensor::scalar_i64(4));
        let first = c.op(Op::Sub, &[rows, w]);
        let near = c.op(Op::Greater, &[cols, first]);
        let both = c.op(Op::And, &[seen, near]);
        let (z, neg) = (c.scalar(0.0), c.scalar(f32::MIN));
        Some(c.op(Op::Where, &[both, z, neg]))
    });
    let (fused, ops, rel) = fuse(&g);
    assert!(
        matches!(ops.as_slice(), [Op::Attention { causal: false, .. }]),
        "{ops:?}"
    );
    assert_eq!(attention_inputs(&fused).len(), 4);
    assert!(rel <= 1e-6, "{rel:.3e}");
}

#[test]
fn near_misses_stay_unfused() {
    // Softmax over the query axis.
    let mut c = Chain::new();
    let (q, k, v) = (c.q, c.k, c.v);
    let (kr, vr) = (c.repeat_kv(k), c.repeat_kv(v));
    let kt = c.op(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[kr],
    );
    let s = c.op(Op::MatMul, &[q, kt]);
    let p = c.op(Op::Softmax { axis: 2 }, &[s]);
    let o = c.op(Op::MatMul, &[p, vr]);
    let cases = vec![("softmax over the queries", c.finish(o))];

    // A scale that is an input, not a constant.
    let mut c = Chain::new();
    let (q, k, v) = (c.q, c.k, c.v);
    let sc =
        c.g.add_input("scale", TensorType::fixed(DType::F32, &[]))
            .unwrap();
    let (kr, vr) = (c.repeat_kv(k), c.repeat_kv(v));
    let kt = c.op(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[kr],
    );
    let s = c.op(Op::MatMul, &[q, kt]);
    let s = c.op(Op::Mul, &[s, sc]);
    let p = c.op(Op::Softmax { axis: -1 }, &[s]);
    let o = c.op(Op::MatMul, &[p, vr]);
    let mut cases = cases;
    cases.push(("a scale read from an input", c.finish(o)));

    // A mask that multiplies the scores instead of adding to them.
    let mut c2 = Chain::new();
    let (q, k, v) = (c2.q, c2.k, c2.v);
    let (kr, vr) = (c2.repeat_kv(k), c2.repeat_kv(v));
    let kt = c2.op(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[kr],
    );
    let s = c2.op(Op::MatMul, &[q, kt]);
    let m = c2.constant(Tensor::from_f32(vec![1, 1, 1, T], &vec![0.5; T as usize]));
    let s = c2.op(Op::Mul, &[s, m]);
    let p = c2.op(Op::Softmax { axis: -1 }, &[s]);
    let o = c2.op(Op::MatMul, &[p, vr]);
    cases.push(("a multiplicative mask", c2.finish(o)));

    // The probabilities are a graph output too.
    let mut c = Chain::new();
    let (q, k, v) = (c.q, c.k, c.v);
    let (kr, vr) = (c.repeat_kv(k), c.repeat_kv(v));
    let kt = c.op(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[kr],
    );
    let s = c.op(Op::MatMul, &[q, kt]);
    let p = c.op(Op::Softmax { axis: -1 }, &[s]);
    c.g.set_output("probs", p).unwrap();
    let o = c.op(Op::MatMul, &[p, vr]);
    cases.push(("probabilities read elsewhere", c.finish(o)));

    // kᵀ that is not k's last two axes swapped (k's head axis moved instead).
    let mut c = Chain::new();
    let (q, k, v) = (c.q, c.k, c.v);
    let (kr, vr) = (c.repeat_kv(k), c.repeat_kv(v));
    let kt = c.op(
        Op::Transpose {
            perm: vec![0, 1, 3, 2],
        },
        &[kr],
    );
    let kt = c.op(Op::Neg, &[kt]);
    let s = c.op(Op::MatMul, &[q, kt]);
    let p = c.op(Op::Softmax { axis: -1 }, &[s]);
    let o = c.op(Op::MatMul, &[p, vr]);
    cases.push(("kᵀ negated", c.finish(o)));

    for (what, g) in cases {
        let (_, ops, rel) = fuse(&g);
        assert!(ops.is_empty(), "{what}: fused into {ops:?}");
        assert!(
            rel <= 1e-6,
            "{what}: canonicalize changed the result by {rel:.3e}"
        );
    }
}

#[test]
fn no_fuse_attention_keeps_the_chain() {
    let g = dynamo(|c| Some(c.causal_mask()));
    let mut kept = g.clone();
    let mut cx = PassCx::new(PassOptions {
        no_fuse_attention: true,
        ..Default::default()
    });
    Canonicalize.run(&mut kept, &mut cx).unwrap();
    assert!(
        kept.node_ids()
            .into_iter()
            .all(|id| !matches!(kept.node(id).op, Op::Attention { .. }))
    );
    assert!(
        kept.node_ids()
            .into_iter()
            .any(|id| matches!(kept.node(id).op, Op::Softmax { .. }))
    );
}
