//! The printer: a graph's canonical def ([`Graph::to_def`]) written as text.
//!
//! Printing from the def (not from the live graph) makes the text as canonical as the def:
//! nodes appear in its order, so the parser, which inserts nodes in text order, rebuilds a
//! graph with the same def. Interface nodes sit in the header; when the def's order does not
//! start with them in header order, the ones out of place get a placement line in the body.

use super::{
    INLINE_TENSOR_MAX, Kind, fmt_f32, fmt_f64, fp8_to_f32, push_name, push_node_name, push_quoted,
};
use crate::graph::interface_name;
use crate::{Attr, AttrMap, DType, Dim, Graph, GraphDef, Op, Tensor, TensorType, ValueRef};
use half::{bf16, f16};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Interfaces with more entries than this print one entry per line.
pub const HEADER_ONE_LINE_MAX: usize = 6;

/// What a def position is in the text.
#[derive(Clone, Copy)]
enum Role {
    /// An interface entry: its kind and its rank in header order.
    Iface(Kind, usize),
    /// A body node line with this number.
    Body(usize),
}

/// Prints `g` as text (without weights). See `TEXT_FORMAT.md`.
pub fn print(g: &Graph) -> String {
    Printer::new(g.to_def()).print()
}

struct Printer {
    def: GraphDef,
    role: Vec<Role>,
    /// Interface names shared by entries of different kinds: references need `@kind`.
    ambiguous: HashMap<String, usize>,
    out: String,
}

impl Printer {
    fn new(def: GraphDef) -> Self {
        let n = def.nodes.len();
        let mut iface: Vec<Option<(Kind, usize)>> = vec![None; n];
        let lists = [(Kind::Input, &def.inputs), (Kind::Param, &def.params)];
        let state: Vec<usize> = def.state.iter().map(|&(p, _)| p).collect();
        let mut rank = 0;
        for (kind, list) in lists.into_iter().chain([(Kind::State, &state)]) {
            for &p in list {
                if p < n && iface[p].is_none() {
                    iface[p] = Some((kind, rank));
                    rank += 1;
                }
            }
        }
        let mut next = 0;
        let role = iface
            .iter()
            .map(|r| match r {
                Some((k, rank)) => Role::Iface(*k, *rank),
                None => {
                    next += 1;
                    Role::Body(next - 1)
                }
            })
            .collect();
        let mut ambiguous: HashMap<String, usize> = HashMap::new();
        for (p, r) in iface.iter().enumerate() {
            if r.is_some() {
                *ambiguous
                    .entry(interface_name(&def.nodes[p].op).to_string())
                    .or_default() += 1;
            }
        }
        ambiguous.retain(|_, count| *count > 1);
        Printer {
            def,
            role,
            ambiguous,
            out: String::new(),
        }
    }

    fn print(mut self) -> String {
        self.header();
        // The longest prefix of the node order made of interface nodes in header order is
        // implied by the header; every later interface node gets a placement line.
        let mut implied = 0;
        let mut last_rank = None;
        while let Some(Role::Iface(_, rank)) = self.role.get(implied) {
            if last_rank.is_some_and(|r| r > *rank) {
                break;
            }
            last_rank = Some(*rank);
            implied += 1;
        }
        for p in implied..self.def.nodes.len() {
            match self.role[p] {
                Role::Iface(kind, _) => {
                    self.out.push_str("  ");
                    self.out.push_str(kind.word());
                    self.out.push(' ');
                    self.value(ValueRef { node: p, slot: 0 });
                    self.out.push('\n');
                }
                Role::Body(_) => self.node_line(p),
            }
        }
        for (name, v) in &self.def.outputs.clone() {
            self.out.push_str("  return ");
            self.value(*v);
            self.out.push_str(" as ");
            push_quoted(&mut self.out, name);
            self.out.push('\n');
        }
        for (name, v) in &self.def.state_updates.clone() {
            self.out.push_str("  update %");
            push_name(&mut self.out, name);
            self.out.push_str(" = ");
            self.value(*v);
            self.out.push('\n');
        }
        self.out.push_str("}\n");
        self.out
    }

