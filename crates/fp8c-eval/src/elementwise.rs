//! The elementwise family: unary math, broadcasting binary arithmetic, comparisons and logic,
//! `where`, `clip`, `cast` (kernel in `cast.rs`) and the GELU gradient `gelu_grad` (which,
//! like the reductions, computes in f64 and rounds once).
//!
//! Floats compute in f32 (f16/bf16 widened exactly, rounded once on store) and f64 in f64.
//! Integers use wrapping two's-complement arithmetic (numpy's behaviour on overflow); integer
//! `div` truncates toward zero (C, as ONNX) and division by zero is an error, not a panic.
//! `max`/`min`/`clip` propagate NaN from the data input.

use crate::args;
use crate::broadcast::{Plan, broadcast_shapes, zip2};
use crate::cast;
use crate::data::{Data, Elem, float_values_f64, par_map, same_type, store_f64, tensor};
use crate::error::{ErrorKind, Fail, KResult, dtype_err, shape_err, unsupported, value_err};
use fp8c_ir::{DType, ElementwiseOp as E, GeluApprox, Support, Tensor};

/// Evaluates an op of the elementwise family.
pub(crate) fn eval(op: E<'_>, inputs: &[&Tensor]) -> KResult<Vec<Tensor>> {
    let out = match op {
        E::Identity
        | E::Neg
        | E::Abs
        | E::Sqrt
        | E::Reciprocal
        | E::Exp
        | E::Log
        | E::Erf
        | E::Tanh
        | E::Sigmoid
        | E::Relu
        | E::Floor
        | E::Ceil
        | E::Sin
        | E::Cos
        | E::Gelu { .. }
        | E::LeakyRelu { .. }
        | E::Not
        | E::IsNaN
        | E::IsInf { .. } => {
            let [x] = args(inputs)?;
            unary(op, x)?
        }
        E::Add
        | E::Sub
        | E::Mul
        | E::Div
        | E::Pow
        | E::Max
        | E::Min
        | E::Mod { .. }
        | E::Equal
        | E::Less
        | E::LessOrEqual
        | E::Greater
        | E::GreaterOrEqual
        | E::And
        | E::Or
        | E::Xor => binary(op, inputs)?,
        E::Where => where_(inputs)?,
        E::Clip => clip(inputs)?,
        E::Cast { to, saturate } => {
            let [x] = args(inputs)?;
            cast::cast(x, *to, *saturate)?
        }
        E::GeluGrad { approximate } => {
            let [x, dy] = args(inputs)?;
            gelu_grad(x, dy, *approximate)?
        }
        E::__Lifetime(never, _) => match never {},
    };
    Ok(vec![out])
}

/// Every op of the family is evaluated (each has a row in `fp8c_ir::elementwise`).
pub(crate) fn support(op: E<'_>) -> Support {
    match op {
        E::Identity
        | E::Neg
        | E::Abs
        | E::Sqrt
        | E::Reciprocal
        | E::Exp
        | E::Log
        | E::Erf
        | E::Tanh
        | E::Sigmoid
        | E::Relu
        | E::Floor
        | E::Ceil
        | E::Sin
        | E::Cos
        | E::Gelu { .. }
        | E::LeakyRelu { .. }
        | E::Not
        | E::IsNaN
        | E::IsInf { .. }
        | E::Add
        | E::Sub
        | E::Mul
        | E::Div
        | E::Pow
        | E::Max
        | E::Min
        | E::Mod { .. }
        | E::Equal
        | E::Less
        | E::LessOrEqual
        | E::Greater
        | E::GreaterOrEqual
        | E::And
        | E::Or
        | E::Xor
        | E::Where
        | E::Clip
        | E::Cast { .. }
        | E::GeluGrad { .. } => Support::Yes,
        E::__Lifetime(never, _) => match never {},
    }
}

