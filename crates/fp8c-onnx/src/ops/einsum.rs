//! ONNX Einsum, imported as the IR ops that compute it: `transpose`, `reshape`, `slice` (for
//! diagonals), `reduce_sum` and batched `matmul`, so an einsum that is a product (attention
//! scores, a projection) is a GEMM the precision policy can put in FP8.
//!
//! The equation is expanded first: each `...` becomes labels of its own, right-aligned across
//! operands (numpy broadcasting of the ellipsis dims), and an implicit output (no `->`) is the
//! ellipsis followed by the labels used exactly once, in alphabetical order. Then:
//! 1. per operand, a repeated label takes the diagonal (the two axes flattened, then every
//!    `n + 1`-th element), and a label used nowhere else is summed out;
//! 2. operands contract left to right: labels shared by both and still needed later are batch
//!    dims, shared ones not needed are the contraction, the rest stay; each side is transposed
//!    to `[batch, own, contracted]` and flattened to a matrix per batch, multiplied, and the
//!    result unflattened (a product with a matrix, `btd,de->bte`, is one broadcasting
//!    `matmul` with nothing flattened);
//! 3. the last operand sums out what the output does not name and is transposed to its order.
//!
//! Any dim may be symbolic except those of a diagonal. Batch dims are copied by the reshapes
//! (`0`) and may broadcast; a flattened group with symbolic dims is the reshape's `-1` when it
//! is the only one, else its size is read at run time (`shape` of its axes, multiplied), so
//! binding the input shapes folds it to a constant.

use super::NodeCx;
use crate::OnnxError;
use fp8c_ir::{Op, Tensor, Value};

/// A label: a letter's code point, or `ELLIPSIS + i` for the i-th broadcast dim of `...`.
type Label = u32;
const ELLIPSIS: Label = 0x1_0000;

/// An operand being rewritten: its IR value and one label per axis.
struct Operand {
    v: Value,
    labels: Vec<Label>,
}

/// Splits `term` into labels; `ell` is the number of dims its `...` stands for, right-aligned
/// to `max_ell`.
fn term_labels(term: &str, ell: usize, max_ell: usize) -> Vec<Label> {
    let mut out = Vec::new();
    let mut rest = term;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            out.extend((max_ell - ell..max_ell).map(|i| ELLIPSIS + i as Label));
            rest = r;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c as Label);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// Parses `equation` for operands of the given ranks: the labels of each input and of the
/// output.
fn parse(equation: &str, ranks: &[usize]) -> Result<(Vec<Vec<Label>>, Vec<Label>), String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return Err(format!(
            "equation \"{equation}\" names {} operands, the node has {}",
            terms.len(),
            ranks.len()
        ));
    }
    let valid = |t: &str| {
        t.replace("...", "")
            .chars()
            .all(|c| c.is_ascii_alphabetic())
            && t.matches("...").count() <= 1
    };
    let mut ells = Vec::with_capacity(terms.len());
    for (i, (t, &rank)) in terms.iter().zip(ranks).enumerate() {
        if !valid(t) {
            return Err(format!(
                "equation \"{equation}\": term {i} (\"{t}\") must be letters with at most one \"...\""
            ));
        }
        let letters = t.replace("...", "").len();
        let ell = match (t.contains("..."), rank.checked_sub(letters)) {
            (true, Some(e)) => e,
            (false, Some(0)) => 0,
            _ => {
                return Err(format!(
                    "equation \"{equation}\": term {i} (\"{t}\") does not fit operand {i} of rank {rank}"
                ));
            }
        };
        ells.push(ell);
    }
    let max_ell = ells.iter().copied().max().unwrap_or(0);
    let inputs: Vec<Vec<Label>> = terms
        .iter()
        .zip(&ells)
        .map(|(t, &e)| term_labels(t, e, max_ell))
        .collect();
    let output = match rhs {
        Some(r) => {
            if !valid(r) {
                return Err(format!(
                    "equation \"{equation}\": the output (\"{r}\") must be letters with at most one \"...\""
                ));
            }
            let out = term_labels(r, max_ell, max_ell);
            for (k, l) in out.iter().enumerate() {
                if out[..k].contains(l) {
                    return Err(format!(
                        "equation \"{equation}\": the output repeats a label"
                    ));
                }
                if !inputs.iter().any(|t| t.contains(l)) {
                    return Err(format!(
                        "equation \"{equation}\": output label '{}' is in no input",
                        char::from_u32(*l).unwrap_or('?')
                    ));
                }
            }
            out
        }
        None => {
            let mut out: Vec<Label> = (0..max_ell).map(|i| ELLIPSIS + i as Label).collect();
            let mut once: Vec<Label> = inputs
                .iter()
                .flatten()
                .copied()
                .filter(|&l| l < ELLIPSIS)
                .filter(|&l| inputs.iter().flatten().filter(|&&m| m == l).count() == 1)
                .collect();
            once.sort_unstable();
            out.extend(once);
            out
        }
    };
    Ok((inputs, output))
}

