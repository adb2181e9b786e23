//! The parser: text to [`GraphDef`](crate::GraphDef) to [`Graph`] (via [`Graph::from_def`],
//! which keeps the types written in the text and inserts nodes in text order, so the def
//! comes back as printed).
//!
//! A hand-written recursive-descent parser over bytes: the grammar is line-oriented and a
//! little context-sensitive (`#` is a result slot right after a value, a node name after
//! whitespace), which a separate tokenizer would only complicate. Every error carries the
//! line and column of the offending text; nothing here panics or allocates more than the
//! input's size justifies.
//!
//! Layout: this file holds the entry point, what the body parses into (`Raw`) and the
//! header and body lines; `lexer` the cursor (positions and errors, whitespace, names,
//! numbers); `values` types, attribute values and tensor literals, and building the op from
//! its attributes; `build` turns the parsed lines into a [`Graph`].

mod build;
mod lexer;
mod values;

use super::Kind;
use crate::{Attr, Graph, IrError, Op, Result, TensorType};
use lexer::Parser;
use std::collections::{BTreeMap, HashMap};
use values::build_op;

/// Parses the text form (see `TEXT_FORMAT.md`) into a graph whose params have no data.
pub fn parse(text: &str) -> Result<Graph> {
    let mut p = Parser {
        src: text,
        b: text.as_bytes(),
        pos: 0,
    };
    let raw = p.graph()?;
    raw.into_graph(&p)
}

/// An interface entry declared in the header.
struct Iface {
    kind: Kind,
    name: String,
    types: Vec<TensorType>,
    init: f64,
    node_name: String,
    at: usize,
    /// Byte offset of its first use, for the rule "placement line before first use".
    first_use: Option<usize>,
    placed: bool,
}

/// A node line of the body.
struct Line {
    types: Vec<TensorType>,
    op: Op,
    inputs: Vec<Ref>,
    name: Option<String>,
    at: usize,
}

#[derive(Clone, Copy)]
enum Target {
    Iface(usize),
    Line(usize),
}

#[derive(Clone, Copy)]
struct Ref {
    target: Target,
    slot: u32,
}

/// One entry of the body's node order.
enum Item {
    Line(usize),
    Place(usize),
}

#[derive(Default)]
struct Raw {
    name: String,
    ifaces: Vec<Iface>,
    iface_names: HashMap<String, Vec<usize>>,
    lines: Vec<Line>,
    numbers: HashMap<u64, usize>,
    items: Vec<Item>,
    outputs: Vec<(String, Ref)>,
    output_at: HashMap<String, usize>,
    updates: BTreeMap<String, Ref>,
    /// Where the header's `{` is (errors about the whole graph point there).
    header_at: usize,
}

