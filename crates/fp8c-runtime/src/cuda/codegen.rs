//! CUDA for elementwise programs: an [`EwExpr`] (or a single elementwise op) with its input
//! kinds and access modes becomes the `ew_expr.cuh` header that `kernels/elementwise.cu`
//! includes. The kernel around it (loads, stores, FP8 output, amax) is fixed; only the
//! straight-line program and a few constants are generated.
//!
//! Numbers in attributes (`leaky_relu`'s alpha) are written as their exact f32 bit patterns,
//! so the generated code computes with the very constants of the IR.

use crate::cuda::kernels::kind_code;
use fp8c_ir::{DType, EwArg, EwExpr, EwInst, GeluApprox, Op};
use std::fmt::Write;

/// Most inputs one elementwise program may read (`EW_MAX_IN` in elementwise.cu).
pub const MAX_INPUTS: usize = 16;
/// Most dims of a strided operand (`FP8C_MAX_DIMS` in common.cuh).
pub const MAX_DIMS: usize = 8;

/// How the kernel reads one input, from its shape against the output's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Same shape as the output: element i.
    Full,
    /// One element.
    Scalar,
    /// The output's trailing dims (a bias row): element i % len.
    Row(u64),
    /// General numpy broadcasting: element strides per output dim (0 on broadcast dims).
    Strided(Vec<i64>),
}

impl Access {
    fn code(&self) -> &'static str {
        match self {
            Access::Full => "EW_MODE_FULL",
            Access::Scalar => "EW_MODE_SCALAR",
            Access::Row(_) => "EW_MODE_ROW",
            Access::Strided(_) => "EW_MODE_STRIDED",
        }
    }

    /// How an input of dims `input` is read for an output of dims `out` (numpy broadcasting;
    /// the caller has checked that the shapes broadcast).
    pub fn for_shapes(input: &[u64], out: &[u64]) -> Access {
        let n: u64 = input.iter().product();
        if n == 1 {
            return Access::Scalar;
        }
        if input == out {
            return Access::Full;
        }
        let trimmed: Vec<u64> = input.iter().copied().skip_while(|&d| d == 1).collect();
        if trimmed.len() <= out.len() && out[out.len() - trimmed.len()..] == trimmed[..] {
            return Access::Row(n);
        }
        let mut strides = vec![0i64; out.len()];
        let mut stride = 1i64;
        for (k, &d) in input.iter().enumerate().rev() {
            let o = out.len() - (input.len() - k);
            strides[o] = if d == 1 { 0 } else { stride };
            stride *= d as i64;
        }
        Access::Strided(strides)
    }
}

/// One elementwise kernel to generate.
#[derive(Clone, Debug)]
pub struct EwSpec {
    /// The program's instructions (`a0` when empty): an [`EwExpr`]'s, or a single op's (which
    /// may be one no `EwExpr` admits, such as `gelu_grad`).
    pub program: Vec<EwInst>,
    /// Each input's dtype (f32, bf16, f16 or bool).
    pub inputs: Vec<DType>,
    /// Each input's access mode.
    pub access: Vec<Access>,
    /// The result's dtype (f32, bf16, f16 or bool).
    pub out: DType,
    /// FP8 output: format and saturation (`q = quantize(y)` and `amax(y)` as well).
    pub quant: Option<(DType, bool)>,
}

/// The kernel's parameter block (`EwParams` in elementwise.cu, field for field).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EwParams {
    /// Input device pointers.
    pub inputs: [u64; MAX_INPUTS],
    /// Row inputs: their element count.
    pub row_len: [u64; MAX_INPUTS],
    /// Strided inputs: element strides per output dim.
    pub strides: [[i64; MAX_DIMS]; MAX_INPUTS],
    /// The output's dims (for strided inputs).
    pub dims: [u64; MAX_DIMS],
    /// Number of dims.
    pub rank: u32,
    /// Padding (C layout).
    pub pad: u32,
    /// The result (0: not written).
    pub y: u64,
    /// The FP8 result (0: not written).
    pub q: u64,
    /// The quantization scale (f32[]).
    pub scale: u64,
    /// amax(y) accumulator (0: not computed).
    pub amax: u64,
    /// Output elements.
    pub n: u64,
}

