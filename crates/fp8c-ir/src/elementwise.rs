//! The elementwise table: one row per op of the elementwise family, holding everything the
//! crates above need to know about it, so that an elementwise op is added in one place.
//!
//! A row gives:
//! - its **kind** (how operands combine: unary or binary math, comparison, logic, predicate,
//!   or [`Kind::Own`] for the ops each backend computes with code of its own: `not`, `pow`,
//!   `mod`, `where`, `clip`, `cast`, `gelu_grad`);
//! - its **types** ([`Types`]: the element types its inputs may have; type inference checks
//!   them, comparisons and predicates give bool) and **flags** ([`Flags`]);
//! - its **CUDA** expression, a template over the operands `{a0}`, `{a1}`, ... and the op's
//!   attributes `{alpha}` (device functions of `kernels/elementwise.cu`), or `None` with the
//!   reason it has no CUDA form;
//! - its **scalar semantics** for floats (one closure, expanded for f32 and f64 so that each
//!   type computes in its own precision, bit for bit what the CPU reference computes) and,
//!   where integers are accepted, for integers (wrapping two's complement, as numpy);
//! - its **derivative**: one formula per input (the [`crate::formula`] language over `x`/`a`,
//!   `b`, `c`, the output `y`, the incoming gradient `dy` and the op's attributes), or why it
//!   has none.
//!
//! Type inference, the CPU evaluator and the CUDA lowering dispatch on the row (its kind and
//! types), never on the op: an op of a kind other than `Own` needs nothing but its row. The CPU
//! evaluator runs the closures through [`dispatch_unary`] / [`dispatch_binary`] (the caller's
//! kernel receives the concrete closure, so the per-element loop is monomorphised and
//! inlined); the CUDA code generator renders the templates; autodiff instantiates the formulas.
//! Every generated `match` is exhaustive over [`ElementwiseOp`], so an op added to the family
//! without a row here does not compile.

use crate::op::ElementwiseOp;
use crate::{DType, GeluApprox};

/// How an elementwise op combines its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `f(x)` on one input, same type out (the float closure, and the integer one where the
    /// row has it; a row of [`Types::Any`] moves elements unread: the identity).
    Unary,
    /// `f(a, b)` on two same-typed numeric inputs (numpy broadcasting), same type out.
    Binary,
    /// Binary with any number (≥ 1) of inputs, folded left (`max`, `min`).
    Variadic,
    /// A comparison of two same-typed inputs, bool out.
    Compare,
    /// A boolean connective on bool inputs, bool out.
    Logic,
    /// A test on one float input, bool out.
    Predicate,
    /// An op each backend computes with code of its own (see [`Own`]).
    Own(Own),
}

/// The ops of [`Kind::Own`], with the attributes their code needs: mixed operand types, a
/// selection, a conversion, a bool input or a two-input gradient. Backends match this
/// exhaustively, so a new one fails to compile where it is not handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Own {
    /// `not`: bool to bool.
    Not,
    /// `pow`: the exponent may have another numeric type; the result has the base's.
    Pow,
    /// `mod`: C's remainder (`fmod`) or Python's (integers only).
    Mod { fmod: bool },
    /// `where(cond, a, b)`: any type for the branches.
    Where,
    /// `clip(x, min, max)`, scalar bounds of x's type.
    Clip,
    /// Element type conversion.
    Cast { to: DType, saturate: bool },
    /// The gradient of `gelu`: inputs x and dy.
    GeluGrad { approximate: GeluApprox },
}

/// The element types an op's inputs may have (for `Own` ops: the data input's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Types {
    /// Any type.
    Any,
    /// Floats other than FP8 (FP8 is storage only).
    Float,
    /// Floats other than FP8, and signed integers.
    Signed,
    /// Floats other than FP8, and integers. A unary row with no integer closure computes
    /// integers as its f64 function truncated toward zero (ONNX Erf).
    Numeric,
    /// Numeric types and bool.
    NumericOrBool,
    /// Bool.
    Bool,
}

impl Types {
    /// Whether `d` is one of these types.
    pub fn admits(self, d: DType) -> bool {
        let float = d.is_float() && !d.is_fp8();
        let signed = matches!(d, DType::I64 | DType::I32 | DType::I16 | DType::I8);
        match self {
            Types::Any => true,
            Types::Float => float,
            Types::Signed => float || signed,
            Types::Numeric => float || d.is_int(),
            Types::NumericOrBool => float || d.is_int() || d == DType::Bool,
            Types::Bool => d == DType::Bool,
        }
    }

