//! The elementwise family: unary math, broadcasting binary arithmetic, comparisons and logic,
//! `where`, `clip`, `cast` (kernel in `cast.rs`) and the GELU gradient `gelu_grad` (which,
//! like the reductions, computes in f64 and rounds once).
//!
//! Everything comes from the op's row in the IR's elementwise table (`fp8c_ir::elementwise`,
//! shared with type inference, the CUDA code generator and autodiff): its kind picks the path
//! (unary, predicate, broadcasting binary, comparison, logic), its types and flags the integer
//! handling, and its closures the scalar functions — a kernel here is handed to the table's
//! `dispatch_*` functions, which call it back with the op's closure (so every loop is
//! monomorphised). Own code exists only for the `Own` ops (`not`, `pow`, `mod`, `where`,
//! `clip`, `cast`, `gelu_grad`) and the f32 fast paths of `erf` and `gelu`.
//!
//! Floats compute in f32 (f16/bf16 widened exactly, rounded once on store) and f64 in f64.
//! Integers use wrapping two's-complement arithmetic (numpy's behaviour on overflow); integer
//! `div` truncates toward zero (C, as ONNX) and division by zero is an error, not a panic.
//! `max`/`min`/`clip` propagate NaN from the data input.

use crate::args;
use crate::broadcast::{Plan, broadcast_shapes, zip2};
use crate::cast;
use crate::cast::store_f64;
use crate::data::{Data, Elem, float_values_f64, par_map, same_type};
use crate::error::{ErrorKind, Fail, KResult, dtype_err, shape_err, value_err};
use fp8c_ir::elementwise::{
    self as table, BinaryKernel, CompareKernel, INV_SQRT_2PI, Int, Kind, Own, PredicateKernel,
    Real, SQRT_2_OVER_PI, Types, UnaryKernel,
};
use fp8c_ir::{DType, ElementwiseOp as E, GeluApprox, Support, Tensor};
use std::borrow::Cow;

/// Evaluates an op of the elementwise family, by its row's kind.
pub(crate) fn eval(op: E<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let row = table::row(op);
    let out = match row.kind {
        Kind::Unary => {
            let [x] = args(inputs)?;
            unary(op, row.types, x)?
        }
        Kind::Predicate => {
            let [x] = args(inputs)?;
            classify(op, x)?
        }
        Kind::Binary | Kind::Variadic => binary(op, Binary::Arith(Arith::Table), inputs)?,
        Kind::Compare => binary(op, Binary::Compare, inputs)?,
        Kind::Logic => binary(op, Binary::Logic, inputs)?,
        Kind::Own(own) => match own {
            Own::Not => {
                let [x] = args(inputs)?;
                not(x)?
            }
            Own::Mod { fmod } => binary(op, Binary::Arith(Arith::Mod { fmod }), inputs)?,
            Own::Pow => {
                let [a, b] = inputs else {
                    return Fail::arity("2", inputs.len());
                };
                pow(a, b)?
            }
            Own::Where => where_(inputs)?,
            Own::Clip => clip(inputs)?,
            Own::Cast { to, saturate } => {
                let [x] = args(inputs)?;
                cast::cast(x, to, saturate)?
            }
            Own::GeluGrad { approximate } => {
                let [x, dy] = args(inputs)?;
                gelu_grad(x, dy, approximate)?
            }
        },
    };
    Ok(vec![out])
}

/// Whether the evaluator computes `op`: the `Own` ops have their code here; the other kinds
/// need the row's function of their kind (a row without one is an internal error).
pub(crate) fn support(op: E<'_>) -> Support {
    let row = table::row(op);
    let has = match row.kind {
        Kind::Unary => {
            row.types == Types::Any || table::dispatch_unary::<f32, _>(op, Probe).is_some()
        }
        Kind::Predicate => table::dispatch_predicate::<f32, _>(op, Probe).is_some(),
        Kind::Binary | Kind::Variadic => table::dispatch_binary::<f32, _>(op, Probe).is_some(),
        Kind::Compare => table::dispatch_compare::<f32, _>(op, Probe).is_some(),
        Kind::Logic => table::dispatch_logic(op, Probe).is_some(),
        Kind::Own(_) => true,
    };
    if has {
        Support::Yes
    } else {
        Support::No("internal: the elementwise row has no function of its kind")
    }
}

