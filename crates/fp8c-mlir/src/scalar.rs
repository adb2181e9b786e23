//! Scalar arithmetic inside `linalg.generic` bodies: fp8c's elementwise ops, and the FP8
//! encode / decode as integer bit arithmetic (ports of fp8c-core's `encode_bits` and decode
//! table, the same as the CUDA kernels' `fp8_encode` / `fp8_decode`), since MLIR's
//! `arith.truncf` / `arith.extf` to and from f8 types do not lower to LLVM.

use fp8c_ir::{DType, Op};
use melior::{
    Context,
    dialect::arith::{self, CmpfPredicate, CmpiPredicate},
    ir::{
        Block, BlockLike, Location, Type, Value,
        attribute::{FloatAttribute, IntegerAttribute},
        operation::OperationBuilder,
        r#type::IntegerType,
    },
};

/// How `arg_max` / `arg_min` and `top_k` compare two elements: exactly as fp8c-eval's `arg_extreme`
/// (floats in f64, where f16/bf16/f32 widen exactly; i64 exactly; u64 through f64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgKeys {
    /// Ordered float comparisons (a NaN never beats or ties) after widening to f32 / f64.
    Float,
    /// u64 values compared as their f64 roundings (the CPU's `as f64`).
    U64AsF64,
    /// Integer comparisons, unsigned or not.
    Int(bool),
}

/// Builds scalar operations at the end of one block.
pub(crate) struct Scalar<'c, 'b> {
    pub ctx: &'c Context,
    pub block: &'b Block<'c>,
    pub loc: Location<'c>,
}

impl<'c, 'b> Scalar<'c, 'b> {
    fn push(&self, op: melior::ir::Operation<'c>) -> Value<'c, 'b> {
        self.block
            .append_operation(op)
            .result(0)
            .expect("one result")
            .into()
    }

