//! The textual IR, the JSON form and the binary weights sidecar.
//!
//! The grammar is specified in `crates/fp8c-ir/TEXT_FORMAT.md`; in short:
//!
//! ```text
//! graph @fc1(%x: f32[8,256]) params(%w: f32[256,512]) state(%x.h: f32[16] = 0) {
//!   %0: f32[] = amax %x  # fc1.x.amax
//!   %1: f32[8,512] = matmul %x, %w  # fc1
//!   return %1 as "y"
//!   update %x.h = %2
//! }
//! ```
//!
//! Invariants this module keeps:
//! - `parse(print(g)) == g` for every graph without weights whose interface satisfies the
//!   verifier (exact: names, node order, types, attributes and tensor bits all survive);
//!   weights travel separately through [`write_weights`] / [`read_weights`].
//! - `print(parse(t)) == t` for text in canonical form (what `print` writes).
//! - Neither `parse`, `from_json` nor `read_weights` panics or allocates more than its input
//!   justifies, whatever the input.

mod json;
mod parse;
mod print;
mod weights;

pub use json::{from_json, to_json, to_json_with_weights};
pub use parse::parse;
pub use print::print;
pub use weights::{OLD_WEIGHTS_MAGIC, read_weights, write_weights};

use crate::DType;

/// The three kinds of interface entries, in header order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Input,
    Param,
    State,
}

impl Kind {
    /// The keyword of the kind (header section, placement line, `@kind` qualifier).
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Input => "input",
            Kind::Param => "param",
            Kind::State => "state",
        }
    }
}

/// Tensors with at most this many elements print as a value list; larger ones as hex bytes.
pub const INLINE_TENSOR_MAX: usize = 64;

/// True if `s` can be written without quotes after `%` or `@`, or as a symbolic dimension:
/// `[A-Za-z_][A-Za-z0-9_.]*`.
pub(crate) fn is_bare_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(is_name_char)
}

/// Characters allowed after the first one of a bare name.
pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// Characters of an unquoted node name (the `# name` at the end of a node line).
pub(crate) fn is_node_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-')
}

/// True if a node name can be written without quotes.
pub(crate) fn is_bare_node_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_node_name_char)
}

/// Appends `s` as a JSON string literal.
pub(crate) fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends a value or graph name: bare if it can be, quoted otherwise.
pub(crate) fn push_name(out: &mut String, s: &str) {
    if is_bare_name(s) {
        out.push_str(s);
    } else {
        push_quoted(out, s);
    }
}

/// Appends a node name: bare if it can be, quoted otherwise.
pub(crate) fn push_node_name(out: &mut String, s: &str) {
    if is_bare_node_name(s) {
        out.push_str(s);
    } else {
        push_quoted(out, s);
    }
}

/// An f64 that parses back to the same bits (except NaN payloads), always with a decimal
/// point or an exponent: `1.0`, `1e-5`, `inf`, `-inf`, `nan`.
pub(crate) fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else {
        format!("{v:?}")
    }
}

/// The f32 counterpart of [`fmt_f64`].
pub(crate) fn fmt_f32(v: f32) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else {
        format!("{v:?}")
    }
}

/// Decodes one FP8 byte (E4M3 "FN": no infinities, NaN = S.1111.111; E5M2: IEEE-like).
/// Other dtypes are not FP8 and decode as NaN.
pub(crate) fn fp8_to_f32(dtype: DType, b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0f32 } else { 1.0 };
    let (exp_bits, man_bits, bias) = match dtype {
        DType::F8E4M3 => (4u32, 3u32, 7i32),
        DType::F8E5M2 => (5, 2, 15),
        _ => return f32::NAN,
    };
    let e = ((b & 0x7f) >> man_bits) as i32;
    let m = (b & ((1 << man_bits) - 1)) as i32;
    let e_max = (1 << exp_bits) - 1;
    if dtype == DType::F8E4M3 && e == e_max && m == 7 {
        return f32::NAN;
    }
    if dtype == DType::F8E5M2 && e == e_max {
        return if m == 0 {
            sign * f32::INFINITY
        } else {
            f32::NAN
        };
    }
    let scale = |p: i32| 2f32.powi(p);
    if e == 0 {
        sign * m as f32 * scale(1 - bias - man_bits as i32)
    } else {
        sign * (1.0 + m as f32 / (1 << man_bits) as f32) * scale(e - bias)
    }
}
