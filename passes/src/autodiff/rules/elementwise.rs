//! Elementwise rules, read from the elementwise table (`fp8c_ir::elementwise`): each row's
//! derivative is one formula per input (`fp8c_ir::formula`), turned here into IR nodes; the
//! gradients of broadcasting ops are then summed back over the axes each operand was
//! broadcast along. A row whose op is piecewise constant (`floor`) gives no gradient; a row
//! marked not differentiable (comparisons, logic, `mod`, `gelu_grad`) has no rule, and
//! autodiff reports its reason if a gradient must flow through it — never a silent zero.
//!
//! Subgradients at kinks follow PyTorch (the formulas say so): relu'(0) = 0, |x|'(0) = 0,
//! clip passes the gradient where `min ≤ x ≤ max`, max/min send it to the first operand on
//! ties.

use super::{At, Grads, R};
use crate::autodiff::driver::adjoint_dtype;
use crate::autodiff::emit::Emit;
use fp8c_ir::elementwise::{Grad, row};
use fp8c_ir::formula::{BinOp, Expr};
use fp8c_ir::{Attr, AttrMap, DType, ElementwiseOp, Op, Support, Value};

/// Whether the op has a gradient (from its row).
pub(super) fn support(o: ElementwiseOp<'_>) -> Support {
    match row(o).grad {
        Grad::Formulas(_) | Grad::Zero(_) => Support::Yes,
        Grad::NotDifferentiable(why) => Support::No(why),
    }
}

pub(super) fn vjp(o: ElementwiseOp<'_>, e: &mut Emit<'_>, at: &At<'_>) -> R<Option<Grads>> {
    let fs = match row(o).grad {
        Grad::NotDifferentiable(_) => return Ok(None),
        Grad::Zero(_) => return Ok(Some(vec![None; at.ins.len()])),
        Grad::Formulas(fs) => fs,
    };
    let mut out = vec![None; at.ins.len()];
    for (i, f) in fs.iter().enumerate() {
        if f.is_empty() || !at.want(i) || i >= at.ins.len() {
            continue;
        }
        let expr = fp8c_ir::formula::parse(f)
            .map_err(|m| at.err(format!("internal: derivative formula `{f}`: {m}")))?;
        let mut cx = Formula {
            e,
            at,
            input: i,
            k: 0,
        };
        let d = cx.emit(&expr)?;
        out[i] = Some(e.sum_to(&at.n(&format!("d{i}")), d, &e.dims(at.ins[i])?)?);
    }
    Ok(Some(out))
}

/// Emits one derivative formula for input `input` of the node `at`.
struct Formula<'a, 'e, 'g> {
    e: &'a mut Emit<'g>,
    at: &'a At<'e>,
    input: usize,
    /// Counter for node names.
    k: usize,
}

