//! `attention` and `attention_grad` spelled in the unfused ops (matmul, softmax,
//! softmax_grad, ...), for a backend without an attention kernel: the same semantics
//! (`fp8c_ir::attention`), with the score matrix materialised. The session runs it on the
//! graph such a device executes; `decompose` of a graph without attention changes nothing.
//!
//! ```text
//! s   = scale·q·kᵀ [+ mask] [causal: where(j > i + Tk − Tq, −∞, s)]
//! m   = max_j s                      none = (m = −∞): every key hidden
//! o   = where(none, 0, softmax(s))·v
//! lse = where(none, −∞, m + log Σ_j e^(s − m))
//! backward: p = where(lse = −∞, 0, e^(s − lse)); dv = pᵀ·do; dp = do·vᵀ;
//!           ds = softmax_grad(p, dp)·scale; dq = ds·k; dk = dsᵀ·q
//! ```
//!
//! Grouped KV heads are repeated for the products (`repeat_kv`) and their gradients summed
//! back over each group.

use crate::autodiff::emit::Emit;
use fp8c_ir::attention::AttnDims;
use fp8c_ir::{DType, Graph, IrError, Node, Op, Value};

type R<T> = Result<T, IrError>;

/// Replaces every `attention` and `attention_grad` node of `g` by the unfused ops; returns how
/// many it replaced.
pub fn decompose(g: &mut Graph) -> R<usize> {
    decompose_if(g, |_, _| true)
}

/// [`decompose`] of the attention nodes `pick(g, node)` chooses (a backend whose kernels take
/// some of them: the others are spelled out).
pub fn decompose_if(g: &mut Graph, pick: impl Fn(&Graph, &Node) -> bool) -> R<usize> {
    let mut count = 0;
    for id in g.topo_order()? {
        let n = g.node(id);
        if !pick(g, n) {
            continue;
        }
        let (scale, causal, grad) = match n.op {
            Op::Attention { scale, causal } => (scale, causal, false),
            Op::AttentionGrad { scale, causal } => (scale, causal, true),
            _ => continue,
        };
        let (name, ins) = (n.name.clone(), n.inputs().to_vec());
        let outs: Vec<Value> = (0..n.outputs.len() as u32)
            .map(|s| Value::new(id, s))
            .collect();
        let mut e = Emit::new(g);
        let news = if grad {
            backward(&mut e, &name, &ins, scale, causal)?
        } else {
            forward(&mut e, &name, &ins, scale, causal)?
        };
        for (old, new) in outs.into_iter().zip(news) {
            g.replace_uses(old, new)?;
        }
        g.remove_node(id)?;
        count += 1;
    }
    Ok(count)
}

/// The geometry of q, k, v.
fn dims(e: &Emit<'_>, name: &str, [q, k, v]: [Value; 3]) -> R<AttnDims> {
    AttnDims::of(&e.dims(q)?, &e.dims(k)?, &e.dims(v)?)
        .map_err(|m| IrError::node(name, "attention", m))
}

/// `x` `[B, Hkv, T, D]` with each head repeated for its `G` query heads.
fn repeat(e: &mut Emit<'_>, name: &str, x: Value, d: &AttnDims) -> R<Value> {
    let g = d.group() as u64;
    if g == 1 {
        return Ok(x);
    }
    let [b, hkv, t, w] =
        <[u64; 4]>::try_from(e.dims(x)?).map_err(|_| IrError::Other(format!("{name}: rank")))?;
    let u = e.op(name, Op::Unsqueeze { axes: vec![2] }, &[x])?;
    let x5 = e.expand(&format!("{name}.expand"), u, &[b, hkv, g, t, w])?;
    e.reshape(&format!("{name}.heads"), x5, &[b, hkv * g, t, w])
}

/// The gradient `[B, H, T, D]` of a repeated `x`, summed back to `[B, Hkv, T, D]`.
fn group_sum(e: &mut Emit<'_>, name: &str, dx: Value, d: &AttnDims) -> R<Value> {
    let g = d.group() as u64;
    if g == 1 {
        return Ok(dx);
    }
    let [b, _, t, w] =
        <[u64; 4]>::try_from(e.dims(dx)?).map_err(|_| IrError::Other(format!("{name}: rank")))?;
    let x5 = e.reshape(
        &format!("{name}.groups"),
        dx,
        &[b, d.kv_heads as u64, g, t, w],
    )?;
    e.reduce_sum(name, x5, vec![2], false)
}

/// The scores `scale·q·kᵀ + mask`, with the causally hidden keys at −∞.
#[allow(clippy::too_many_arguments)]
fn scores(
    e: &mut Emit<'_>,
    name: &str,
    q: Value,
    k: Value,
    mask: Option<Value>,
    scale: f64,
    causal: bool,
    d: &AttnDims,
) -> R<Value> {
    let kt = e.swap_last2(&format!("{name}.kt"), k)?;
    let s = e.op(&format!("{name}.qk"), Op::MatMul, &[q, kt])?;
    let mut s = e.scale(&format!("{name}.scaled"), s, scale)?;
    if let Some(m) = mask {
        s = e.add(&format!("{name}.masked"), s, m)?;
    }
    if causal {
        // The hidden keys as a constant [Tq, Tk] (the decomposition holds T×T values anyway,
        // and every backend takes a constant).
        let hidden: Vec<bool> = (0..d.q_len)
            .flat_map(|i| (0..d.kv_len).map(move |j| j >= d.visible_end(i, true)))
            .collect();
        let shape = vec![d.q_len as u64, d.kv_len as u64];
        let hidden = e.constant(
            &format!("{name}.causal"),
            fp8c_ir::Tensor::from_bool(shape, &hidden),
        )?;
        let inf = e.scalar(&format!("{name}.causal.inf"), e.dtype(s), f64::NEG_INFINITY)?;
        s = e.op(
            &format!("{name}.causal.where"),
            Op::Where,
            &[hidden, inf, s],
        )?;
    }
    Ok(s)
}