/// A kernel that runs nothing: asks the table whether it has a function.
struct Probe;

impl<T> UnaryKernel<T> for Probe {
    type Out = ();
    fn run(self, _: impl Fn(T) -> T + Send + Sync + Copy) {}
}

impl<T> BinaryKernel<T> for Probe {
    type Out = ();
    fn run(self, _: impl Fn(T, T) -> T + Send + Sync + Copy) {}
}

impl<T> CompareKernel<T> for Probe {
    type Out = ();
    fn run(self, _: impl Fn(T, T) -> bool + Send + Sync + Copy) {}
}

impl<T> PredicateKernel<T> for Probe {
    type Out = ();
    fn run(self, _: impl Fn(T) -> bool + Send + Sync + Copy) {}
}

/// The table has no function of the kind the evaluator asked for: the two disagree about
/// the op's row, an internal error.
fn no_row(op: E<'_>, what: &str) -> Fail {
    Fail::new(
        ErrorKind::Unsupported,
        format!("internal: the elementwise table has no {what} function for {op:?}"),
    )
}

// ---------------------------------------------------------------- kernels the table calls back

/// A unary map (or predicate) over a slice, in parallel when large.
struct Map<'a, T>(&'a [T]);

impl<T: Copy + Send + Sync> UnaryKernel<T> for Map<'_, T> {
    type Out = Vec<T>;
    fn run(self, f: impl Fn(T) -> T + Send + Sync + Copy) -> Vec<T> {
        par_map(self.0, |&x| f(x))
    }
}

impl<T: Copy + Send + Sync> PredicateKernel<T> for Map<'_, T> {
    type Out = Vec<bool>;
    fn run(self, f: impl Fn(T) -> bool + Send + Sync + Copy) -> Vec<bool> {
        par_map(self.0, |&x| f(x))
    }
}

/// Two same-typed slices zipped through a broadcast plan.
struct Zip<'a, T> {
    plan: &'a Plan,
    a: &'a [T],
    b: &'a [T],
}

impl<T: Copy + Default + Send + Sync> BinaryKernel<T> for Zip<'_, T> {
    type Out = Vec<T>;
    fn run(self, f: impl Fn(T, T) -> T + Send + Sync + Copy) -> Vec<T> {
        self.plan.map2(self.a, self.b, f)
    }
}

impl<T: Copy + Send + Sync> CompareKernel<T> for Zip<'_, T> {
    type Out = Vec<bool>;
    fn run(self, f: impl Fn(T, T) -> bool + Send + Sync + Copy) -> Vec<bool> {
        self.plan.map2(self.a, self.b, f)
    }
}

// ---------------------------------------------------------------- unary

/// The integer types a unary op accepts besides the floats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ints {
    /// None: floats only.
    None,
    /// The signed integers (wrapping, as numpy).
    Signed,
    /// The signed integers and u8.
    SignedAndU8,
}

/// A unary op by its row's types: [`Types::Any`] is the identity (x itself, its storage
/// shared); floats run the float closure; integers the integer closure (signed ones for a
/// [`Types::Signed`] row, signed ones and u8 for a numeric one: u16, u32 and u64 are refused
/// here) or, for a numeric row without one, the f64 function truncated toward zero.
fn unary(op: E<'_>, types: Types, x: &Tensor) -> KResult<Tensor> {
    if types == Types::Any {
        return Ok(x.clone());
    }
    let ints = match (
        table::dispatch_unary_int::<i64, _>(op, Probe).is_some(),
        types,
    ) {
        (false, Types::Numeric) => return truncated(op, x),
        (false, _) => Ints::None,
        (true, Types::Signed) => Ints::Signed,
        (true, _) => Ints::SignedAndU8,
    };
    unary_table(op, x, ints)
}