/// Float math that f32 and f64 spell differently.
pub(crate) trait FloatMath: Copy {
    /// The error function: musl's `erff`/`erf` through the `libm` crate (< 1 ulp).
    fn erf_(self) -> Self;
}
impl FloatMath for f32 {
    fn erf_(self) -> f32 {
        libm::erff(self)
    }
}
impl FloatMath for f64 {
    fn erf_(self) -> f64 {
        libm::erf(self)
    }
}

/// Integer arithmetic with ONNX semantics, for every integer element type.
pub(crate) trait IntOps: Elem + Ord {
    /// Truncating division (C semantics); the caller rules out a zero divisor.
    fn div_trunc(self, rhs: Self) -> Self;
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
            fn div_trunc(self, rhs: Self) -> Self { self.wrapping_div(rhs) }
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
            fn div_trunc(self, rhs: Self) -> Self { self / rhs }
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
impl_int_ops!(unsigned: u8);

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

/// Applies a float body to F32/F64 data (the body is expanded once per type, so inherent
/// methods such as `x.exp()` resolve to the right precision).
macro_rules! float_map {
    ($data:expr, |$x:ident| $body:expr) => {
        match $data {
            Data::F32(v) => {
                #[allow(dead_code)]
                type F = f32;
                Data::F32(par_map(&v, |&$x: &f32| $body))
            }
            Data::F64(v) => {
                #[allow(dead_code)]
                type F = f64;
                Data::F64(par_map(&v, |&$x: &f64| $body))
            }
            other => return dtype_err!("expects a float input, got {}", other.type_name()),
        }
    };
}

/// Like [`float_map!`], plus a body for the signed integer types (u8 and bool are refused).
macro_rules! signed_map {
    ($data:expr, |$x:ident| $fbody:expr, int: |$i:ident| $ibody:expr) => {
        match $data {
            Data::F32(v) => Data::F32(par_map(&v, |&$x: &f32| $fbody)),
            Data::F64(v) => Data::F64(par_map(&v, |&$x: &f64| $fbody)),
            Data::I64(v) => Data::I64(par_map(&v, |&$i: &i64| $ibody)),
            Data::I32(v) => Data::I32(par_map(&v, |&$i: &i32| $ibody)),
            Data::I16(v) => Data::I16(par_map(&v, |&$i: &i16| $ibody)),
            Data::I8(v) => Data::I8(par_map(&v, |&$i: &i8| $ibody)),
            other => {
                return dtype_err!(
                    "expects a float or signed integer input, got {}",
                    other.type_name()
                )
            }
        }
    };
}

/// Applies an f64 function to integer data, truncating the result back to the type.
fn int_unary(data: Data, f: impl Fn(f64) -> f64 + Sync + Send) -> KResult<Data> {
    Ok(match data {
        Data::I64(v) => Data::I64(par_map(&v, |&x| IntOps::from_f64_trunc(f(x.as_f64())))),
        Data::I32(v) => Data::I32(par_map(&v, |&x| IntOps::from_f64_trunc(f(x.as_f64())))),
        Data::I16(v) => Data::I16(par_map(&v, |&x| IntOps::from_f64_trunc(f(x.as_f64())))),
        Data::I8(v) => Data::I8(par_map(&v, |&x| IntOps::from_f64_trunc(f(x.as_f64())))),
        Data::U8(v) => Data::U8(par_map(&v, |&x| IntOps::from_f64_trunc(f(x.as_f64())))),
        other => return dtype_err!("expects a numeric input, got {}", other.type_name()),
    })
}

/// √(2/π), the tanh-GELU constant.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// Evaluates a unary elementwise op.
fn unary(op: E<'_>, x: &Tensor) -> KResult<Tensor> {
    let dtype = x.dtype();
    match op {
        E::Identity => return Ok(x.clone()),
        E::IsNaN | E::IsInf { .. } => return classify(op, x),
        _ => {}
    }
    let data = Data::load(x)?;
    let out = match op {
        E::Neg => signed_map!(data, |x| -x, int: |x| x.wrapping_neg()),
        E::Abs => match data {
            Data::U8(v) => Data::U8(v),
            d => signed_map!(d, |x| x.abs(), int: |x| x.wrapping_abs()),
        },
        // `x < 0` keeps NaN (and -0.0) as they are.
        E::Relu => signed_map!(data, |x| if x < 0.0 { 0.0 } else { x }, int: |x| x.max(0)),
        E::Not => match data {
            Data::Bool(v) => Data::Bool(par_map(&v, |&b| !b)),
            d => return dtype_err!("expects a bool input, got {}", d.type_name()),
        },
        E::Sqrt => float_map!(data, |x| x.sqrt()),
        E::Reciprocal => float_map!(data, |x| 1.0 / x),
        E::Exp => float_map!(data, |x| x.exp()),
        E::Log => float_map!(data, |x| x.ln()),
        E::Erf => match data {
            d @ (Data::F32(_) | Data::F64(_)) => float_map!(d, |x| x.erf_()),
            // ONNX Erf takes integers too: erf of the value, truncated (0 or ±1).
            d => int_unary(d, |x: f64| libm::erf(x))?,
        },
        E::Tanh => float_map!(data, |x| x.tanh()),
        // Two branches so that exp never overflows: both are accurate to an ulp or two.
        E::Sigmoid => float_map!(data, |x| if x >= 0.0 {
            1.0 / (1.0 + (-x).exp())
        } else {
            let e = x.exp();
            e / (1.0 + e)
        }),
        E::Floor => float_map!(data, |x| x.floor()),
        E::Ceil => float_map!(data, |x| x.ceil()),
        E::Sin => float_map!(data, |x| x.sin()),
        E::Cos => float_map!(data, |x| x.cos()),
        E::LeakyRelu { alpha } => {
            let a = *alpha;
            match data {
                Data::F32(v) => Data::F32(par_map(&v, |&x| if x < 0.0 { a * x } else { x })),
                Data::F64(v) => {
                    let a = a as f64;
                    Data::F64(par_map(&v, |&x| if x < 0.0 { a * x } else { x }))
                }
                d => return dtype_err!("expects a float input, got {}", d.type_name()),
            }
        }
        E::Gelu {
            approximate: GeluApprox::None,
        } => {
            // 0.5·x·(1 + erf(x/√2)), x/√2 computed as x·(1/√2) as onnxruntime does.
            float_map!(data, |x| 0.5
                * x
                * (1.0 + (x * std::f64::consts::FRAC_1_SQRT_2 as F).erf_()))
        }
        E::Gelu {
            approximate: GeluApprox::Tanh,
        } => {
            // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
            float_map!(data, |x| 0.5
                * x
                * (1.0 + (SQRT_2_OVER_PI as F * (x + 0.044715 * x * x * x)).tanh()))
        }
        other => return unsupported!("`{other:?}` is not a unary elementwise op"),
    };
    out.store(dtype, x.shape().to_vec())
}

/// `is_nan` and `is_inf`: float inputs (FP8 decoded) to bool.
fn classify(op: E<'_>, x: &Tensor) -> KResult<Tensor> {
    let v = crate::fp8::float_values_any(x, "input")?;
    let out: Vec<bool> = match op {
        E::IsNaN => par_map(&v, |x| x.is_nan()),
        E::IsInf {
            detect_negative,
            detect_positive,
        } => {
            let (n, p) = (*detect_negative, *detect_positive);
            par_map(&v, |&x| {
                x.is_infinite() && ((x > 0.0 && p) || (x < 0.0 && n))
            })
        }
        _ => unreachable!("classify is called for is_nan and is_inf only"),
    };
    Data::Bool(out).store(DType::Bool, x.shape().to_vec())
}

/// Applies an arithmetic body to two same-typed numeric [`Data`] through a broadcast plan:
/// `float: |x, y| ...` for f32/f64, `int: |x, y| ...` for every integer type (`IntOps`).
macro_rules! num_zip {
    ($plan:expr, $a:expr, $b:expr, float: |$x:ident, $y:ident| $fe:expr, int: |$xi:ident, $yi:ident| $ie:expr) => {
        match ($a, $b) {
            (Data::F32(a), Data::F32(b)) => Data::F32($plan.map2(&a, &b, |$x: f32, $y: f32| $fe)),
            (Data::F64(a), Data::F64(b)) => Data::F64($plan.map2(&a, &b, |$x: f64, $y: f64| $fe)),
            (Data::I64(a), Data::I64(b)) => Data::I64($plan.map2(&a, &b, |$xi: i64, $yi: i64| $ie)),
            (Data::I32(a), Data::I32(b)) => Data::I32($plan.map2(&a, &b, |$xi: i32, $yi: i32| $ie)),
            (Data::I16(a), Data::I16(b)) => Data::I16($plan.map2(&a, &b, |$xi: i16, $yi: i16| $ie)),
            (Data::I8(a), Data::I8(b)) => Data::I8($plan.map2(&a, &b, |$xi: i8, $yi: i8| $ie)),
            (Data::U8(a), Data::U8(b)) => Data::U8($plan.map2(&a, &b, |$xi: u8, $yi: u8| $ie)),
            (a, b) => {
                return dtype_err!(
                    "expects numeric inputs, got {} and {}",
                    a.type_name(),
                    b.type_name()
                )
            }
        }
    };
}

/// Applies a comparison to two same-typed [`Data`] (bool included: false < true) giving
/// bools.
macro_rules! cmp_zip {
    ($plan:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {
        match ($a, $b) {
            (Data::F32(a), Data::F32(b)) => $plan.map2(&a, &b, |$x: f32, $y: f32| $e),
            (Data::F64(a), Data::F64(b)) => $plan.map2(&a, &b, |$x: f64, $y: f64| $e),
            (Data::I64(a), Data::I64(b)) => $plan.map2(&a, &b, |$x: i64, $y: i64| $e),
            (Data::I32(a), Data::I32(b)) => $plan.map2(&a, &b, |$x: i32, $y: i32| $e),
            (Data::I16(a), Data::I16(b)) => $plan.map2(&a, &b, |$x: i16, $y: i16| $e),
            (Data::I8(a), Data::I8(b)) => $plan.map2(&a, &b, |$x: i8, $y: i8| $e),
            (Data::U8(a), Data::U8(b)) => $plan.map2(&a, &b, |$x: u8, $y: u8| $e),
            (Data::Bool(a), Data::Bool(b)) => $plan.map2(&a, &b, |x: bool, y: bool| {
                let ($x, $y) = (u8::from(x), u8::from(y));
                $e
            }),
            (a, b) => return dtype_err!("cannot compare {} with {}", a.type_name(), b.type_name()),
        }
    };
}

/// NaN-propagating max/min for floats.
fn fmax_nan<T: PartialOrd + Copy>(x: T, y: T) -> T {
    #[allow(clippy::eq_op)]
    if x != x || x >= y { x } else { y }
}
fn fmin_nan<T: PartialOrd + Copy>(x: T, y: T) -> T {
    #[allow(clippy::eq_op)]
    if x != x || x <= y { x } else { y }
}

/// Evaluates a broadcasting binary op (and variadic `max`/`min`).
fn binary(op: E<'_>, inputs: &[&Tensor]) -> KResult<Tensor> {
    if let E::Max | E::Min = op {
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
            acc = binary_pair(op, &acc, t)?;
        }
        return Ok(acc);
    }
    let [a, b] = inputs else {
        return Fail::arity("2", inputs.len());
    };
    binary_pair(op, a, b)
}

fn binary_pair(op: E<'_>, a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    if let E::Pow = op {
        return pow(a, b);
    }
    if a.dtype() != b.dtype() {
        return dtype_err!("input dtypes differ: {} and {}", a.dtype(), b.dtype());
    }
    let dtype = a.dtype();
    let out_shape = broadcast_shapes(&[a.shape(), b.shape()])?;
    let plan = Plan::new(&out_shape, &[a.shape(), b.shape()])?;
    let (da, db) = (Data::load(a)?, Data::load(b)?);
    let numeric = |d: &Data| !matches!(d, Data::Bool(_));
    let out = match op {
        E::Add | E::Sub | E::Mul | E::Div | E::Max | E::Min | E::Mod { .. } => {
            if !numeric(&da) {
                return dtype_err!("expects numeric inputs, got bool");
            }
            let data = match op {
                E::Add => {
                    num_zip!(plan, da, db, float: |x, y| x + y, int: |x, y| x.wrapping_add(y))
                }
                E::Sub => {
                    num_zip!(plan, da, db, float: |x, y| x - y, int: |x, y| x.wrapping_sub(y))
                }
                E::Mul => {
                    num_zip!(plan, da, db, float: |x, y| x * y, int: |x, y| x.wrapping_mul(y))
                }
                E::Div => {
                    check_no_int_zero(&db)?;
                    num_zip!(plan, da, db, float: |x, y| x / y, int: |x, y| x.div_trunc(y))
                }
                E::Max => {
                    num_zip!(plan, da, db, float: |x, y| fmax_nan(x, y), int: |x, y| x.max(y))
                }
                E::Min => {
                    num_zip!(plan, da, db, float: |x, y| fmin_nan(x, y), int: |x, y| x.min(y))
                }
                E::Mod { fmod } => {
                    let float = matches!(da, Data::F32(_) | Data::F64(_));
                    if float && !fmod {
                        return dtype_err!(
                            "float inputs need fmod=1 (ONNX: fmod=0 is for integers)"
                        );
                    }
                    check_no_int_zero(&db)?;
                    if *fmod {
                        // Rust's float `%` is C fmod: the sign of the dividend.
                        num_zip!(plan, da, db, float: |x, y| x % y, int: |x, y| x.rem_c(y))
                    } else {
                        num_zip!(plan, da, db, float: |x, y| x % y, int: |x, y| x.rem_floor(y))
                    }
                }
                _ => unreachable!("arithmetic ops are matched above"),
            };
            return data.store(dtype, out_shape);
        }
        E::Equal => cmp_zip!(plan, da, db, |x, y| x == y),
        E::Less => cmp_zip!(plan, da, db, |x, y| x < y),
        E::LessOrEqual => cmp_zip!(plan, da, db, |x, y| x <= y),
        E::Greater => cmp_zip!(plan, da, db, |x, y| x > y),
        E::GreaterOrEqual => cmp_zip!(plan, da, db, |x, y| x >= y),
        E::And | E::Or | E::Xor => {
            let (Data::Bool(x), Data::Bool(y)) = (da, db) else {
                return dtype_err!("expects bool inputs, got {dtype}");
            };
            match op {
                E::And => plan.map2(&x, &y, |p, q| p & q),
                E::Or => plan.map2(&x, &y, |p, q| p | q),
                _ => plan.map2(&x, &y, |p, q| p ^ q),
            }
        }
        other => return unsupported!("`{other:?}` is not a binary elementwise op"),
    };
    Data::Bool(out).store(DType::Bool, out_shape)
}