    /// What an error says was expected.
    pub fn expected(self) -> &'static str {
        match self {
            Types::Any => "any type",
            Types::Float => "a float type other than FP8",
            Types::Signed => "a float (not FP8) or signed integer type",
            Types::Numeric => "a numeric type (float other than FP8, or integer)",
            Types::NumericOrBool => "a numeric type or bool",
            Types::Bool => "bool",
        }
    }
}

/// Yes/no facts of a row (the table's `[...]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// On integers a zero divisor (input 1) is an error: the CPU evaluator fails, the CUDA
    /// program raises its error flag (`div`, `mod`).
    pub zero_divisor: bool,
}

impl Flags {
    /// No flag.
    pub const NONE: Flags = Flags {
        zero_divisor: false,
    };
}

/// The derivative of an elementwise op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grad {
    /// One formula per input (`""`: that input gets no gradient, e.g. `where`'s condition).
    /// Formulas of broadcasting ops give the gradient of the broadcast shape; autodiff sums it
    /// back to each operand's shape.
    Formulas(&'static [&'static str]),
    /// The op is piecewise constant: its gradient is zero almost everywhere (`floor`).
    Zero(&'static str),
    /// The op's output is not a float function of float inputs, or no rule is defined; the
    /// string says why (autodiff reports it if a gradient must flow through).
    NotDifferentiable(&'static str),
}

/// One row of the table (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// How operands combine.
    pub kind: Kind,
    /// The element types the inputs may have.
    pub types: Types,
    /// Yes/no facts.
    pub flags: Flags,
    /// The CUDA expression template, or why there is none.
    pub cuda: Result<&'static str, &'static str>,
    /// The derivative.
    pub grad: Grad,
}

/// Float arithmetic the table's closures use: implemented for f32 and f64, each computing in
/// its own precision (`x.exp()` is `f32::exp` for f32).
pub trait Real:
    Copy
    + PartialOrd
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Rem<Output = Self>
    + std::ops::Neg<Output = Self>
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// The nearest value of this type to `v` (exact for f64).
    fn from_f64(v: f64) -> Self;
    /// `v` widened or kept (exact).
    fn from_f32(v: f32) -> Self;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// e^x (f32: [`crate::fmath::exp_f32`]).
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// The error function (musl's `erff`/`erf` through `libm`, < 1 ulp).
    fn erf(self) -> Self;
    /// Hyperbolic tangent (f32: [`crate::fmath::tanh_f32`]).
    fn tanh(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Round toward −∞.
    fn floor(self) -> Self;
    /// Round toward +∞.
    fn ceil(self) -> Self;
    /// Round to the nearest integer, ties to even.
    fn round_even(self) -> Self;
    /// `self` to the power `e`.
    fn powf(self, e: Self) -> Self;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// True for ±∞.
    fn is_infinite(self) -> bool;
}

macro_rules! impl_real {
    ($t:ty, $erf:path, $exp:path, $tanh:path) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline]
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline]
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
        }
    };
}
// f32 `exp` and `tanh` are fp8c's own (`fmath`: f64 evaluation rounded once, branch-free so
// tensor loops vectorise, the same bits on every platform); erf is musl's (`libm`) for both
// types; f64 uses the platform's exp and tanh.
impl_real!(
    f32,
    libm::erff,
    crate::fmath::exp_f32,
    crate::fmath::tanh_f32
);
impl_real!(f64, libm::erf, f64::exp, f64::tanh);

/// Integer arithmetic the table's closures use, with numpy's wrapping semantics.
pub trait Int: Copy + Ord + Send + Sync {
    /// 0.
    const ZERO: Self;
    /// Wrapping negation.
    fn wrapping_neg(self) -> Self;
    /// Wrapping absolute value (|MIN| = MIN, as numpy).
    fn wrapping_abs(self) -> Self;
    /// Wrapping sum.
    fn wrapping_add(self, o: Self) -> Self;
    /// Wrapping difference.
    fn wrapping_sub(self, o: Self) -> Self;
    /// Wrapping product.
    fn wrapping_mul(self, o: Self) -> Self;
    /// Quotient truncated toward zero, wrapping (`MIN / -1` is MIN); the caller rules out a
    /// zero divisor ([`Flags::zero_divisor`]).
    fn wrapping_div(self, o: Self) -> Self;
}

