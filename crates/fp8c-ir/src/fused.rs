//! What the fused ops (made by the fusion pass) carry as attributes: the elementwise program
//! [`EwExpr`], and the compact attribute text both it and the fusion pass's e-graph use.
//!
//! An [`EwExpr`] is a straight-line program of elementwise IR ops over the fused op's inputs
//! `a0, a1, ...`; instruction `i` defines `t{i}` and the last one is the result (an empty
//! program returns `a0`). Its text form has no spaces or parentheses, so it also fits in an
//! egg symbol:
//!
//! ```text
//! add[a1,a0];div[t0,a2];erf[t1];add[t2,a3];mul[t0,t3];mul[t4,a4]
//! gelu{approximate=tanh}[a0]
//! ```
//!
//! Compact attributes are `key=value` pairs separated by commas: integers `3`, floats in
//! Rust's round-trip form `1.0` / `1e-12` / `inf`, `true` / `false`, bare words, `~` for an
//! absent optional value, lists `[1,2]`, and quoted strings `"..."` (`\"` and `\\` escaped).
//! Tensor attributes have no compact form.

use crate::attr::{AttrMap, AttrValue};
use crate::{Attr, Op};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// Where an instruction of an [`EwExpr`] reads an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EwArg {
    /// Input `i` of the fused op (`a{i}`).
    Input(u32),
    /// The result of instruction `i` (`t{i}`).
    Temp(u32),
}

/// One instruction: an elementwise op applied to operands.
#[derive(Clone, Debug, PartialEq)]
pub struct EwInst {
    /// The op (elementwise unary or binary, `where` or `clip`).
    pub op: Op,
    /// Its operands, in the op's input order.
    pub args: Vec<EwArg>,
}

/// A straight-line elementwise program (see the module docs).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct EwExpr {
    insts: Vec<EwInst>,
}

/// True for the ops an [`EwExpr`] may contain.
pub fn is_program_op(op: &Op) -> bool {
    op.is_elementwise_unary() || op.is_elementwise_binary() || matches!(op, Op::Where | Op::Clip)
}

impl EwExpr {
    /// A program from its instructions; every op must be elementwise and every `t{i}` must be
    /// defined before it is read.
    pub fn new(insts: Vec<EwInst>) -> Result<Self, String> {
        for (i, inst) in insts.iter().enumerate() {
            if !is_program_op(&inst.op) {
                return Err(format!(
                    "instruction {i}: `{}` is not an elementwise op",
                    inst.op.name()
                ));
            }
            for a in &inst.args {
                if let EwArg::Temp(t) = a
                    && *t as usize >= i
                {
                    return Err(format!(
                        "instruction {i} reads t{t}, which is not defined before it"
                    ));
                }
            }
        }
        Ok(EwExpr { insts })
    }

    /// The instructions, in order.
    pub fn insts(&self) -> &[EwInst] {
        &self.insts
    }

    /// True for the empty program (its result is `a0`).
    pub fn is_empty(&self) -> bool {
        self.insts.is_empty()
    }

    /// How many inputs the program reads: one more than the largest `a{i}` (1 when empty).
    pub fn num_inputs(&self) -> usize {
        let max = self
            .insts
            .iter()
            .flat_map(|i| &i.args)
            .filter_map(|a| match a {
                EwArg::Input(i) => Some(*i as usize + 1),
                EwArg::Temp(_) => None,
            })
            .max();
        max.unwrap_or(1)
    }

    /// Parses the text form.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Ok(EwExpr::default());
        }
        let mut insts = Vec::new();
        for (i, part) in split_top(text, ';')?.into_iter().enumerate() {
            insts.push(parse_inst(part).map_err(|e| format!("instruction {i} `{part}`: {e}"))?);
        }
        EwExpr::new(insts)
    }
}

fn parse_inst(s: &str) -> Result<EwInst, String> {
    let open = s.find(['{', '[']).ok_or("expected `[` with the operands")?;
    let name = &s[..open];
    let mut rest = &s[open..];
    let mut attrs = AttrMap::default();
    if rest.starts_with('{') {
        let end = matching_close(rest)?;
        attrs = parse_compact_attrs(&rest[1..end])?;
        rest = &rest[end + 1..];
    }
    let args = rest
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or("expected the operands as `[a0,t1,...]` at the end")?;
    let args = if args.is_empty() {
        Vec::new()
    } else {
        args.split(',').map(parse_arg).collect::<Result<_, _>>()?
    };
    let op = Op::from_parts(name, attrs)?;
    Ok(EwInst { op, args })
}

