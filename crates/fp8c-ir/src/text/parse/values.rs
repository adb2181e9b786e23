//! Types, attribute values and tensor literals of the text form, and building an op from
//! its attributes (trying each reading of an ambiguous word).

use super::lexer::Parser;
use crate::text::fp8_to_f32;
use crate::{Attr, AttrMap, DType, Dim, Op, Result, Tensor, TensorType};
use half::{bf16, f16};
use std::collections::HashMap;

impl Parser<'_> {
    pub(super) fn dtype(&mut self) -> Result<DType> {
        let at = self.pos;
        let Some(word) = self.ident() else {
            return Err(self.expected("a type such as `f32[8,256]`"));
        };
        word.parse().map_err(|e: String| self.err_at(at, e))
    }

    pub(super) fn tensor_type(&mut self) -> Result<TensorType> {
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
    pub(super) fn result_types(&mut self) -> Result<Vec<TensorType>> {
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

    /// A float literal (state init, float list element): a number, `inf`, `-inf` or `nan`.
    pub(super) fn float_value(&mut self) -> Result<f64> {
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

    /// One element of an attribute list: an integer (`Ok`) or a float (`Err`).
    pub(super) fn list_element(&mut self) -> Result<std::result::Result<i64, f64>> {
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

    /// An attribute value with its alternative readings (`none` is `Attr::None` or the word
    /// `none`; the op's field decides).
    pub(super) fn attr_value(&mut self) -> Result<Vec<Attr>> {
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
    pub(super) fn tensor_literal(&mut self, at: usize) -> Result<Tensor> {
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
                let shown = crate::text::print::type_text(&ty);
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
    pub(super) fn element(&mut self, dtype: DType, out: &mut Vec<u8>) -> Result<()> {
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
        if dtype.is_narrow_float() {
            return Err(self.err_at(at, format!("write {dtype} elements as hex bits (0x..)")));
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
                DType::U16 => (0, u16::MAX.into()),
                DType::U32 => (0, u32::MAX.into()),
                DType::U64 => (0, u64::MAX.into()),
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
pub(super) fn build_op(
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