    fn header(&mut self) {
        self.out.push_str("graph @");
        push_name(&mut self.out, &self.def.name);
        let state: Vec<usize> = self.def.state.iter().map(|&(p, _)| p).collect();
        let sections = [
            ("", self.def.inputs.clone()),
            (" params", self.def.params.clone()),
            (" state", state),
        ];
        // Short interfaces stay on one line; long ones get one entry per line so that big
        // graphs (a BERT has hundreds of params and state entries) stay readable and diffable.
        let entries: usize = sections.iter().map(|(_, l)| l.len()).sum();
        let multiline = entries > HEADER_ONE_LINE_MAX;
        for (i, (keyword, list)) in sections.into_iter().enumerate() {
            if i > 0 && list.is_empty() {
                continue;
            }
            self.out.push_str(keyword);
            self.out.push('(');
            for (k, &p) in list.iter().enumerate() {
                if k > 0 {
                    self.out.push(',');
                    if !multiline {
                        self.out.push(' ');
                    }
                }
                if multiline {
                    self.out.push_str("\n    ");
                }
                self.iface_entry(p, (i == 2).then(|| self.def.state[k].1));
            }
            if multiline && !list.is_empty() {
                self.out.push('\n');
            }
            self.out.push(')');
        }
        self.out.push_str(" {\n");
    }

    /// `%name: type [= init] [# node_name]`
    fn iface_entry(&mut self, p: usize, init: Option<f64>) {
        let Some(node) = self.def.nodes.get(p) else {
            self.out.push_str("%\"<missing node>\": ()");
            return;
        };
        let iname = interface_name(&node.op).to_string();
        let node_name = node.name.clone();
        let outputs = node.outputs.clone();
        self.out.push('%');
        push_name(&mut self.out, &iname);
        self.out.push_str(": ");
        self.result_types(&outputs);
        if let Some(init) = init {
            self.out.push_str(" = ");
            self.out.push_str(&fmt_init(init));
        }
        if node_name != iname {
            self.out.push_str(" # ");
            push_node_name(&mut self.out, &node_name);
        }
    }

    /// `%N: type = op operands attrs  # name`
    fn node_line(&mut self, p: usize) {
        let node = self.def.nodes[p].clone();
        self.out.push_str("  ");
        self.value(ValueRef { node: p, slot: 0 });
        self.out.push_str(": ");
        self.result_types(&node.outputs);
        self.out.push_str(" = ");
        self.out.push_str(node.op.name());
        for (i, v) in node.inputs.iter().enumerate() {
            self.out.push_str(if i == 0 { " " } else { ", " });
            self.value(*v);
        }
        for (key, attr) in node.op.attrs() {
            self.out.push(' ');
            self.out.push_str(key);
            self.out.push('=');
            push_attr(&mut self.out, &node.op, key, &attr);
        }
        self.out.push_str("  # ");
        push_node_name(&mut self.out, &node.name);
        self.out.push('\n');
    }

    fn value(&mut self, v: ValueRef) {
        self.out.push('%');
        match self.role.get(v.node) {
            Some(Role::Body(n)) => {
                let _ = write!(self.out, "{n}");
            }
            Some(Role::Iface(kind, _)) => {
                let name = interface_name(&self.def.nodes[v.node].op);
                push_name(&mut self.out, name);
                if self.ambiguous.contains_key(name) {
                    self.out.push('@');
                    self.out.push_str(kind.word());
                }
            }
            None => self.out.push_str("\"<missing node>\""),
        }
        if v.slot > 0 {
            let _ = write!(self.out, "#{}", v.slot);
        }
    }

    fn result_types(&mut self, types: &[TensorType]) {
        if let [t] = types {
            push_type(&mut self.out, t);
            return;
        }
        self.out.push('(');
        for (i, t) in types.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            push_type(&mut self.out, t);
        }
        self.out.push(')');
    }
}

/// A state's initial value: integers without a decimal point (`0`, `1`), else as [`fmt_f64`].
fn fmt_init(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 && !(v == 0.0 && v.is_sign_negative()) {
        format!("{}", v as i64)
    } else {
        fmt_f64(v)
    }
}

/// `f32[8,batch,?]`; symbolic dimensions that are not bare names are quoted.
pub(crate) fn push_type(out: &mut String, t: &TensorType) {
    out.push_str(t.dtype.name());
    out.push('[');
    for (i, d) in t.shape.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        match d {
            Dim::Known(n) => {
                let _ = write!(out, "{n}");
            }
            Dim::Sym(s) => push_name(out, s),
            Dim::Unknown => out.push('?'),
        }
    }
    out.push(']');
}

/// One attribute value. Floats take the shortest form that rebuilds the same op: an f32
/// field holding 0.1f32 prints `0.1`, not `0.10000000149011612`.
fn push_attr(out: &mut String, op: &Op, key: &str, attr: &Attr) {
    match attr {
        Attr::Int(v) => {
            let _ = write!(out, "{v}");
        }
        Attr::Float(v) => out.push_str(&short_float(op, key, *v)),
        Attr::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Attr::Ints(vs) => {
            out.push('[');
            for (i, v) in vs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{v}");
            }
            out.push(']');
        }
        Attr::Floats(vs) => {
            out.push('[');
            for (i, v) in vs.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&fmt_f64(*v));
            }
            out.push(']');
        }
        Attr::Word(w) => out.push_str(w),
        Attr::Str(s) => push_quoted(out, s),
        Attr::Tensor(t) => push_tensor(out, t),
        Attr::None => out.push_str("none"),
    }
}