fn parse_arg(s: &str) -> Result<EwArg, String> {
    let bad = || format!("operand `{s}` is not `a<N>` or `t<N>`");
    let (kind, num) = s.split_at_checked(1).ok_or_else(bad)?;
    let n: u32 = num.parse().map_err(|_| bad())?;
    match kind {
        "a" => Ok(EwArg::Input(n)),
        "t" => Ok(EwArg::Temp(n)),
        _ => Err(bad()),
    }
}

impl fmt::Display for EwArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EwArg::Input(i) => write!(f, "a{i}"),
            EwArg::Temp(i) => write!(f, "t{i}"),
        }
    }
}

impl fmt::Display for EwExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, inst) in self.insts.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            f.write_str(inst.op.name())?;
            let attrs = inst.op.attrs();
            if !attrs.is_empty() {
                let text = compact_attrs(&attrs).map_err(|_| fmt::Error)?;
                write!(f, "{{{text}}}")?;
            }
            f.write_str("[")?;
            for (k, a) in inst.args.iter().enumerate() {
                if k > 0 {
                    f.write_str(",")?;
                }
                write!(f, "{a}")?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

impl AttrValue for EwExpr {
    fn to_attr(&self) -> Attr {
        Attr::Str(self.to_string())
    }
    fn from_attr(a: Attr) -> Result<Self, String> {
        match a {
            Attr::Str(s) => EwExpr::parse(&s),
            other => Err(format!(
                "expected an elementwise program as a quoted string, got {other:?}"
            )),
        }
    }
    fn example() -> Self {
        EwExpr::default()
    }
}

impl Serialize for EwExpr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for EwExpr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        EwExpr::parse(&text).map_err(serde::de::Error::custom)
    }
}

// ------------------------------------------------------------------ compact attributes

/// The compact text of attributes (`to=f8e4m3,saturate=true`); errors on tensor attributes.
pub fn compact_attrs(attrs: &[(&str, Attr)]) -> Result<String, String> {
    let mut out = String::new();
    for (i, (k, v)) in attrs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push('=');
        push_compact_value(&mut out, v).map_err(|e| format!("attribute `{k}`: {e}"))?;
    }
    Ok(out)
}

fn push_compact_value(out: &mut String, v: &Attr) -> Result<(), String> {
    match v {
        Attr::Int(i) => out.push_str(&i.to_string()),
        Attr::Float(f) => out.push_str(&float_text(*f)),
        Attr::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Attr::Ints(vs) => {
            let items: Vec<String> = vs.iter().map(|v| v.to_string()).collect();
            out.push_str(&format!("[{}]", items.join(",")));
        }
        Attr::Floats(vs) => {
            let items: Vec<String> = vs.iter().map(|v| float_text(*v)).collect();
            out.push_str(&format!("[{}]", items.join(",")));
        }
        Attr::Word(w) => out.push_str(w),
        Attr::Str(s) => {
            out.push('"');
            for c in s.chars() {
                if c == '"' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
        }
        Attr::None => out.push('~'),
        Attr::Tensor(_) => return Err("tensor attributes have no compact form".into()),
    }
    Ok(())
}

/// A float that reads back as a float with the same bits (`1.0`, not `1`).
fn float_text(v: f64) -> String {
    format!("{v:?}")
}

/// Parses compact attribute text (the inverse of [`compact_attrs`]).
pub fn parse_compact_attrs(s: &str) -> Result<AttrMap, String> {
    let mut map = BTreeMap::new();
    if s.is_empty() {
        return Ok(AttrMap(map));
    }
    for part in split_top(s, ',')? {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("expected `key=value`, got `{part}`"))?;
        let value = parse_compact_value(v).map_err(|e| format!("attribute `{k}`: {e}"))?;
        if map.insert(k.to_string(), value).is_some() {
            return Err(format!("attribute `{k}` is given twice"));
        }
    }
    Ok(AttrMap(map))
}

