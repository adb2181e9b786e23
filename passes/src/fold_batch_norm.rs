//! Fold batch norm into the convolution before it (inference only).
//!
//! An inference-mode `batch_norm` is a per-channel affine map, `y = (x − mean)·s + β` with
//! `s = γ / √(var + ε)`. When `x` is a convolution's output read by nothing else, and the
//! conv's weight and bias and the norm's four vectors are known (params with data,
//! constants, or pure functions of them such as an export's `ConstantOfShape` weights), the
//! map goes into the conv: `W'[o] = W[o]·s[o]` and `b'[o] = (b[o] − mean[o])·s[o] + β[o]`,
//! each computed in f64 and rounded once to f32. The norm's pass over the activations goes
//! (5% of a ResNet-50 f32 run on the CPU).
//!
//! [`FoldBatchNorm`] runs before scaling and folds only the convolutions the precision pass
//! left in high precision. An FP8 conv's weight has one scale for all output channels, and
//! the norm's per-channel factors folded into it before quantizing would spread the channels
//! over the FP8 range (on PP-OCR's classifier that doubled the FP8 output's relative error).
//! [`FoldBatchNormFp8`] folds those after scaling instead, behind the quantization: the conv
//! reads `dequantize(q_w) · s` (an f32 `mul` by the per-channel factors, `[M, 1, ...]`) and
//! the folded bias, so the FP8 codes and scales are the unfolded graph's and only the f32
//! products move (the runtime computes the scaled weight once, at prepare, as it does the
//! dequantized one). The norm's pass over the activations goes: 7 ms of light ResNet-50's
//! FP8 run at one thread.
//!
//! The result is not bit-identical to the unfolded graph: the per-channel factor moves from
//! the conv's output to its weights, so the products round differently (relative differences
//! around 1e-7 in f32). onnxruntime folds the same way at session creation.
//!
//! Training graphs keep their norms (γ and β are trained; the weights change every step).
//! Folded weights and biases become new params named after the conv (`{conv}.weight_bn`,
//! `{conv}.bias_bn`); the params nobody reads any more are dropped.

use crate::{Pass, PassCx};
use fp8c_ir::{DType, Dim, Graph, IrError, NodeId, Op, OpView, Tensor, Value};
use std::collections::{HashMap, HashSet};

/// The batch-norm folding pass (see the module docs).
pub struct FoldBatchNorm;

impl Pass for FoldBatchNorm {
    fn name(&self) -> &'static str {
        "fold-batch-norm"
    }

    fn about(&self) -> &'static str {
        "inference: batch norms after convolutions folded into the convolutions' weights and bias"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        let what = "folded into the convolution before them";
        run_fold(g, cx, fold, (self.name(), what))
    }
}

/// Runs one of the folds over `g` with the GEMMs the precision pass put in FP8 (nothing in
/// training), noting under the pass's name how many norms went and `what` became of them.
fn run_fold(
    g: &mut Graph,
    cx: &mut PassCx,
    fold: fn(&mut Graph, &HashSet<&str>) -> Result<usize, IrError>,
    (pass, what): (&str, &str),
) -> Result<bool, IrError> {
    if cx.options.train.is_some() {
        return Ok(false);
    }
    let fp8: HashSet<&str> = cx
        .decisions
        .iter()
        .filter(|d| d.precision == crate::precision::Precision::Fp8)
        .map(|d| d.name.as_str())
        .collect();
    let folded = fold(g, &fp8)?;
    if folded > 0 {
        cx.notes
            .push(format!("{pass}: {folded} batch norm(s) {what}"));
    }
    Ok(folded > 0)
}

/// The batch-norm folding pass for FP8 convolutions, after scaling (see the module docs).
pub struct FoldBatchNormFp8;

