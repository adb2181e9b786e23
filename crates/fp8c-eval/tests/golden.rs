//! Golden cases: every case in tests/golden/op_cases.json gives input tensors, an fp8c op and
//! the outputs onnxruntime (cross-checked against onnx.reference) or a numpy/ml_dtypes formula
//! produced for it (see tests/gen/gen_op_cases.py, which says how to regenerate it). All
//! failures are reported together.

use fp8c_eval::eval_op;
use fp8c_ir::{Attr, AttrMap, DType, Op, Tensor};
use half::{bf16, f16};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    source: String,
    op: OpSpec,
    inputs: Vec<Hex>,
    outputs: Vec<Hex>,
    atol: f64,
    rtol: f64,
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

/// Why `got` does not match `want`, if it does not.
fn mismatch(got: &Tensor, want: &Tensor, atol: f64, rtol: f64) -> Option<String> {
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

/// Evaluates every case of a case file; returns the failures and the number of cases.
fn run_cases(text: &str) -> (Vec<String>, usize) {
    let file: File = serde_json::from_str(text).expect("the case file parses");
    let mut failures = Vec::new();
    for case in &file.cases {
        let op = match case.op.build() {
            Ok(op) => op,
            Err(e) => {
                failures.push(format!(
                    "{}: op `{}` does not build: {e}",
                    case.name, case.op.name
                ));
                continue;
            }
        };
        let inputs: Vec<Tensor> = case.inputs.iter().map(Hex::tensor).collect();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outs = match eval_op(&op, &refs) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        if outs.len() < case.outputs.len() {
            failures.push(format!(
                "{}: {} outputs, want {}",
                case.name,
                outs.len(),
                case.outputs.len()
            ));
            continue;
        }
        for (k, (got, want)) in outs.iter().zip(&case.outputs).enumerate() {
            if let Some(why) = mismatch(got, &want.tensor(), case.atol, case.rtol) {
                failures.push(format!(
                    "{} (output {k}, from {}): {why}",
                    case.name, case.source
                ));
            }
        }
    }
    (failures, file.cases.len())
}

#[test]
fn golden_cases_match_onnxruntime_and_numpy() {
    let (failures, n) = run_cases(include_str!("golden/op_cases.json"));
    assert!(n >= 150, "expected the full case list, got {n}");
    assert!(
        failures.is_empty(),
        "{} of {n} golden cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
