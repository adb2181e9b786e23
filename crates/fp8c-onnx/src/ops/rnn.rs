//! LSTM, GRU and RNN (ONNX's recurrent ops, as PyTorch's `nn.LSTM`/`nn.GRU`/`nn.RNN` export
//! them), unrolled over time at import: the IR has no loops, and the sequence length is
//! static (from the model, or from `--input-shape` / the inputs given to `run`).
//!
//! Per direction, the input projection of every step is one MatMul (`X · Wᵀ + Wb (+ Rb)`,
//! `[seq, batch, gates·H]`), then each step is the recurrent MatMul `H · Rᵀ` and the gate
//! arithmetic of the ONNX definition (gate order: LSTM i, o, f, c; GRU z, r, h), with
//! `clip` on the pre-activations and the `activations` attribute (Sigmoid, Tanh, Relu).
//! `sequence_lens` masks each batch row past its length: its state stops and its outputs
//! are 0, as the specification says. Outputs Y `[seq, dirs, batch, H]` (layout 1: `[batch,
//! seq, dirs, H]`), Y_h and LSTM's Y_c `[dirs, batch, H]` (layout 1: `[batch, dirs, H]`).

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{DType, Op, Tensor, Value};

/// Which recurrent op.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Cell {
    Lstm,
    Gru,
    Rnn,
}

impl Cell {
    fn gates(self) -> u64 {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn => 1,
        }
    }

    /// Activations per direction and their defaults.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Rnn => &["Tanh"],
        }
    }
}

/// An activation the unrolled cell applies.
#[derive(Clone, Copy)]
enum Act {
    Sigmoid,
    Tanh,
    Relu,
}

/// What every step reads.
struct Step {
    clip: Option<Value>,
    acts: Vec<Act>,
    /// `sequence_lens` as i64 `[batch, 1]`, if given.
    lens: Option<Value>,
}

fn unsq(cx: &mut NodeCx<'_>, name: &str, v: Value, axis: i64) -> Result<Value, OnnxError> {
    cx.add_helper(name, Op::Unsqueeze { axes: vec![axis] }, &[v])
}

fn pick(cx: &mut NodeCx<'_>, name: &str, v: Value, at: u64, axis: i64) -> Result<Value, OnnxError> {
    let i = cx.constant(&format!("{name}.index"), Tensor::scalar_i64(at as i64))?;
    cx.add_helper(name, Op::Gather { axis }, &[v, i])
}

fn transpose(cx: &mut NodeCx<'_>, name: &str, v: Value, perm: &[i64]) -> Result<Value, OnnxError> {
    cx.add_helper(
        name,
        Op::Transpose {
            perm: perm.to_vec(),
        },
        &[v],
    )
}

/// `v[.., from·H .. (from + n)·H]` along the last axis.
fn part(
    cx: &mut NodeCx<'_>,
    name: &str,
    v: Value,
    from: u64,
    n: u64,
    h: u64,
) -> Result<Value, OnnxError> {
    let k = |cx: &mut NodeCx<'_>, s: &str, x: i64| {
        cx.constant(&format!("{name}.{s}"), Tensor::from_i64(vec![1], &[x]))
    };
    let start = k(cx, "start", (from * h) as i64)?;
    let end = k(cx, "end", ((from + n) * h) as i64)?;
    let axis = k(cx, "axis", -1)?;
    let step = k(cx, "step", 1)?;
    cx.add_helper(name, Op::Slice, &[v, start, end, axis, step])
}

impl Step {
    /// The activation `which` (of this direction's list) of `x`, after `clip`.
    fn act(
        &self,
        cx: &mut NodeCx<'_>,
        name: &str,
        which: usize,
        x: Value,
    ) -> Result<Value, OnnxError> {
        let x = match self.clip {
            Some(c) => {
                let lo = cx.add_helper(&format!("{name}.neg_clip"), Op::Neg, &[c])?;
                cx.add_helper(&format!("{name}.clipped"), Op::Clip, &[x, lo, c])?
            }
            None => x,
        };
        let op = match self.acts[which] {
            Act::Sigmoid => Op::Sigmoid,
            Act::Tanh => Op::Tanh,
            Act::Relu => Op::Relu,
        };
        cx.add_helper(name, op, &[x])
    }

