//! Type inference per op family (one module each, named as the family), and the verifier.
//!
//! Types are written in the text form (`f32[batch,3,?]`): a number is a known size, `?` is
//! unknown and any other word a symbol. Each case builds a small graph with the builder and
//! reads the types `add_node` inferred.

mod conv;
mod elementwise;
mod fp8;
mod interface;
mod linalg;
mod movement;
mod never_panics;
mod normalize;
mod pool;
mod reduce;
mod verifier;

use fp8c_ir::{
    AmaxSource, AutoPad, DType, Dim, GeluApprox, Graph, IrError, NodeId, Op, PadMode, Tensor,
    TensorType, Value, verify,
};

/// Parses `f32[2,batch,?]`.
fn ty(s: &str) -> TensorType {
    let (dtype, dims) = s
        .trim_end_matches(']')
        .split_once('[')
        .expect("dtype[dims]");
    let shape = dims
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| match d {
            "?" => Dim::Unknown,
            _ => d
                .parse()
                .map(Dim::Known)
                .unwrap_or_else(|_| Dim::Sym(d.to_string())),
        })
        .collect();
    TensorType::new(dtype.parse().expect("dtype"), shape)
}

/// One input of a test node: a graph input of some type, or a constant.
enum In {
    T(&'static str),
    C(Tensor),
}
use In::{C, T};

fn i64s(v: &[i64]) -> In {
    C(Tensor::from_i64(vec![v.len() as u64], v))
}

/// Builds a graph feeding `ins` to one `op` node; its output types, or the error text.
fn node(op: Op, ins: Vec<In>) -> Result<String, String> {
    let mut g = Graph::new("t");
    let mut vals = Vec::new();
    for (i, x) in ins.into_iter().enumerate() {
        vals.push(match x {
            T(s) => g.add_input(&format!("x{i}"), ty(s)).unwrap(),
            C(value) => g
                .add_node(&format!("c{i}"), Op::Constant { value }, &[])
                .unwrap()[0],
        });
    }
    let outs = g.add_node("n", op, &vals).map_err(|e| e.to_string())?;
    Ok(outs
        .iter()
        .map(|&v| g.value_type(v).to_string())
        .collect::<Vec<_>>()
        .join(", "))
}

#[track_caller]
fn ok(op: Op, ins: Vec<In>) -> String {
    node(op, ins).unwrap_or_else(|e| panic!("unexpected error: {e}"))
}

#[track_caller]
fn err(op: Op, ins: Vec<In>) -> String {
    match node(op, ins) {
        Ok(t) => panic!("expected an error, inferred {t}"),
        Err(e) => e,
    }
}
