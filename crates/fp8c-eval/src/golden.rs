//! The golden cases (`tests/golden/op_cases.json`, made by `tests/gen/gen_op_cases.py` from
//! onnxruntime, onnx's reference evaluator and numpy/ml_dtypes; `tests/golden/block_cases.json`,
//! made by `tests/gen/gen_block_cases.py` with numpy and ml_dtypes): the case file's format and
//! the comparison. One driver runs them on every device (`crates/fp8c-session/tests/golden/`),
//! so each case is written once.

use fp8c_ir::{Attr, AttrMap, DType, Op, Tensor};
use half::{bf16, f16};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The case file's text, embedded.
pub const CASES_JSON: &str = include_str!("../tests/golden/op_cases.json");

/// The block-scaling case file's text, embedded (every case bit for bit).
pub const BLOCK_CASES_JSON: &str = include_str!("../tests/golden/block_cases.json");

/// Every case of a case file's text.
pub fn cases(text: &str) -> Result<Vec<Case>, String> {
    let file: File = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(file.cases)
}

#[derive(Deserialize)]
struct File {
    cases: Vec<Case>,
}

/// One golden case: inputs, the op, and the reference outputs with their tolerance.
#[derive(Deserialize)]
pub struct Case {
    /// The case's name (`scaled_matmul_f8e4m3`).
    pub name: String,
    /// Where the reference outputs come from.
    pub source: String,
    op: OpSpec,
    inputs: Vec<Hex>,
    outputs: Vec<Hex>,
    /// Absolute tolerance (0 with `rtol` 0: bit for bit, any NaN matching any NaN).
    pub atol: f64,
    /// Relative tolerance.
    pub rtol: f64,
}

impl Case {
    /// The op, built from its text-form name and attributes.
    pub fn op(&self) -> Result<Op, String> {
        self.op
            .build()
            .map_err(|e| format!("op `{}` does not build: {e}", self.op.name))
    }

    /// The input tensors.
    pub fn inputs(&self) -> Vec<Tensor> {
        self.inputs.iter().map(Hex::tensor).collect()
    }

    /// The reference outputs.
    pub fn outputs(&self) -> Vec<Tensor> {
        self.outputs.iter().map(Hex::tensor).collect()
    }

    /// The case as a one-node program for a backend: float inputs become graph inputs
    /// `in{i}` (returned with their values, to feed), integer ones (shapes, axes, indices)
    /// constants, as an import folds them, so shape-taking ops have static shapes; the op's
    /// results are the outputs `out{k}`. An error when the op refuses its inputs.
    pub fn program(&self) -> Result<(fp8c_ir::Graph, BTreeMap<String, Tensor>), String> {
        let op = self.op()?;
        let mut g = fp8c_ir::Graph::new(&self.name);
        let mut vals = Vec::new();
        let mut feed = BTreeMap::new();
        for (i, t) in self.inputs().iter().enumerate() {
            let name = format!("in{i}");
            if t.dtype().is_float() {
                vals.push(g.add_input(&name, t.ty()).map_err(|e| e.to_string())?);
                feed.insert(name, t.clone());
            } else {
                let c = Op::Constant { value: t.clone() };
                vals.push(g.add_node(&name, c, &[]).map_err(|e| e.to_string())?[0]);
            }
        }
        let outs = g.add_node("op", op, &vals).map_err(|e| e.to_string())?;
        for (k, v) in outs.iter().enumerate() {
            g.set_output(&format!("out{k}"), *v)
                .map_err(|e| e.to_string())?;
        }
        Ok((g, feed))
    }
}

/// An op by text-form name and attributes, built with `Op::from_parts` as the IR parser does.
#[derive(Deserialize)]
struct OpSpec {
    name: String,
    attrs: serde_json::Map<String, serde_json::Value>,
}

impl OpSpec {
    fn build(&self) -> Result<Op, String> {
        let mut map = AttrMap::default();
        for (k, v) in &self.attrs {
            map.0.insert(k.clone(), attr(v)?);
        }
        Op::from_parts(&self.name, map)
    }
}

/// A JSON attribute value as the text form would spell it.
fn attr(v: &serde_json::Value) -> Result<Attr, String> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => Attr::None,
        Value::Bool(b) => Attr::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Attr::Int(i),
            None => Attr::Float(n.as_f64().ok_or("a number")?),
        },
        Value::String(w) => Attr::Word(w.clone()),
        Value::Array(items) => Attr::Ints(
            items
                .iter()
                .map(|i| i.as_i64().ok_or("an integer list"))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(_) => {
            let h: Hex = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
            Attr::Tensor(h.tensor())
        }
    })
}

#[derive(Deserialize)]
struct Hex {
    dtype: DType,
    shape: Vec<u64>,
    hex: String,
}

impl Hex {
    fn tensor(&self) -> Tensor {
        let bytes = (0..self.hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&self.hex[i..i + 2], 16).expect("hex digits"))
            .collect();
        Tensor::from_bytes(self.dtype, self.shape.clone(), bytes)
            .expect("a consistent golden tensor")
    }
}

/// Values as f64 for tolerance comparisons (FP8 decoded by fp8c-core).
fn values(t: &Tensor) -> Vec<f64> {
    match t.dtype() {
        DType::F8E4M3 => t
            .bytes()
            .iter()
            .map(|&c| f64::from(fp8c_core::decode(fp8c_core::Fp8Format::E4M3, c)))
            .collect(),
        DType::F8E5M2 => t
            .bytes()
            .iter()
            .map(|&c| f64::from(fp8c_core::decode(fp8c_core::Fp8Format::E5M2, c)))
            .collect(),
        DType::F16 => t
            .bytes()
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::BF16 => t
            .bytes()
            .chunks_exact(2)
            .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        _ => t.to_f64_vec().expect("non-FP8 values"),
    }
}

/// Why `got` does not match `want` within `atol`/`rtol`, if it does not.
pub fn mismatch(got: &Tensor, want: &Tensor, atol: f64, rtol: f64) -> Option<String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Some(format!(
            "got {} {:?}, want {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    if atol == 0.0 && rtol == 0.0 {
        let (g, w) = (values(got), values(want));
        // Exact: bit for bit, except that any NaN matches any NaN of a float type.
        let bad = got.bytes() != want.bytes()
            && g.iter()
                .zip(&w)
                .any(|(a, b)| !(a.is_nan() && b.is_nan()) && a.to_bits() != b.to_bits());
        return bad.then(|| format!("values differ:\n   got  {g:?}\n   want {w:?}"));
    }
    let (g, w) = (values(got), values(want));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
        if !ok {
            return Some(format!(
                "element {i}: got {a}, want {b} (atol {atol}, rtol {rtol})"
            ));
        }
    }
    None
}