impl EwParams {
    /// A parameter block for `access` over an output of dims `out_dims`, pointers unset.
    pub fn new(access: &[Access], out_dims: &[u64]) -> Result<EwParams, String> {
        if out_dims.len() > MAX_DIMS {
            return Err(format!(
                "rank {} is above the {MAX_DIMS} dims the CUDA elementwise kernel handles",
                out_dims.len()
            ));
        }
        let mut p = EwParams {
            inputs: [0; MAX_INPUTS],
            row_len: [1; MAX_INPUTS],
            strides: [[0; MAX_DIMS]; MAX_INPUTS],
            dims: [1; MAX_DIMS],
            rank: out_dims.len() as u32,
            pad: 0,
            y: 0,
            q: 0,
            scale: 0,
            amax: 0,
            n: out_dims.iter().product(),
        };
        p.dims[..out_dims.len()].copy_from_slice(out_dims);
        for (k, a) in access.iter().enumerate() {
            match a {
                Access::Row(len) => p.row_len[k] = *len,
                Access::Strided(s) => p.strides[k][..s.len()].copy_from_slice(s),
                Access::Full | Access::Scalar => {}
            }
        }
        Ok(p)
    }
}

/// A float literal with exactly `v`'s bits.
fn f32_lit(v: f32) -> String {
    format!("__uint_as_float(0x{:08x}u)", v.to_bits())
}

fn arg(a: &EwArg) -> String {
    match a {
        EwArg::Input(i) => format!("a[{i}]"),
        EwArg::Temp(t) => format!("t{t}"),
    }
}

/// The CUDA expression of one instruction.
fn inst_expr(inst: &EwInst) -> Result<String, String> {
    let a: Vec<String> = inst.args.iter().map(arg).collect();
    let want = |n: usize| -> Result<(), String> {
        if a.len() == n {
            Ok(())
        } else {
            Err(format!(
                "`{}` takes {n} operands, got {}",
                inst.op.name(),
                a.len()
            ))
        }
    };
    let unary = |f: &str| -> Result<String, String> {
        want(1)?;
        Ok(format!("{f}({})", a[0]))
    };
    let binary = |f: &str| -> Result<String, String> {
        want(2)?;
        Ok(format!("{f}({}, {})", a[0], a[1]))
    };
    match &inst.op {
        Op::Identity => unary("ew_identity"),
        Op::Neg => unary("ew_neg"),
        Op::Abs => unary("ew_abs"),
        Op::Sqrt => unary("ew_sqrt"),
        Op::Reciprocal => unary("ew_reciprocal"),
        Op::Exp => unary("ew_exp"),
        Op::Log => unary("ew_log"),
        Op::Erf => unary("ew_erf"),
        Op::Tanh => unary("ew_tanh"),
        Op::Sigmoid => unary("ew_sigmoid"),
        Op::Relu => unary("ew_relu"),
        Op::Floor => unary("ew_floor"),
        Op::Ceil => unary("ew_ceil"),
        Op::Sin => unary("ew_sin"),
        Op::Cos => unary("ew_cos"),
        Op::Gelu {
            approximate: GeluApprox::None,
        } => unary("ew_gelu_none"),
        Op::Gelu {
            approximate: GeluApprox::Tanh,
        } => unary("ew_gelu_tanh"),
        Op::GeluGrad {
            approximate: GeluApprox::None,
        } => binary("ew_gelu_grad_none"),
        Op::GeluGrad {
            approximate: GeluApprox::Tanh,
        } => binary("ew_gelu_grad_tanh"),
        Op::LeakyRelu { alpha } => {
            want(1)?;
            Ok(format!("ew_leaky_relu({}, {})", a[0], f32_lit(*alpha)))
        }
        Op::Not => unary("ew_not"),
        Op::IsNaN => unary("ew_is_nan"),
        Op::IsInf {
            detect_negative,
            detect_positive,
        } => {
            want(1)?;
            Ok(format!(
                "ew_is_inf({}, {detect_negative}, {detect_positive})",
                a[0]
            ))
        }
        Op::Add => binary("ew_add"),
        Op::Sub => binary("ew_sub"),
        Op::Mul => binary("ew_mul"),
        Op::Div => binary("ew_div"),
        Op::Pow => binary("ew_pow"),
        Op::Max | Op::Min => {
            // Variadic: fold left, as the CPU reference does.
            if a.is_empty() {
                return Err(format!("`{}` needs at least one operand", inst.op.name()));
            }
            let f = if matches!(inst.op, Op::Max) {
                "ew_max"
            } else {
                "ew_min"
            };
            Ok(a[1..]
                .iter()
                .fold(a[0].clone(), |acc, x| format!("{f}({acc}, {x})")))
        }
        Op::Mod { fmod: true } => binary("ew_fmod"),
        Op::Equal => binary("ew_equal"),
        Op::Less => binary("ew_less"),
        Op::LessOrEqual => binary("ew_less_or_equal"),
        Op::Greater => binary("ew_greater"),
        Op::GreaterOrEqual => binary("ew_greater_or_equal"),
        Op::And => binary("ew_and"),
        Op::Or => binary("ew_or"),
        Op::Xor => binary("ew_xor"),
        Op::Where => {
            want(3)?;
            Ok(format!("ew_where({}, {}, {})", a[0], a[1], a[2]))
        }
        Op::Clip => {
            want(3)?;
            Ok(format!("ew_clip({}, {}, {})", a[0], a[1], a[2]))
        }
        other => Err(format!(
            "`{}` is not supported in a CUDA elementwise program yet",
            other.name()
        )),
    }
}