    /// `new` where step `t` is within the row's length, else `old`.
    fn mask(
        &self,
        cx: &mut NodeCx<'_>,
        name: &str,
        t: u64,
        new: Value,
        old: Value,
    ) -> Result<Value, OnnxError> {
        let Some(lens) = self.lens else {
            return Ok(new);
        };
        let tc = cx.constant(&format!("{name}.t"), Tensor::scalar_i64(t as i64))?;
        let live = cx.add_helper(&format!("{name}.live"), Op::Less, &[tc, lens])?;
        cx.add_helper(name, Op::Where, &[live, new, old])
    }
}

/// LSTM (`Cell::Lstm`), GRU, RNN.
pub(super) fn recurrent(cx: &mut NodeCx<'_>, cell: Cell) -> Result<Vec<Value>, OnnxError> {
    let hidden = cx
        .attr_int_opt("hidden_size")?
        .filter(|&h| h > 0)
        .ok_or_else(|| cx.err("attribute `hidden_size` is required"))? as u64;
    let direction = cx.attr_string("direction", "forward")?;
    let dirs: Vec<bool> = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => {
            return Err(cx.err(format!(
                "direction \"{d}\" is not forward, reverse or bidirectional"
            )));
        }
    };
    let layout = cx.attr_int("layout", 0)?;
    if cx.attr_bool("input_forget", false)? {
        return Err(cx.err("input_forget = 1 (coupled input and forget gates) is not supported"));
    }
    if ["activation_alpha", "activation_beta"]
        .iter()
        .any(|a| cx.attr(a).is_some_and(|a| !a.floats.is_empty()))
    {
        return Err(cx.err("activation_alpha/activation_beta are not supported"));
    }
    let per_dir = cell.default_activations().len();
    let names = match cx.attr_strings("activations")? {
        Some(a) if !a.is_empty() => a,
        _ => cell
            .default_activations()
            .iter()
            .cycle()
            .take(per_dir * dirs.len())
            .map(|s| s.to_string())
            .collect(),
    };
    if names.len() != per_dir * dirs.len() {
        return Err(cx.err(format!(
            "{} activations for {} direction(s) of {per_dir}",
            names.len(),
            dirs.len()
        )));
    }
    let mut acts = Vec::new();
    for n in &names {
        acts.push(match n.to_ascii_lowercase().as_str() {
            "sigmoid" => Act::Sigmoid,
            "tanh" => Act::Tanh,
            "relu" => Act::Relu,
            _ => {
                return Err(cx.err(format!(
                    "activation \"{n}\" is not supported (Sigmoid, Tanh, Relu)"
                )));
            }
        });
    }
    let linear_before_reset = cell == Cell::Gru && cx.attr_bool("linear_before_reset", false)?;

    let x = cx.input(0)?;
    let xty = cx.ty(x).clone();
    if xty.rank() != 3 || !xty.dtype.is_float() {
        return Err(cx.err(format!(
            "input X must be float [seq, batch, input], got {xty}"
        )));
    }
    let dtype = xty.dtype;
    let x = if layout == 1 {
        transpose(cx, "x_seq_major", x, &[1, 0, 2])?
    } else {
        x
    };
    let seq_axis = if layout == 1 { 1 } else { 0 };
    let seq = xty.shape[seq_axis].known().ok_or_else(|| {
        cx.err(format!(
            "X {xty} has no static sequence length: fp8c unrolls {} over time and needs it",
            cx.op_type
        ))
    })?;
    let g = cell.gates();
    let (w, r) = (cx.input(1)?, cx.input(2)?);
    let nd = dirs.len() as u64;
    let input = xty.shape[2].known();
    for (what, v, want) in [
        ("W", w, vec![Some(nd), Some(g * hidden), input]),
        ("R", r, vec![Some(nd), Some(g * hidden), Some(hidden)]),
    ]
    .into_iter()
    .chain(
        cx.opt_input(3)
            .map(|b| ("B", b, vec![Some(nd), Some(2 * g * hidden)])),
    ) {
        let ty = cx.ty(v).clone();
        let fits = ty.rank() == want.len()
            && ty
                .shape
                .iter()
                .zip(&want)
                .all(|(d, w)| w.is_none() || d.known().is_none() || d.known() == *w);
        if !fits {
            let dims: Vec<String> = want
                .iter()
                .map(|w| w.map_or("?".into(), |w| w.to_string()))
                .collect();
            return Err(cx.err(format!(
                "input {what} {ty} must be [{}] for {} direction(s) of {g} gate(s) of {hidden}",
                dims.join(", "),
                nd
            )));
        }
    }
    let clip = match cx.attr_float_opt("clip")? {
        Some(c) => Some(cx.scalar("clip", dtype, f64::from(c))?),
        None => None,
    };
    let lens = match cx.opt_input(4) {
        Some(l) => {
            let to = Op::Cast {
                to: DType::I64,
                saturate: false,
            };
            let l = cx.add_helper("sequence_lens.i64", to, &[l])?;
            Some(unsq(cx, "sequence_lens.column", l, 1)?)
        }
        None => None,
    };
    let batch_shape = cx.add_helper(
        "batch_shape",
        Op::Shape {
            start: 1,
            end: Some(2),
        },
        &[x],
    )?;
    let h_dim = cx.constant("hidden_dim", Tensor::from_i64(vec![1], &[hidden as i64]))?;
    let state_shape =
        cx.add_helper("state_shape", Op::Concat { axis: 0 }, &[batch_shape, h_dim])?;
    let zero = Tensor::from_f64_as(dtype, vec![1], &[0.0]).map_err(|e| cx.err(e))?;
    let zeros = cx.add_helper("zeros", Op::ConstantOfShape { value: zero }, &[state_shape])?;

    let mut ys = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &reverse) in dirs.iter().enumerate() {
        let step = Step {
            clip,
            acts: acts[d * per_dir..(d + 1) * per_dir].to_vec(),
            lens,
        };
        let p = format!("d{d}");
        let du = d as u64;
        let wd = pick(cx, &format!("{p}.w"), w, du, 0)?;
        let wt = transpose(cx, &format!("{p}.w_t"), wd, &[1, 0])?;
        let rd = pick(cx, &format!("{p}.r"), r, du, 0)?;
        let mut xw = cx.add_helper(&format!("{p}.xw"), Op::MatMul, &[x, wt])?;
        let mut rb_h = None;
        if let Some(b) = cx.opt_input(3) {
            let bd = pick(cx, &format!("{p}.b"), b, du, 0)?;
            let wb = part(cx, &format!("{p}.wb"), bd, 0, g, hidden)?;
            xw = cx.add_helper(&format!("{p}.xw_wb"), Op::Add, &[xw, wb])?;
            if linear_before_reset {
                // z and r take both biases here; h's recurrent bias goes inside r ⊙ (..).
                let rb = part(cx, &format!("{p}.rb_zr"), bd, g, 2, hidden)?;
                let zero_h = cx.constant(
                    &format!("{p}.rb_zero"),
                    Tensor::from_f64_as(dtype, vec![hidden], &vec![0.0; hidden as usize])
                        .map_err(|e| cx.err(e))?,
                )?;
                let rb = cx.add_helper(
                    &format!("{p}.rb_zr0"),
                    Op::Concat { axis: 0 },
                    &[rb, zero_h],
                )?;
                xw = cx.add_helper(&format!("{p}.xw_rb"), Op::Add, &[xw, rb])?;
                rb_h = Some(part(cx, &format!("{p}.rb_h"), bd, g + 2, 1, hidden)?);
            } else {
                let rb = part(cx, &format!("{p}.rb"), bd, g, g, hidden)?;
                xw = cx.add_helper(&format!("{p}.xw_rb"), Op::Add, &[xw, rb])?;
            }
        }
        let initial = |cx: &mut NodeCx<'_>, i: usize, what: &str| -> Result<Value, OnnxError> {
            match cx.opt_input(i) {
                Some(v) => {
                    let v = if layout == 1 {
                        transpose(cx, &format!("{p}.{what}_t"), v, &[1, 0, 2])?
                    } else {
                        v
                    };
                    pick(cx, &format!("{p}.{what}0"), v, du, 0)
                }
                None => Ok(zeros),
            }
        };
        let mut h = initial(cx, 5, "h")?;
        let mut c = if cell == Cell::Lstm {
            initial(cx, 6, "c")?
        } else {
            zeros
        };
        let peep = match (cell, cx.opt_input(7)) {
            (Cell::Lstm, Some(pv)) => {
                let pd = pick(cx, &format!("{p}.p"), pv, du, 0)?;
                Some([0, 1, 2].map(|k| part(cx, &format!("{p}.p{k}"), pd, k, 1, hidden)))
            }
            _ => None,
        };
        let peep = match peep {
            Some([a, b, e]) => Some([a?, b?, e?]),
            None => None,
        };
        // GRU: h's recurrent weights apart (r multiplies before or after them).
        let rt_all = transpose(cx, &format!("{p}.r_t"), rd, &[1, 0])?;
        let (rt, rt_h) = if cell == Cell::Gru {
            let rzr = part(cx, &format!("{p}.r_zr"), rt_all, 0, 2, hidden)?;
            let rh = part(cx, &format!("{p}.r_h"), rt_all, 2, 1, hidden)?;
            (rzr, Some(rh))
        } else {
            (rt_all, None)
        };
        let mut y_steps = vec![None; seq as usize];
        for s in 0..seq {
            let t = if reverse { seq - 1 - s } else { s };
            let q = format!("{p}.t{t}");
            let xt = pick(cx, &format!("{q}.x"), xw, t, 0)?;
            let rec = cx.add_helper(&format!("{q}.rec"), Op::MatMul, &[h, rt])?;
            let (h_new, c_new) = match cell {
                Cell::Rnn => {
                    let pre = cx.add_helper(&format!("{q}.pre"), Op::Add, &[xt, rec])?;
                    (step.act(cx, &format!("{q}.h"), 0, pre)?, c)
                }
                Cell::Lstm => {
                    let pre = cx.add_helper(&format!("{q}.pre"), Op::Add, &[xt, rec])?;
                    let gate = |cx: &mut NodeCx<'_>, k: u64, n: &str| {
                        part(cx, &format!("{q}.{n}"), pre, k, 1, hidden)
                    };
                    let (mut i, mut o, mut f, cc) = (
                        gate(cx, 0, "i")?,
                        gate(cx, 1, "o")?,
                        gate(cx, 2, "f")?,
                        gate(cx, 3, "c")?,
                    );
                    if let Some([pi, _, pf]) = peep {
                        let a = cx.add_helper(&format!("{q}.pi"), Op::Mul, &[pi, c])?;
                        i = cx.add_helper(&format!("{q}.i_p"), Op::Add, &[i, a])?;
                        let b = cx.add_helper(&format!("{q}.pf"), Op::Mul, &[pf, c])?;
                        f = cx.add_helper(&format!("{q}.f_p"), Op::Add, &[f, b])?;
                    }
                    let i = step.act(cx, &format!("{q}.i_act"), 0, i)?;
                    let f = step.act(cx, &format!("{q}.f_act"), 0, f)?;
                    let cc = step.act(cx, &format!("{q}.c_act"), 1, cc)?;
                    let kept = cx.add_helper(&format!("{q}.kept"), Op::Mul, &[f, c])?;
                    let added = cx.add_helper(&format!("{q}.added"), Op::Mul, &[i, cc])?;
                    let c_new = cx.add_helper(&format!("{q}.c_new"), Op::Add, &[kept, added])?;
                    if let Some([_, po, _]) = peep {
                        let a = cx.add_helper(&format!("{q}.po"), Op::Mul, &[po, c_new])?;
                        o = cx.add_helper(&format!("{q}.o_p"), Op::Add, &[o, a])?;
                    }
                    let o = step.act(cx, &format!("{q}.o_act"), 0, o)?;
                    let hc = step.act(cx, &format!("{q}.h_act"), 2, c_new)?;
                    (
                        cx.add_helper(&format!("{q}.h_new"), Op::Mul, &[o, hc])?,
                        c_new,
                    )
                }
                Cell::Gru => {
                    let xzr = part(cx, &format!("{q}.x_zr"), xt, 0, 2, hidden)?;
                    let xh = part(cx, &format!("{q}.x_h"), xt, 2, 1, hidden)?;
                    let zr = cx.add_helper(&format!("{q}.zr_pre"), Op::Add, &[xzr, rec])?;
                    let zr = step.act(cx, &format!("{q}.zr"), 0, zr)?;
                    let z = part(cx, &format!("{q}.z"), zr, 0, 1, hidden)?;
                    let rg = part(cx, &format!("{q}.r"), zr, 1, 1, hidden)?;
                    let rh_w = rt_h.ok_or_else(|| cx.err("internal: GRU without its h weights"))?;
                    let inner = if linear_before_reset {
                        let hr = cx.add_helper(&format!("{q}.h_rec"), Op::MatMul, &[h, rh_w])?;
                        let hr = match rb_h {
                            Some(b) => cx.add_helper(&format!("{q}.h_rec_b"), Op::Add, &[hr, b])?,
                            None => hr,
                        };
                        cx.add_helper(&format!("{q}.reset"), Op::Mul, &[rg, hr])?
                    } else {
                        let rhp = cx.add_helper(&format!("{q}.reset_h"), Op::Mul, &[rg, h])?;
                        cx.add_helper(&format!("{q}.h_rec"), Op::MatMul, &[rhp, rh_w])?
                    };
                    let pre = cx.add_helper(&format!("{q}.h_pre"), Op::Add, &[xh, inner])?;
                    let hh = step.act(cx, &format!("{q}.h_cand"), 1, pre)?;
                    // (1 − z) ⊙ ĥ + z ⊙ h = ĥ + z ⊙ (h − ĥ)
                    let diff = cx.add_helper(&format!("{q}.h_diff"), Op::Sub, &[h, hh])?;
                    let zd = cx.add_helper(&format!("{q}.z_diff"), Op::Mul, &[z, diff])?;
                    (cx.add_helper(&format!("{q}.h_new"), Op::Add, &[hh, zd])?, c)
                }
            };
            let y_t = step.mask(cx, &format!("{q}.y"), t, h_new, zeros)?;
            h = step.mask(cx, &format!("{q}.h"), t, h_new, h)?;
            if cell == Cell::Lstm {
                c = step.mask(cx, &format!("{q}.c"), t, c_new, c)?;
            }
            y_steps[t as usize] = Some(unsq(cx, &format!("{q}.y_row"), y_t, 0)?);
        }
        let y_steps: Vec<Value> = y_steps.into_iter().flatten().collect();
        let y = cx.add_helper(&format!("{p}.y"), Op::Concat { axis: 0 }, &y_steps)?;
        ys.push(unsq(cx, &format!("{p}.y_dir"), y, 1)?);
        hs.push(unsq(cx, &format!("{p}.h_last"), h, 0)?);
        cs.push(unsq(cx, &format!("{p}.c_last"), c, 0)?);
    }
    let cat = |cx: &mut NodeCx<'_>, n: &str, v: &[Value], axis: i64| {
        cx.add_helper(n, Op::Concat { axis }, v)
    };
    let mut y = cat(cx, "y_all", &ys, 1)?;
    let mut yh = cat(cx, "y_h_all", &hs, 0)?;
    let mut yc = cat(cx, "y_c_all", &cs, 0)?;
    if layout == 1 {
        y = transpose(cx, "y_batch_major", y, &[2, 0, 1, 3])?;
        yh = transpose(cx, "y_h_batch_major", yh, &[1, 0, 2])?;
        yc = transpose(cx, "y_c_batch_major", yc, &[1, 0, 2])?;
    }
    let mut outs = vec![y, yh];
    if cell == Cell::Lstm {
        outs.push(yc);
    }
    Ok(outs)
}