/// A unary op whose functions are the table's (`float`, and `int` where `ints` allows).
fn unary_table(op: E<'_>, x: &Tensor, ints: Ints) -> KResult<Tensor> {
    fn float<F: Real>(op: E<'_>, v: &[F]) -> KResult<Vec<F>> {
        table::dispatch_unary(op, Map(v)).ok_or_else(|| no_row(op, "unary float"))
    }
    fn int<I: Int>(op: E<'_>, v: &[I]) -> KResult<Vec<I>> {
        table::dispatch_unary_int(op, Map(v)).ok_or_else(|| no_row(op, "unary integer"))
    }
    let signed = ints != Ints::None;
    let out = match Data::load(x)? {
        // erf and exact GELU on f32 vectorise apart from erff's exp branch (`erf.rs`).
        Data::F32(v) if matches!(op, E::Erf) => Data::F32(Cow::from(crate::erf::erf(&v))),
        Data::F32(v)
            if matches!(
                op,
                E::Gelu {
                    approximate: GeluApprox::None
                }
            ) =>
        {
            Data::F32(Cow::from(crate::erf::gelu(&v)))
        }
        Data::F32(v)
            if matches!(
                op,
                E::Gelu {
                    approximate: GeluApprox::Tanh
                }
            ) =>
        {
            Data::F32(Cow::from(par_map(&v, |&x| {
                fp8c_ir::elementwise::gelu_tanh(x)
            })))
        }
        Data::F32(v) => Data::F32(Cow::from(float(op, &v)?)),
        Data::F64(v) => Data::F64(Cow::from(float(op, &v)?)),
        Data::I64(v) if signed => Data::I64(Cow::from(int(op, &v)?)),
        Data::I32(v) if signed => Data::I32(Cow::from(int(op, &v)?)),
        Data::I16(v) if signed => Data::I16(Cow::from(int(op, &v)?)),
        Data::I8(v) if signed => Data::I8(Cow::from(int(op, &v)?)),
        Data::U8(v) if ints == Ints::SignedAndU8 => Data::U8(Cow::from(int(op, &v)?)),
        other if signed => {
            return dtype_err!(
                "expects a float or signed integer input, got {}",
                other.type_name()
            );
        }
        other => return dtype_err!("expects a float input, got {}", other.type_name()),
    };
    out.store(x.dtype(), x.shape().to_vec())
}

/// A numeric unary op without an integer closure (ONNX Erf): floats by the table; integers
/// as the row's f64 function of the value, truncated toward zero (erf: 0 or ±1).
fn truncated(op: E<'_>, x: &Tensor) -> KResult<Tensor> {
    if x.dtype().is_float() && !x.dtype().is_fp8() {
        return unary_table(op, x, Ints::None);
    }
    table::dispatch_unary::<f64, _>(op, Truncated(Data::load(x)?))
        .ok_or_else(|| no_row(op, "unary f64"))??
        .store(x.dtype(), x.shape().to_vec())
}

/// Integer data mapped through an f64 function, truncated back ([`truncated`]).
struct Truncated<'a>(Data<'a>);

impl<'a> UnaryKernel<f64> for Truncated<'a> {
    type Out = KResult<Data<'a>>;
    fn run(self, f: impl Fn(f64) -> f64 + Send + Sync + Copy) -> KResult<Data<'a>> {
        int_unary(self.0, f)
    }
}

/// `not`: bool to bool.
fn not(x: &Tensor) -> KResult<Tensor> {
    let out = match Data::load(x)? {
        Data::Bool(v) => Data::Bool(Cow::from(par_map(&v, |&b| !b))),
        d => return dtype_err!("expects a bool input, got {}", d.type_name()),
    };
    out.store(x.dtype(), x.shape().to_vec())
}

/// `is_nan` and `is_inf`: float inputs (FP8 decoded) to bool, by the table's predicate.
fn classify(op: E<'_>, x: &Tensor) -> KResult<Tensor> {
    let v = crate::fp8_codes::float_values_any(x, "input")?;
    let out = table::dispatch_predicate(op, Map(&v)).ok_or_else(|| no_row(op, "predicate"))?;
    Data::Bool(Cow::from(out)).store(DType::Bool, x.shape().to_vec())
}

// ---------------------------------------------------------------- binary

/// How a broadcasting binary op computes.
#[derive(Clone, Copy)]
enum Binary {
    /// Numeric operands, result of their type.
    Arith(Arith),
    /// A comparison: operands of any one type (bool included: false < true), bool result.
    Compare,
    /// A connective on bools.
    Logic,
}