    fn i32t(&self) -> Type<'c> {
        IntegerType::new(self.ctx, 32).into()
    }

    pub fn f32(&self, v: f32) -> Value<'c, 'b> {
        let t = Type::float32(self.ctx);
        self.push(arith::constant(
            self.ctx,
            FloatAttribute::new(self.ctx, t, f64::from(v)).into(),
            self.loc,
        ))
    }

    pub fn i32(&self, v: u32) -> Value<'c, 'b> {
        self.push(arith::constant(
            self.ctx,
            IntegerAttribute::new(self.i32t(), i64::from(v as i32)).into(),
            self.loc,
        ))
    }

    fn named(&self, name: &str, operands: &[Value<'c, '_>], result: Type<'c>) -> Value<'c, 'b> {
        self.push(
            OperationBuilder::new(name, self.loc)
                .add_operands(operands)
                .add_results(&[result])
                .build()
                .expect("valid scalar op"),
        )
    }

    pub(crate) fn inferred(&self, name: &str, operands: &[Value<'c, '_>]) -> Value<'c, 'b> {
        self.push(
            OperationBuilder::new(name, self.loc)
                .add_operands(operands)
                .enable_result_type_inference()
                .build()
                .expect("valid scalar op"),
        )
    }

    pub fn bitcast(&self, v: Value<'c, '_>, to: Type<'c>) -> Value<'c, 'b> {
        self.named("arith.bitcast", &[v], to)
    }
    pub fn bits(&self, v: Value<'c, '_>) -> Value<'c, 'b> {
        self.bitcast(v, self.i32t())
    }
    pub fn float(&self, v: Value<'c, '_>) -> Value<'c, 'b> {
        self.bitcast(v, Type::float32(self.ctx))
    }
    pub fn int(&self, name: &str, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred(name, &[a, b])
    }
    pub fn cmpi(&self, p: CmpiPredicate, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::cmpi(self.ctx, p, a, b, self.loc))
    }
    pub fn cmpf(&self, p: CmpfPredicate, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::cmpf(self.ctx, p, a, b, self.loc))
    }
    pub fn select(&self, c: Value<'c, '_>, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::select(c, a, b, self.loc))
    }
    pub fn and(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.int("arith.andi", a, b)
    }
    pub fn or(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.int("arith.ori", a, b)
    }

    /// Whether [`Scalar::elementwise`] builds `op`.
    pub fn covers(op: &Op) -> bool {
        matches!(
            op,
            Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Max
                | Op::Min
                | Op::Neg
                | Op::Exp
                | Op::Tanh
                | Op::Relu
                | Op::Sqrt
                | Op::Reciprocal
                | Op::Sigmoid
                | Op::Sin
                | Op::Cos
                | Op::Log
                | Op::Erf
                | Op::Pow
                | Op::Gelu { .. }
                | Op::Abs
                | Op::Floor
                | Op::Ceil
                | Op::Round
                | Op::Sign
                | Op::LeakyRelu { .. }
        )
    }

    /// `op` over `a` (f32), a variadic `max` / `min` folded left to right as the CPU does.
    pub fn variadic(&self, op: &Op, a: &[Value<'c, '_>]) -> Value<'c, 'b> {
        let mut y = self.elementwise(op, a).expect("covered");
        if matches!(op, Op::Max | Op::Min) {
            for &v in &a[2.min(a.len())..] {
                y = self.elementwise(op, &[y, v]).expect("covered");
            }
        }
        y
    }

    /// Whether [`Scalar::int_elementwise`] builds `op`.
    pub fn covers_int(op: &Op) -> bool {
        matches!(
            op,
            Op::Add
                | Op::Sub
                | Op::Mul
                | Op::Div
                | Op::Max
                | Op::Min
                | Op::Neg
                | Op::Abs
                | Op::Relu
        )
    }

    /// An elementwise op on integers as fp8c-eval computes it: wrapping `add` / `sub` / `mul` /
    /// `neg` / `abs`, `div` truncating toward zero (`MIN / −1` wraps to MIN), `max` / `min`
    /// (variadic, folded), `relu`. A zero divisor, which fails the CPU's run, divides by 1
    /// here (integer division by zero must not trap in the JIT code).
    pub fn int_elementwise(&self, op: &Op, a: &[Value<'c, '_>], unsigned: bool) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        let ty = a[0].r#type();
        let k = |v: i64| {
            self.push(arith::constant(
                self.ctx,
                IntegerAttribute::new(ty, v).into(),
                self.loc,
            ))
        };
        let (zero, one) = (k(0), k(1));
        let lt0 = |x| self.cmpi(CmpiPredicate::Slt, x, zero);
        let fold = |name: &str| {
            let mut y = self.int(name, a[0], a[1]);
            for &v in &a[2..] {
                y = self.int(name, y, v);
            }
            y
        };
        match op {
            Op::Add => self.int("arith.addi", a[0], a[1]),
            Op::Sub => self.int("arith.subi", a[0], a[1]),
            Op::Mul => self.int("arith.muli", a[0], a[1]),
            Op::Max => fold(if unsigned {
                "arith.maxui"
            } else {
                "arith.maxsi"
            }),
            Op::Min => fold(if unsigned {
                "arith.minui"
            } else {
                "arith.minsi"
            }),
            Op::Neg => self.int("arith.subi", zero, a[0]),
            Op::Abs | Op::Relu if unsigned => self.int("arith.addi", a[0], zero),
            Op::Abs => {
                let neg = self.int("arith.subi", zero, a[0]);
                self.select(lt0(a[0]), neg, a[0])
            }
            Op::Relu => self.select(lt0(a[0]), zero, a[0]),
            Op::Div => {
                let b0 = self.cmpi(CmpiPredicate::Eq, a[1], zero);
                let d = self.select(b0, one, a[1]);
                if unsigned {
                    self.int("arith.divui", a[0], d)
                } else {
                    // x / −1 is −x, wrapping (divsi would trap on MIN / −1).
                    let m1 = self.cmpi(CmpiPredicate::Eq, d, k(-1));
                    let d = self.select(m1, one, d);
                    let q = self.int("arith.divsi", a[0], d);
                    let neg = self.int("arith.subi", zero, a[0]);
                    self.select(m1, neg, q)
                }
            }
            _ => unreachable!("covers_int"),
        }
    }

    /// Integer `mod`: C's remainder (`fmod`, the dividend's sign) or Python's (the divisor's
    /// sign), wrapping as fp8c-eval's; a zero divisor (an error on the CPU) and `MIN % −1`
    /// (0) cannot trap.
    pub fn int_rem(
        &self,
        a: Value<'c, '_>,
        b: Value<'c, '_>,
        unsigned: bool,
        fmod: bool,
    ) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        let ty = a.r#type();
        let k = |v: i64| {
            self.push(arith::constant(
                self.ctx,
                IntegerAttribute::new(ty, v).into(),
                self.loc,
            ))
        };
        let (zero, one) = (k(0), k(1));
        let b0 = self.cmpi(CmpiPredicate::Eq, b, zero);
        let d = self.select(b0, one, b);
        if unsigned {
            return self.int("arith.remui", a, d);
        }
        let m1 = self.cmpi(CmpiPredicate::Eq, d, k(-1));
        let d = self.select(m1, one, d);
        let r = self.int("arith.remsi", a, d);
        if fmod {
            return r;
        }
        // A nonzero remainder whose sign differs from the divisor's moves by the divisor.
        let nz = self.cmpi(CmpiPredicate::Ne, r, zero);
        let rn = self.cmpi(CmpiPredicate::Slt, r, zero);
        let bn = self.cmpi(CmpiPredicate::Slt, d, zero);
        let differ = self.int("arith.xori", rn, bn);
        let fix = self.and(nz, differ);
        let moved = self.int("arith.addi", r, d);
        self.select(fix, moved, r)
    }

    /// Whether [`Scalar::program_op`] builds `op`: the elementwise ops, float comparisons and
    /// `where`, the instructions of the fused ops' elementwise programs (`EwExpr`).
    pub fn covers_program(op: &Op) -> bool {
        Self::covers(op)
            || matches!(
                op,
                Op::Equal
                    | Op::Less
                    | Op::LessOrEqual
                    | Op::Greater
                    | Op::GreaterOrEqual
                    | Op::Where
            )
    }

    /// One instruction of an elementwise program: f32 operands (a comparison gives an i1, which
    /// `where` selects on), or None for an op [`Scalar::covers_program`] does not cover.
    pub fn program_op(&self, op: &Op, a: &[Value<'c, '_>]) -> Option<Value<'c, 'b>> {
        let p = match op {
            Op::Equal => CmpfPredicate::Oeq,
            Op::Less => CmpfPredicate::Olt,
            Op::LessOrEqual => CmpfPredicate::Ole,
            Op::Greater => CmpfPredicate::Ogt,
            Op::GreaterOrEqual => CmpfPredicate::Oge,
            Op::Where => return Some(self.select(a[0], a[1], a[2])),
            _ => return self.elementwise(op, a),
        };
        Some(self.cmpf(p, a[0], a[1]))
    }

    /// Runs an elementwise program whose inputs are `input(i)` (fp8c-ir `EwExpr`: each
    /// instruction reads inputs and earlier results); its value, or `input(0)` when empty.
    pub fn program(
        &self,
        insts: &[fp8c_ir::EwInst],
        input: impl Fn(u32) -> Value<'c, 'b>,
    ) -> Value<'c, 'b> {
        let mut temps: Vec<Value<'c, 'b>> = Vec::new();
        for inst in insts {
            let args: Vec<Value> = inst
                .args
                .iter()
                .map(|arg| match arg {
                    fp8c_ir::EwArg::Input(i) => input(*i),
                    fp8c_ir::EwArg::Temp(t) => temps[*t as usize],
                })
                .collect();
            temps.push(self.program_op(&inst.op, &args).expect("covered"));
        }
        temps.last().copied().unwrap_or_else(|| input(0))
    }

    /// An f32 `v` rounded to the narrower float type `t` and widened back (exact).
    pub fn round_through(&self, v: Value<'c, '_>, t: Type<'c>) -> Value<'c, 'b> {
        let n = self.named("arith.truncf", &[v], t);
        self.named("arith.extf", &[n], Type::float32(self.ctx))
    }

    /// [`Scalar::program`] on tensors of the narrow float type `t` (f16 / bf16), held as
    /// f32: each instruction computes in f32 and its float result is rounded to `t`, as the
    /// CPU evaluates a program instruction by instruction on `t` tensors (comparisons stay
    /// i1).
    pub fn program_rounded(
        &self,
        insts: &[fp8c_ir::EwInst],
        t: Type<'c>,
        input: impl Fn(u32) -> Value<'c, 'b>,
    ) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        let f32t = Type::float32(self.ctx);
        let mut temps: Vec<Value<'c, 'b>> = Vec::new();
        for inst in insts {
            let args: Vec<Value> = inst
                .args
                .iter()
                .map(|arg| match arg {
                    fp8c_ir::EwArg::Input(i) => input(*i),
                    fp8c_ir::EwArg::Temp(t) => temps[*t as usize],
                })
                .collect();
            let v = self.program_op(&inst.op, &args).expect("covered");
            temps.push(if v.r#type() == f32t {
                self.round_through(v, t)
            } else {
                v
            });
        }
        temps.last().copied().unwrap_or_else(|| input(0))
    }

    /// An fp8c elementwise op on f32 scalars (the ops the emitter covers), or None.
    pub fn elementwise(&self, op: &Op, a: &[Value<'c, '_>]) -> Option<Value<'c, 'b>> {
        let l = self.loc;
        Some(match op {
            Op::Add => self.push(arith::addf(a[0], a[1], l)),
            Op::Sub => self.push(arith::subf(a[0], a[1], l)),
            Op::Mul => self.push(arith::mulf(a[0], a[1], l)),
            Op::Div => self.push(arith::divf(a[0], a[1], l)),
            // NaN-propagating, as fp8c's fmax_nan / fmin_nan.
            Op::Max => self.inferred("arith.maximumf", &[a[0], a[1]]),
            Op::Min => self.inferred("arith.minimumf", &[a[0], a[1]]),
            Op::Neg => self.push(arith::negf(a[0], l)),
            Op::Exp => self.exp_of(a[0]),
            Op::Tanh => self.tanh_of(a[0]),
            Op::Sqrt => self.inferred("math.sqrt", &[a[0]]),
            Op::Reciprocal => self.push(arith::divf(self.f32(1.0), a[0], l)),
            Op::Sin => self.inferred("math.sin", &[a[0]]),
            Op::Cos => self.inferred("math.cos", &[a[0]]),
            Op::Log => self.inferred("math.log", &[a[0]]),
            Op::Erf => self.inferred("math.erf", &[a[0]]),
            Op::Pow => {
                // A square is a·a and a cube (a·a)·a, as the CPU reference's pow_f32.
                let pw = self.inferred("math.powf", &[a[0], a[1]]);
                let sq = self.push(arith::mulf(a[0], a[0], l));
                let cube = self.push(arith::mulf(sq, a[0], l));
                let two = self.cmpf(CmpfPredicate::Oeq, a[1], self.f32(2.0));
                let three = self.cmpf(CmpfPredicate::Oeq, a[1], self.f32(3.0));
                let pw = self.select(three, cube, pw);
                self.select(two, sq, pw)
            }
            Op::Gelu { approximate } => {
                // The CPU's f32 formulas, operation for operation.
                let x = a[0];
                let mul = |p: Value<'c, '_>, q: Value<'c, '_>| self.push(arith::mulf(p, q, l));
                let half_x = mul(self.f32(0.5), x);
                let inner = match approximate {
                    fp8c_ir::GeluApprox::None => {
                        let t = mul(x, self.f32(std::f64::consts::FRAC_1_SQRT_2 as f32));
                        self.inferred("math.erf", &[t])
                    }
                    fp8c_ir::GeluApprox::Tanh => {
                        let cube = mul(mul(mul(self.f32(0.044715), x), x), x);
                        let t = self.push(arith::addf(x, cube, l));
                        let k = fp8c_ir::elementwise::SQRT_2_OVER_PI as f32;
                        self.tanh_of(mul(self.f32(k), t))
                    }
                };
                mul(half_x, self.push(arith::addf(self.f32(1.0), inner, l)))
            }
            Op::Sigmoid => {
                // As the CPU: e = exp(-|x|); x >= 0 ? 1 / (1 + e) : e / (1 + e).
                let one = self.f32(1.0);
                let abs = self.inferred("math.absf", &[a[0]]);
                let e = self.exp_of(self.push(arith::negf(abs, l)));
                let den = self.push(arith::addf(one, e, l));
                let pos = self.push(arith::divf(one, den, l));
                let negv = self.push(arith::divf(e, den, l));
                let ge = self.cmpf(CmpfPredicate::Oge, a[0], self.f32(0.0));
                self.select(ge, pos, negv)
            }
            Op::Relu => {
                // x < 0 ? 0 : x (NaN stays NaN, as the CPU's relu).
                let zero = self.f32(0.0);
                let lt = self.cmpf(CmpfPredicate::Olt, a[0], zero);
                self.select(lt, zero, a[0])
            }
            Op::Abs => self.inferred("math.absf", &[a[0]]),
            Op::Floor => self.inferred("math.floor", &[a[0]]),
            Op::Ceil => self.inferred("math.ceil", &[a[0]]),
            Op::Round => self.inferred("math.roundeven", &[a[0]]),
            Op::Sign => {
                // x > 0 ? 1 : x < 0 ? -1 : x (zeros and NaN stay), as the CPU's sign.
                let zero = self.f32(0.0);
                let gt = self.cmpf(CmpfPredicate::Ogt, a[0], zero);
                let lt = self.cmpf(CmpfPredicate::Olt, a[0], zero);
                let neg = self.select(lt, self.f32(-1.0), a[0]);
                self.select(gt, self.f32(1.0), neg)
            }
            Op::LeakyRelu { alpha } => {
                // x < 0 ? alpha·x : x, as the CPU's leaky_relu.
                let lt = self.cmpf(CmpfPredicate::Olt, a[0], self.f32(0.0));
                let scaled = self.push(arith::mulf(self.f32(*alpha), a[0], l));
                self.select(lt, scaled, a[0])
            }
            _ => return None,
        })
    }

    /// fp8c's `cast` between the non-FP8 types, Rust's `as` rules (the CPU reference's):
    /// float → float rounds to nearest even; int → float rounds; float → int truncates,
    /// saturates and maps NaN to 0; int → int wraps or extends by the source's signedness;
    /// → bool is `x != 0` (NaN is true); bool → 0 / 1.
    pub fn cast(
        &self,
        x: Value<'c, '_>,
        from: DType,
        to: DType,
        fe: Type<'c>,
        te: Type<'c>,
    ) -> Value<'c, 'b> {
        let float = |d: DType| matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
        let width = |d: DType| match d {
            DType::F64 | DType::I64 | DType::U64 => 64,
            DType::F32 | DType::I32 | DType::U32 => 32,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 16,
            DType::Bool => 1,
            _ => 8,
        };
        let unsigned = |d: DType| {
            matches!(
                d,
                DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool
            )
        };
        if to == DType::Bool {
            let zero = if float(from) {
                self.push(arith::constant(
                    self.ctx,
                    FloatAttribute::new(self.ctx, fe, 0.0).into(),
                    self.loc,
                ))
            } else {
                self.push(arith::constant(
                    self.ctx,
                    IntegerAttribute::new(fe, 0).into(),
                    self.loc,
                ))
            };
            return if float(from) {
                self.cmpf(CmpfPredicate::Une, x, zero)
            } else {
                self.cmpi(CmpiPredicate::Ne, x, zero)
            };
        }
        match (float(from), float(to)) {
            (true, true)
                if width(to) > width(from) || (from == DType::F16 && to == DType::BF16) =>
            {
                let wide = self.named("arith.extf", &[x], Type::float64(self.ctx));
                if to == DType::F64 {
                    wide
                } else {
                    self.named("arith.truncf", &[wide], te)
                }
            }
            (true, true) => self.named("arith.truncf", &[x], te),
            (false, true) => {
                let op = if unsigned(from) {
                    "arith.uitofp"
                } else {
                    "arith.sitofp"
                };
                self.named(op, &[x], te)
            }
            (true, false) => {
                // Saturate in f64 (exact for every bound up to 2^63), NaN to 0.
                let w = width(to);
                let (lo, hi) = if unsigned(to) {
                    (0.0, 2f64.powi(w))
                } else {
                    (-(2f64.powi(w - 1)), 2f64.powi(w - 1))
                };
                let xd = if from == DType::F64 {
                    self.named("arith.addf", &[x, self.f64c(0.0)], fe)
                } else {
                    self.named("arith.extf", &[x], Type::float64(self.ctx))
                };
                let op = if unsigned(to) {
                    "arith.fptoui"
                } else {
                    "arith.fptosi"
                };
                let lo_v = self.f64c(lo);
                let below = self.cmpf(CmpfPredicate::Ole, xd, lo_v);
                let at_least_hi = self.cmpf(CmpfPredicate::Oge, xd, self.f64c(hi));
                let nan = self.cmpf(CmpfPredicate::Uno, xd, xd);
                let safe = self.select(below, lo_v, xd);
                let safe = self.select(at_least_hi, lo_v, safe);
                let safe = self.select(nan, self.f64c(0.0), safe);
                let v = self.named(op, &[safe], te);
                let max = if unsigned(to) {
                    (1u128 << w) - 1
                } else {
                    (1u128 << (w - 1)) - 1
                };
                let max_v = self.push(arith::constant(
                    self.ctx,
                    IntegerAttribute::new(te, max as i64).into(),
                    self.loc,
                ));
                self.select(at_least_hi, max_v, v)
            }
            (false, false) => {
                let (wf, wt) = (width(from), width(to));
                if wt < wf {
                    self.named("arith.trunci", &[x], te)
                } else if wt > wf {
                    self.named(
                        if unsigned(from) {
                            "arith.extui"
                        } else {
                            "arith.extsi"
                        },
                        &[x],
                        te,
                    )
                } else {
                    x_same(self, x)
                }
            }
        }
    }

    /// An index value read from a tensor of indices: sign-extended to i64, a negative one
    /// counted from the end of an axis of `len`, clamped into `0..len` (the CPU reference
    /// fails the run on an out-of-range index; the JIT code must not read outside).
    pub fn axis_index(&self, v: Value<'c, '_>, len: i64) -> Value<'c, 'b> {
        let i64t: Type = IntegerType::new(self.ctx, 64).into();
        let v = self.named_pub("arith.extsi_or_self", v, i64t);
        let neg = self.cmpi(CmpiPredicate::Slt, v, self.i64c(0));
        let v = self.select(neg, self.int("arith.addi", v, self.i64c(len)), v);
        let v = self.int("arith.maxsi", v, self.i64c(0));
        let v = self.int("arith.minsi", v, self.i64c(len - 1));
        self.named_pub("arith.index_cast", v, Type::index(self.ctx))
    }

    /// `tensor.extract` of `t` at `coords` (index values).
    pub fn extract(
        &self,
        t: Value<'c, '_>,
        coords: &[Value<'c, '_>],
        elem: Type<'c>,
    ) -> Value<'c, 'b> {
        let mut operands = vec![t];
        operands.extend_from_slice(coords);
        self.named("tensor.extract", &operands, elem)
    }

    /// An i1 constant.
    pub fn bool_const(&self, v: bool) -> Value<'c, 'b> {
        let t: Type = IntegerType::new(self.ctx, 1).into();
        self.push(arith::constant(
            self.ctx,
            IntegerAttribute::new(t, i64::from(v)).into(),
            self.loc,
        ))
    }

    /// An `index` constant.
    pub fn index_const(&self, v: i64) -> Value<'c, 'b> {
        let t = Type::index(self.ctx);
        self.push(arith::constant(
            self.ctx,
            IntegerAttribute::new(t, v).into(),
            self.loc,
        ))
    }

    /// An i64 constant.
    pub fn i64c(&self, v: i64) -> Value<'c, 'b> {
        let t: Type = IntegerType::new(self.ctx, 64).into();
        self.push(arith::constant(
            self.ctx,
            IntegerAttribute::new(t, v).into(),
            self.loc,
        ))
    }

    /// `name` with one operand and result type `to`; "arith.extsi_or_self" sign-extends an
    /// integer narrower than `to` and passes one of the same width through.
    pub fn named_pub(&self, name: &str, v: Value<'c, '_>, to: Type<'c>) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        if name == "arith.extsi_or_self" {
            let w = IntegerType::try_from(v.r#type())
                .map(|t| t.width())
                .unwrap_or(64);
            if w == 64 {
                return self.int("arith.addi", v, self.i64c(0));
            }
            return self.named("arith.extsi", &[v], to);
        }
        self.named(name, &[v], to)
    }

    /// `linalg.index` of iteration dim `dim`.
    pub fn linalg_index(&self, dim: usize) -> Value<'c, 'b> {
        let i64t: Type = IntegerType::new(self.ctx, 64).into();
        self.push(
            OperationBuilder::new("linalg.index", self.loc)
                .add_attributes(&[(
                    melior::ir::Identifier::new(self.ctx, "dim"),
                    IntegerAttribute::new(i64t, dim as i64).into(),
                )])
                .add_results(&[Type::index(self.ctx)])
                .build()
                .expect("linalg.index"),
        )
    }

    /// fp8c-core `compute_scale` (TE's rules) from an f32 `amax` floored at `epsilon`: `fmt_max
    /// / amax / 2^margin`; amax 0, inf or NaN keeps `prev`; an infinite scale becomes f32::MAX;
    /// `power_2` clears the mantissa.
    pub fn scale_from_amax(
        &self,
        amax: Value<'c, '_>,
        prev: Value<'c, '_>,
        fmt: DType,
        margin: f32,
        epsilon: f32,
        power_2: bool,
    ) -> Value<'c, 'b> {
        // max(amax, epsilon): NaN stays NaN.
        let eps = self.f32(epsilon);
        let below = self.cmpf(CmpfPredicate::Olt, amax, eps);
        let amax = self.select(below, eps, amax);
        let fmax = self.f32(if fmt == DType::F8E4M3 { 448.0 } else { 57344.0 });
        let pow2_margin = self.f32(2f64.powf(f64::from(margin)) as f32);
        let sf = self.push(arith::divf(fmax, amax, self.loc));
        let sf = self.push(arith::divf(sf, pow2_margin, self.loc));
        // amax > 0 and finite, else the previous scale; an infinite scale becomes f32::MAX.
        let positive = self.cmpf(CmpfPredicate::Ogt, amax, self.f32(0.0));
        let finite = self.cmpf(CmpfPredicate::One, amax, self.f32(f32::INFINITY));
        let ok = self.and(positive, finite);
        let sf = self.select(ok, sf, prev);
        let abs = self.and(self.bits(sf), self.i32(0x7fff_ffff));
        let inf = self.cmpi(CmpiPredicate::Eq, abs, self.i32(0x7f80_0000));
        let scale = self.select(inf, self.f32(f32::MAX), sf);
        if power_2 {
            self.float(self.and(self.bits(scale), self.i32(0xff80_0000)))
        } else {
            scale
        }
    }

    /// The bits of `|x|` (an f32) as an i32: ordered like the magnitudes, NaNs above +inf.
    pub fn abs_bits(&self, x: Value<'c, '_>) -> Value<'c, 'b> {
        self.and(self.bits(x), self.i32(0x7fff_ffff))
    }

    /// fp8c's `dequantize` of one code: `decode(q) · scale_inv`, a NaN keeping its sign.
    pub fn dequantize(
        &self,
        fmt: DType,
        q: Value<'c, '_>,
        scale_inv: Value<'c, '_>,
    ) -> Value<'c, 'b> {
        let v = self.decode(fmt, q);
        self.mul_keep_nan(v, scale_inv)
    }

    /// A normalised row's mean and `1/√(var + ε)` (f64) from its sums `Σx` and `Σ(x − mean)²`
    /// over `n` elements, as fp8c-eval's layer_norm computes them.
    pub fn mean_inv(
        &self,
        sum: Value<'c, '_>,
        sq: Value<'c, '_>,
        n: f64,
        eps: f64,
    ) -> (Value<'c, 'b>, Value<'c, 'b>) {
        let mean = self.divf64(sum, self.f64c(n));
        let var = self.divf64(sq, self.f64c(n));
        let sd = self.sqrtf64(self.addf64(var, self.f64c(eps)));
        (mean, self.divf64(self.f64c(1.0), sd))
    }

    /// `x` rounded toward zero (`math.trunc`).
    pub fn trunc(&self, x: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred("math.trunc", &[x])
    }
    /// `a·b + c` rounded once (`math.fma`, LLVM's `llvm.fma`).
    pub fn fma(&self, a: Value<'c, '_>, b: Value<'c, '_>, c: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred("math.fma", &[a, b, c])
    }
    /// A float as f32, as the CPU's `f32_values` reads a tensor: f32 as is, f16 / bf16
    /// widened (exact), f64 rounded to nearest even.
    pub fn to_f32(&self, v: Value<'c, 'b>) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        let f32t = Type::float32(self.ctx);
        match v.r#type() {
            t if t == f32t => v,
            t if t == Type::float64(self.ctx) => self.truncf(v),
            _ => self.named("arith.extf", &[v], f32t),
        }
    }
    /// A float in its CPU compute type: f64 as is, anything narrower as [`Scalar::to_f32`].
    pub fn to_f32_or_f64(&self, v: Value<'c, 'b>) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        if v.r#type() == Type::float64(self.ctx) {
            v
        } else {
            self.to_f32(v)
        }
    }
    /// A float (f64 as is, narrower ones widened) or, with `signed_int`, a signed integer
    /// as f64 (exact up to 2^53).
    pub fn float_or_int_to_f64(&self, v: Value<'c, 'b>, signed_int: bool) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        let f64t = Type::float64(self.ctx);
        if signed_int {
            self.named("arith.sitofp", &[v], f64t)
        } else if v.r#type() == f64t {
            v
        } else {
            self.named("arith.extf", &[v], f64t)
        }
    }
    /// `(a before b, a ties b)` in top_k's total order of elements of type `elem` compared by
    /// `keys` (best first: larger, or smaller unless `largest`; NaN above every number and
    /// tying NaN; f16 / bf16 widened exactly).
    pub fn total_order(
        &self,
        keys: ArgKeys,
        largest: bool,
        elem: Type<'c>,
        a: Value<'c, 'b>,
        b: Value<'c, 'b>,
    ) -> (Value<'c, 'b>, Value<'c, 'b>) {
        use ArgKeys as K;
        match keys {
            K::Int(unsigned) => {
                let p = match (largest, unsigned) {
                    (true, true) => CmpiPredicate::Ugt,
                    (true, false) => CmpiPredicate::Sgt,
                    (false, true) => CmpiPredicate::Ult,
                    (false, false) => CmpiPredicate::Slt,
                };
                (self.cmpi(p, a, b), self.cmpi(CmpiPredicate::Eq, a, b))
            }
            K::Float | K::U64AsF64 => {
                let f32t = Type::float32(self.ctx);
                let wide = |v| {
                    if elem == f32t || elem == Type::float64(self.ctx) {
                        v
                    } else {
                        self.named("arith.extf", &[v], f32t)
                    }
                };
                let (a, b) = (wide(a), wide(b));
                let (na, nb) = (
                    self.cmpf(CmpfPredicate::Uno, a, a),
                    self.cmpf(CmpfPredicate::Uno, b, b),
                );
                let not = |v| self.int("arith.xori", v, self.bool_const(true));
                // largest: a > b, or a NaN over a number; smallest: a < b, or a number
                // under a NaN.
                let beats = if largest {
                    let gt = self.cmpf(CmpfPredicate::Ogt, a, b);
                    self.or(gt, self.and(na, not(nb)))
                } else {
                    let lt = self.cmpf(CmpfPredicate::Olt, a, b);
                    self.or(lt, self.and(not(na), nb))
                };
                let eq = self.cmpf(CmpfPredicate::Oeq, a, b);
                (beats, self.or(eq, self.and(na, nb)))
            }
        }
    }
    /// f32 → f64 (exact).
    pub fn extf(&self, v: Value<'c, '_>) -> Value<'c, 'b> {
        self.named("arith.extf", &[v], Type::float64(self.ctx))
    }
    /// f64 → f32, rounded to nearest even.
    pub fn truncf(&self, v: Value<'c, '_>) -> Value<'c, 'b> {
        self.named("arith.truncf", &[v], Type::float32(self.ctx))
    }
    pub fn f64c(&self, v: f64) -> Value<'c, 'b> {
        let t = Type::float64(self.ctx);
        self.push(arith::constant(
            self.ctx,
            FloatAttribute::new(self.ctx, t, v).into(),
            self.loc,
        ))
    }
    pub fn addf64(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::addf(a, b, self.loc))
    }
    pub fn subf64(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::subf(a, b, self.loc))
    }
    pub fn mulf64(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::mulf(a, b, self.loc))
    }
    pub fn logf64(&self, a: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred("math.log", &[a])
    }
    pub fn sqrtf64(&self, a: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred("math.sqrt", &[a])
    }
    pub fn divf64(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.push(arith::divf(a, b, self.loc))
    }
    /// max with NaN winning (the CPU's fold).
    pub fn maxf64(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred("arith.maximumf", &[a, b])
    }
    /// min with NaN winning (the CPU's fold).
    pub fn minf64(&self, a: Value<'c, '_>, b: Value<'c, '_>) -> Value<'c, 'b> {
        self.inferred("arith.minimumf", &[a, b])
    }
    /// `fp8c_ir::fmath`'s range reduction of an f64 `y`: `(2^n, r)` with `y = n·ln 2 + r`,
    /// the same operations in the same order (no contraction: arith ops carry no fastmath).
    fn fmath_reduce(&self, y: Value<'c, '_>) -> (Value<'c, 'b>, Value<'c, 'b>) {
        use fp8c_ir::fmath::{LN2_HI, LN2_LO, LOG2E, ROUNDER};
        let i64t: Type = IntegerType::new(self.ctx, 64).into();
        let k = self.addf64(self.mulf64(y, self.f64c(LOG2E)), self.f64c(ROUNDER));
        let n = self.subf64(k, self.f64c(ROUNDER));
        let bits = self.int(
            "arith.subi",
            self.bitcast(k, i64t),
            self.i64c(ROUNDER.to_bits() as i64),
        );
        let biased = self.int("arith.addi", bits, self.i64c(1023));
        let scale = self.bitcast(
            self.int("arith.shli", biased, self.i64c(52)),
            Type::float64(self.ctx),
        );
        let r = self.subf64(
            self.subf64(y, self.mulf64(n, self.f64c(LN2_HI))),
            self.mulf64(n, self.f64c(LN2_LO)),
        );
        (scale, r)
    }

    /// `fmath`'s `e^r − 1` polynomial (Horner over `fmath::EXPM1`).
    fn fmath_expm1(&self, r: Value<'c, '_>) -> Value<'c, 'b> {
        use fp8c_ir::fmath::EXPM1;
        let mut p = self.f64c(EXPM1[12]);
        for &c in EXPM1[..12].iter().rev() {
            p = self.addf64(self.mulf64(p, r), self.f64c(c));
        }
        self.mulf64(r, p)
    }

    /// f32 `e^x` as the CPU computes it (`fp8c_ir::fmath::exp_f32`), bit for bit.
    pub fn exp_f32(&self, x: Value<'c, '_>) -> Value<'c, 'b> {
        let (lo, hi) = fp8c_ir::fmath::EXP_RANGE;
        // maximumf/minimumf keep NaN, as the CPU's clamp does.
        let y = self.minf64(self.maxf64(self.extf(x), self.f64c(lo)), self.f64c(hi));
        let (scale, r) = self.fmath_reduce(y);
        let e = self.mulf64(self.addf64(self.f64c(1.0), self.fmath_expm1(r)), scale);
        self.truncf(e)
    }

    /// f32 `tanh(x)` as the CPU computes it (`fp8c_ir::fmath::tanh_f32`), bit for bit.
    pub fn tanh_f32(&self, x: Value<'c, '_>) -> Value<'c, 'b> {
        let a = self.inferred("math.absf", &[self.extf(x)]);
        let a = self.minf64(a, self.f64c(fp8c_ir::fmath::TANH_LIMIT));
        let (scale, r) = self.fmath_reduce(self.mulf64(self.f64c(2.0), a));
        let u = self.addf64(
            self.mulf64(scale, self.fmath_expm1(r)),
            self.subf64(scale, self.f64c(1.0)),
        );
        let t = self.truncf(self.divf64(u, self.addf64(u, self.f64c(2.0))));
        self.inferred("math.copysign", &[t, x])
    }

    /// `e^x` in x's type: f32 as [`Self::exp_f32`], f64 by `math.exp` (the CPU's `f64::exp`).
    pub fn exp_of(&self, x: Value<'c, '_>) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        if x.r#type() == Type::float32(self.ctx) {
            self.exp_f32(x)
        } else {
            self.inferred("math.exp", &[x])
        }
    }

    /// `tanh(x)` in x's type: f32 as [`Self::tanh_f32`], f64 by `math.tanh`.
    pub fn tanh_of(&self, x: Value<'c, '_>) -> Value<'c, 'b> {
        use melior::ir::ValueLike;
        if x.r#type() == Type::float32(self.ctx) {
            self.tanh_f32(x)
        } else {
            self.inferred("math.tanh", &[x])
        }
    }

    /// exp(f64(x) − m), m an f64.
    pub fn exp_diff(&self, x: Value<'c, '_>, m: Value<'c, '_>) -> Value<'c, 'b> {
        let xe = self.extf(x);
        let d = self.push(arith::subf(xe, m, self.loc));
        self.inferred("math.exp", &[d])
    }

    /// `x · s` with the host's NaN rule (a NaN operand comes out quieted with its sign), so
    /// that quantize(−NaN) keeps its sign whatever LLVM makes of a NaN product.
    pub fn mul_keep_nan(&self, x: Value<'c, '_>, s: Value<'c, '_>) -> Value<'c, 'b> {
        let quiet = |v: Value<'c, '_>| {
            let q = self.or(self.bits(v), self.i32(0x0040_0000));
            self.float(q)
        };
        let p = self.push(arith::mulf(x, s, self.loc));
        let s_nan = self.cmpf(CmpfPredicate::Uno, s, s);
        let p = self.select(s_nan, quiet(s), p);
        let x_nan = self.cmpf(CmpfPredicate::Uno, x, x);
        self.select(x_nan, quiet(x), p)
    }

    /// fp8c-core `encode_bits::<SAT>` of an f32: the FP8 code in the low 8 bits of an i32.
    pub fn encode(&self, fmt: DType, sat: bool, x: Value<'c, '_>) -> Value<'c, 'b> {
        let e4 = fmt == DType::F8E4M3;
        let (rebias, shift) = if e4 {
            (120u32 << 23, 20u32)
        } else {
            (112 << 23, 21)
        };
        let min_normal = if e4 { 0x3c80_0000 } else { 0x3880_0000 };
        let overflow_above = if e4 { 0x43e8_0000 } else { 0x476f_ffff };
        let magic = if e4 { 16384.0f32 } else { 128.0 };
        let (max_code, overflow_code, nan_code) = if e4 {
            (0x7e, 0x7f, 0x7f)
        } else {
            (0x7b, 0x7c, 0x7e)
        };
        let bits = self.bits(x);
        let sign = self.and(self.int("arith.shrui", bits, self.i32(24)), self.i32(0x80));
        let abs = self.and(bits, self.i32(0x7fff_ffff));
        let lsb = self.and(self.int("arith.shrui", abs, self.i32(shift)), self.i32(1));
        let half_minus_one = (1u32 << (shift - 1)) - 1;
        // (abs − rebias + half − 1 + lsb) >> shift, wrapping like the CPU.
        let t = self.int("arith.subi", abs, self.i32(rebias));
        let t = self.int("arith.addi", t, self.i32(half_minus_one));
        let t = self.int("arith.addi", t, lsb);
        let normal = self.int("arith.shrui", t, self.i32(shift));
        // Subnormals: |x| + magic rounded to nearest even by the f32 addition.
        let m = self.f32(magic);
        let sum = self.push(arith::addf(self.float(abs), m, self.loc));
        let subnormal = self.int("arith.subi", self.bits(sum), self.bits(m));
        let is_sub = self.cmpi(CmpiPredicate::Ult, abs, self.i32(min_normal));
        let mag = self.select(is_sub, subnormal, normal);
        let over = self.cmpi(CmpiPredicate::Ugt, abs, self.i32(overflow_above));
        let over_code = self.i32(if sat { max_code } else { overflow_code });
        let mag = self.select(over, over_code, mag);
        let nan = self.cmpi(CmpiPredicate::Ugt, abs, self.i32(0x7f80_0000));
        let mag = self.select(nan, self.i32(nan_code), mag);
        self.or(mag, sign)
    }

    /// fp8c-core `quantize`: encode(x · s); an infinite x gives NaN (E4M3) / ±inf (E5M2).
    /// Returns the code as a value of the FP8 type.
    pub fn quantize(
        &self,
        fmt: DType,
        sat: bool,
        x: Value<'c, '_>,
        s: Value<'c, '_>,
        f8: Type<'c>,
    ) -> Value<'c, 'b> {
        let c = self.encode(fmt, sat, self.mul_keep_nan(x, s));
        let bits = self.bits(x);
        let sign = self.and(self.int("arith.shrui", bits, self.i32(24)), self.i32(0x80));
        let inf_code = self.or(
            sign,
            self.i32(if fmt == DType::F8E4M3 { 0x7f } else { 0x7c }),
        );
        let abs = self.and(bits, self.i32(0x7fff_ffff));
        let is_inf = self.cmpi(CmpiPredicate::Eq, abs, self.i32(0x7f80_0000));
        let code = self.select(is_inf, inf_code, c);
        self.as_fp8(code, f8)
    }

    /// An FP8 code held in an i32 as a value of the FP8 type `f8`.
    fn as_fp8(&self, code: Value<'c, '_>, f8: Type<'c>) -> Value<'c, 'b> {
        let byte = self.named(
            "arith.trunci",
            &[code],
            IntegerType::new(self.ctx, 8).into(),
        );
        self.bitcast(byte, f8)
    }

    /// fp8c-core `encode_f32` (ONNX `Cast` to FP8: round to nearest even, `sat` clamps to the
    /// largest finite value, ±inf included): the code as a value of the FP8 type.
    pub fn cast_to_fp8(
        &self,
        fmt: DType,
        sat: bool,
        x: Value<'c, '_>,
        f8: Type<'c>,
    ) -> Value<'c, 'b> {
        let code = self.encode(fmt, sat, x);
        self.as_fp8(code, f8)
    }

    /// The exact f32 of an FP8 code (a value of the FP8 type); every NaN code gives the
    /// sign-preserving quiet NaN, as fp8c-core's decode table.
    pub fn decode(&self, fmt: DType, q: Value<'c, '_>) -> Value<'c, 'b> {
        let byte = self.bitcast(q, IntegerType::new(self.ctx, 8).into());
        let code = self.named("arith.extui", &[byte], self.i32t());
        let sign = self.int("arith.shli", self.and(code, self.i32(0x80)), self.i32(24));
        let e4 = fmt == DType::F8E4M3;
        let (eshift, emask, mmask, bias, mshift, sub_scale) = if e4 {
            (3, 0xf, 7, 120, 20, 2f32.powi(-9)) // m · 2^-9, exact
        } else {
            (2, 0x1f, 3, 112, 21, 2f32.powi(-16)) // m · 2^-16, exact
        };
        let e = self.and(
            self.int("arith.shrui", code, self.i32(eshift)),
            self.i32(emask),
        );
        let m = self.and(code, self.i32(mmask));
        let normal = self.or(
            sign,
            self.or(
                self.int(
                    "arith.shli",
                    self.int("arith.addi", e, self.i32(bias)),
                    self.i32(23),
                ),
                self.int("arith.shli", m, self.i32(mshift)),
            ),
        );
        let mf = self.named("arith.uitofp", &[m], Type::float32(self.ctx));
        let sub = self.push(arith::mulf(mf, self.f32(sub_scale), self.loc));
        let sub = self.or(self.bits(sub), sign);
        let e_zero = self.cmpi(CmpiPredicate::Eq, e, self.i32(0));
        let bits = self.select(e_zero, sub, normal);
        let special = if e4 {
            // S.1111.111 is NaN.
            let top = self.cmpi(
                CmpiPredicate::Eq,
                self.and(code, self.i32(0x7f)),
                self.i32(0x7f),
            );
            (top, self.or(sign, self.i32(0x7fc0_0000)))
        } else {
            // S.11111.mm: ±inf (mm = 0) or NaN.
            let top = self.cmpi(CmpiPredicate::Eq, e, self.i32(0x1f));
            let inf = self.cmpi(CmpiPredicate::Eq, m, self.i32(0));
            let v = self.select(inf, self.i32(0x7f80_0000), self.i32(0x7fc0_0000));
            (top, self.or(sign, v))
        };
        let bits = self.select(special.0, special.1, bits);
        self.float(bits)
    }
}

/// A value passed through unchanged (same width, another signedness: the bits are the value).
fn x_same<'c, 'b>(s: &Scalar<'c, 'b>, x: Value<'c, '_>) -> Value<'c, 'b> {
    use melior::ir::ValueLike;
    let zero = s.push(arith::constant(
        s.ctx,
        IntegerAttribute::new(x.r#type(), 0).into(),
        s.loc,
    ));
    s.int("arith.addi", x, zero)
}
