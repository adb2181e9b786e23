//! The parser: text to [`GraphDef`] to [`Graph`] (via [`Graph::from_def`], which keeps the
//! types written in the text and inserts nodes in text order, so the def comes back as printed).
//!
//! A hand-written recursive-descent parser over bytes: the grammar is line-oriented and a
//! little context-sensitive (`#` is a result slot right after a value, a node name after
//! whitespace), which a separate tokenizer would only complicate. Every error carries the
//! line and column of the offending text; nothing here panics or allocates more than the
//! input's size justifies.

use super::{Kind, fp8_to_f32, is_name_char, is_node_name_char};
use crate::{
    Attr, AttrMap, DType, Dim, Graph, GraphDef, IrError, NodeDef, Op, Result, Tensor, TensorType,
    ValueRef,
};
use half::{bf16, f16};
use std::collections::{BTreeMap, HashMap};

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

struct Parser<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
}

/// A number as written: its text (digits only for hex) and whether it is an integer.
struct Num<'a> {
    text: &'a str,
    int: bool,
    hex: bool,
}

impl<'a> Parser<'a> {
    // ------------------------------------------------------------ positions and errors

    fn err_at(&self, at: usize, msg: impl Into<String>) -> IrError {
        let at = at.min(self.src.len());
        let before = &self.src.as_bytes()[..at];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1);
        let col = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        IrError::Parse {
            line,
            col,
            msg: msg.into(),
        }
    }

    /// The 1-based line of byte offset `at`.
    fn line_of(&self, at: usize) -> usize {
        let at = at.min(self.b.len());
        self.b[..at].iter().filter(|&&c| c == b'\n').count() + 1
    }

    fn err(&self, msg: impl Into<String>) -> IrError {
        self.err_at(self.pos, msg)
    }

    /// A short description of what is at the cursor, for "expected X, found Y".
    fn found(&self) -> String {
        match self.peek() {
            None => "end of input".to_string(),
            Some(b'\n') => "end of line".to_string(),
            Some(_) => {
                let end = (self.pos + 80).min(self.b.len());
                let rest = String::from_utf8_lossy(&self.b[self.pos..end]);
                let word: String = rest
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .take(20)
                    .collect();
                format!("`{word}`")
            }
        }
    }

    fn expected(&self, what: &str) -> IrError {
        self.err(format!("expected {what}, found {}", self.found()))
    }

    // ------------------------------------------------------------ characters

    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<u8> {
        self.b.get(self.pos + k).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Skips spaces and tabs (and `\r`), not newlines.
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Skips whitespace including newlines and `//` comment lines.
    fn ws_nl(&mut self) {
        loop {
            self.ws();
            match self.peek() {
                Some(b'\n') => self.pos += 1,
                Some(b'/') if self.peek_at(1) == Some(b'/') => self.skip_line(),
                _ => break,
            }
        }
    }

    fn skip_line(&mut self) {
        while !matches!(self.peek(), None | Some(b'\n')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<()> {
        self.ws();
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    fn end_of_line(&mut self) -> Result<()> {
        self.ws();
        match self.peek() {
            None => Ok(()),
            Some(b'\n') => {
                self.pos += 1;
                Ok(())
            }
            _ => Err(self.expected("end of line")),
        }
    }

    // ------------------------------------------------------------ tokens

    /// A bare name `[A-Za-z_][A-Za-z0-9_.]*` (keywords, op names, words, dtypes).
    fn ident(&mut self) -> Option<&'a str> {
        let start = self.pos;
        match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => self.pos += 1,
            _ => return None,
        }
        while self.peek().is_some_and(|c| is_name_char(c as char)) {
            self.pos += 1;
        }
        Some(&self.src[start..self.pos])
    }

    fn peek_ident(&self) -> Option<&str> {
        let mut q = Parser {
            src: self.src,
            b: self.b,
            pos: self.pos,
        };
        let s = q.ident()?;
        let (start, end) = (self.pos, self.pos + s.len());
        Some(&self.src[start..end])
    }

    fn keyword(&mut self, kw: &str) -> bool {
        if self.peek_ident() == Some(kw) {
            self.pos += kw.len();
            true
        } else {
            false
        }
    }

    /// A JSON string literal at the cursor.
    fn string(&mut self) -> Result<String> {
        let start = self.pos;
        if !self.eat(b'"') {
            return Err(self.expected("a quoted string"));
        }
        loop {
            match self.peek() {
                None | Some(b'\n') => return Err(self.err_at(start, "unterminated string")),
                Some(b'\\') => self.pos += 2,
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(_) => self.pos += 1,
            }
        }
        let lit = self
            .src
            .get(start..self.pos)
            .ok_or_else(|| self.err_at(start, "unterminated string"))?;
        serde_json::from_str::<String>(lit)
            .map_err(|e| self.err_at(start, format!("bad string literal: {e}")))
    }

    /// A value or graph name: bare or quoted.
    fn name(&mut self, what: &str) -> Result<String> {
        if self.peek() == Some(b'"') {
            return self.string();
        }
        match self.ident() {
            Some(s) => Ok(s.to_string()),
            None => Err(self.expected(what)),
        }
    }

    /// A node name after `#`: quoted, or a run of `[A-Za-z0-9_.:/-]`.
    fn node_name(&mut self) -> Result<String> {
        self.ws();
        if self.peek() == Some(b'"') {
            return self.string();
        }
        let start = self.pos;
        while self.peek().is_some_and(|c| is_node_name_char(c as char)) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.expected("a node name after `#` (quote names with other characters)"));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn digits(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let at = self.pos;
        let d = self.digits();
        if d.is_empty() {
            self.pos = at;
            return Err(self.expected(what));
        }
        d.parse()
            .map_err(|_| self.err_at(at, format!("{what} `{d}` is too large")))
    }

    /// A number: `-?digits(.digits)?([eE][+-]?digits)?` or `0x` hex digits.
    fn number(&mut self) -> Result<Num<'a>> {
        let at = self.pos;
        if self.peek() == Some(b'0') && matches!(self.peek_at(1), Some(b'x' | b'X')) {
            self.pos += 2;
            let hs = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                self.pos += 1;
            }
            if hs == self.pos {
                return Err(self.expected("hex digits after `0x`"));
            }
            if self
                .peek()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
            {
                return Err(self.err(format!(
                    "unexpected `{}` after number",
                    self.peek().unwrap_or(b'?') as char
                )));
            }
            return Ok(Num {
                text: &self.src[hs..self.pos],
                int: true,
                hex: true,
            });
        }
        let mut int = true;
        self.eat(b'-');
        if self.digits().is_empty() {
            self.pos = at;
            return Err(self.expected("a number"));
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            int = false;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.pos;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits().is_empty() {
                self.pos = save;
            } else {
                int = false;
            }
        }
        if self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        {
            return Err(self.err(format!(
                "unexpected `{}` after number",
                self.peek().unwrap_or(b'?') as char
            )));
        }
        Ok(Num {
            text: &self.src[at..self.pos],
            int,
            hex: false,
        })
    }

    // ------------------------------------------------------------ types

    fn dtype(&mut self) -> Result<DType> {
        let at = self.pos;
        let Some(word) = self.ident() else {
            return Err(self.expected("a type such as `f32[8,256]`"));
        };
        word.parse().map_err(|e: String| self.err_at(at, e))
    }

    fn tensor_type(&mut self) -> Result<TensorType> {
        self.ws();
        let dtype = self.dtype()?;
        if !self.eat(b'[') {
            return Err(self.expected("`[` after the dtype (a scalar is `f32[]`)"));
        }
        let mut shape = Vec::new();
        self.ws();
        if !self.eat(b']') {
            loop {
                self.ws();
                let dim = match self.peek() {
                    Some(b'?') => {
                        self.pos += 1;
                        Dim::Unknown
                    }
                    Some(c) if c.is_ascii_digit() => Dim::Known(self.u64("a dimension")?),
                    Some(b'"') => Dim::Sym(self.string()?),
                    _ => match self.ident() {
                        Some(s) => Dim::Sym(s.to_string()),
                        None => return Err(self.expected("a dimension (a size, a name or `?`)")),
                    },
                };
                shape.push(dim);
                self.ws();
                if self.eat(b']') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.expected("`,` or `]` in the shape"));
                }
            }
        }
        Ok(TensorType { dtype, shape })
    }

    /// `TYPE` or `(TYPE, ...)`.
    fn result_types(&mut self) -> Result<Vec<TensorType>> {
        self.ws();
        if !self.eat(b'(') {
            return Ok(vec![self.tensor_type()?]);
        }
        let mut types = Vec::new();
        self.ws();
        if self.eat(b')') {
            return Ok(types);
        }
        loop {
            types.push(self.tensor_type()?);
            self.ws();
            if self.eat(b')') {
                return Ok(types);
            }
            if !self.eat(b',') {
                return Err(self.expected("`,` or `)` in the result types"));
            }
        }
    }

    // ------------------------------------------------------------ the graph

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

    /// A float literal (state init, float list element): a number, `inf`, `-inf` or `nan`.
    fn float_value(&mut self) -> Result<f64> {
        let at = self.pos;
        if self.keyword("inf") {
            return Ok(f64::INFINITY);
        }
        if self.keyword("nan") {
            return Ok(f64::NAN);
        }
        if self.peek() == Some(b'-') && self.peek_at(1) == Some(b'i') {
            self.pos += 1;
            if self.keyword("inf") {
                return Ok(f64::NEG_INFINITY);
            }
            self.pos = at;
        }
        let n = self.number()?;
        if n.hex {
            return Err(self.err_at(at, "hex is only allowed in tensor literals"));
        }
        n.text
            .parse()
            .map_err(|_| self.err_at(at, format!("bad number `{}`", n.text)))
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

    /// One element of an attribute list: an integer (`Ok`) or a float (`Err`).
    fn list_element(&mut self) -> Result<std::result::Result<i64, f64>> {
        let at = self.pos;
        if matches!(self.peek(), Some(b'0'..=b'9'))
            || (self.peek() == Some(b'-') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()))
        {
            let n = self.number()?;
            if n.hex {
                return Err(self.err_at(at, "hex is only allowed in tensor literals"));
            }
            let text = n.text;
            return if n.int {
                text.parse()
                    .map(Ok)
                    .map_err(|_| self.err_at(at, format!("integer `{text}` is out of range")))
            } else {
                text.parse()
                    .map(Err)
                    .map_err(|_| self.err_at(at, format!("bad number `{text}`")))
            };
        }
        self.float_value().map(Err)
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

    /// An attribute value with its alternative readings (`none` is `Attr::None` or the word
    /// `none`; the op's field decides).
    fn attr_value(&mut self) -> Result<Vec<Attr>> {
        let at = self.pos;
        match self.peek() {
            Some(b'"') => Ok(vec![Attr::Str(self.string()?)]),
            Some(b'[') => {
                self.pos += 1;
                let mut ints = Vec::new();
                let mut floats = Vec::new();
                let mut all_int = true;
                self.ws();
                if !self.eat(b']') {
                    loop {
                        self.ws();
                        match self.list_element()? {
                            Ok(v) => {
                                ints.push(v);
                                floats.push(v as f64);
                            }
                            Err(v) => {
                                all_int = false;
                                floats.push(v);
                            }
                        }
                        self.ws();
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.expected("`,` or `]` in the list"));
                        }
                    }
                }
                Ok(vec![if all_int {
                    Attr::Ints(ints)
                } else {
                    Attr::Floats(floats)
                }])
            }
            Some(b'-' | b'0'..=b'9') => {
                if self.peek() == Some(b'-') && self.peek_at(1) == Some(b'i') {
                    return Ok(vec![Attr::Float(self.float_value()?)]);
                }
                let n = self.number()?;
                if n.hex {
                    return Err(self.err_at(at, "hex is only allowed in tensor literals"));
                }
                let (text, int) = (n.text, n.int);
                if int {
                    let v = text.parse().map_err(|_| {
                        self.err_at(at, format!("integer `{text}` is out of range"))
                    })?;
                    Ok(vec![Attr::Int(v)])
                } else {
                    let v = text
                        .parse()
                        .map_err(|_| self.err_at(at, format!("bad number `{text}`")))?;
                    Ok(vec![Attr::Float(v)])
                }
            }
            _ => {
                let Some(word) = self.ident().map(str::to_string) else {
                    return Err(self.expected("an attribute value"));
                };
                Ok(match word.as_str() {
                    "dense" if self.peek() == Some(b'<') => {
                        vec![Attr::Tensor(self.tensor_literal(at)?)]
                    }
                    "true" => vec![Attr::Bool(true), Attr::Word(word)],
                    "false" => vec![Attr::Bool(false), Attr::Word(word)],
                    "none" => vec![Attr::None, Attr::Word(word)],
                    "inf" => vec![Attr::Float(f64::INFINITY), Attr::Word(word)],
                    "nan" => vec![Attr::Float(f64::NAN), Attr::Word(word)],
                    _ => vec![Attr::Word(word)],
                })
            }
        }
    }

    /// After `dense`: `<dtype[dims]>[e, ...]` or `<dtype[dims]>hex"..."`.
    fn tensor_literal(&mut self, at: usize) -> Result<Tensor> {
        self.pos += 1; // `<`
        let ty = self.tensor_type()?;
        let Some(dims) = ty.known_dims() else {
            return Err(self.err_at(at, "a tensor literal needs a fully known shape"));
        };
        self.expect(b'>', "`>` after the tensor type")?;
        let dtype = ty.dtype;
        let bytes = if self.keyword("hex") {
            let s_at = self.pos;
            let s = self.string()?;
            hex_bytes(&s)
                .ok_or_else(|| self.err_at(s_at, "expected an even number of hex digits"))?
        } else if self.eat(b'[') {
            let mut bytes = Vec::new();
            let mut count = 0usize;
            self.ws();
            if !self.eat(b']') {
                loop {
                    self.ws();
                    self.element(dtype, &mut bytes)?;
                    count += 1;
                    self.ws();
                    if self.eat(b']') {
                        break;
                    }
                    if !self.eat(b',') {
                        return Err(self.expected("`,` or `]` in the tensor values"));
                    }
                }
            }
            let want = crate::checked_numel(&dims);
            if want != Some(count as u64) {
                let shown = super::print::type_text(&ty);
                let want = want.map_or("too many".to_string(), |w| w.to_string());
                return Err(self.err_at(
                    at,
                    format!("dense<{shown}> needs {want} values, got {count}"),
                ));
            }
            bytes
        } else {
            return Err(self.expected("`[` with the values or `hex\"...\"`"));
        };
        Tensor::from_bytes(dtype, dims, bytes).map_err(|e| self.err_at(at, e))
    }

    /// One tensor element of `dtype`, appended as little-endian bytes.
    fn element(&mut self, dtype: DType, out: &mut Vec<u8>) -> Result<()> {
        let at = self.pos;
        let size = dtype.size();
        if self.peek() == Some(b'0') && matches!(self.peek_at(1), Some(b'x' | b'X')) {
            let n = self.number()?;
            let text = n.text;
            let bits = u64::from_str_radix(text, 16)
                .ok()
                .filter(|&v| size == 8 || v >> (8 * size) == 0);
            let Some(bits) = bits else {
                return Err(self.err_at(
                    at,
                    format!("0x{text} does not fit in {dtype} ({size} byte(s))"),
                ));
            };
            out.extend_from_slice(&bits.to_le_bytes()[..size]);
            return Ok(());
        }
        if dtype == DType::Bool {
            match self.ident() {
                Some("true") => out.push(1),
                Some("false") => out.push(0),
                _ => {
                    self.pos = at;
                    return Err(self.expected("`true`, `false` or hex bits in a bool tensor"));
                }
            }
            return Ok(());
        }
        if !dtype.is_float() {
            let n = self.number()?;
            if !n.int {
                return Err(self.err_at(at, format!("expected an integer in a {dtype} tensor")));
            }
            let text = n.text;
            let v: Option<i128> = text.parse().ok();
            let (lo, hi): (i128, i128) = match dtype {
                DType::I64 => (i64::MIN.into(), i64::MAX.into()),
                DType::I32 => (i32::MIN.into(), i32::MAX.into()),
                DType::I16 => (i16::MIN.into(), i16::MAX.into()),
                DType::I8 => (i8::MIN.into(), i8::MAX.into()),
                _ => (0, u8::MAX.into()),
            };
            let Some(v) = v.filter(|v| (lo..=hi).contains(v)) else {
                return Err(self.err_at(at, format!("{text} is out of range for {dtype}")));
            };
            out.extend_from_slice(&v.to_le_bytes()[..size]);
            return Ok(());
        }
        let v = self.float_value()?;
        let text = &self.src[at..self.pos];
        // Parse the text directly at the element's width: exact for what the printer writes.
        let v32: f32 = if v.is_nan() {
            f32::NAN
        } else {
            text.parse().unwrap_or(v as f32)
        };
        match dtype {
            DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
            DType::F32 => out.extend_from_slice(&v32.to_le_bytes()),
            DType::F16 => out.extend_from_slice(&f16::from_f32(v32).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&bf16::from_f32(v32).to_le_bytes()),
            _ => {
                let code = if v32.is_nan() {
                    Some(0x7f)
                } else {
                    (0..=255u8).find(|&c| fp8_to_f32(dtype, c).to_bits() == v32.to_bits())
                };
                let Some(code) = code else {
                    let msg = format!(
                        "{text} is not exactly representable in {dtype} (write its bits as 0x..)"
                    );
                    return Err(self.err_at(at, msg));
                };
                out.push(code);
            }
        }
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

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Builds the op. An attribute with several readings (`none` is [`Attr::None`] or the word
/// `none`) starts with the first; when the op rejects that attribute, the next is tried, so
/// there are at most as many attempts as readings. On failure: the message for the first
/// reading and the attribute it names.
fn build_op(
    name: &str,
    attrs: Vec<(String, usize, Vec<Attr>)>,
) -> std::result::Result<Op, (String, Option<String>)> {
    let keys: Vec<String> = attrs.iter().map(|(k, _, _)| k.clone()).collect();
    let mut alts: Vec<Vec<Attr>> = attrs.into_iter().map(|(_, _, a)| a).collect();
    if alts.iter().all(|a| a.len() <= 1) {
        // One reading each (the common case): move the values, large tensors included.
        let map = keys
            .iter()
            .cloned()
            .zip(alts.iter_mut().map(|a| a.pop().unwrap_or(Attr::None)))
            .collect();
        return Op::from_parts(name, AttrMap(map)).map_err(|msg| {
            let key = named_key(&msg, &keys);
            (msg, key)
        });
    }
    let mut choice = vec![0usize; keys.len()];
    let mut first_msg: HashMap<usize, String> = HashMap::new();
    loop {
        let map = keys
            .iter()
            .zip(&alts)
            .zip(&choice)
            .map(|((k, a), &c)| (k.clone(), a.get(c).cloned().unwrap_or(Attr::None)))
            .collect();
        let msg = match Op::from_parts(name, AttrMap(map)) {
            Ok(op) => return Ok(op),
            Err(msg) => msg,
        };
        let key = named_key(&msg, &keys);
        let Some(i) = key.as_ref().and_then(|k| keys.iter().position(|x| x == k)) else {
            return Err((msg, key));
        };
        let first = first_msg.entry(i).or_insert(msg);
        if choice[i] + 1 >= alts[i].len() {
            return Err((first.clone(), key));
        }
        choice[i] += 1;
    }
}

/// The attribute an `Op::from_parts` message is about (the first backquoted word that is
/// one of `keys`).
fn named_key(msg: &str, keys: &[String]) -> Option<String> {
    msg.split('`')
        .skip(1)
        .step_by(2)
        .find(|k| keys.iter().any(|a| a == k))
        .map(str::to_string)
}

impl Raw {
    /// Orders the nodes (unplaced interface nodes first, in header order, then the body),
    /// names the unnamed ones and hands the def to [`Graph::from_def`].
    fn into_graph(self, p: &Parser<'_>) -> Result<Graph> {
        let mut order: Vec<Item> = (0..self.ifaces.len())
            .filter(|&i| !self.ifaces[i].placed)
            .map(Item::Place)
            .collect();
        order.extend(self.items);
        let mut iface_pos = vec![0; self.ifaces.len()];
        let mut line_pos = vec![0; self.lines.len()];
        for (pos, item) in order.iter().enumerate() {
            match *item {
                Item::Place(i) => iface_pos[i] = pos,
                Item::Line(i) => line_pos[i] = pos,
            }
        }
        // Node names: explicit ones must be unique; unnamed nodes get `op`, `op.1`, ...
        let mut used: HashMap<String, usize> = HashMap::new();
        for iface in &self.ifaces {
            if let Some(prev) = used.insert(iface.node_name.clone(), iface.at) {
                return Err(dup_name(p, &iface.node_name, iface.at, prev));
            }
        }
        for line in &self.lines {
            if let Some(name) = &line.name
                && let Some(prev) = used.insert(name.clone(), line.at)
            {
                return Err(dup_name(p, name, line.at, prev));
            }
        }
        let vref = |r: &Ref| ValueRef {
            node: match r.target {
                Target::Iface(i) => iface_pos[i],
                Target::Line(i) => line_pos[i],
            },
            slot: r.slot,
        };
        let mut nodes: Vec<Option<NodeDef>> = (0..order.len()).map(|_| None).collect();
        for (i, iface) in self.ifaces.iter().enumerate() {
            let op = match iface.kind {
                Kind::Input => Op::Input {
                    name: iface.name.clone(),
                },
                Kind::Param => Op::Param {
                    name: iface.name.clone(),
                },
                Kind::State => Op::State {
                    name: iface.name.clone(),
                },
            };
            nodes[iface_pos[i]] = Some(NodeDef {
                name: iface.node_name.clone(),
                op,
                inputs: vec![],
                outputs: iface.types.clone(),
            });
        }
        for (i, line) in self.lines.into_iter().enumerate() {
            let name = match line.name {
                Some(n) => n,
                None => {
                    let base = line.op.name();
                    let fresh = std::iter::once(base.to_string())
                        .chain((1..).map(|k| format!("{base}.{k}")))
                        .find(|n| !used.contains_key(n))
                        .unwrap_or_default();
                    used.insert(fresh.clone(), line.at);
                    fresh
                }
            };
            nodes[line_pos[i]] = Some(NodeDef {
                name,
                op: line.op,
                inputs: line.inputs.iter().map(vref).collect(),
                outputs: line.types,
            });
        }
        let of_kind = |k: Kind| -> Vec<usize> {
            self.ifaces
                .iter()
                .enumerate()
                .filter(|(_, f)| f.kind == k)
                .map(|(i, _)| iface_pos[i])
                .collect()
        };
        let def = GraphDef {
            name: self.name,
            nodes: nodes.into_iter().flatten().collect(),
            inputs: of_kind(Kind::Input),
            params: of_kind(Kind::Param),
            state: self
                .ifaces
                .iter()
                .enumerate()
                .filter(|(_, f)| f.kind == Kind::State)
                .map(|(i, f)| (iface_pos[i], f.init))
                .collect(),
            outputs: self
                .outputs
                .iter()
                .map(|(n, r)| (n.clone(), vref(r)))
                .collect(),
            state_updates: self
                .updates
                .iter()
                .map(|(n, r)| (n.clone(), vref(r)))
                .collect(),
            weights: BTreeMap::new(),
        };
        Graph::from_def(&def).map_err(|e| p.err_at(self.header_at, e.to_string()))
    }
}

fn dup_name(p: &Parser<'_>, name: &str, at: usize, prev: usize) -> IrError {
    let line = p.line_of(prev);
    p.err_at(
        at,
        format!("node name {name:?} is used twice (also at line {line})"),
    )
}