/// Where an arithmetic op's functions come from.
#[derive(Clone, Copy)]
enum Arith {
    /// The table, for floats and integers.
    Table,
    /// C's fmod on floats (Rust's `%`: the sign of the dividend, `fmod` must be set); on
    /// integers C's remainder (`fmod`) or Python's (the sign of the divisor).
    Mod { fmod: bool },
}

/// Evaluates a broadcasting binary op (and the table's variadic ones, `max`/`min`, folded
/// left).
fn binary(op: E<'_>, how: Binary, inputs: &[&Tensor]) -> KResult<Tensor> {
    if table::row(op).kind == Kind::Variadic {
        let Some((first, rest)) = inputs.split_first() else {
            return Fail::arity("at least 1", 0);
        };
        let mut acc = (*first).clone();
        if rest.is_empty() {
            // A lone input is still checked for a numeric type.
            let _ = Data::load(&acc)?;
            if acc.dtype() == DType::Bool {
                return dtype_err!("expects numeric inputs, got bool");
            }
        }
        for t in rest {
            acc = binary_pair(op, how, &acc, t)?;
        }
        return Ok(acc);
    }
    let [a, b] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    binary_pair(op, how, a, b)
}

fn binary_pair(op: E<'_>, how: Binary, a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    if a.dtype() != b.dtype() {
        return dtype_err!("input dtypes differ: {} and {}", a.dtype(), b.dtype());
    }
    let dtype = a.dtype();
    let out_shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    let plan = Plan::new(&out_shape, &[a.shape(), b.shape()])?;
    let (da, db) = (Data::load(a)?, Data::load(b)?);
    let out = match how {
        Binary::Arith(rule) => {
            if matches!(da, Data::Bool(_)) {
                return dtype_err!("expects numeric inputs, got bool");
            }
            if let Arith::Mod { fmod: false } = rule
                && matches!(da, Data::F32(_) | Data::F64(_))
            {
                return dtype_err!("float inputs need fmod=1 (ONNX: fmod=0 is for integers)");
            }
            if table::row(op).flags.zero_divisor {
                check_no_int_zero(&db)?;
            }
            return arith(op, rule, &plan, da, db)?.store(dtype, out_shape);
        }
        Binary::Compare => compare(op, &plan, da, db)?,
        Binary::Logic => {
            let (Data::Bool(a), Data::Bool(b)) = (da, db) else {
                return dtype_err!("expects bool inputs, got {dtype}");
            };
            table::dispatch_logic(
                op,
                Zip {
                    plan: &plan,
                    a: &a,
                    b: &b,
                },
            )
            .ok_or_else(|| no_row(op, "logic"))?
        }
    };
    Data::Bool(Cow::from(out)).store(DType::Bool, out_shape)
}

/// Arithmetic on two same-typed numeric operands.
fn arith(
    op: E<'_>,
    rule: Arith,
    plan: &Plan,
    da: Data<'_>,
    db: Data<'_>,
) -> KResult<Data<'static>> {
    fn float<F: Real + Default>(
        op: E<'_>,
        rule: Arith,
        plan: &Plan,
        a: &[F],
        b: &[F],
    ) -> KResult<Vec<F>> {
        match rule {
            Arith::Table => table::dispatch_binary(op, Zip { plan, a, b })
                .ok_or_else(|| no_row(op, "binary float")),
            Arith::Mod { .. } => Ok(plan.map2(a, b, |x, y| x % y)),
        }
    }
    fn int<I: Int + IntOps>(
        op: E<'_>,
        rule: Arith,
        plan: &Plan,
        a: &[I],
        b: &[I],
    ) -> KResult<Vec<I>> {
        match rule {
            Arith::Table => table::dispatch_binary_int(op, Zip { plan, a, b })
                .ok_or_else(|| no_row(op, "binary integer")),
            Arith::Mod { fmod: true } => Ok(plan.map2(a, b, IntOps::rem_c)),
            Arith::Mod { fmod: false } => Ok(plan.map2(a, b, IntOps::rem_floor)),
        }
    }
    Ok(match (da, db) {
        (Data::F32(a), Data::F32(b)) => Data::F32(Cow::from(float(op, rule, plan, &a, &b)?)),
        (Data::F64(a), Data::F64(b)) => Data::F64(Cow::from(float(op, rule, plan, &a, &b)?)),
        (Data::I64(a), Data::I64(b)) => Data::I64(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::I32(a), Data::I32(b)) => Data::I32(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::I16(a), Data::I16(b)) => Data::I16(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::I8(a), Data::I8(b)) => Data::I8(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::U8(a), Data::U8(b)) => Data::U8(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::U16(a), Data::U16(b)) => Data::U16(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::U32(a), Data::U32(b)) => Data::U32(Cow::from(int(op, rule, plan, &a, &b)?)),
        (Data::U64(a), Data::U64(b)) => Data::U64(Cow::from(int(op, rule, plan, &a, &b)?)),
        (a, b) => {
            return dtype_err!(
                "expects numeric inputs, got {} and {}",
                a.type_name(),
                b.type_name()
            );
        }
    })
}