macro_rules! impl_int {
    (signed: $($t:ty),*) => {$(
        impl Int for $t {
            const ZERO: Self = 0;
            fn wrapping_neg(self) -> Self { <$t>::wrapping_neg(self) }
            fn wrapping_abs(self) -> Self { <$t>::wrapping_abs(self) }
            fn wrapping_add(self, o: Self) -> Self { <$t>::wrapping_add(self, o) }
            fn wrapping_sub(self, o: Self) -> Self { <$t>::wrapping_sub(self, o) }
            fn wrapping_mul(self, o: Self) -> Self { <$t>::wrapping_mul(self, o) }
            fn wrapping_div(self, o: Self) -> Self { <$t>::wrapping_div(self, o) }
        }
    )*};
    (unsigned: $($t:ty),*) => {$(
        impl Int for $t {
            const ZERO: Self = 0;
            fn wrapping_neg(self) -> Self { <$t>::wrapping_neg(self) }
            fn wrapping_abs(self) -> Self { self }
            fn wrapping_add(self, o: Self) -> Self { <$t>::wrapping_add(self, o) }
            fn wrapping_sub(self, o: Self) -> Self { <$t>::wrapping_sub(self, o) }
            fn wrapping_mul(self, o: Self) -> Self { <$t>::wrapping_mul(self, o) }
            fn wrapping_div(self, o: Self) -> Self { <$t>::wrapping_div(self, o) }
        }
    )*};
}
impl_int!(signed: i64, i32, i16, i8);
impl_int!(unsigned: u64, u32, u16, u8);

/// A CPU kernel that receives a unary closure (see [`dispatch_unary`]).
pub trait UnaryKernel<T> {
    /// What the kernel returns.
    type Out;
    /// Runs the kernel with the op's scalar function.
    fn run(self, f: impl Fn(T) -> T + Send + Sync + Copy) -> Self::Out;
}

/// A CPU kernel that receives a binary closure (see [`dispatch_binary`]).
pub trait BinaryKernel<T> {
    /// What the kernel returns.
    type Out;
    /// Runs the kernel with the op's scalar function.
    fn run(self, f: impl Fn(T, T) -> T + Send + Sync + Copy) -> Self::Out;
}

/// A CPU kernel that receives a comparison or logic closure (see [`dispatch_compare`]).
pub trait CompareKernel<T> {
    /// What the kernel returns.
    type Out;
    /// Runs the kernel with the op's predicate.
    fn run(self, f: impl Fn(T, T) -> bool + Send + Sync + Copy) -> Self::Out;
}

/// A CPU kernel that receives a one-input predicate (see [`dispatch_predicate`]).
pub trait PredicateKernel<T> {
    /// What the kernel returns.
    type Out;
    /// Runs the kernel with the op's predicate.
    fn run(self, f: impl Fn(T) -> bool + Send + Sync + Copy) -> Self::Out;
}

/// √(2/π), the tanh-GELU constant.
pub const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// The tanh GELU, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, in `F` (the table's row; the
/// CPU evaluator maps f32 tensors through it directly, where the row's closure, which also
/// holds the exact form, was not inlined into the vector loop).
#[inline(always)]
pub fn gelu_tanh<F: Real>(x: F) -> F {
    F::from_f64(0.5)
        * x
        * (F::ONE + (F::from_f64(SQRT_2_OVER_PI) * (x + F::from_f64(0.044715) * x * x * x)).tanh())
}

/// 1/√(2π), the normal density's factor (the exact GELU's derivative).
pub const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// NaN-propagating max (the first operand's NaN wins, as the CPU reference and CUDA agree).
fn fmax_nan<T: PartialOrd + Copy>(x: T, y: T) -> T {
    #[allow(clippy::eq_op)]
    if x != x || x >= y { x } else { y }
}

/// NaN-propagating min.
fn fmin_nan<T: PartialOrd + Copy>(x: T, y: T) -> T {
    #[allow(clippy::eq_op)]
    if x != x || x <= y { x } else { y }
}