impl Parser<'_> {
    fn graph(&mut self) -> Result<Raw> {
        let mut raw = Raw::default();
        self.ws_nl();
        if !self.keyword("graph") {
            return Err(self.expected("`graph`"));
        }
        self.expect(b'@', "`@` and the graph name")?;
        raw.name = self.name("the graph name")?;
        self.ws();
        if self.peek() != Some(b'(') {
            return Err(self.expected("`(` and the graph inputs"));
        }
        self.header_section(&mut raw, Kind::Input)?;
        self.ws();
        if self.keyword("params") {
            self.header_section(&mut raw, Kind::Param)?;
            self.ws();
        }
        if self.keyword("state") {
            self.header_section(&mut raw, Kind::State)?;
            self.ws();
        }
        raw.header_at = self.pos;
        if !self.eat(b'{') {
            return Err(self.expected("`params(`, `state(` or `{`"));
        }
        self.end_of_line()?;
        loop {
            self.ws_nl();
            let at = self.pos;
            match self.peek() {
                None => return Err(self.err("unexpected end of input: missing `}`")),
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b'%') => self.node_line(&mut raw)?,
                _ => match self.ident() {
                    Some("return") => self.return_line(&mut raw, at)?,
                    Some("update") => self.update_line(&mut raw)?,
                    Some(w @ ("input" | "param" | "state")) => {
                        let kind = match w {
                            "input" => Kind::Input,
                            "param" => Kind::Param,
                            _ => Kind::State,
                        };
                        self.place_line(&mut raw, kind, at)?
                    }
                    _ => {
                        self.pos = at;
                        return Err(self.expected(
                            "a node line (`%N: type = op ...`), `return`, `update` or `}`",
                        ));
                    }
                },
            }
        }
        self.end_of_line()?;
        self.ws_nl();
        if self.peek().is_some() {
            return Err(self.err("unexpected text after the closing `}`"));
        }
        Ok(raw)
    }

    /// `( %name: type [= init] [# node_name], ... )` for one interface kind.
    fn header_section(&mut self, raw: &mut Raw, kind: Kind) -> Result<()> {
        self.ws();
        if !self.eat(b'(') {
            return Err(self.expected(&format!("`(` after `{}`", section_word(kind))));
        }
        self.ws_nl();
        if self.eat(b')') {
            return Ok(());
        }
        loop {
            self.ws_nl();
            let at = self.pos;
            if !self.eat(b'%') {
                return Err(self.expected(&format!("`%name` of a {}", kind.word())));
            }
            let name = self.name(&format!("the {} name after `%`", kind.word()))?;
            if raw
                .iface_names
                .get(&name)
                .is_some_and(|v| v.iter().any(|&i| raw.ifaces[i].kind == kind))
            {
                let shown = super::print::ref_name(&name);
                return Err(self.err_at(at, format!("{} %{shown} declared twice", kind.word())));
            }
            self.expect(b':', &format!("`:` and a type after %{name}"))?;
            let types = self.result_types()?;
            let mut init = 0.0;
            self.ws();
            if kind == Kind::State && self.eat(b'=') {
                self.ws();
                init = self.float_value()?;
                self.ws();
            }
            let mut node_name = name.clone();
            if self.eat(b'#') {
                node_name = self.node_name()?;
            }
            raw.iface_names
                .entry(name.clone())
                .or_default()
                .push(raw.ifaces.len());
            raw.ifaces.push(Iface {
                kind,
                name,
                types,
                init,
                node_name,
                at,
                first_use: None,
                placed: false,
            });
            self.ws_nl();
            if self.eat(b')') {
                return Ok(());
            }
            if !self.eat(b',') {
                return Err(self.expected(&format!("`,` or `)` after the {}", kind.word())));
            }
        }
    }

    /// A value reference: `%N`, `%N#k`, `%name`, `%"name"`, `%name@kind`.
    fn value_ref(&mut self, raw: &mut Raw) -> Result<Ref> {
        self.ws();
        let at = self.pos;
        if !self.eat(b'%') {
            return Err(self.expected("a value (`%N` or `%name`)"));
        }
        let target = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
            let n = self.u64("a value number")?;
            match raw.numbers.get(&n) {
                Some(&i) => Target::Line(i),
                None => return Err(self.err_at(at, format!("use of undefined value %{n}"))),
            }
        } else {
            let name = self.name("a value number or name after `%`")?;
            let kind = if self.eat(b'@') {
                match self.ident() {
                    Some("input") => Some(Kind::Input),
                    Some("param") => Some(Kind::Param),
                    Some("state") => Some(Kind::State),
                    _ => return Err(self.expected("`input`, `param` or `state` after `@`")),
                }
            } else {
                None
            };
            let found: Vec<usize> = raw
                .iface_names
                .get(&name)
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|&i| kind.is_none_or(|k| raw.ifaces[i].kind == k))
                        .collect()
                })
                .unwrap_or_default();
            match found[..] {
                [i] => {
                    let first = &mut raw.ifaces[i].first_use;
                    first.get_or_insert(at);
                    Target::Iface(i)
                }
                [] => {
                    let shown = super::print::ref_name(&name);
                    return Err(self.err_at(at, format!("use of undefined value %{shown}")));
                }
                _ => {
                    let shown = super::print::ref_name(&name);
                    let kinds: Vec<String> = found
                        .iter()
                        .map(|&i| format!("%{shown}@{}", raw.ifaces[i].kind.word()))
                        .collect();
                    return Err(self.err_at(
                        at,
                        format!("%{shown} is ambiguous: write {}", kinds.join(" or ")),
                    ));
                }
            }
        };
        let mut slot = 0u32;
        if self.peek() == Some(b'#') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
            let s = self.u64("a result slot")?;
            slot = u32::try_from(s).map_err(|_| self.err_at(at, "result slot is too large"))?;
        }
        let types = match target {
            Target::Iface(i) => &raw.ifaces[i].types,
            Target::Line(i) => &raw.lines[i].types,
        };
        if slot as usize >= types.len() {
            let text = &self.src[at..self.pos];
            let base = text.split('#').next().unwrap_or(text);
            return Err(self.err_at(
                at,
                format!(
                    "{base} has {} result(s); there is no {base}#{slot}",
                    types.len()
                ),
            ));
        }
        Ok(Ref { target, slot })
    }

    /// `%N: types = op operands attrs [# name]`
    fn node_line(&mut self, raw: &mut Raw) -> Result<()> {
        let at = self.pos;
        self.pos += 1; // `%`
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.err_at(
                at,
                "node results are numbered (`%0`, `%1`, ...); interface values are declared in the header",
            ));
        }
        let number = self.u64("a value number")?;
        if raw.numbers.contains_key(&number) {
            return Err(self.err_at(at, format!("value %{number} defined twice")));
        }
        self.expect(b':', &format!("`:` and the result type after %{number}"))?;
        let types = self.result_types()?;
        self.ws();
        if !self.eat(b'=') {
            return Err(self.expected("`=` after result type"));
        }
        self.ws();
        let op_at = self.pos;
        let Some(op_name) = self.ident().map(str::to_string) else {
            return Err(self.expected("an op name"));
        };
        if !Op::NAMES.contains(&op_name.as_str()) {
            return Err(self.err_at(op_at, format!("unknown op `{op_name}`")));
        }
        let mut inputs = Vec::new();
        self.ws();
        if self.peek() == Some(b'%') {
            loop {
                inputs.push(self.value_ref(raw)?);
                self.ws();
                if !self.eat(b',') {
                    break;
                }
            }
        }
        let mut attrs: Vec<(String, usize, Vec<Attr>)> = Vec::new();
        loop {
            self.ws();
            let key_at = self.pos;
            let Some(key) = self.ident().map(str::to_string) else {
                break;
            };
            if !self.eat(b'=') {
                return Err(self.expected(&format!("`=` after attribute `{key}`")));
            }
            if attrs.iter().any(|(k, _, _)| *k == key) {
                return Err(self.err_at(key_at, format!("attribute `{key}` given twice")));
            }
            let value = self.attr_value()?;
            attrs.push((key, key_at, value));
        }
        self.ws();
        let name = if self.eat(b'#') {
            Some(self.node_name()?)
        } else {
            None
        };
        if self.peek().is_some_and(|c| c != b'\n') {
            return Err(self.expected(if name.is_some() {
                "end of line after the node name (quote names with other characters)"
            } else {
                "an operand, `key=value`, `# name` or end of line"
            }));
        }
        self.end_of_line()?;
        let positions: Vec<(String, usize)> =
            attrs.iter().map(|(k, p, _)| (k.clone(), *p)).collect();
        let op = build_op(&op_name, attrs).map_err(|(msg, key)| {
            let shown = name.clone().unwrap_or_else(|| format!("%{number}"));
            let at = key
                .and_then(|k| positions.iter().find(|(a, _)| *a == k))
                .map_or(op_at, |(_, p)| *p);
            self.err_at(at, IrError::node(shown, &op_name, msg).to_string())
        })?;
        raw.numbers.insert(number, raw.lines.len());
        raw.items.push(Item::Line(raw.lines.len()));
        raw.lines.push(Line {
            types,
            op,
            inputs,
            name,
            at,
        });
        Ok(())
    }

    /// `return VALUE as "name"`
    fn return_line(&mut self, raw: &mut Raw, at: usize) -> Result<()> {
        let v = self.value_ref(raw)?;
        self.ws();
        if !self.keyword("as") {
            return Err(self.expected("`as \"name\"` after the returned value"));
        }
        self.ws();
        let name = self.string()?;
        if let Some(&prev) = raw.output_at.get(&name) {
            let line = self.line_of(prev);
            return Err(self.err_at(
                at,
                format!("output {name:?} returned twice (also at line {line})"),
            ));
        }
        raw.output_at.insert(name.clone(), at);
        raw.outputs.push((name, v));
        self.end_of_line()
    }

    /// `update %state = VALUE`
    fn update_line(&mut self, raw: &mut Raw) -> Result<()> {
        self.ws();
        let at = self.pos;
        if !self.eat(b'%') {
            return Err(self.expected("`%name` of the updated state"));
        }
        let name = self.name("a state name")?;
        let is_state = raw.iface_names.get(&name).is_some_and(|v| {
            v.iter()
                .any(|&i| matches!(raw.ifaces[i].kind, Kind::State | Kind::Param))
        });
        if !is_state {
            let shown = super::print::ref_name(&name);
            return Err(self.err_at(
                at,
                format!(
                    "update of %{shown}, which is not declared in `params(...)` or `state(...)`"
                ),
            ));
        }
        if raw.updates.contains_key(&name) {
            let shown = super::print::ref_name(&name);
            return Err(self.err_at(at, format!("state %{shown} updated twice")));
        }
        self.expect(b'=', "`=` after the updated state")?;
        let v = self.value_ref(raw)?;
        raw.updates.insert(name, v);
        self.end_of_line()
    }

    /// `input %x`, `param %w`, `state %x.h`: where an interface node sits in the node order.
    fn place_line(&mut self, raw: &mut Raw, kind: Kind, at: usize) -> Result<()> {
        self.ws();
        let name_at = self.pos;
        if !self.eat(b'%') {
            return Err(self.expected(&format!("`%name` of the {} to place", kind.word())));
        }
        let name = self.name(&format!("a {} name", kind.word()))?;
        if self.peek() == Some(b'@') {
            self.pos += 1;
            if self.ident() != Some(kind.word()) {
                return Err(self.err_at(name_at, format!("expected `@{}` here", kind.word())));
            }
        }
        let shown = super::print::ref_name(&name);
        let Some(i) = raw
            .iface_names
            .get(&name)
            .and_then(|v| v.iter().copied().find(|&i| raw.ifaces[i].kind == kind))
        else {
            return Err(self.err_at(
                name_at,
                format!("{} %{shown} is not declared in the header", kind.word()),
            ));
        };
        let iface = &mut raw.ifaces[i];
        if iface.placed {
            return Err(self.err_at(at, format!("{} %{shown} placed twice", kind.word())));
        }
        if let Some(first) = iface.first_use {
            let line = self.line_of(first);
            return Err(self.err_at(
                at,
                format!(
                    "`{} %{shown}` must come before the first use of %{shown} (line {line})",
                    kind.word()
                ),
            ));
        }
        iface.placed = true;
        raw.items.push(Item::Place(i));
        self.end_of_line()
    }
}

fn section_word(kind: Kind) -> &'static str {
    match kind {
        Kind::Input => "graph @name",
        Kind::Param => "params",
        Kind::State => "state",
    }
}