/// A comparison of two same-typed operands, by the table's predicate.
fn compare(op: E<'_>, plan: &Plan, da: Data, db: Data) -> KResult<Vec<bool>> {
    fn go<T: PartialOrd + Copy + Send + Sync>(
        op: E<'_>,
        plan: &Plan,
        a: &[T],
        b: &[T],
    ) -> KResult<Vec<bool>> {
        table::dispatch_compare(op, Zip { plan, a, b }).ok_or_else(|| no_row(op, "comparison"))
    }
    match (da, db) {
        (Data::F32(a), Data::F32(b)) => go(op, plan, &a, &b),
        (Data::F64(a), Data::F64(b)) => go(op, plan, &a, &b),
        (Data::I64(a), Data::I64(b)) => go(op, plan, &a, &b),
        (Data::I32(a), Data::I32(b)) => go(op, plan, &a, &b),
        (Data::I16(a), Data::I16(b)) => go(op, plan, &a, &b),
        (Data::I8(a), Data::I8(b)) => go(op, plan, &a, &b),
        (Data::U8(a), Data::U8(b)) => go(op, plan, &a, &b),
        (Data::U16(a), Data::U16(b)) => go(op, plan, &a, &b),
        (Data::U32(a), Data::U32(b)) => go(op, plan, &a, &b),
        (Data::U64(a), Data::U64(b)) => go(op, plan, &a, &b),
        (Data::Bool(a), Data::Bool(b)) => go(op, plan, &a, &b),
        (a, b) => dtype_err!("cannot compare {} with {}", a.type_name(), b.type_name()),
    }
}

/// Integer arithmetic with ONNX semantics, for every integer element type.
pub(crate) trait IntOps: Elem + Ord {
    /// Remainder with the sign of the dividend (C `%`, ONNX `fmod=1`).
    fn rem_c(self, rhs: Self) -> Self;
    /// Remainder with the sign of the divisor (Python `%`, ONNX `fmod=0`).
    fn rem_floor(self, rhs: Self) -> Self;
    /// `self` raised to an integer power with wrapping multiplication; negative exponents
    /// give the truncated reciprocal (only ±1 survive).
    fn pow_int(self, e: i64) -> Self;
    fn as_f64(self) -> f64;
    /// `f64 → Self` truncating toward zero, saturating, NaN to 0 (Rust `as`).
    fn from_f64_trunc(v: f64) -> Self;
}

macro_rules! impl_int_ops {
    (signed: $($t:ty),*) => {$(
        impl IntOps for $t {
            fn rem_c(self, rhs: Self) -> Self { self.wrapping_rem(rhs) }
            fn rem_floor(self, rhs: Self) -> Self {
                let r = self.wrapping_rem(rhs);
                if r != 0 && ((r < 0) != (rhs < 0)) { r.wrapping_add(rhs) } else { r }
            }
            fn pow_int(self, e: i64) -> Self {
                if e < 0 {
                    return match self { 1 => 1, -1 => if e % 2 == 0 { 1 } else { -1 }, _ => 0 };
                }
                pow_wrapping(self, e as u64, 1, |a, b| a.wrapping_mul(b))
            }
            fn as_f64(self) -> f64 { self as f64 }
            fn from_f64_trunc(v: f64) -> Self { v as $t }
        }
    )*};
    (unsigned: $($t:ty),*) => {$(
        impl IntOps for $t {
            fn rem_c(self, rhs: Self) -> Self { self % rhs }
            fn rem_floor(self, rhs: Self) -> Self { self % rhs }
            fn pow_int(self, e: i64) -> Self {
                if e < 0 {
                    return if self == 1 { 1 } else { 0 };
                }
                pow_wrapping(self, e as u64, 1, |a, b| a.wrapping_mul(b))
            }
            fn as_f64(self) -> f64 { self as f64 }
            fn from_f64_trunc(v: f64) -> Self { v as $t }
        }
    )*};
}
impl_int_ops!(signed: i64, i32, i16, i8);
impl_int_ops!(unsigned: u8, u16, u32, u64);