fn parse_compact_value(v: &str) -> Result<Attr, String> {
    if v == "~" {
        return Ok(Attr::None);
    }
    if v == "true" || v == "false" {
        return Ok(Attr::Bool(v == "true"));
    }
    if let Some(body) = v.strip_prefix('"') {
        let body = body.strip_suffix('"').ok_or("unterminated string")?;
        let mut out = String::new();
        let mut chars = body.chars();
        while let Some(c) = chars.next() {
            out.push(if c == '\\' {
                chars.next().ok_or("dangling `\\`")?
            } else {
                c
            });
        }
        return Ok(Attr::Str(out));
    }
    if let Some(body) = v.strip_prefix('[') {
        let body = body.strip_suffix(']').ok_or("unterminated list")?;
        if body.is_empty() {
            return Ok(Attr::Ints(Vec::new()));
        }
        let items: Vec<&str> = body.split(',').collect();
        if let Ok(ints) = items.iter().map(|s| s.parse::<i64>()).collect() {
            return Ok(Attr::Ints(ints));
        }
        let floats = items
            .iter()
            .map(|s| s.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| format!("`{v}` is not a list of numbers"))?;
        return Ok(Attr::Floats(floats));
    }
    if let Ok(i) = v.parse::<i64>() {
        return Ok(Attr::Int(i));
    }
    let starts_numeric = v.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+');
    if starts_numeric || v == "inf" || v == "NaN" {
        return v
            .parse::<f64>()
            .map(Attr::Float)
            .map_err(|_| format!("`{v}` is not a number"));
    }
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(Attr::Word(v.to_string()));
    }
    Err(format!("cannot read the value `{v}`"))
}

/// Splits at `sep` outside brackets, braces and quoted strings.
fn split_top(s: &str, sep: char) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut quoted, mut escaped) = (0i32, 0usize, false, false);
    for (i, c) in s.char_indices() {
        if quoted {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '[' | '{' => depth += 1,
            ']' | '}' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced `{c}` in `{s}`"));
                }
            }
            _ if c == sep && depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 || quoted {
        return Err(format!("unbalanced brackets or quotes in `{s}`"));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

/// The index of the `}` or `]` closing the bracket `s` starts with.
fn matching_close(s: &str) -> Result<usize, String> {
    let (mut depth, mut quoted, mut escaped) = (0i32, false, false);
    for (i, c) in s.char_indices() {
        if quoted {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '[' | '{' => depth += 1,
            ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err(format!("unbalanced brackets in `{s}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, GeluApprox};

    #[test]
    fn program_text_round_trips() {
        let text = "add[a1,a0];div[t0,a2];erf[t1];add[t2,a3];mul[t0,t3];mul[t4,a4]";
        let e = EwExpr::parse(text).unwrap();
        assert_eq!(e.insts().len(), 6);
        assert_eq!(e.num_inputs(), 5);
        assert_eq!(e.to_string(), text);
        let g = EwExpr::parse("gelu{approximate=tanh}[a0];leaky_relu{alpha=0.01}[t0]").unwrap();
        assert_eq!(
            g.insts()[0].op,
            Op::Gelu {
                approximate: GeluApprox::Tanh
            }
        );
        assert_eq!(EwExpr::parse(&g.to_string()).unwrap(), g);
        assert!(EwExpr::parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_programs_are_refused() {
        assert!(EwExpr::parse("relu[t0]").is_err());
        assert!(EwExpr::parse("matmul[a0,a1]").is_err());
        assert!(EwExpr::parse("relu[x0]").is_err());
        assert!(EwExpr::parse("relu(a0)").is_err());
    }

    #[test]
    fn compact_attrs_round_trip() {
        let op = Op::ComputeScale {
            fmt: DType::F8E4M3,
            margin: 0.5,
            source: crate::AmaxSource::HistoryMax,
            epsilon: 1e-12,
            power_2: false,
        };
        let text = compact_attrs(&op.attrs()).unwrap();
        assert_eq!(
            Op::from_parts("compute_scale", parse_compact_attrs(&text).unwrap()).unwrap(),
            op
        );
        let t = Op::Transpose { perm: vec![1, 0] };
        let text = compact_attrs(&t.attrs()).unwrap();
        assert_eq!(text, "perm=[1,0]");
        assert_eq!(
            Op::from_parts("transpose", parse_compact_attrs(&text).unwrap()).unwrap(),
            t
        );
        let s = parse_compact_attrs(r#"expr="relu[a0]",to=~"#).unwrap();
        assert_eq!(s.0["expr"], Attr::Str("relu[a0]".into()));
        assert_eq!(s.0["to"], Attr::None);
    }
}