/// `attention`'s outputs o and lse.
fn forward(e: &mut Emit<'_>, name: &str, ins: &[Value], scale: f64, causal: bool) -> R<Vec<Value>> {
    let [q, k, v] = [ins[0], ins[1], ins[2]];
    let d = dims(e, name, [q, k, v])?;
    let dt = e.dtype(q);
    let kr = repeat(e, &format!("{name}.k"), k, &d)?;
    let vr = repeat(e, &format!("{name}.v"), v, &d)?;
    let s = scores(e, name, q, kr, ins.get(3).copied(), scale, causal, &d)?;
    let max = Op::ReduceMax {
        axes: Some(vec![-1]),
        keepdims: true,
    };
    let m = e.op(&format!("{name}.max"), max, &[s])?;
    let ninf = e.scalar(&format!("{name}.ninf"), dt, f64::NEG_INFINITY)?;
    let none = e.op(&format!("{name}.none"), Op::Equal, &[m, ninf])?;
    let p = e.op(&format!("{name}.softmax"), Op::Softmax { axis: -1 }, &[s])?;
    let zero = e.scalar(&format!("{name}.zero"), dt, 0.0)?;
    let p = e.op(&format!("{name}.p"), Op::Where, &[none, zero, p])?;
    let o = e.op(&format!("{name}.o"), Op::MatMul, &[p, vr])?;
    let c = e.sub(&format!("{name}.centred"), s, m)?;
    let x = e.op(&format!("{name}.exp"), Op::Exp, &[c])?;
    let sum = e.reduce_sum(&format!("{name}.sum"), x, vec![-1], true)?;
    let log = e.op(&format!("{name}.log"), Op::Log, &[sum])?;
    let lse = e.add(&format!("{name}.lse4"), m, log)?;
    let lse = e.op(&format!("{name}.lse_none"), Op::Where, &[none, ninf, lse])?;
    let lse_dt = if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let lse = e.cast(&format!("{name}.lse_cast"), lse, lse_dt)?;
    let lse = e.reshape(&format!("{name}.lse"), lse, &d.lse_shape())?;
    Ok(vec![o, lse])
}

/// `attention_grad`'s outputs dq, dk, dv.
fn backward(
    e: &mut Emit<'_>,
    name: &str,
    ins: &[Value],
    scale: f64,
    causal: bool,
) -> R<Vec<Value>> {
    let [q, k, v, _o, lse, d_o] = [ins[0], ins[1], ins[2], ins[3], ins[4], ins[5]];
    let d = dims(e, name, [q, k, v])?;
    let dt = e.dtype(q);
    let kr = repeat(e, &format!("{name}.k"), k, &d)?;
    let vr = repeat(e, &format!("{name}.v"), v, &d)?;
    let s = scores(e, name, q, kr, ins.get(6).copied(), scale, causal, &d)?;
    let mut l4 = d.lse_shape();
    l4.push(1);
    let l = e.cast(&format!("{name}.lse_cast"), lse, dt)?;
    let l = e.reshape(&format!("{name}.lse4"), l, &l4)?;
    let c = e.sub(&format!("{name}.centred"), s, l)?;
    let p = e.op(&format!("{name}.exp"), Op::Exp, &[c])?;
    let ninf = e.scalar(&format!("{name}.ninf"), dt, f64::NEG_INFINITY)?;
    let none = e.op(&format!("{name}.none"), Op::Equal, &[l, ninf])?;
    let zero = e.scalar(&format!("{name}.zero"), dt, 0.0)?;
    let p = e.op(&format!("{name}.p"), Op::Where, &[none, zero, p])?;
    let pt = e.swap_last2(&format!("{name}.pt"), p)?;
    let dvr = e.op(&format!("{name}.dv_heads"), Op::MatMul, &[pt, d_o])?;
    let vt = e.swap_last2(&format!("{name}.vt"), vr)?;
    let dp = e.op(&format!("{name}.dp"), Op::MatMul, &[d_o, vt])?;
    let ds = e.op(
        &format!("{name}.ds"),
        Op::SoftmaxGrad {
            axis: -1,
            log: false,
        },
        &[p, dp],
    )?;
    let ds = e.scale(&format!("{name}.ds_scaled"), ds, scale)?;
    let dq = e.op(&format!("{name}.dq"), Op::MatMul, &[ds, kr])?;
    let dst = e.swap_last2(&format!("{name}.dst"), ds)?;
    let dkr = e.op(&format!("{name}.dk_heads"), Op::MatMul, &[dst, q])?;
    let dk = group_sum(e, &format!("{name}.dk"), dkr, &d)?;
    let dv = group_sum(e, &format!("{name}.dv"), dvr, &d)?;
    Ok(vec![dq, dk, dv])
}
