//! Helpers shared by the op tests: tensor constructors and one-call evaluation.
#![allow(dead_code)]

use fp8c_eval::{ErrorKind, eval_op};
use fp8c_ir::{DType, Op, Tensor};

pub fn f32s(shape: &[u64], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape.to_vec(), v)
}

pub fn i64s(shape: &[u64], v: &[i64]) -> Tensor {
    Tensor::from_i64(shape.to_vec(), v)
}

pub fn i32s(shape: &[u64], v: &[i32]) -> Tensor {
    Tensor::from_i32(shape.to_vec(), v)
}

pub fn bools(shape: &[u64], v: &[bool]) -> Tensor {
    Tensor::from_bool(shape.to_vec(), v)
}

/// A 1-D i64 tensor (shape inputs, indices, pads).
pub fn list(v: &[i64]) -> Tensor {
    i64s(&[v.len() as u64], v)
}

pub fn scalar_f32(v: f32) -> Tensor {
    Tensor::scalar_f32(v)
}

/// A tensor of `dtype` from f64 values (not FP8).
pub fn typed(dtype: DType, shape: &[u64], v: &[f64]) -> Tensor {
    Tensor::from_f64_as(dtype, shape.to_vec(), v).unwrap()
}

/// A tensor of raw FP8 codes.
pub fn fp8(dtype: DType, shape: &[u64], codes: &[u8]) -> Tensor {
    Tensor::from_bytes(dtype, shape.to_vec(), codes.to_vec()).unwrap()
}

/// Evaluates a single-output op, panicking with the error on failure.
pub fn eval1(op: Op, inputs: &[&Tensor]) -> Tensor {
    let mut out = eval_op(&op, inputs).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.len(), 1, "{} should have one output", op.name());
    out.remove(0)
}

/// Evaluates an op that must fail, returning the error's kind.
pub fn fails(op: Op, inputs: &[&Tensor]) -> ErrorKind {
    match eval_op(&op, inputs) {
        Ok(o) => panic!("`{}` should fail, got {o:?}", op.name()),
        Err(e) => {
            assert!(
                e.to_string().starts_with(&format!("`{}`", op.name())),
                "error names the op: {e}"
            );
            e.kind
        }
    }
}

pub fn vf32(t: &Tensor) -> Vec<f32> {
    t.to_f32_vec().unwrap()
}

pub fn vf64(t: &Tensor) -> Vec<f64> {
    t.to_f64_vec().unwrap()
}

pub fn vi64(t: &Tensor) -> Vec<i64> {
    t.to_i64_vec().unwrap()
}

pub fn vbool(t: &Tensor) -> Vec<bool> {
    t.bytes().iter().map(|&b| b != 0).collect()
}

/// Asserts two f32 slices agree within `tol` (absolute), NaN matching NaN.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths: got {got:?}, want {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol;
        assert!(
            ok,
            "element {i}: got {g}, want {w} (tol {tol})\n got  {got:?}\n want {want:?}"
        );
    }
}