fn short_float(op: &Op, key: &str, v: f64) -> String {
    let narrow = v as f32;
    if narrow as f64 == v && !v.is_nan() {
        let short = fmt_f32(narrow);
        let reparsed: f64 = short.parse().unwrap_or(f64::NAN);
        let attrs = op
            .attrs()
            .into_iter()
            .map(|(k, a)| {
                (
                    k.to_string(),
                    if k == key { Attr::Float(reparsed) } else { a },
                )
            })
            .collect();
        if Op::from_parts(op.name(), AttrMap(attrs)).as_ref() == Ok(op) {
            return short;
        }
    }
    fmt_f64(v)
}

/// `dense<f32[2]>[1.0,-0.0]` for small tensors, `dense<f32[100]>hex"0000803f..."` otherwise.
pub(crate) fn push_tensor(out: &mut String, t: &Tensor) {
    out.push_str("dense<");
    push_type(out, &t.ty());
    out.push('>');
    let size = t.dtype().size();
    if t.len() > INLINE_TENSOR_MAX {
        out.push_str("hex\"");
        for b in t.bytes() {
            let _ = write!(out, "{b:02x}");
        }
        out.push('"');
        return;
    }
    out.push('[');
    for (i, chunk) in t.bytes().chunks_exact(size).enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_element(out, t.dtype(), chunk);
    }
    out.push(']');
}

/// One tensor element, exact: decimal where that is exact, hex bits for NaNs other than
/// the type's canonical one (all FP8 NaNs) and for bool bytes other than 0 and 1.
fn push_element(out: &mut String, dtype: DType, b: &[u8]) {
    let mut raw = [0u8; 8];
    raw[..b.len()].copy_from_slice(b);
    let bits = u64::from_le_bytes(raw);
    let hex = |out: &mut String| {
        let _ = write!(out, "0x{:0width$x}", bits, width = 2 * b.len());
    };
    match dtype {
        DType::I64 => {
            let _ = write!(out, "{}", bits as i64);
        }
        DType::I32 => {
            let _ = write!(out, "{}", bits as u32 as i32);
        }
        DType::I16 => {
            let _ = write!(out, "{}", bits as u16 as i16);
        }
        DType::I8 => {
            let _ = write!(out, "{}", bits as u8 as i8);
        }
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => {
            let _ = write!(out, "{bits}");
        }
        // Storage-only narrow floats: their bits (the decoders live in fp8c-core).
        DType::F8E4M3Fnuz | DType::F8E5M2Fnuz | DType::F8E8M0 | DType::F4E2M1 => hex(out),
        DType::Bool => match bits {
            0 => out.push_str("false"),
            1 => out.push_str("true"),
            _ => hex(out),
        },
        DType::F64 => {
            let v = f64::from_bits(bits);
            if v.is_nan() && bits != f64::NAN.to_bits() {
                hex(out)
            } else {
                out.push_str(&fmt_f64(v))
            }
        }
        DType::F32 => {
            let v = f32::from_bits(bits as u32);
            if v.is_nan() && bits as u32 != f32::NAN.to_bits() {
                hex(out)
            } else {
                out.push_str(&fmt_f32(v))
            }
        }
        DType::F16 => {
            let v = f16::from_bits(bits as u16);
            if v.is_nan() && bits as u16 != f16::NAN.to_bits() {
                hex(out)
            } else {
                out.push_str(&fmt_f32(v.to_f32()))
            }
        }
        DType::BF16 => {
            let v = bf16::from_bits(bits as u16);
            if v.is_nan() && bits as u16 != bf16::NAN.to_bits() {
                hex(out)
            } else {
                out.push_str(&fmt_f32(v.to_f32()))
            }
        }
        DType::F8E4M3 | DType::F8E5M2 => {
            let v = fp8_to_f32(dtype, bits as u8);
            if v.is_nan() {
                hex(out)
            } else {
                out.push_str(&fmt_f32(v))
            }
        }
    }
}

/// A value or state name as written after `%` (bare or quoted), for messages.
pub(crate) fn ref_name(name: &str) -> String {
    let mut s = String::new();
    push_name(&mut s, name);
    s
}

/// A type as written in the text, for messages.
pub(crate) fn type_text(t: &TensorType) -> String {
    let mut s = String::new();
    push_type(&mut s, t);
    s
}