/// Einsum: inputs the operands (1 or more), attribute `equation`.
pub(super) fn einsum(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    if cx.attr("equation").is_none() {
        return Err(cx.err("attribute `equation` is required"));
    }
    let equation = cx.attr_string("equation", "")?;
    let values = cx.all_inputs()?;
    let ranks: Vec<usize> = values.iter().map(|&v| cx.ty(v).rank()).collect();
    let (terms, output) = parse(&equation, &ranks).map_err(|e| cx.err(e))?;
    let mut b = Builder { cx, step: 0 };
    let mut ops: Vec<Operand> = Vec::with_capacity(values.len());
    for (k, (v, labels)) in values.into_iter().zip(terms.iter()).enumerate() {
        let mut op = b.diagonals(Operand {
            v,
            labels: labels.clone(),
        })?;
        // Sum out what no other operand and not the output names.
        let used_elsewhere = |l: &Label| {
            output.contains(l)
                || terms
                    .iter()
                    .enumerate()
                    .any(|(j, t)| j != k && t.contains(l))
        };
        let drop: Vec<Label> = op
            .labels
            .iter()
            .copied()
            .filter(|l| !used_elsewhere(l))
            .collect();
        op = b.sum_out(op, &drop)?;
        ops.push(op);
    }
    let mut ops = ops.into_iter();
    let mut acc = ops
        .next()
        .ok_or_else(|| b.cx.err("Einsum needs at least one input"))?;
    let rest: Vec<Operand> = ops.collect();
    for (i, next) in rest.into_iter().enumerate() {
        let later = &terms[i + 2..];
        let keep = |l: &Label| output.contains(l) || later.iter().any(|t| t.contains(l));
        acc = b.contract(acc, next, &keep)?;
    }
    let drop: Vec<Label> = acc
        .labels
        .iter()
        .copied()
        .filter(|l| !output.contains(l))
        .collect();
    acc = b.sum_out(acc, &drop)?;
    let perm: Vec<usize> = output
        .iter()
        .map(|l| acc.labels.iter().position(|m| m == l).unwrap_or(0))
        .collect();
    let y = if perm.iter().enumerate().all(|(i, &p)| i == p) {
        b.cx.add(Op::Identity, &[acc.v])?
    } else {
        let perm = perm.into_iter().map(|p| p as i64).collect();
        b.cx.add(Op::Transpose { perm }, &[acc.v])?
    };
    Ok(vec![y])
}

/// Adds the helper nodes, numbered in order.
struct Builder<'c, 'a> {
    cx: &'c mut NodeCx<'a>,
    step: usize,
}

impl Builder<'_, '_> {
    fn add(&mut self, what: &str, op: Op, ins: &[Value]) -> Result<Value, OnnxError> {
        self.step += 1;
        let suffix = format!("{what}{}", self.step);
        self.cx.add_helper(&suffix, op, ins)
    }