impl Pass for FoldBatchNormFp8 {
    fn name(&self) -> &'static str {
        "fold-batch-norm-fp8"
    }

    fn about(&self) -> &'static str {
        "inference: batch norms after FP8 convolutions folded behind the weight's dequantize"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        let what = "folded behind FP8 convolutions' dequantized weights";
        run_fold(g, cx, fold_fp8, (self.name(), what))
    }
}

/// Folds every foldable `conv → batch_norm` pair of `g` whose conv is named in `fp8`, behind
/// the conv's weight: `conv(x, w · s, b')` with `s` the per-channel factors; returns how many
/// were folded.
pub fn fold_fp8(g: &mut Graph, fp8: &HashSet<&str>) -> Result<usize, IrError> {
    let mut folded = 0;
    let mut known = Known {
        values: HashMap::new(),
    };
    for bn in g.topo_order()? {
        if !g.contains(bn) {
            continue;
        }
        let Some(conv) = pair(g, bn, |name| fp8.contains(name)) else {
            continue;
        };
        let w = g.node(conv).inputs()[1];
        let w_ty = g.value_type(w).clone();
        let Some(m) = w_ty.shape.first().and_then(Dim::known) else {
            continue;
        };
        if w_ty.dtype != DType::F32 {
            continue;
        }
        let Some(f) = factors(g, bn, conv, m as usize, &mut known) else {
            continue;
        };
        let scale: Vec<f32> = f.scale.iter().map(|&s| s as f32).collect();
        if !scale.iter().all(|s| s.is_finite()) {
            continue;
        }
        let name = g.node(conv).name.clone();
        let mut shape = vec![m];
        shape.resize(w_ty.rank(), 1);
        let s = Tensor::from_vec(DType::F32, shape, scale)
            .map_err(|e| IrError::node(&name, "conv", format!("internal: folded factors: {e}")))?;
        let s = {
            let pname = g.fresh_name(&format!("{name}.scale_bn"));
            g.add_param(&pname, s.ty(), Some(s))?
        };
        let w_scaled = g.add_node(&format!("{name}.w.bn"), Op::Mul, &[w, s])?[0];
        let bias = Tensor::from_vec(DType::F32, vec![m], f.bias)
            .map_err(|e| IrError::node(&name, "conv", format!("internal: folded bias: {e}")))?;
        replace_conv(g, bn, conv, w_scaled, bias)?;
        folded += 1;
    }
    if folded > 0 {
        g.dce();
    }
    Ok(folded)
}

/// The conv before `bn` when the pair can fold: `bn` is a `batch_norm` reading a conv (of
/// one result, read by the norm alone, not a graph result) that `pick` accepts by name.
fn pair(g: &Graph, bn: NodeId, pick: impl Fn(&str) -> bool) -> Option<NodeId> {
    let n = g.node(bn);
    if !matches!(n.op, Op::BatchNormalization { .. }) {
        return None;
    }
    let x = *n.inputs().first()?;
    let conv = g.node(x.node);
    if !matches!(conv.op, Op::Conv { .. })
        || conv.outputs.len() != 1
        || conv.outputs[0].dtype != DType::F32
        || !pick(&conv.name)
        || n.inputs().len() != 5
    {
        return None;
    }
    // The conv's result must feed this norm alone (a second reader needs it unnormalised).
    if g.users(x).len() != 1 || g.is_graph_result(x) {
        return None;
    }
    Some(x.node)
}

/// A norm's per-channel factors `s = γ / √(var + ε)` in f64, and the folded bias
/// `(b − mean)·s + β` (`b` the conv's bias, 0 without one) computed in f64 and rounded once
/// to f32.
struct Factors {
    scale: Vec<f64>,
    bias: Vec<f32>,
}