macro_rules! elementwise_table {
    ($(
        $variant:ident $({ $($attr:ident),* })? => $kind:ident $(($own:ident $($own_attrs:tt)*))? $types:ident
            $([$($flag:ident),*])?, cuda $cuda:expr
            $(, float |$($fx:ident),+| $fbody:expr)?
            $(, int |$($ix:ident),+| $ibody:expr)?
            $(, cmp |$cx:ident, $cy:ident| $cbody:expr)?
            $(, logic |$lx:ident, $ly:ident| $lbody:expr)?
            , grad $grad:expr;
    )*) => {
        /// The row of an elementwise op.
        // `..Flags::NONE` is a no-op for a row that sets every flag, and needed by the others.
        #[allow(unused_variables, clippy::needless_update)]
        pub fn row(op: ElementwiseOp<'_>) -> Row {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => Row {
                    kind: Kind::$kind $((Own::$own $($own_attrs)*))?,
                    types: Types::$types,
                    flags: Flags { $($($flag: true,)*)? ..Flags::NONE },
                    cuda: $cuda,
                    grad: $grad,
                }, )*
            }
        }

        /// The text names of the ops that have a row (every op of the elementwise family).
        pub const ROW_NAMES: &[&str] = &[$(elementwise_table!(@name $variant)),*];

        /// Runs `k` with the float scalar function of a [`Kind::Unary`] op; None for ops of
        /// other kinds.
        #[allow(unused_variables)]
        pub fn dispatch_unary<F: Real, K: UnaryKernel<F>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@float1 k, F, $kind; $(|$($fx),+| $fbody)?), )*
            }
        }

        /// Runs `k` with the float scalar function of a [`Kind::Binary`] or
        /// [`Kind::Variadic`] op; None for ops of other kinds.
        #[allow(unused_variables)]
        pub fn dispatch_binary<F: Real, K: BinaryKernel<F>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@float2 k, F; $(|$($fx),+| $fbody)?), )*
            }
        }

        /// Runs `k` with the integer function of a unary op that accepts integers; None
        /// otherwise.
        #[allow(unused_variables)]
        pub fn dispatch_unary_int<I: Int, K: UnaryKernel<I>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@int1 k, I; $(|$($ix),+| $ibody)?), )*
            }
        }

        /// Runs `k` with the integer function of a binary op that accepts integers; None
        /// otherwise.
        #[allow(unused_variables)]
        pub fn dispatch_binary_int<I: Int, K: BinaryKernel<I>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@int2 k, I; $(|$($ix),+| $ibody)?), )*
            }
        }

        /// Runs `k` with the predicate of a [`Kind::Compare`] op (any ordered type); None for
        /// ops of other kinds.
        #[allow(unused_variables)]
        pub fn dispatch_compare<T: PartialOrd + Copy + Send + Sync, K: CompareKernel<T>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@cmp k, T; $(|$cx, $cy| $cbody)?), )*
            }
        }

        /// Runs `k` with the connective of a [`Kind::Logic`] op on bools; None for ops of
        /// other kinds.
        #[allow(unused_variables)]
        pub fn dispatch_logic<K: CompareKernel<bool>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@cmp k, bool; $(|$lx, $ly| $lbody)?), )*
            }
        }

        /// Runs `k` with the predicate of a [`Kind::Predicate`] op; None for other kinds.
        #[allow(unused_variables)]
        pub fn dispatch_predicate<F: Real, K: PredicateKernel<F>>(op: ElementwiseOp<'_>, k: K) -> Option<K::Out> {
            match op {
                $( ElementwiseOp::$variant $({ $($attr),* })? => elementwise_table!(@pred k, F, $kind; $(|$($fx),+| $fbody)?), )*
            }
        }
    };
    (@name $variant:ident) => { stringify!($variant) };
    // Inlined into the kernel's loop so that it vectorises (some bodies, erf's, are large).
    (@float1 $k:ident, $F:ident, Unary; |$x:ident| $body:expr) => { Some($k.run(#[inline(always)] move |$x: $F| -> $F { $body })) };
    (@float1 $k:ident, $F:ident, $kind:ident; $($rest:tt)*) => { None };
    (@float2 $k:ident, $F:ident; |$x:ident, $y:ident| $body:expr) => { Some($k.run(move |$x: $F, $y: $F| -> $F { $body })) };
    (@float2 $k:ident, $F:ident; $($rest:tt)*) => { None };
    (@int1 $k:ident, $I:ident; |$x:ident| $body:expr) => { Some($k.run(move |$x: $I| -> $I { $body })) };
    (@int1 $k:ident, $I:ident; $($rest:tt)*) => { None };
    (@int2 $k:ident, $I:ident; |$x:ident, $y:ident| $body:expr) => { Some($k.run(move |$x: $I, $y: $I| -> $I { $body })) };
    (@int2 $k:ident, $I:ident; $($rest:tt)*) => { None };
    (@cmp $k:ident, $T:ident; |$x:ident, $y:ident| $body:expr) => { Some($k.run(move |$x: $T, $y: $T| -> bool { $body })) };
    (@cmp $k:ident, $T:ident; ) => { None };
    (@pred $k:ident, $F:ident, Predicate; |$x:ident| $body:expr) => { Some($k.run(move |$x: $F| -> bool { $body })) };
    (@pred $k:ident, $F:ident, $kind:ident; $($rest:tt)*) => { None };
}

// Rows. Float bodies are written once for f32 and f64 (`Real`); constants go through
// `F::from_f64`, which for these decimal literals gives the same f32 as writing them as f32
// literals (checked by a test). Derivative formulas use the names documented in
// `crate::formula`.
elementwise_table! {
    // ---- unary math ----
    Identity => Unary Any, cuda Ok("ew_identity({a0})"), float |x| x, int |x| x, grad Grad::Formulas(&["dy"]);
    Neg => Unary Signed, cuda Ok("ew_neg({a0})"), float |x| -x, int |x| x.wrapping_neg(), grad Grad::Formulas(&["-dy"]);
    Abs => Unary Numeric, cuda Ok("ew_abs({a0})"), float |x| x.abs(), int |x| x.wrapping_abs(),
        grad Grad::Formulas(&["where(x > 0, dy, where(x < 0, -dy, 0))"]);
    Sqrt => Unary Float, cuda Ok("ew_sqrt({a0})"), float |x| x.sqrt(), grad Grad::Formulas(&["dy / y * 0.5"]);
    Reciprocal => Unary Float, cuda Ok("ew_reciprocal({a0})"), float |x| F::ONE / x, grad Grad::Formulas(&["-(dy * (y * y))"]);
    Exp => Unary Float, cuda Ok("ew_exp({a0})"), float |x| x.exp(), grad Grad::Formulas(&["dy * y"]);
    Log => Unary Float, cuda Ok("ew_log({a0})"), float |x| x.ln(), grad Grad::Formulas(&["dy / x"]);
    // ONNX Erf takes integers too: no integer closure, so they compute as the f64 function
    // truncated toward zero (see `Types::Numeric`).
    Erf => Unary Numeric, cuda Ok("ew_erf({a0})"), float |x| x.erf(), grad Grad::Formulas(&["dy * exp(-(x * x)) * 1.1283791670955126"]);
    Tanh => Unary Float, cuda Ok("ew_tanh({a0})"), float |x| x.tanh(), grad Grad::Formulas(&["dy * (1 - y * y)"]);
    // Two branches so that exp never overflows (1/(1 + e^-x) for x ≥ 0, e^x/(1 + e^x) below),
    // sharing one e^(-|x|) so that the choice is a select and the loop vectorises.
    Sigmoid => Unary Float, cuda Ok("ew_sigmoid({a0})"),
        float |x| { let e = (-x.abs()).exp(); if x >= F::ZERO { F::ONE / (F::ONE + e) } else { e / (F::ONE + e) } },
        grad Grad::Formulas(&["dy * (y * (1 - y))"]);
    // `x < 0` keeps NaN (and -0.0) as they are.
    Relu => Unary Signed, cuda Ok("ew_relu({a0})"), float |x| if x < F::ZERO { F::ZERO } else { x },
        int |x| if x < I::ZERO { I::ZERO } else { x }, grad Grad::Formulas(&["where(x > 0, dy, 0)"]);
    Floor => Unary Float, cuda Ok("ew_floor({a0})"), float |x| x.floor(), grad Grad::Zero("floor is piecewise constant");
    Sign => Unary Float, cuda Ok("ew_sign({a0})"),
        float |x| if x > F::ZERO { F::ONE } else if x < F::ZERO { -F::ONE } else { x },
        grad Grad::Zero("sign is piecewise constant");
    Ceil => Unary Float, cuda Ok("ew_ceil({a0})"), float |x| x.ceil(), grad Grad::Zero("ceil is piecewise constant");
    // ONNX Round: to the nearest integer, halves to even.
    Round => Unary Float, cuda Ok("ew_round({a0})"), float |x| x.round_even(), grad Grad::Zero("round is piecewise constant");
    Sin => Unary Float, cuda Ok("ew_sin({a0})"), float |x| x.sin(), grad Grad::Formulas(&["dy * cos(x)"]);
    Cos => Unary Float, cuda Ok("ew_cos({a0})"), float |x| x.cos(), grad Grad::Formulas(&["-(dy * sin(x))"]);
    // 0.5·x·(1 + erf(x/√2)) with x/√2 computed as x·(1/√2), as onnxruntime does; or
    // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
    Gelu { approximate } => Unary Float, cuda Ok("ew_gelu_{approximate}({a0})"),
        float |x| match approximate {
            crate::GeluApprox::None => F::from_f64(0.5) * x * (F::ONE + (x * F::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erf()),
            crate::GeluApprox::Tanh => gelu_tanh(x),
        },
        grad Grad::Formulas(&["gelu_grad(x, dy)"]);
    LeakyRelu { alpha } => Unary Float, cuda Ok("ew_leaky_relu({a0}, {alpha})"),
        float |x| if x < F::ZERO { F::from_f32(*alpha) * x } else { x },
        grad Grad::Formulas(&["where(x > 0, dy, dy * alpha)"]);
    Not => Own(Not) Bool, cuda Ok("ew_not({a0})"), grad Grad::NotDifferentiable("not is a boolean op");
    IsNaN => Predicate Float, cuda Ok("ew_is_nan({a0})"), float |x| x.is_nan(), grad Grad::NotDifferentiable("is_nan has a bool output");
    IsInf { detect_negative, detect_positive } => Predicate Float, cuda Ok("ew_is_inf({a0}, {detect_negative}, {detect_positive})"),
        float |x| x.is_infinite() && ((x > F::ZERO && *detect_positive) || (x < F::ZERO && *detect_negative)),
        grad Grad::NotDifferentiable("is_inf has a bool output");

    // ---- binary arithmetic (numpy broadcasting) ----
    Add => Binary Numeric, cuda Ok("ew_add({a0}, {a1})"), float |x, y| x + y, int |x, y| x.wrapping_add(y), grad Grad::Formulas(&["dy", "dy"]);
    Sub => Binary Numeric, cuda Ok("ew_sub({a0}, {a1})"), float |x, y| x - y, int |x, y| x.wrapping_sub(y), grad Grad::Formulas(&["dy", "-dy"]);
    Mul => Binary Numeric, cuda Ok("ew_mul({a0}, {a1})"), float |x, y| x * y, int |x, y| x.wrapping_mul(y), grad Grad::Formulas(&["dy * b", "dy * a"]);
    // Integer division truncates toward zero (C, as ONNX) and fails on a zero divisor.
    Div => Binary Numeric [zero_divisor], cuda Ok("ew_div({a0}, {a1})"), float |x, y| x / y, int |x, y| x.wrapping_div(y), grad Grad::Formulas(&["dy / b", "-(dy * y / b)"]);
    // Mixed base and exponent types: a kernel of its own.
    Pow => Own(Pow) Numeric, cuda Ok("ew_pow({a0}, {a1})"),
        grad Grad::Formulas(&["dy * (pow(a, cast(b, a) - 1) * cast(b, a))", "cast(dy * (y * log(a)), b)"]);
    Max => Variadic Numeric, cuda Ok("ew_max({a0}, {a1})"), float |x, y| fmax_nan(x, y), int |x, y| x.max(y),
        grad Grad::Formulas(&["where(a >= b, dy, 0)", "where(a >= b, 0, dy)"]);
    Min => Variadic Numeric, cuda Ok("ew_min({a0}, {a1})"), float |x, y| fmin_nan(x, y), int |x, y| x.min(y),
        grad Grad::Formulas(&["where(a <= b, dy, 0)", "where(a <= b, 0, dy)"]);
    // fmod=1: C's fmod (sign of the dividend; Rust's float `%`); fmod=0: Python's `%` on
    // integers. Each backend has its own kernels (fmod=0 on floats is an error).
    Mod { fmod } => Own(Mod { fmod: *fmod }) Numeric [zero_divisor], cuda if *fmod { Ok("ew_fmod({a0}, {a1})") } else { Ok("ew_mod({a0}, {a1})") },
        grad Grad::NotDifferentiable("mod is not differentiated (no rule)");

    // ---- comparisons and logic ----
    Equal => Compare NumericOrBool, cuda Ok("ew_equal({a0}, {a1})"), cmp |x, y| x == y, grad Grad::NotDifferentiable("comparisons have a bool output");
    Less => Compare Numeric, cuda Ok("ew_less({a0}, {a1})"), cmp |x, y| x < y, grad Grad::NotDifferentiable("comparisons have a bool output");
    LessOrEqual => Compare Numeric, cuda Ok("ew_less_or_equal({a0}, {a1})"), cmp |x, y| x <= y, grad Grad::NotDifferentiable("comparisons have a bool output");
    Greater => Compare Numeric, cuda Ok("ew_greater({a0}, {a1})"), cmp |x, y| x > y, grad Grad::NotDifferentiable("comparisons have a bool output");
    GreaterOrEqual => Compare Numeric, cuda Ok("ew_greater_or_equal({a0}, {a1})"), cmp |x, y| x >= y, grad Grad::NotDifferentiable("comparisons have a bool output");
    And => Logic Bool, cuda Ok("ew_and({a0}, {a1})"), logic |x, y| x & y, grad Grad::NotDifferentiable("logic ops have a bool output");
    Or => Logic Bool, cuda Ok("ew_or({a0}, {a1})"), logic |x, y| x | y, grad Grad::NotDifferentiable("logic ops have a bool output");
    Xor => Logic Bool, cuda Ok("ew_xor({a0}, {a1})"), logic |x, y| x ^ y, grad Grad::NotDifferentiable("logic ops have a bool output");

    // ---- selection, clipping, conversion ----
    Where => Own(Where) Any, cuda Ok("ew_where({a0}, {a1}, {a2})"), grad Grad::Formulas(&["", "where(a, dy, 0)", "where(a, 0, dy)"]);
    // The gradient passes where min ≤ x ≤ max (PyTorch's rule at the bounds); the bounds get none.
    Clip => Own(Clip) Numeric, cuda Ok("ew_clip({a0}, {a1}, {a2})"), grad Grad::Formulas(&["where(x >= b, where(x <= c, dy, 0), 0)", "", ""]);
    Cast { to, saturate } => Own(Cast { to: *to, saturate: *saturate }) Any, cuda Err("cast has a kernel of its own (cast.cu)"), grad Grad::Formulas(&["cast(dy, x)"]);
    // The gradient of gelu: inputs x and dy.
    GeluGrad { approximate } => Own(GeluGrad { approximate: *approximate }) Float, cuda Ok("ew_gelu_grad_{approximate}({a0}, {a1})"),
        grad Grad::NotDifferentiable("second-order gradients are not supported");
}

/// True for ops of the elementwise family (the ops an elementwise program may contain).
pub fn is_elementwise(op: &crate::Op) -> bool {
    matches!(op.view(), crate::OpView::Elementwise(_))
}

/// The row of `op`, if it is elementwise.
pub fn row_of(op: &crate::Op) -> Option<Row> {
    match op.view() {
        crate::OpView::Elementwise(e) => Some(row(e)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_constants_round_to_the_f32_literals() {
        // `F::from_f64(c)` for f32 must equal the f32 literal the reference used to write.
        assert_eq!(0.044715f64 as f32, 0.044715f32);
        assert_eq!(0.5f64 as f32, 0.5f32);
        assert_eq!(SQRT_2_OVER_PI as f32, 0.797_884_6_f32);
        assert_eq!(
            std::f64::consts::FRAC_1_SQRT_2 as f32,
            std::f32::consts::FRAC_1_SQRT_2
        );
    }

    #[test]
    fn every_elementwise_op_has_a_row_and_every_formula_parses() {
        for op in crate::Op::examples() {
            let Some(r) = row_of(&op) else { continue };
            if let Grad::Formulas(fs) = r.grad {
                for f in fs.iter().filter(|f| !f.is_empty()) {
                    crate::formula::parse(f)
                        .unwrap_or_else(|e| panic!("{}: formula `{f}`: {e}", op.name()));
                }
            }
        }
    }
}