    fn ints(&mut self, what: &str, v: &[i64]) -> Result<Value, OnnxError> {
        self.step += 1;
        let suffix = format!("{what}{}", self.step);
        self.cx
            .constant(&suffix, Tensor::from_i64(vec![v.len() as u64], v))
    }

    /// The static size of axis `axis` of `v`.
    fn dim(&self, v: Value, axis: usize, why: &str) -> Result<i64, OnnxError> {
        let ty = self.cx.ty(v);
        ty.shape[axis]
            .known()
            .and_then(|d| i64::try_from(d).ok())
            .ok_or_else(|| {
                self.cx.err(format!(
                    "an operand of type {ty} has a symbolic dim on axis {axis}, which {why} needs static"
                ))
            })
    }

    fn transpose(&mut self, op: Operand, order: &[Label]) -> Result<Operand, OnnxError> {
        let perm: Vec<usize> = order
            .iter()
            .map(|l| op.labels.iter().position(|m| m == l).unwrap_or(0))
            .collect();
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(op);
        }
        let p = perm.iter().map(|&p| p as i64).collect();
        let v = self.add("transpose", Op::Transpose { perm: p }, &[op.v])?;
        Ok(Operand {
            v,
            labels: order.to_vec(),
        })
    }

    fn reshape(&mut self, v: Value, shape: &[i64]) -> Result<Value, OnnxError> {
        let s = self.ints("shape", shape)?;
        self.add("reshape", Op::Reshape { allowzero: false }, &[v, s])
    }

    /// Takes the diagonal of every repeated label.
    fn diagonals(&mut self, mut op: Operand) -> Result<Operand, OnnxError> {
        while let Some((p, q)) = (0..op.labels.len()).find_map(|q| {
            (0..q)
                .find(|&p| op.labels[p] == op.labels[q])
                .map(|p| (p, q))
        }) {
            let l = op.labels[p];
            let (np, nq) = (
                self.dim(op.v, p, "a diagonal")?,
                self.dim(op.v, q, "a diagonal")?,
            );
            if np != nq {
                return Err(self.cx.err(format!(
                    "a repeated label spans axes {p} and {q} of sizes {np} and {nq}"
                )));
            }
            let mut order: Vec<Label> = Vec::with_capacity(op.labels.len());
            let mut others: Vec<Label> = Vec::new();
            for (i, &m) in op.labels.iter().enumerate() {
                if i != p && i != q {
                    others.push(m);
                }
            }
            // Distinct placeholder labels for the two axes while they are moved last.
            let (a, b) = (u32::MAX - 1, u32::MAX);
            let mut tagged = op.labels.clone();
            tagged[p] = a;
            tagged[q] = b;
            order.extend(&others);
            order.extend([a, b]);
            let moved = self.transpose(
                Operand {
                    v: op.v,
                    labels: tagged,
                },
                &order,
            )?;
            let mut shape = vec![0i64; others.len()];
            shape.push(np * np);
            let flat = self.reshape(moved.v, &shape)?;
            let axis = others.len() as i64;
            let starts = self.ints("starts", &[0])?;
            let ends = self.ints("ends", &[np * np])?;
            let axes = self.ints("axes", &[axis])?;
            let steps = self.ints("steps", &[np + 1])?;
            let v = self.add("diagonal", Op::Slice, &[flat, starts, ends, axes, steps])?;
            others.push(l);
            op = Operand { v, labels: others };
        }
        Ok(op)
    }

    /// Sums out `drop` (labels of `op`).
    fn sum_out(&mut self, op: Operand, drop: &[Label]) -> Result<Operand, OnnxError> {
        if drop.is_empty() {
            return Ok(op);
        }
        let axes: Vec<i64> = (0..op.labels.len())
            .filter(|&i| drop.contains(&op.labels[i]))
            .map(|i| i as i64)
            .collect();
        let v = self.add(
            "sum",
            Op::ReduceSum {
                axes: Some(axes),
                keepdims: false,
            },
            &[op.v],
        )?;
        let labels = op
            .labels
            .into_iter()
            .filter(|l| !drop.contains(l))
            .collect();
        Ok(Operand { v, labels })
    }

    /// The size of the group of `labels` in `op` (the product of their dims), as a reshape
    /// target entry.
    fn extent(&self, op: &Operand, labels: &[Label]) -> Extent {
        let axes: Vec<usize> = labels
            .iter()
            .map(|l| op.labels.iter().position(|m| m == l).unwrap_or(0))
            .collect();
        let ty = self.cx.ty(op.v);
        let mut n = 1i64;
        for &a in &axes {
            match ty.shape[a].known().and_then(|d| i64::try_from(d).ok()) {
                Some(d) => n = n.saturating_mul(d),
                None => return Extent::Symbolic(op.v, axes),
            }
        }
        Extent::Known(n)
    }

    /// The shape tensor of a reshape to `parts`: a constant when at most one part is
    /// symbolic (that one is `-1`), else the symbolic parts are read at run time (`shape` of
    /// their axes, multiplied) and concatenated with the static ones.
    fn target(&mut self, parts: &[Extent]) -> Result<Value, OnnxError> {
        let symbolic = parts
            .iter()
            .filter(|p| matches!(p, Extent::Symbolic(..)))
            .count();
        let fixed = |p: &Extent| match p {
            Extent::Same => 0,
            Extent::Known(n) => *n,
            Extent::Symbolic(..) => -1,
        };
        if symbolic <= 1 {
            let shape: Vec<i64> = parts.iter().map(fixed).collect();
            return self.ints("shape", &shape);
        }
        let mut pieces: Vec<Value> = Vec::new();
        let mut run: Vec<i64> = Vec::new();
        for p in parts {
            let Extent::Symbolic(v, axes) = p else {
                run.push(fixed(p));
                continue;
            };
            if !run.is_empty() {
                let c = self.ints("shape", &std::mem::take(&mut run))?;
                pieces.push(c);
            }
            let ty = self.cx.ty(*v).clone();
            let mut size: Option<Value> = None;
            let mut known = 1i64;
            for &a in axes {
                if let Some(d) = ty.shape[a].known().and_then(|d| i64::try_from(d).ok()) {
                    known = known.saturating_mul(d);
                    continue;
                }
                let (start, end) = (a as i64, Some(a as i64 + 1));
                let d = self.add("dim", Op::Shape { start, end }, &[*v])?;
                size = Some(match size {
                    None => d,
                    Some(s) => self.add("size", Op::Mul, &[s, d])?,
                });
            }
            let size = match size {
                Some(s) if known == 1 => s,
                Some(s) => {
                    let k = self.ints("factor", &[known])?;
                    self.add("size", Op::Mul, &[s, k])?
                }
                None => self.ints("shape", &[known])?,
            };
            pieces.push(size);
        }
        if !run.is_empty() {
            let c = self.ints("shape", &run)?;
            pieces.push(c);
        }
        self.add("shape", Op::Concat { axis: 0 }, &pieces)
    }

    /// Contracts `a` with `b`, keeping the labels `keep` says later work needs.
    fn contract(
        &mut self,
        a: Operand,
        b: Operand,
        keep: &dyn Fn(&Label) -> bool,
    ) -> Result<Operand, OnnxError> {
        let in_b = |l: &Label| b.labels.contains(l);
        let in_a = |l: &Label| a.labels.contains(l);
        let a_drop: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|l| !in_b(l) && !keep(l))
            .collect();
        let b_drop: Vec<Label> = b
            .labels
            .iter()
            .copied()
            .filter(|l| !in_a(l) && !keep(l))
            .collect();
        let a = self.sum_out(a, &a_drop)?;
        let b = self.sum_out(b, &b_drop)?;
        let batch: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|l| b.labels.contains(l) && keep(l))
            .collect();
        let sum: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|l| b.labels.contains(l) && !keep(l))
            .collect();
        let a_own: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|l| !b.labels.contains(l))
            .collect();
        let b_own: Vec<Label> = b
            .labels
            .iter()
            .copied()
            .filter(|l| !a.labels.contains(l))
            .collect();
        let a = self.transpose(a, &[batch.clone(), a_own.clone(), sum.clone()].concat())?;
        let b = self.transpose(b, &[batch.clone(), sum.clone(), b_own.clone()].concat())?;
        let mut labels = batch.clone();
        labels.extend(&a_own);
        labels.extend(&b_own);
        // A product with a matrix (`btd,de->bte`, a Linear layer): matmul broadcasts `a`'s
        // leading dims itself, so they stay as they are, symbolic or not.
        if batch.is_empty() && sum.len() == 1 && b_own.len() == 1 {
            let v = self.add("matmul", Op::MatMul, &[a.v, b.v])?;
            return Ok(Operand { v, labels });
        }
        let (m, k, kb, n) = (
            self.extent(&a, &a_own),
            self.extent(&a, &sum),
            self.extent(&b, &sum),
            self.extent(&b, &b_own),
        );
        if let (Extent::Known(k), Extent::Known(kb)) = (&k, &kb)
            && k != kb
        {
            return Err(self.cx.err(format!(
                "the contracted dims have {k} elements in one operand and {kb} in the other"
            )));
        }
        let nb = batch.len();
        let matrix = |rows: Extent, cols: Extent| {
            let mut s: Vec<Extent> = (0..nb).map(|_| Extent::Same).collect();
            s.extend([rows, cols]);
            s
        };
        let av = if a_own.len() == 1 && sum.len() == 1 {
            a.v
        } else {
            let s = self.target(&matrix(m, k))?;
            self.add("reshape", Op::Reshape { allowzero: false }, &[a.v, s])?
        };
        let bv = if b_own.len() == 1 && sum.len() == 1 {
            b.v
        } else {
            let s = self.target(&matrix(kb, n))?;
            self.add("reshape", Op::Reshape { allowzero: false }, &[b.v, s])?
        };
        let prod = self.add("matmul", Op::MatMul, &[av, bv])?;
        let v = if a_own.len() == 1 && b_own.len() == 1 {
            prod
        } else {
            let mut shape: Vec<Extent> = (0..nb).map(|_| Extent::Same).collect();
            for l in &a_own {
                shape.push(self.extent(&a, std::slice::from_ref(l)));
            }
            for l in &b_own {
                shape.push(self.extent(&b, std::slice::from_ref(l)));
            }
            let s = self.target(&shape)?;
            self.add("reshape", Op::Reshape { allowzero: false }, &[prod, s])?
        };
        Ok(Operand { v, labels })
    }
}