/// [`Factors`] of the pair `conv → bn` over `m` channels, when every vector is known and
/// every factor finite (a negative or NaN variance, an infinite γ: the norm stays, its
/// unfolded result is what the model says).
fn factors(g: &Graph, bn: NodeId, conv: NodeId, m: usize, known: &mut Known) -> Option<Factors> {
    let n = g.node(bn);
    let Op::BatchNormalization { epsilon } = n.op else {
        return None;
    };
    let [_, gamma, beta, mean, var] = n.inputs() else {
        return None;
    };
    let mut vector = |v: Value| -> Option<Vec<f64>> {
        let t = known.get(g, v)?;
        if t.shape() != [m as u64] || t.dtype() != DType::F32 {
            return None;
        }
        Some(
            t.as_slice::<f32>()
                .ok()?
                .iter()
                .map(|&x| f64::from(x))
                .collect(),
        )
    };
    let bias = match g.node(conv).inputs().get(2) {
        Some(&b) => vector(b)?,
        None => vec![0.0; m],
    };
    let (gamma, beta, mean, var) = (
        vector(*gamma)?,
        vector(*beta)?,
        vector(*mean)?,
        vector(*var)?,
    );
    let eps = f64::from(epsilon);
    let scale: Vec<f64> = (0..m).map(|o| gamma[o] / (var[o] + eps).sqrt()).collect();
    let bias: Vec<f32> = (0..m)
        .map(|o| ((bias[o] - mean[o]) * scale[o] + beta[o]) as f32)
        .collect();
    (scale.iter().all(|x| x.is_finite()) && bias.iter().all(|x| x.is_finite()))
        .then_some(Factors { scale, bias })
}

/// Replaces `conv → bn` by one conv over `weight` (a value) and the folded `bias` (a new
/// param), under the conv's name.
fn replace_conv(
    g: &mut Graph,
    bn: NodeId,
    conv: NodeId,
    weight: Value,
    bias: Tensor,
) -> Result<(), IrError> {
    let c = g.node(conv);
    let (name, op, x) = (c.name.clone(), c.op.clone(), c.inputs()[0]);
    let pname = g.fresh_name(&format!("{name}.bias_bn"));
    let b = g.add_param(&pname, bias.ty(), Some(bias))?;
    let out = g.add_node(&name, op, &[x, weight, b])?[0];
    let new = out.node;
    g.replace_uses(Value::new(bn, 0), out)?;
    g.remove_node(bn)?;
    g.remove_node(conv)?;
    g.rename_node(new, &name);
    Ok(())
}

/// Folds every foldable `conv → batch_norm` pair of `g` whose conv is not named in `fp8`;
/// returns how many were folded.
pub fn fold(g: &mut Graph, fp8: &HashSet<&str>) -> Result<usize, IrError> {
    let mut folded = 0;
    let mut known = Known {
        values: HashMap::new(),
    };
    for bn in g.topo_order()? {
        // Earlier folds remove nodes; the order was taken before them.
        if !g.contains(bn) {
            continue;
        }
        let Some(plan) = plan(g, bn, fp8, &mut known) else {
            continue;
        };
        let replaced: Vec<Value> = g.node(plan.conv).inputs()[1..].to_vec();
        apply(g, bn, plan)?;
        for v in replaced {
            known.release(g, v);
        }
        folded += 1;
    }
    if folded > 0 {
        g.dce();
    }
    Ok(folded)
}

/// What folding one pair computes: the conv node, its new weight and bias.
struct Folded {
    conv: NodeId,
    weight: Tensor,
    bias: Tensor,
}

/// Values known at compile time: params with data, constants, and the results of pure nodes
/// whose inputs are known (an export's `ConstantOfShape` weights, a weight's cast), each
/// computed once with the CPU reference, as the runtime would compute it at prepare.
struct Known {
    values: HashMap<Value, Option<Tensor>>,
}

/// How many producers deep [`Known::get`] looks for a value's data.
const MAX_DEPTH: usize = 8;

impl Known {
    fn get(&mut self, g: &Graph, v: Value) -> Option<Tensor> {
        self.at_depth(g, v, 0)
    }

