//! CUDA for elementwise programs: an [`EwExpr`] (or a single elementwise op) with its input
//! kinds and access modes becomes the `ew_expr.cuh` header that `kernels/elementwise.cu`
//! includes. The kernel around it (loads, stores, FP8 output, amax) is fixed; only the
//! straight-line program and a few constants are generated.
//!
//! Each instruction is its op's CUDA template from the elementwise table
//! (`fp8c_ir::elementwise`, one row per op) with the operands and attributes filled in: this
//! file has no list of ops. Numbers in attributes (`leaky_relu`'s alpha) are written as their
//! exact f32 bit patterns, so the generated code computes with the very constants of the IR.

use crate::cuda::kernels::kind_code;
use fp8c_ir::elementwise::{self, Kind};
use fp8c_ir::{Attr, DType, EwArg, EwExpr, EwInst, Op, OpView};
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
        Access::Strided(broadcast_strides(input, out))
    }
}

/// Element strides that read `input` broadcast to `out` (numpy rules, 0 on broadcast dims).
pub fn broadcast_strides(input: &[u64], out: &[u64]) -> Vec<i64> {
    let mut strides = vec![0i64; out.len()];
    let mut stride = 1i64;
    for (k, &d) in input.iter().enumerate().rev() {
        let o = out.len() - (input.len() - k);
        strides[o] = if d == 1 { 0 } else { stride };
        stride *= d as i64;
    }
    strides
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
    /// Integer programs: the step's error flag (i32; 0: none), set on a zero divisor.
    pub err: u64,
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
            err: 0,
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

/// The CUDA expression of one instruction: its op's template in the elementwise table
/// ([`fp8c_ir::elementwise::row`]) with the operands and attributes filled in. A variadic op
/// (`max`, `min`) folds its binary template left over the operands, as the CPU reference does.
fn inst_expr(inst: &EwInst) -> Result<String, String> {
    let name = inst.op.name();
    let OpView::Elementwise(e) = inst.op.view() else {
        return Err(format!(
            "`{name}` is not supported in a CUDA elementwise program yet"
        ));
    };
    let row = elementwise::row(e);
    let template = row.cuda.map_err(|why| {
        format!("`{name}` is not supported in a CUDA elementwise program yet: {why}")
    })?;
    let attrs = inst.op.attrs();
    let a: Vec<String> = inst.args.iter().map(arg).collect();
    if row.kind == Kind::Variadic {
        let Some((first, rest)) = a.split_first() else {
            return Err(format!("`{name}` needs at least one operand"));
        };
        return rest.iter().try_fold(first.clone(), |acc, x| {
            render(name, template, &[acc, x.clone()], &attrs)
        });
    }
    let arity = template_operands(template);
    if a.len() != arity {
        return Err(format!("`{name}` takes {arity} operands, got {}", a.len()));
    }
    render(name, template, &a, &attrs)
}

/// The `{...}` placeholders of a template, in order.
fn placeholders(template: &str) -> impl Iterator<Item = &str> {
    template
        .split('{')
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(p, _)| p))
}

/// The operand index a placeholder names (`a0` is 0), if it names one.
fn operand(placeholder: &str) -> Option<usize> {
    placeholder.strip_prefix('a')?.parse().ok()
}

/// How many operands a template reads (one more than its highest `{aN}`).
fn template_operands(template: &str) -> usize {
    placeholders(template)
        .filter_map(operand)
        .map(|i| i + 1)
        .max()
        .unwrap_or(0)
}

/// An attribute as CUDA source: floats (the table's are f32) as their exact bit patterns,
/// booleans as `true` / `false`, words (`tanh`) and integers as written.
fn attr_source(value: &Attr) -> Option<String> {
    Some(match value {
        Attr::Float(v) => f32_lit(*v as f32),
        Attr::Bool(b) => b.to_string(),
        Attr::Int(i) => i.to_string(),
        Attr::Word(w) => w.clone(),
        _ => return None,
    })
}

