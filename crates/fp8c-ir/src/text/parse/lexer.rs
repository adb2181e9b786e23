//! The parser's cursor over the text's bytes: positions and errors (line and column),
//! whitespace and comments, names, strings and numbers.

use crate::text::{is_name_char, is_node_name_char};
use crate::{IrError, Result};

pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) b: &'a [u8],
    pub(super) pos: usize,
}

/// A number as written: its text (digits only for hex) and whether it is an integer.
pub(super) struct Num<'a> {
    pub(super) text: &'a str,
    pub(super) int: bool,
    pub(super) hex: bool,
}

impl<'a> Parser<'a> {
    // ------------------------------------------------------------ positions and errors

    pub(super) fn err_at(&self, at: usize, msg: impl Into<String>) -> IrError {
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
    pub(super) fn line_of(&self, at: usize) -> usize {
        let at = at.min(self.b.len());
        self.b[..at].iter().filter(|&&c| c == b'\n').count() + 1
    }

    pub(super) fn err(&self, msg: impl Into<String>) -> IrError {
        self.err_at(self.pos, msg)
    }

    /// A short description of what is at the cursor, for "expected X, found Y".
    pub(super) fn found(&self) -> String {
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

    pub(super) fn expected(&self, what: &str) -> IrError {
        self.err(format!("expected {what}, found {}", self.found()))
    }

    // ------------------------------------------------------------ characters

    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    pub(super) fn peek_at(&self, k: usize) -> Option<u8> {
        self.b.get(self.pos + k).copied()
    }

    pub(super) fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Skips spaces and tabs (and `\r`), not newlines.
    pub(super) fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Skips whitespace including newlines and `//` comment lines.
    pub(super) fn ws_nl(&mut self) {
        loop {
            self.ws();
            match self.peek() {
                Some(b'\n') => self.pos += 1,
                Some(b'/') if self.peek_at(1) == Some(b'/') => self.skip_line(),
                _ => break,
            }
        }
    }

    pub(super) fn skip_line(&mut self) {
        while !matches!(self.peek(), None | Some(b'\n')) {
            self.pos += 1;
        }
    }

    pub(super) fn expect(&mut self, c: u8, what: &str) -> Result<()> {
        self.ws();
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    pub(super) fn end_of_line(&mut self) -> Result<()> {
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
    pub(super) fn ident(&mut self) -> Option<&'a str> {
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

    pub(super) fn peek_ident(&self) -> Option<&str> {
        let mut q = Parser {
            src: self.src,
            b: self.b,
            pos: self.pos,
        };
        let s = q.ident()?;
        let (start, end) = (self.pos, self.pos + s.len());
        Some(&self.src[start..end])
    }

    pub(super) fn keyword(&mut self, kw: &str) -> bool {
        if self.peek_ident() == Some(kw) {
            self.pos += kw.len();
            true
        } else {
            false
        }
    }

    /// A JSON string literal at the cursor.
    pub(super) fn string(&mut self) -> Result<String> {
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
    pub(super) fn name(&mut self, what: &str) -> Result<String> {
        if self.peek() == Some(b'"') {
            return self.string();
        }
        match self.ident() {
            Some(s) => Ok(s.to_string()),
            None => Err(self.expected(what)),
        }
    }

    /// A node name after `#`: quoted, or a run of `[A-Za-z0-9_.:/-]`.
    pub(super) fn node_name(&mut self) -> Result<String> {
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

    pub(super) fn digits(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }

    pub(super) fn u64(&mut self, what: &str) -> Result<u64> {
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
    pub(super) fn number(&mut self) -> Result<Num<'a>> {
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
}