    /// Forgets `v`, a folded conv's old weight or bias, and takes its data out of the graph
    /// when it is a param nothing reads any more: each original weight goes as soon as its
    /// folded copy is made, so a model's weights are not held twice until the pass ends
    /// (ResNet-50's f32 compile peaked at 2.2× its weights).
    fn release(&mut self, g: &mut Graph, v: Value) {
        self.values.remove(&v);
        if let Op::Param { name } = &g.node(v.node).op
            && g.users(v).is_empty()
            && !g.is_graph_result(v)
        {
            let name = name.clone();
            g.take_weight(&name);
        }
    }

    fn at_depth(&mut self, g: &Graph, v: Value, depth: usize) -> Option<Tensor> {
        if let Some(t) = self.values.get(&v) {
            return t.clone();
        }
        let n = g.node(v.node);
        let t = match &n.op {
            Op::Param { name } => g.weights().get(name).cloned(),
            Op::Constant { value } => Some(value.clone()),
            op if depth < MAX_DEPTH && pure(op) => {
                let ins: Option<Vec<Tensor>> = n
                    .inputs()
                    .to_vec()
                    .into_iter()
                    .map(|i| self.at_depth(g, i, depth + 1))
                    .collect();
                ins.and_then(|ins| {
                    let refs: Vec<&Tensor> = ins.iter().collect();
                    let mut outs = fp8c_eval::eval_op(op, &refs).ok()?;
                    (v.slot < outs.len() as u32).then(|| outs.swap_remove(v.slot as usize))
                })
            }
            _ => None,
        };
        self.values.insert(v, t.clone());
        t
    }
}

/// Ops whose result depends on their inputs alone and that make or move values (what an
/// export builds a weight from).
fn pure(op: &Op) -> bool {
    !op.is_interface() && matches!(op.view(), OpView::Movement(_) | OpView::Elementwise(_))
}

/// The folded weight and bias for the `batch_norm` node `bn`, when it can be folded.
fn plan(g: &Graph, bn: NodeId, fp8: &HashSet<&str>, known: &mut Known) -> Option<Folded> {
    let conv = pair(g, bn, |name| !fp8.contains(name))?;
    let w = known.get(g, g.node(conv).inputs().get(1).copied()?)?;
    if w.dtype() != DType::F32 {
        return None;
    }
    let m = *w.shape().first()? as usize;
    let per = w.shape()[1..].iter().product::<u64>() as usize;
    let f = factors(g, bn, conv, m, known)?;
    let ws = w.as_slice::<f32>().ok()?;
    let mut weight = Vec::with_capacity(ws.len());
    for (o, &s) in f.scale.iter().enumerate() {
        weight.extend(
            ws[o * per..][..per]
                .iter()
                .map(|&x| (f64::from(x) * s) as f32),
        );
    }
    // A folded weight that overflows keeps the norm.
    if !weight.iter().all(|x| x.is_finite()) {
        return None;
    }
    let weight = Tensor::from_vec(DType::F32, w.shape().to_vec(), weight).ok()?;
    let bias = Tensor::from_vec(DType::F32, vec![m as u64], f.bias).ok()?;
    Some(Folded { conv, weight, bias })
}