fn check_no_int_zero(d: &Data) -> KResult<()> {
    let zero = match d {
        Data::I64(v) => v.contains(&0),
        Data::I32(v) => v.contains(&0),
        Data::I16(v) => v.contains(&0),
        Data::I8(v) => v.contains(&0),
        Data::U8(v) => v.contains(&0),
        _ => false,
    };
    if zero {
        return value_err!("integer division by zero");
    }
    Ok(())
}

/// ONNX Pow: the output has the base's type; the exponent may have another numeric type.
/// Float bases compute `powf` in their compute type; integer bases with integer exponents
/// use exact wrapping integer powers; integer bases with float exponents compute in f64 and
/// truncate toward zero (as numpy's `astype`).
fn pow(a: &Tensor, b: &Tensor) -> KResult<Tensor> {
    let dtype = a.dtype();
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
        Data::F64(v) => v.clone(),
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
            (Data::$var(v), s)
        }};
    }
    let (out, shape) = match da {
        Data::F32(x) => {
            let (v, s) = match (&db, &exp_int) {
                (Data::F32(e), _) => zip2((&x, sa), (e, sb), |x, e| x.powf(e))?,
                (_, Some(e)) => zip2((&x, sa), (e, sb), |x, e| x.powf(e as f32))?,
                _ => zip2((&x, sa), (&exp_f64, sb), |x, e| x.powf(e as f32))?,
            };
            (Data::F32(v), s)
        }
        Data::F64(x) => {
            let (v, s) = match &exp_int {
                Some(e) => zip2((&x, sa), (e, sb), |x, e| x.powf(e as f64))?,
                None => zip2((&x, sa), (&exp_f64, sb), |x, e| x.powf(e))?,
            };
            (Data::F64(v), s)
        }
        Data::I64(v) => int_base!(v, I64),
        Data::I32(v) => int_base!(v, I32),
        Data::I16(v) => int_base!(v, I16),
        Data::I8(v) => int_base!(v, I8),
        Data::U8(v) => int_base!(v, U8),
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
    let plan = Plan::new(&shape, &[c.shape(), a.shape(), b.shape()])?;
    let cond: Vec<bool> = c.bytes().iter().map(|&x| x != 0).collect();
    let bytes = match a.dtype().size() {
        1 => where_raw::<1>(&plan, &cond, a.bytes(), b.bytes()),
        2 => where_raw::<2>(&plan, &cond, a.bytes(), b.bytes()),
        4 => where_raw::<4>(&plan, &cond, a.bytes(), b.bytes()),
        _ => where_raw::<8>(&plan, &cond, a.bytes(), b.bytes()),
    };
    tensor(a.dtype(), shape, bytes)
}