/// One entry of a reshape's target shape.
enum Extent {
    /// The input's dim at the same position (a batch dim; `0` in the shape).
    Same,
    /// A static size.
    Known(i64),
    /// The product of these axes of this value, some of them symbolic.
    Symbolic(Value, Vec<usize>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equations_expand_ellipses_and_implicit_outputs() {
        let l = |s: &str| s.chars().map(|c| c as Label).collect::<Vec<_>>();
        let (ins, out) = parse("ij,jk", &[2, 2]).unwrap();
        assert_eq!((ins, out), (vec![l("ij"), l("jk")], l("ik")));
        let (ins, out) = parse("...ii ->...i", &[3]).unwrap();
        assert_eq!(ins[0], vec![ELLIPSIS, 'i' as Label, 'i' as Label]);
        assert_eq!(out, vec![ELLIPSIS, 'i' as Label]);
        // Right-aligned ellipses: rank 4 vs rank 3 operands.
        let (ins, _) = parse("...ij,...jk->...ik", &[4, 3]).unwrap();
        assert_eq!(ins[0][..2], [ELLIPSIS, ELLIPSIS + 1]);
        assert_eq!(ins[1][..1], [ELLIPSIS + 1]);
        assert!(parse("ij,jk", &[2]).is_err());
        assert!(parse("ij->k", &[2]).is_err());
        assert!(parse("i1->i", &[2]).is_err());
        assert!(parse("ijk->i", &[2]).is_err());
    }
}