/// Replaces `conv → bn` by one conv over the folded weight and bias, under the conv's name.
fn apply(g: &mut Graph, bn: NodeId, f: Folded) -> Result<(), IrError> {
    let name = g.node(f.conv).name.clone();
    let pname = g.fresh_name(&format!("{name}.weight_bn"));
    let w = g.add_param(&pname, f.weight.ty(), Some(f.weight))?;
    replace_conv(g, bn, f.conv, w, f.bias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fp8c_ir::TensorType;
    use fp8c_runtime::{Backend, CpuBackend};

    fn f32_tensor(shape: &[u64], v: Vec<f32>) -> Tensor {
        Tensor::from_vec(DType::F32, shape.to_vec(), v).unwrap()
    }

    /// `x[1,2,4,4] → conv(w[3,2,3,3], pad 1) → batch_norm → relu`, every vector known unless
    /// `w_known` is false (a weight given at run time).
    fn conv_bn(with_bias: bool, var0: f32, w_known: bool) -> Graph {
        let mut g = Graph::new("conv_bn");
        let x = g
            .add_input("x", TensorType::fixed(DType::F32, &[1, 2, 4, 4]))
            .unwrap();
        let wv: Vec<f32> = (0..54).map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0).collect();
        let p = |g: &mut Graph, name: &str, shape: &[u64], v: Option<Vec<f32>>| {
            let ty = TensorType::fixed(DType::F32, shape);
            g.add_param(name, ty, v.map(|v| f32_tensor(shape, v)))
                .unwrap()
        };
        let w = p(&mut g, "w", &[3, 2, 3, 3], w_known.then_some(wv));
        let mut ins = vec![x, w];
        if with_bias {
            ins.push(p(&mut g, "b", &[3], Some(vec![0.5, -1.0, 0.25])));
        }
        let conv = Op::Conv {
            kernel_shape: vec![3, 3],
            strides: vec![1, 1],
            pads: vec![1, 1, 1, 1],
            dilations: vec![1, 1],
            group: 1,
            auto_pad: fp8c_ir::AutoPad::NotSet,
        };
        let y = g.add_node("conv0", conv, &ins).unwrap()[0];
        let gamma = p(&mut g, "gamma", &[3], Some(vec![1.5, 0.2, -0.7]));
        let beta = p(&mut g, "beta", &[3], Some(vec![0.1, 0.0, -2.0]));
        let mean = p(&mut g, "mean", &[3], Some(vec![0.3, -0.4, 1.0]));
        let var = p(&mut g, "var", &[3], Some(vec![var0, 2.0, 0.01]));
        let bn = Op::BatchNormalization { epsilon: 1e-5 };
        let z = g.add_node("bn0", bn, &[y, gamma, beta, mean, var]).unwrap()[0];
        let r = g.add_node("relu0", Op::Relu, &[z]).unwrap()[0];
        g.set_output("out", r).unwrap();
        g
    }

    fn ops(g: &Graph) -> Vec<String> {
        g.topo_order()
            .unwrap()
            .into_iter()
            .map(|id| g.node(id).op.name().to_string())
            .collect()
    }

    fn run(g: &Graph) -> Vec<f32> {
        let x: Vec<f32> = (0..32).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
        let inputs = [("x".to_string(), f32_tensor(&[1, 2, 4, 4], x))].into();
        let program = fp8c_runtime::lower(g).unwrap();
        let mut exe = CpuBackend.prepare(&program, g.weights()).unwrap();
        let outs = exe.run(&inputs).unwrap();
        outs["out"].as_slice::<f32>().unwrap().to_vec()
    }

    #[test]
    fn conv_and_norm_become_one_conv_with_the_same_results() {
        for with_bias in [false, true] {
            let mut g = conv_bn(with_bias, 0.5, true);
            let want = run(&g);
            assert_eq!(fold(&mut g, &HashSet::new()).unwrap(), 1);
            assert_eq!(ops(&g), ["input", "param", "param", "conv", "relu"]);
            let names: Vec<&str> = g.weights().keys().map(String::as_str).collect();
            assert_eq!(names, ["conv0.bias_bn", "conv0.weight_bn"]);
            let conv = g.find_node("conv0").expect("the conv keeps its name");
            assert_eq!(g.node(conv).inputs().len(), 3);
            let got = run(&g);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "[{i}] {a} vs {b}");
            }
            assert!(want.iter().any(|&v| v > 0.0), "a test that shows something");
        }
    }

    /// An FP8 conv's norm folds behind its weight: the conv reads `w · s` through a `mul`
    /// (the weight value itself untouched: in a scaled graph, its dequantize) and the folded
    /// bias; results match the unfolded graph's to f32 rounding. The f32 fold leaves it.
    #[test]
    fn an_fp8_convs_norm_folds_behind_its_weight() {
        for with_bias in [false, true] {
            let mut g = conv_bn(with_bias, 0.5, true);
            let want = run(&g);
            let fp8: HashSet<&str> = ["conv0"].into();
            assert_eq!(fold(&mut g, &fp8).unwrap(), 0);
            assert_eq!(fold_fp8(&mut g, &fp8).unwrap(), 1);
            assert_eq!(
                ops(&g),
                ["input", "param", "param", "mul", "param", "conv", "relu"]
            );
            let conv = g.find_node("conv0").expect("the conv keeps its name");
            let w = g.node(conv).inputs()[1];
            assert_eq!(g.node(w.node).op.name(), "mul");
            assert_eq!(
                g.node(g.node(w.node).inputs()[0].node).op.name(),
                "param",
                "the weight itself is read as it was"
            );
            let scale = &g.weights()["conv0.scale_bn"];
            assert_eq!(scale.shape(), [3, 1, 1, 1]);
            let got = run(&g);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "[{i}] {a} vs {b}");
            }
            assert!(want.iter().any(|&v| v > 0.0), "a test that shows something");
        }
        // A weight given at run time folds too (only the norm's vectors must be known), a
        // NaN factor does not, nor does a conv outside the FP8 set.
        let mut g = conv_bn(false, 0.5, false);
        assert_eq!(fold_fp8(&mut g, &["conv0"].into()).unwrap(), 1);
        let mut g = conv_bn(true, -1.0, true);
        assert_eq!(fold_fp8(&mut g, &["conv0"].into()).unwrap(), 0);
        let mut g = conv_bn(true, 0.5, true);
        assert_eq!(fold_fp8(&mut g, &HashSet::new()).unwrap(), 0);
    }

    /// A folded conv's original weight leaves the graph's weights as soon as its fold is
    /// applied (nothing reads it), not at the pass's end; a param still read stays.
    #[test]
    fn the_replaced_weight_is_released_at_once() {
        let mut g = conv_bn(true, 0.5, true);
        let mut known = Known {
            values: HashMap::new(),
        };
        let bn = g.find_node("bn0").unwrap();
        let f = plan(&g, bn, &HashSet::new(), &mut known).expect("foldable");
        let replaced: Vec<Value> = g.node(f.conv).inputs()[1..].to_vec();
        let w = replaced[0];
        let handle = g.weights()["w"].storage().handle();
        assert!(
            known.values.contains_key(&w),
            "plan read the weight through the cache"
        );
        apply(&mut g, bn, f).unwrap();
        // Only the conv's weight and bias are released; the norm's vectors wait for DCE.
        for v in replaced {
            known.release(&mut g, v);
        }
        assert!(!known.values.contains_key(&w));
        assert!(!g.weights().contains_key("w"));
        assert!(!g.weights().contains_key("b"));
        assert!(
            !handle.is_live(),
            "nothing holds the original weight's bytes"
        );
        assert!(g.weights().contains_key("gamma"));
    }

    #[test]
    fn what_cannot_fold_stays() {
        // A variance that makes a factor NaN.
        let mut g = conv_bn(true, -1.0, true);
        assert_eq!(fold(&mut g, &HashSet::new()).unwrap(), 0);
        assert!(ops(&g).contains(&"batch_norm".to_string()));
        // The conv's result also read elsewhere.
        let mut g = conv_bn(false, 0.5, true);
        let conv = g.find_node("conv0").unwrap();
        g.set_output("raw", Value::new(conv, 0)).unwrap();
        assert_eq!(fold(&mut g, &HashSet::new()).unwrap(), 0);
        // An FP8 conv.
        let mut g = conv_bn(false, 0.5, true);
        assert_eq!(fold(&mut g, &["conv0"].into()).unwrap(), 0);
        // A weight with no data (a param given at run time).
        let mut g = conv_bn(false, 0.5, false);
        assert_eq!(fold(&mut g, &HashSet::new()).unwrap(), 0);
    }
}