/// `template` with `{aN}` replaced by operand N and `{attr}` by the attribute's source.
fn render(
    op: &str,
    template: &str,
    operands: &[String],
    attrs: &[(&'static str, Attr)],
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some((key, after)) = rest[open + 1..].split_once('}') else {
            return Err(format!(
                "internal: unclosed `{{` in the CUDA template of `{op}`"
            ));
        };
        let value = match operand(key) {
            Some(i) => operands.get(i).cloned(),
            None => attrs
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| attr_source(v)),
        };
        let Some(value) = value else {
            return Err(format!(
                "internal: the CUDA template of `{op}` names `{{{key}}}`, which it cannot fill"
            ));
        };
        out.push_str(&value);
        rest = after;
    }
    out.push_str(rest);
    Ok(out)
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
    // KIND_U8 holds bools here (0 / 1): u8 arithmetic would be read as bool logic, the wrong
    // result found when the golden cases first ran on the emulated device (add of u8 gave 1).
    if d == DType::U8 {
        return Err(
            "u8 operands are not supported by the CUDA elementwise kernel (f32, bf16, f16 and bool are)".into(),
        );
    }
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

/// The C type of an integer dtype (integer programs compute in it, wrapping).
fn int_ctype(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::I8 => "signed char",
        DType::U8 => "unsigned char",
        DType::I16 => "short",
        DType::U16 => "unsigned short",
        DType::I32 => "int",
        DType::U32 => "unsigned int",
        DType::I64 => "long long",
        DType::U64 => "unsigned long long",
        _ => return None,
    })
}

/// A probe for the table's integer forms: runs nothing, answers whether there is one.
struct IntProbe;
impl elementwise::UnaryKernel<i64> for IntProbe {
    type Out = ();
    fn run(self, _: impl Fn(i64) -> i64 + Send + Sync + Copy) {}
}
impl elementwise::BinaryKernel<i64> for IntProbe {
    type Out = ();
    fn run(self, _: impl Fn(i64, i64) -> i64 + Send + Sync + Copy) {}
}

/// Whether the CPU reference computes `op` on integers: the table's integer forms (truncating
/// `div` among them), the comparisons, and the `Own` ops with integer rules (both `mod`s,
/// `pow` with an integer exponent, `where`, `clip`). An integer program admits only these:
/// any other op would silently compute in float through C++'s conversions.
fn has_int_form(op: &Op) -> bool {
    use elementwise::Own;
    let OpView::Elementwise(e) = op.view() else {
        return false;
    };
    match elementwise::row(e).kind {
        Kind::Unary => elementwise::dispatch_unary_int::<i64, _>(e, IntProbe).is_some(),
        Kind::Binary | Kind::Variadic => {
            elementwise::dispatch_binary_int::<i64, _>(e, IntProbe).is_some()
        }
        Kind::Compare | Kind::Own(Own::Mod { .. } | Own::Pow | Own::Where | Own::Clip) => true,
        Kind::Logic
        | Kind::Predicate
        | Kind::Own(Own::Not | Own::Cast { .. } | Own::GeluGrad { .. }) => false,
    }
}

/// Whether `spec` computes on integers: an integer result, or a bool one from integer
/// operands (comparisons). A float result with an integer operand is a float program (`pow`
/// of a float base by an integer exponent).
pub fn is_int_program(spec: &EwSpec) -> bool {
    int_ctype(spec.out).is_some()
        || (spec.out == DType::Bool && spec.inputs.iter().any(|&d| int_ctype(d).is_some()))
}

/// The kind code of an integer exponent read by a float program (`EW_KIND_I64` /
/// `EW_KIND_I32` in elementwise.cu, converted to f32 as Rust's `as` does).
fn int_exponent_kind(d: DType) -> Option<&'static str> {
    match d {
        DType::I64 => Some("EW_KIND_I64"),
        DType::I32 => Some("EW_KIND_I32"),
        _ => None,
    }
}

/// Whether an integer program can fail (a zero divisor): it needs an error flag.
pub fn can_fail(spec: &EwSpec) -> bool {
    is_int_program(spec)
        && spec
            .program
            .iter()
            .any(|i| elementwise::row_of(&i.op).is_some_and(|r| r.flags.zero_divisor))
}

/// A `constexpr` function of the input index: `k == 0 ? v0 : k == 1 ? v1 : … : default`.
fn input_table(
    h: &mut String,
    ret: &str,
    name: &str,
    values: impl Iterator<Item = String>,
    default: &str,
) {
    let mut table = String::new();
    for (k, v) in values.enumerate() {
        let _ = write!(table, "k == {k} ? {v} : ");
    }
    let _ = writeln!(
        h,
        "__device__ __forceinline__ constexpr {ret} {name}(int k) {{ return {table}{default}; }}"
    );
}