/// The one-instruction program of a single elementwise op over inputs `a0..a{arity-1}`.
pub fn single_op(op: &Op, arity: usize) -> Vec<EwInst> {
    let args = (0..arity as u32).map(EwArg::Input).collect();
    vec![EwInst {
        op: op.clone(),
        args,
    }]
}

/// The instructions of an [`EwExpr`].
pub fn program_of(expr: &EwExpr) -> Vec<EwInst> {
    expr.insts().to_vec()
}

fn kind_name(d: DType) -> Result<&'static str, String> {
    match kind_code(d) {
        Some(0) => Ok("KIND_F32"),
        Some(1) => Ok("KIND_BF16"),
        Some(2) => Ok("KIND_F16"),
        Some(3) => Ok("KIND_U8"),
        _ => Err(format!(
            "{d} operands are not supported by the CUDA elementwise kernel (f32, bf16, f16 and bool are)"
        )),
    }
}

/// Generates `ew_expr.cuh` for `spec`.
pub fn header(spec: &EwSpec) -> Result<String, String> {
    let n = spec.inputs.len();
    if n == 0 || n > MAX_INPUTS {
        return Err(format!(
            "an elementwise program reads 1 to {MAX_INPUTS} inputs, this one {n}"
        ));
    }
    if spec.access.len() != n {
        return Err("internal: one access mode per input is needed".into());
    }
    for inst in &spec.program {
        for a in &inst.args {
            if let EwArg::Input(i) = a
                && *i as usize >= n
            {
                return Err(format!("the program reads a{i}, only {n} inputs are given"));
            }
        }
    }
    let names: Vec<&str> = spec.program.iter().map(|i| i.op.name()).collect();
    let mut h = String::new();
    let _ = writeln!(
        h,
        "// ew_expr.cuh, generated by fp8c-runtime for a program of {} instruction(s): {}",
        names.len(),
        names.join(", ")
    );
    let _ = writeln!(h, "#define EW_NIN {n}");
    let _ = writeln!(h, "#define EW_OUT_KIND {}", kind_name(spec.out)?);
    match spec.quant {
        Some((DType::F8E4M3, sat)) => {
            let _ = writeln!(h, "#define EW_Q_FMT FMT_E4M3\n#define EW_Q_SAT {sat}");
        }
        Some((DType::F8E5M2, sat)) => {
            let _ = writeln!(h, "#define EW_Q_FMT FMT_E5M2\n#define EW_Q_SAT {sat}");
        }
        Some((other, _)) => return Err(format!("{other} is not an FP8 type")),
        None => {
            let _ = writeln!(h, "#define EW_Q_FMT -1\n#define EW_Q_SAT true");
        }
    }
    let strided = spec.access.iter().any(|a| matches!(a, Access::Strided(_)));
    let _ = writeln!(h, "#define EW_HAS_STRIDED {}", u8::from(strided));
    let mut kinds = String::new();
    let mut modes = String::new();
    for (k, (d, a)) in spec.inputs.iter().zip(&spec.access).enumerate() {
        let _ = write!(kinds, "k == {k} ? {} : ", kind_name(*d)?);
        let _ = write!(modes, "k == {k} ? {} : ", a.code());
    }
    let _ = writeln!(
        h,
        "__device__ __forceinline__ constexpr int ew_in_kind(int k) {{ return {kinds}-1; }}"
    );
    let _ = writeln!(
        h,
        "__device__ __forceinline__ constexpr int ew_in_mode(int k) {{ return {modes}-1; }}"
    );
    let _ = writeln!(
        h,
        "__device__ __forceinline__ float ew_program(const float* a) {{"
    );
    let insts = &spec.program;
    for (i, inst) in insts.iter().enumerate() {
        let _ = writeln!(h, "  const float t{i} = {};", inst_expr(inst)?);
    }
    if insts.is_empty() {
        let _ = writeln!(h, "  return a[0];");
    } else {
        let _ = writeln!(h, "  return t{};", insts.len() - 1);
    }
    let _ = writeln!(h, "}}");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_modes_follow_broadcasting() {
        assert_eq!(Access::for_shapes(&[4, 8], &[4, 8]), Access::Full);
        assert_eq!(Access::for_shapes(&[1], &[4, 8]), Access::Scalar);
        assert_eq!(Access::for_shapes(&[8], &[4, 8]), Access::Row(8));
        assert_eq!(Access::for_shapes(&[1, 1, 8], &[2, 4, 8]), Access::Row(8));
        assert_eq!(
            Access::for_shapes(&[4, 1], &[4, 8]),
            Access::Strided(vec![1, 0])
        );
        assert_eq!(
            Access::for_shapes(&[3, 1, 5], &[2, 3, 4, 5]),
            Access::Strided(vec![0, 5, 0, 1])
        );
    }

    #[test]
    fn params_match_the_c_layout() {
        // 16 pointers, 16 row lengths, 16×8 strides, 8 dims, rank + pad, 4 pointers, n.
        assert_eq!(
            std::mem::size_of::<EwParams>(),
            8 * 16 + 8 * 16 + 8 * 16 * 8 + 8 * 8 + 8 + 8 * 4 + 8
        );
    }

    #[test]
    fn header_spells_the_program() {
        let spec = EwSpec {
            program: program_of(
                &EwExpr::parse("add[a0,a1];gelu{approximate=tanh}[t0];leaky_relu{alpha=0.5}[t1]")
                    .unwrap(),
            ),
            inputs: vec![DType::F32, DType::BF16],
            access: vec![Access::Full, Access::Row(8)],
            out: DType::BF16,
            quant: Some((DType::F8E4M3, true)),
        };
        let h = header(&spec).unwrap();
        assert!(h.contains("const float t0 = ew_add(a[0], a[1]);"), "{h}");
        assert!(h.contains("ew_gelu_tanh(t0)"), "{h}");
        assert!(
            h.contains("ew_leaky_relu(t1, __uint_as_float(0x3f000000u))"),
            "{h}"
        );
        assert!(h.contains("#define EW_Q_FMT FMT_E4M3"), "{h}");
        let bad = EwSpec {
            program: program_of(&EwExpr::parse("mod{fmod=false}[a0,a1]").unwrap()),
            ..spec
        };
        assert!(header(&bad).unwrap_err().contains("`mod`"));
    }
}