impl Formula<'_, '_, '_> {
    /// A fresh backward node name: `{node}.d{input}.f{k}`.
    fn name(&mut self) -> String {
        self.k += 1;
        self.at.n(&format!("d{}.f{}", self.input, self.k))
    }

    /// The adjoint arriving at the output.
    fn dy(&self) -> R<Value> {
        self.at.dy()
    }

    fn var(&mut self, v: &str) -> R<Value> {
        let ins = self.at.ins;
        let pick = |i: usize| {
            ins.get(i).copied().ok_or_else(|| {
                self.at.err(format!(
                    "internal: formula reads input {i}, which is absent"
                ))
            })
        };
        match v {
            "x" | "a" => pick(0),
            "b" => pick(1),
            "c" => pick(2),
            "y" => Ok(self.at.outs[0]),
            "dy" => self.dy(),
            attr => {
                let value = self
                    .at
                    .op
                    .attrs()
                    .into_iter()
                    .find(|(n, _)| *n == attr)
                    .and_then(|(_, a)| match a {
                        Attr::Float(f) => Some(f),
                        Attr::Int(i) => Some(i as f64),
                        _ => None,
                    })
                    .ok_or_else(|| {
                        self.at
                            .err(format!("internal: formula name `{attr}` is not a number"))
                    })?;
                let dt = self.e.dtype(self.dy()?);
                let name = self.name();
                self.e.scalar(&name, dt, value)
            }
        }
    }

    /// A number as a scalar of `dt`.
    fn num(&mut self, v: f64, dt: DType) -> R<Value> {
        let name = self.name();
        self.e.scalar(&name, dt, v)
    }

    /// Emits `x`, with numbers taking the dtype `like` (the other operand's).
    fn emit_like(&mut self, x: &Expr, like: Option<DType>) -> R<Value> {
        match x {
            Expr::Num(v) => {
                let dt = match like {
                    Some(d) => d,
                    None => self.e.dtype(self.dy()?),
                };
                self.num(*v, dt)
            }
            _ => self.emit(x),
        }
    }

    fn emit(&mut self, x: &Expr) -> R<Value> {
        match x {
            Expr::Num(v) => {
                let dt = self.e.dtype(self.dy()?);
                self.num(*v, dt)
            }
            Expr::Var(v) => self.var(v),
            Expr::Neg(a) => {
                let a = self.emit(a)?;
                let name = self.name();
                self.e.neg(&name, a)
            }
            Expr::Bin(op, l, r) => {
                let (l, r) = match (&**l, &**r) {
                    (Expr::Num(_), r) => {
                        let r = self.emit(r)?;
                        let dt = self.e.dtype(r);
                        (self.emit_like(l, Some(dt))?, r)
                    }
                    (l, r) => {
                        let l = self.emit(l)?;
                        let dt = self.e.dtype(l);
                        (l, self.emit_like(r, Some(dt))?)
                    }
                };
                let op = match op {
                    BinOp::Add => Op::Add,
                    BinOp::Sub => Op::Sub,
                    BinOp::Mul => Op::Mul,
                    BinOp::Div => Op::Div,
                    BinOp::Gt => Op::Greater,
                    BinOp::Lt => Op::Less,
                    BinOp::Ge => Op::GreaterOrEqual,
                    BinOp::Le => Op::LessOrEqual,
                    BinOp::Eq => Op::Equal,
                };
                let name = self.name();
                self.e.op(&name, op, &[l, r])
            }
            Expr::Call(f, args) if f == "cast" => {
                let [v, like] = args.as_slice() else {
                    return Err(self.at.err("internal: cast(e, v) takes two arguments"));
                };
                let v = self.emit(v)?;
                let like = self.emit(like)?;
                let to = adjoint_dtype(self.e.dtype(like));
                let name = self.name();
                self.e.cast(&name, v, to)
            }
            Expr::Call(f, args) => {
                // Value arguments first; numbers then take the dtype of the last value (the
                // data operand of `where(c, t, 0)`).
                let mut vals: Vec<Option<Value>> = Vec::with_capacity(args.len());
                let mut like = None;
                for a in args {
                    if matches!(a, Expr::Num(_)) {
                        vals.push(None);
                    } else {
                        let v = self.emit(a)?;
                        let dt = self.e.dtype(v);
                        if dt != DType::Bool {
                            like = Some(dt);
                        }
                        vals.push(Some(v));
                    }
                }
                let mut inputs = Vec::with_capacity(args.len());
                for (a, v) in args.iter().zip(vals) {
                    inputs.push(match v {
                        Some(v) => v,
                        None => self.emit_like(a, like)?,
                    });
                }
                let op = self.call_op(f)?;
                let name = self.name();
                self.e.op(&name, op, &inputs)
            }
        }
    }

    /// The IR op a formula calls, taking the differentiated op's attributes of the same
    /// names (`gelu_grad` takes gelu's `approximate`).
    fn call_op(&self, f: &str) -> R<Op> {
        let wanted: Vec<&'static str> = Op::examples()
            .into_iter()
            .find(|o| o.name() == f)
            .map(|o| o.attrs().into_iter().map(|(n, _)| n).collect())
            .ok_or_else(|| {
                self.at
                    .err(format!("internal: formula calls unknown op `{f}`"))
            })?;
        let attrs = AttrMap(
            self.at
                .op
                .attrs()
                .into_iter()
                .filter(|(n, _)| wanted.contains(n))
                .map(|(n, a)| (n.to_string(), a))
                .collect(),
        );
        Op::from_parts(f, attrs).map_err(|m| self.at.err(format!("internal: formula: {m}")))
    }
}