/// The program's straight-line body in type `ty`: one `const ty tI = …;` per instruction,
/// then the last one (the first input when there is none) returned, and the closing brace.
fn program_body(h: &mut String, ty: &str, program: &[EwInst]) -> Result<(), String> {
    for (i, inst) in program.iter().enumerate() {
        let _ = writeln!(h, "  const {ty} t{i} = {};", inst_expr(inst)?);
    }
    match program.len() {
        0 => h.push_str("  return a[0];\n"),
        n => {
            let _ = writeln!(h, "  return t{};", n - 1);
        }
    }
    h.push_str("}\n");
    Ok(())
}

/// `ew_expr.cuh` of an integer program: every non-bool input and the result of one integer
/// type `T` (or a bool result), each instruction computed in `T` with wrapping arithmetic as
/// the CPU reference does, so a chain rounds like the CPU's op-by-op evaluation.
fn int_header(spec: &EwSpec) -> Result<String, String> {
    let n = spec.inputs.len();
    let ints: Vec<DType> = spec
        .inputs
        .iter()
        .chain([&spec.out])
        .copied()
        .filter(|&d| d != DType::Bool)
        .collect();
    let t = ints[0];
    let ctype = int_ctype(t).ok_or_else(|| {
        format!("{t} and integer operands cannot mix in a CUDA elementwise program")
    })?;
    if let Some(other) = ints.iter().find(|&&d| d != t) {
        return Err(format!(
            "{t} and {other} operands cannot mix in a CUDA elementwise program"
        ));
    }
    if spec.quant.is_some() {
        return Err("an integer program has no FP8 output".into());
    }
    for inst in &spec.program {
        if !has_int_form(&inst.op) {
            return Err(format!(
                "`{}` has no integer form (the CPU reference refuses {t} operands too)",
                inst.op.name()
            ));
        }
    }
    let mut h = String::new();
    let names: Vec<&str> = spec.program.iter().map(|i| i.op.name()).collect();
    let _ = writeln!(
        h,
        "// ew_expr.cuh, generated by fp8c-runtime for an integer ({t}) program of {} instruction(s): {}",
        names.len(),
        names.join(", ")
    );
    let _ = writeln!(
        h,
        "#define EW_INT 1
typedef {ctype} ew_int_t;"
    );
    let _ = writeln!(h, "#define EW_NIN {n}");
    let _ = writeln!(
        h,
        "#define EW_OUT_BOOL {}",
        u8::from(spec.out == DType::Bool)
    );
    let strided = spec.access.iter().any(|a| matches!(a, Access::Strided(_)));
    let _ = writeln!(h, "#define EW_HAS_STRIDED {}", u8::from(strided));
    let bools = spec
        .inputs
        .iter()
        .map(|&d| u8::from(d == DType::Bool).to_string());
    input_table(&mut h, "bool", "ew_in_bool", bools, "false");
    let modes = spec.access.iter().map(|a| a.code().to_string());
    input_table(&mut h, "int", "ew_in_mode", modes, "-1");
    // Division and remainder report a zero divisor through `bad` (the step's error flag).
    let _ = writeln!(
        h,
        "#define ew_div(a, b) ew_div_int(a, b, bad)\n#define ew_mod(a, b) ew_mod_int(a, b, bad)\n#define ew_fmod(a, b) ew_fmod_int(a, b, bad)"
    );
    let _ = writeln!(
        h,
        "__device__ __forceinline__ ew_int_t ew_program(const ew_int_t* a, bool& bad) {{"
    );
    program_body(&mut h, "ew_int_t", &spec.program)?;
    h.push_str("#undef ew_div\n#undef ew_mod\n#undef ew_fmod\n");
    Ok(h)
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
    if is_int_program(spec) {
        return int_header(spec);
    }
    for inst in &spec.program {
        if let OpView::Elementwise(fp8c_ir::ElementwiseOp::Mod { fmod: false }) = inst.op.view() {
            return Err("mod with fmod=0 takes integer operands (ONNX)".into());
        }
    }
    let names: Vec<&str> = spec.program.iter().map(|i| i.op.name()).collect();
    let mut h = String::new();
    let _ = writeln!(h, "#define EW_INT 0");
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
    // An integer operand of a float program: only as `pow`'s exponent (ONNX Pow lets the
    // exponent's type differ; the CPU converts it to the base's float type).
    let pow_exponent_only = |k: usize| {
        spec.program.iter().all(|inst| {
            inst.args.iter().enumerate().all(|(j, a)| {
                *a != EwArg::Input(k as u32) || (j == 1 && matches!(inst.op, Op::Pow))
            })
        })
    };
    let mut kinds = Vec::new();
    for (k, d) in spec.inputs.iter().enumerate() {
        kinds.push(match int_exponent_kind(*d) {
            Some(kind) if pow_exponent_only(k) => kind.to_string(),
            _ => kind_name(*d)?.to_string(),
        });
    }
    input_table(&mut h, "int", "ew_in_kind", kinds.into_iter(), "-1");
    let modes = spec.access.iter().map(|a| a.code().to_string());
    input_table(&mut h, "int", "ew_in_mode", modes, "-1");
    let _ = writeln!(
        h,
        "__device__ __forceinline__ float ew_program(const float* a) {{"
    );
    program_body(&mut h, "float", &spec.program)?;
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
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[2, 3, 4], &[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(broadcast_strides(&[1], &[5]), vec![0]);
    }

    #[test]
    fn params_match_the_c_layout() {
        // 16 pointers, 16 row lengths, 16×8 strides, 8 dims, rank + pad, 4 pointers, n, err.
        assert_eq!(
            std::mem::size_of::<EwParams>(),
            8 * 16 + 8 * 16 + 8 * 16 * 8 + 8 * 8 + 8 + 8 * 4 + 8 + 8
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
        assert!(header(&bad).unwrap_err().contains("fmod=0"));
        // The same op on integers is an integer program, in the operands' own type.
        let int = EwSpec {
            program: program_of(&EwExpr::parse("mod{fmod=false}[a0,a1]").unwrap()),
            inputs: vec![DType::I32, DType::I32],
            access: vec![Access::Full, Access::Scalar],
            out: DType::I32,
            quant: None,
        };
        let h = header(&int).unwrap();
        assert!(h.contains("typedef int ew_int_t;"), "{h}");
        assert!(h.contains("const ew_int_t t0 = ew_mod(a[0], a[1]);"), "{h}");
        // An op without an integer form on the CPU is refused, not computed in float.
        let exp = EwSpec {
            program: program_of(&EwExpr::parse("exp[a0]").unwrap()),
            inputs: vec![DType::I64],
            access: vec![Access::Full],
            out: DType::I64,
            quant: None,
        };
        assert!(header(&exp).unwrap_err().contains("no integer form"));
    }

    /// The expressions the hand-written match of ops produced before the templates moved into
    /// the elementwise table: the generated CUDA must not change.
    #[test]
    fn every_op_renders_as_before() {
        let example = |name: &str| {
            Op::examples()
                .into_iter()
                .find(|o| o.name() == name)
                .unwrap()
        };
        let tanh = fp8c_ir::GeluApprox::Tanh;
        let cases: Vec<(Op, u32, &str)> = vec![
            (example("identity"), 1, "ew_identity(a[0])"),
            (example("neg"), 1, "ew_neg(a[0])"),
            (example("abs"), 1, "ew_abs(a[0])"),
            (example("sqrt"), 1, "ew_sqrt(a[0])"),
            (example("reciprocal"), 1, "ew_reciprocal(a[0])"),
            (example("exp"), 1, "ew_exp(a[0])"),
            (example("log"), 1, "ew_log(a[0])"),
            (example("erf"), 1, "ew_erf(a[0])"),
            (example("tanh"), 1, "ew_tanh(a[0])"),
            (example("sigmoid"), 1, "ew_sigmoid(a[0])"),
            (example("relu"), 1, "ew_relu(a[0])"),
            (example("floor"), 1, "ew_floor(a[0])"),
            (example("ceil"), 1, "ew_ceil(a[0])"),
            (example("round"), 1, "ew_round(a[0])"),
            (example("sin"), 1, "ew_sin(a[0])"),
            (example("cos"), 1, "ew_cos(a[0])"),
            (example("gelu"), 1, "ew_gelu_none(a[0])"),
            (
                example("leaky_relu"),
                1,
                "ew_leaky_relu(a[0], __uint_as_float(0x00000000u))",
            ),
            (example("not"), 1, "ew_not(a[0])"),
            (example("is_nan"), 1, "ew_is_nan(a[0])"),
            (example("is_inf"), 1, "ew_is_inf(a[0], false, false)"),
            (example("add"), 2, "ew_add(a[0], a[1])"),
            (example("sub"), 2, "ew_sub(a[0], a[1])"),
            (example("mul"), 2, "ew_mul(a[0], a[1])"),
            (example("div"), 2, "ew_div(a[0], a[1])"),
            (example("pow"), 2, "ew_pow(a[0], a[1])"),
            (example("max"), 1, "a[0]"),
            (example("max"), 2, "ew_max(a[0], a[1])"),
            (example("max"), 3, "ew_max(ew_max(a[0], a[1]), a[2])"),
            (example("min"), 1, "a[0]"),
            (example("min"), 2, "ew_min(a[0], a[1])"),
            (example("min"), 3, "ew_min(ew_min(a[0], a[1]), a[2])"),
            (example("equal"), 2, "ew_equal(a[0], a[1])"),
            (example("less"), 2, "ew_less(a[0], a[1])"),
            (example("less_or_equal"), 2, "ew_less_or_equal(a[0], a[1])"),
            (example("greater"), 2, "ew_greater(a[0], a[1])"),
            (
                example("greater_or_equal"),
                2,
                "ew_greater_or_equal(a[0], a[1])",
            ),
            (example("and"), 2, "ew_and(a[0], a[1])"),
            (example("or"), 2, "ew_or(a[0], a[1])"),
            (example("xor"), 2, "ew_xor(a[0], a[1])"),
            (example("where"), 3, "ew_where(a[0], a[1], a[2])"),
            (example("clip"), 3, "ew_clip(a[0], a[1], a[2])"),
            (example("gelu_grad"), 2, "ew_gelu_grad_none(a[0], a[1])"),
            (Op::Mod { fmod: true }, 2, "ew_fmod(a[0], a[1])"),
            (Op::Gelu { approximate: tanh }, 1, "ew_gelu_tanh(a[0])"),
            (
                Op::GeluGrad { approximate: tanh },
                2,
                "ew_gelu_grad_tanh(a[0], a[1])",
            ),
            (
                Op::LeakyRelu { alpha: 0.01 },
                1,
                "ew_leaky_relu(a[0], __uint_as_float(0x3c23d70au))",
            ),
            (
                Op::IsInf {
                    detect_negative: true,
                    detect_positive: false,
                },
                1,
                "ew_is_inf(a[0], true, false)",
            ),
        ];
        for (op, n, want) in cases {
            let inst = EwInst {
                args: (0..n).map(EwArg::Input).collect(),
                op,
            };
            assert_eq!(inst_expr(&inst).as_deref(), Ok(want), "{}", inst.op.name());
        }
    }

    #[test]
    fn every_cuda_template_of_the_table_renders() {
        for op in Op::examples() {
            let Some(row) = fp8c_ir::elementwise::row_of(&op) else {
                continue;
            };
            let Ok(template) = row.cuda else { continue };
            let n = template_operands(template).max(1) as u32;
            let inst = EwInst {
                args: (0..n).map(EwArg::Input).collect(),
                op,
            };
            let expr = inst_expr(&inst).unwrap_or_else(|e| panic!("{template}: {e}"));
            assert!(!expr.contains(['{', '}']), "{expr}");
        }
        // Wrong operand counts and ops outside the family are refused, naming the op.
        let one = |op: Op, n: u32| EwInst {
            op,
            args: (0..n).map(EwArg::Input).collect(),
        };
        assert_eq!(
            inst_expr(&one(Op::Add, 1)).unwrap_err(),
            "`add` takes 2 operands, got 1"
        );
        assert!(inst_expr(&one(Op::Max, 0)).unwrap_err().contains("`max`"));
        assert!(
            inst_expr(&one(Op::MatMul, 2))
                .unwrap_err()
                .contains("`matmul`")
        );
    }
}
