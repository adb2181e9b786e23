//! The derivative formulas of the elementwise table (`elementwise.rs`): a small expression
//! language, parsed here and turned into IR nodes by the autodiff pass.
//!
//! ```text
//! expr := sum [cmp sum]            cmp: >  <  >=  <=  ==
//! sum  := prod {(+|-) prod}
//! prod := neg {(*|/) neg}
//! neg  := -neg | atom
//! atom := number | name | name(expr, ...) | (expr)
//! ```
//!
//! Names: `x` and `a` (input 0), `b` (input 1), `c` (input 2), `y` (the op's output), `dy`
//! (the gradient arriving at the output), or an attribute of the differentiated op (`alpha`).
//! Calls name an IR op by its text name (`exp(x)`, `pow(a, b)`, `where(c, t, f)`), taking the
//! differentiated op's attributes of the same names (`gelu_grad` takes gelu's
//! `approximate`); `cast(e, v)` converts `e` to the dtype of `v`. Numbers become scalars of
//! the dtype of the other operand.

use std::fmt;

/// A parsed formula.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A number.
    Num(f64),
    /// A variable or attribute name.
    Var(String),
    /// `-e`.
    Neg(Box<Expr>),
    /// `l op r`.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `name(args)`.
    Call(String, Vec<Expr>),
}

/// A binary operator of the formula language.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `>`
    Gt,
    /// `<`
    Lt,
    /// `>=`
    Ge,
    /// `<=`
    Le,
    /// `==`
    Eq,
}

impl BinOp {
    /// The IR op's text name.
    pub fn op_name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Gt => "greater",
            BinOp::Lt => "less",
            BinOp::Ge => "greater_or_equal",
            BinOp::Le => "less_or_equal",
            BinOp::Eq => "equal",
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Num(v) => write!(f, "{v}"),
            Expr::Var(n) => f.write_str(n),
            Expr::Neg(e) => write!(f, "-({e})"),
            Expr::Bin(op, l, r) => write!(f, "{}({l}, {r})", op.op_name()),
            Expr::Call(n, args) => {
                write!(f, "{n}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Parses a formula; the error names the position.
pub fn parse(text: &str) -> Result<Expr, String> {
    let mut p = Parser {
        toks: lex(text)?,
        pos: 0,
    };
    let e = p.expr()?;
    match p.toks.get(p.pos) {
        None => Ok(e),
        Some(t) => Err(format!("unexpected `{t}` after the expression")),
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Num(f64),
    Name(String),
    Sym(&'static str),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Num(v) => write!(f, "{v}"),
            Tok::Name(n) => f.write_str(n),
            Tok::Sym(s) => f.write_str(s),
        }
    }
}

fn lex(text: &str) -> Result<Vec<Tok>, String> {
    const SYMS: [&str; 12] = [
        ">=", "<=", "==", ">", "<", "+", "-", "*", "/", "(", ")", ",",
    ];
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let at = text.len() - rest.len();
        if let Some(s) = SYMS.iter().find(|s| rest.starts_with(**s)) {
            out.push(Tok::Sym(s));
            rest = &rest[s.len()..];
        } else if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e'))
                .unwrap_or(rest.len());
            let v: f64 = rest[..end]
                .parse()
                .map_err(|_| format!("bad number `{}` at {at}", &rest[..end]))?;
            out.push(Tok::Num(v));
            rest = &rest[end..];
        } else if rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            out.push(Tok::Name(rest[..end].to_string()));
            rest = &rest[end..];
        } else {
            return Err(format!(
                "unexpected character `{}` at {at}",
                rest.chars().next().unwrap_or(' ')
            ));
        }
        rest = rest.trim_start();
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek_sym(&self, s: &str) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Sym(t)) if *t == s)
    }

    fn eat(&mut self, s: &str) -> bool {
        let hit = self.peek_sym(s);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn expect(&mut self, s: &str) -> Result<(), String> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(match self.toks.get(self.pos) {
                Some(t) => format!("expected `{s}`, found `{t}`"),
                None => format!("expected `{s}` at the end"),
            })
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let l = self.sum()?;
        for (s, op) in [
            (">=", BinOp::Ge),
            ("<=", BinOp::Le),
            ("==", BinOp::Eq),
            (">", BinOp::Gt),
            ("<", BinOp::Lt),
        ] {
            if self.eat(s) {
                let r = self.sum()?;
                return Ok(Expr::Bin(op, Box::new(l), Box::new(r)));
            }
        }
        Ok(l)
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut l = self.prod()?;
        loop {
            let op = if self.eat("+") {
                BinOp::Add
            } else if self.eat("-") {
                BinOp::Sub
            } else {
                return Ok(l);
            };
            l = Expr::Bin(op, Box::new(l), Box::new(self.prod()?));
        }
    }

    fn prod(&mut self) -> Result<Expr, String> {
        let mut l = self.neg()?;
        loop {
            let op = if self.eat("*") {
                BinOp::Mul
            } else if self.eat("/") {
                BinOp::Div
            } else {
                return Ok(l);
            };
            l = Expr::Bin(op, Box::new(l), Box::new(self.neg()?));
        }
    }

    fn neg(&mut self) -> Result<Expr, String> {
        if self.eat("-") {
            return Ok(Expr::Neg(Box::new(self.neg()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr, String> {
        let tok = self.toks.get(self.pos).cloned();
        self.pos += 1;
        match tok {
            Some(Tok::Num(v)) => Ok(Expr::Num(v)),
            Some(Tok::Name(n)) => {
                if !self.eat("(") {
                    return Ok(Expr::Var(n));
                }
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        args.push(self.expr()?);
                        if self.eat(")") {
                            break;
                        }
                        self.expect(",")?;
                    }
                }
                Ok(Expr::Call(n, args))
            }
            Some(Tok::Sym("(")) => {
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Some(t) => Err(format!("unexpected `{t}`")),
            None => Err("unexpected end of the formula".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_calls() {
        let e = parse("dy * (1 - y * y)").unwrap();
        assert_eq!(e.to_string(), "mul(dy, sub(1, mul(y, y)))");
        let e = parse("where(x > 0, dy, -dy / 2)").unwrap();
        assert_eq!(e.to_string(), "where(greater(x, 0), dy, div(-(dy), 2))");
        assert!(parse("dy *").is_err());
        assert!(parse("f(x,").is_err());
        assert!(parse("x $ y").is_err());
    }
}