/// One element of `N` raw bytes, for dtype-agnostic selection.
#[derive(Clone, Copy)]
struct Raw<const N: usize>([u8; N]);

impl<const N: usize> Default for Raw<N> {
    fn default() -> Self {
        Raw([0; N])
    }
}

fn where_raw<const N: usize>(plan: &Plan, cond: &[bool], a: &[u8], b: &[u8]) -> Vec<u8> {
    let view = |x: &[u8]| -> Vec<Raw<N>> {
        x.chunks_exact(N)
            .map(|c| Raw(c.try_into().unwrap_or([0; N])))
            .collect()
    };
    let out = plan.map3(cond, &view(a), &view(b), |c, x, y| if c { x } else { y });
    out.iter().flat_map(|r| r.0).collect()
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
    macro_rules! go {
        ($v:expr, $var:ident, $t:ty) => {{
            let get = |d: &Option<Data>| match d {
                Some(Data::$var(b)) => Some(b[0]),
                _ => None,
            };
            let (lo, hi): (Option<$t>, Option<$t>) = (get(&lo), get(&hi));
            Data::$var(par_map(&$v, |&x| {
                let mut y = x;
                if let Some(l) = lo {
                    if y < l {
                        y = l;
                    }
                }
                if let Some(h) = hi {
                    if y > h {
                        y = h;
                    }
                }
                y
            }))
        }};
    }
    let out = match Data::load(x)? {
        Data::F32(v) => go!(v, F32, f32),
        Data::F64(v) => go!(v, F64, f64),
        Data::I64(v) => go!(v, I64, i64),
        Data::I32(v) => go!(v, I32, i32),
        Data::I16(v) => go!(v, I16, i16),
        Data::I8(v) => go!(v, I8, i8),
        Data::U8(v) => go!(v, U8, u8),
        Data::Bool(_) => return dtype_err!("expects a numeric input, got bool"),
    };
    out.store(x.dtype(), x.shape().to_vec())
}

/// 1/√(2π), the standard normal density at 0.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

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