fn pow_wrapping<T: Copy>(mut base: T, mut e: u64, one: T, mul: impl Fn(T, T) -> T) -> T {
    let mut acc = one;
    while e > 0 {
        if e & 1 == 1 {
            acc = mul(acc, base);
        }
        base = mul(base, base);
        e >>= 1;
    }
    acc
}

/// Applies an f64 function to integer data, truncating the result back to the type.
fn int_unary(data: Data, f: impl Fn(f64) -> f64 + Sync + Send) -> KResult<Data> {
    Ok(match data {
        Data::I64(v) => Data::I64(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::I32(v) => Data::I32(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::I16(v) => Data::I16(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::I8(v) => Data::I8(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::U8(v) => Data::U8(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::U16(v) => Data::U16(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::U32(v) => Data::U32(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        Data::U64(v) => Data::U64(Cow::from(par_map(&v, |&x| {
            IntOps::from_f64_trunc(f(x.as_f64()))
        }))),
        other => return dtype_err!("expects a numeric input, got {}", other.type_name()),
    })
}

fn check_no_int_zero(d: &Data) -> KResult<()> {
    let zero = match d {
        Data::I64(v) => v.contains(&0),
        Data::I32(v) => v.contains(&0),
        Data::I16(v) => v.contains(&0),
        Data::I8(v) => v.contains(&0),
        Data::U8(v) => v.contains(&0),
        Data::U16(v) => v.contains(&0),
        Data::U32(v) => v.contains(&0),
        Data::U64(v) => v.contains(&0),
        _ => false,
    };
    if zero {
        return value_err!("integer division by zero");
    }
    Ok(())
}

/// `x^e` in f32: a square is `x·x`, the correctly rounded result (as PyTorch computes
/// `pow(x, 2)`; a general `powf` may round a square that lies on a tie the other way), and a
/// cube `(x·x)·x`, as PyTorch and onnxruntime compute `pow(x, 3)` (GELU's tanh form in GPT-2).
/// The CUDA kernel (`ew_pow`) and the MLIR emitter take the same branches.
#[inline(always)]
fn pow_f32(x: f32, e: f32) -> f32 {
    if e == 2.0 {
        x * x
    } else if e == 3.0 {
        (x * x) * x
    } else {
        x.powf(e)
    }
}

/// ONNX Pow: the output has the base's type; the exponent may have another numeric type.
/// Float bases compute `powf` in their compute type; integer bases with integer exponents
/// use exact wrapping integer powers; integer bases with float exponents compute in f64 and
/// truncate toward zero (as numpy's `astype`).
fn pow(a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    let dtype = a.dtype();
    // An f32 base under one exponent (a norm's square, GELU's cube, their gradients'
    // powers): read in place and mapped (vectorised), with pow_f32's results.
    if let (Ok(x), 1) = (a.as_slice::<f32>(), b.len())
        && b.dtype().is_float()
    {
        let e = b.to_f64_vec().map_err(|m| Fail::new(ErrorKind::DType, m))?[0] as f32;
        let shape = broadcast_shapes(&[a.shape(), b.shape()])?;
        let v = match e {
            // Branch-free maps that vectorise.
            2.0 => UnaryKernel::run(Map(x), |x| pow_f32(x, 2.0)),
            3.0 => UnaryKernel::run(Map(x), |x| pow_f32(x, 3.0)),
            // powf(x, 1) is x (exactly: x is representable).
            1.0 => x.to_vec(),
            _ => UnaryKernel::run(Map(x), move |x| pow_f32(x, e)),
        };
        return Data::F32(Cow::from(v)).store(dtype, shape);
    }
    let (da, db) = (Data::load(a)?, Data::load(b)?);
    if matches!(da, Data::Bool(_)) || matches!(db, Data::Bool(_)) {
        return dtype_err!(
            "expects numeric inputs, got {} and {}",
            a.dtype(),
            b.dtype()
        );
    }
    let (sa, sb) = ((a.shape()), (b.shape()));
    let exp_f64: Vec<f64> = match &db {
        Data::F64(v) => v.clone().into_owned(),
        Data::F32(v) => v.iter().map(|&x| x as f64).collect(),
        _ => Vec::new(),
    };
    let exp_int: Option<Vec<i64>> = match &db {
        Data::F64(_) | Data::F32(_) => None,
        _ => Some(b.to_i64_vec().map_err(|m| Fail::new(ErrorKind::DType, m))?),
    };
    macro_rules! int_base {
        ($v:expr, $var:ident) => {{
            let (v, s) = match &exp_int {
                Some(e) => zip2((&$v, sa), (e, sb), |x, e| x.pow_int(e))?,
                None => zip2((&$v, sa), (&exp_f64, sb), |x, e| {
                    IntOps::from_f64_trunc(x.as_f64().powf(e))
                })?,
            };
            (Data::$var(Cow::from(v)), s)
        }};
    }
    let (out, shape) = match da {
        Data::F32(x) => {
            let (v, s) = match (&db, &exp_int) {
                (Data::F32(e), _) => zip2((&x, sa), (e, sb), pow_f32)?,
                (_, Some(e)) => zip2((&x, sa), (e, sb), |x, e| pow_f32(x, e as f32))?,
                _ => zip2((&x, sa), (&exp_f64, sb), |x, e| pow_f32(x, e as f32))?,
            };
            (Data::F32(Cow::from(v)), s)
        }
        Data::F64(x) => {
            let (v, s) = match &exp_int {
                Some(e) => zip2((&x, sa), (e, sb), |x, e| x.powf(e as f64))?,
                None => zip2((&x, sa), (&exp_f64, sb), |x, e| x.powf(e))?,
            };
            (Data::F64(Cow::from(v)), s)
        }
        Data::I64(v) => int_base!(v, I64),
        Data::I32(v) => int_base!(v, I32),
        Data::I16(v) => int_base!(v, I16),
        Data::I8(v) => int_base!(v, I8),
        Data::U8(v) => int_base!(v, U8),
        Data::U16(v) => int_base!(v, U16),
        Data::U32(v) => int_base!(v, U32),
        Data::U64(v) => int_base!(v, U64),
        Data::Bool(_) => unreachable!("bool is rejected above"),
    };
    out.store(dtype, shape)
}

/// `where(cond, a, b)`: any dtype for `a` and `b` (selection copies raw elements).
fn where_(inputs: &[&Tensor]) -> KResult<Tensor> {
    let [c, a, b] = inputs else {
        return Fail::arity("3", inputs.len());
    };
    if c.dtype() != DType::Bool {
        return dtype_err!("the condition must be bool, got {}", c.dtype());
    }
    if a.dtype() != b.dtype() {
        return dtype_err!(
            "the branches' dtypes differ: {} and {}",
            a.dtype(),
            b.dtype()
        );
    }
    let shape = broadcast_shapes(&[c.shape(), a.shape(), b.shape()])?;
    // One condition for every element (a training step's guard: keep the new state or the
    // old): the chosen branch is the result when it already has the output's shape, shared,
    // not copied.
    if c.len() == 1 {
        let chosen = if c.bytes()[0] != 0 { a } else { b };
        if chosen.shape() == shape.as_slice() {
            return Ok((*chosen).clone());
        }
    }
    let plan = Plan::new(&shape, &[c.shape(), a.shape(), b.shape()])?;
    let cond = c.bytes();
    let dtype = a.dtype();
    match dtype.size() {
        1 => where_typed::<u8>(&plan, cond, a, b, shape),
        2 => where_typed::<u16>(&plan, cond, a, b, shape),
        4 => where_typed::<u32>(&plan, cond, a, b, shape),
        _ => where_typed::<u64>(&plan, cond, a, b, shape),
    }
}

/// Selection of raw elements of `T`'s size (any dtype of that size), without decoding.
fn where_typed<T: bytemuck::Pod + Default + Send + Sync>(
    plan: &Plan,
    cond: &[u8],
    a: &Tensor,
    b: &Tensor,
    shape: Vec<u64>,
) -> KResult<Tensor> {
    let dt = |m| Fail::new(ErrorKind::DType, m);
    let (a_v, b_v) = (
        a.as_slice::<T>().map_err(dt)?,
        b.as_slice::<T>().map_err(dt)?,
    );
    let out = plan.map3(cond, a_v, b_v, |c, x, y| if c != 0 { x } else { y });
    Tensor::from_vec(a.dtype(), shape, out).map_err(|m| Fail::new(ErrorKind::TooLarge, m))
}

/// `clip(x, min, max)`: bounds are one-element tensors of x's dtype (absent ones: no bound).
/// `min(max(x, lo), hi)`, so `lo > hi` gives `hi` everywhere (ONNX); NaN in x stays NaN.
fn clip(inputs: &[&Tensor]) -> KResult<Tensor> {
    let Some((x, bounds)) = inputs.split_first() else {
        return Fail::arity("1 to 3", 0);
    };
    if bounds.len() > 2 {
        return Fail::arity("1 to 3", inputs.len());
    }
    for b in bounds {
        if b.dtype() != x.dtype() {
            return dtype_err!(
                "bounds must have the input's dtype {}, got {}",
                x.dtype(),
                b.dtype()
            );
        }
        if b.len() != 1 {
            return shape_err!("bounds must hold one element, got shape {:?}", b.shape());
        }
    }
    let lo = bounds.first().map(|t| Data::load(t)).transpose()?;
    let hi = bounds.get(1).map(|t| Data::load(t)).transpose()?;
    // An absent bound is the type's extreme, which no comparison below crosses (a NaN bound
    // too compares false: no bound), so the loop has no branch on it and vectorises.
    macro_rules! go {
        ($v:expr, $var:ident, $t:ty, $min:expr, $max:expr) => {{
            let get = |d: &Option<Data>, none: $t| match d {
                Some(Data::$var(b)) => b[0],
                _ => none,
            };
            let (lo, hi): ($t, $t) = (get(&lo, $min), get(&hi, $max));
            Data::$var(Cow::from(par_map(&$v, |&x| {
                let y = if x < lo { lo } else { x };
                if y > hi { hi } else { y }
            })))
        }};
    }
    let out = match Data::load(x)? {
        Data::F32(v) => go!(v, F32, f32, f32::NEG_INFINITY, f32::INFINITY),
        Data::F64(v) => go!(v, F64, f64, f64::NEG_INFINITY, f64::INFINITY),
        Data::I64(v) => go!(v, I64, i64, i64::MIN, i64::MAX),
        Data::I32(v) => go!(v, I32, i32, i32::MIN, i32::MAX),
        Data::I16(v) => go!(v, I16, i16, i16::MIN, i16::MAX),
        Data::I8(v) => go!(v, I8, i8, i8::MIN, i8::MAX),
        Data::U8(v) => go!(v, U8, u8, u8::MIN, u8::MAX),
        Data::U16(v) => go!(v, U16, u16, u16::MIN, u16::MAX),
        Data::U32(v) => go!(v, U32, u32, u32::MIN, u32::MAX),
        Data::U64(v) => go!(v, U64, u64, u64::MIN, u64::MAX),
        Data::Bool(_) => return dtype_err!("expects a numeric input, got bool"),
    };
    out.store(x.dtype(), x.shape().to_vec())
}

/// `gelu` backward: `dy · gelu'(x)`.
fn gelu_grad(x: &Tensor, dy: &Tensor, approximate: GeluApprox) -> KResult<Tensor> {
    same_type(dy, x, "dy", "x")?;
    let xv = float_values_f64(x, "x")?;
    let dv = float_values_f64(dy, "dy")?;
    let d = |x: f64| match approximate {
        GeluApprox::None => {
            0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
                + x * INV_SQRT_2PI * (-0.5 * x * x).exp()
        }
        GeluApprox::Tanh => {
            let t = (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh();
            0.5 * (1.0 + t)
                + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        }
    };
    let out = par_map(
        &xv.iter()
            .zip(&dv)
            .map(|(&a, &b)| (a, b))
            .collect::<Vec<_>>(),
        |&(x, g)| g * d(x),
    );
    store_f64(out, x.dtype(), x.shape())
}
