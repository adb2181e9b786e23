//! The text form, JSON and the weights sidecar: exact round trips, error messages, and
//! robustness against garbage (nothing may panic).
//!
//! One module per purpose: hand-written text, builder graphs, errors, the weights sidecar,
//! JSON, and random graphs with the never-panics properties.

mod builder;
mod errors;
mod hand_written;
mod json;
mod random;
mod weights;

use fp8c_ir::{
    AmaxSource, Attr, AttrMap, DType, Dim, Graph, IrError, Op, Tensor, TensorType, Value,
    from_json, parse, print, read_weights, to_json, to_json_with_weights, write_weights,
};
use std::collections::BTreeMap;

/// A small FP8 MLP in canonical form: `print(parse(MLP)) == MLP`.
const MLP: &str = r#"graph @mlp(
    %x: f32[batch,256]
) params(
    %w1: f32[256,512],
    %w2: f32[512,10]
) state(
    %x.h: f32[16] = 0,
    %x.s: f32[] = 1,
    %w1.h: f32[16] = 0,
    %w1.s: f32[] = 1
) {
  %0: f32[] = amax %x  # fc1.x.amax
  %1: (f32[16], f32[16]) = amax_history_update %x.h, %0  # fc1.x.hist
  %2: (f32[], f32[]) = compute_scale %1, %x.s fmt=f8e4m3 margin=0.0 source=history_max epsilon=0.0 power_2=false  # fc1.x.scale
  %3: f8e4m3[batch,256] = quantize %x, %2 to=f8e4m3 saturate=true  # fc1.x.q
  %4: f32[] = amax %w1  # fc1.w.amax
  %5: (f32[16], f32[16]) = amax_history_update %w1.h, %4  # fc1.w.hist
  %6: (f32[], f32[]) = compute_scale %5, %w1.s fmt=f8e4m3 margin=0.0 source=history_max epsilon=0.0 power_2=false  # fc1.w.scale
  %7: f8e4m3[256,512] = quantize %w1, %6 to=f8e4m3 saturate=true  # fc1.w.q
  %8: f32[batch,512] = scaled_matmul %3, %7, %2#1, %6#1 out=f32 fast_accum=true  # fc1
  %9: f32[batch,512] = gelu %8 approximate=none  # fc1.act
  %10: f32[] = constant value=dense<f32[]>[0.5]  # half
  %11: f32[batch,512] = mul %9, %10  # fc1.scaled
  %12: f32[batch,10] = matmul %11, %w2  # fc2
  %13: f32[batch,10] = softmax %12 axis=-1  # /head/Softmax
  return %13 as "probs"
  return %8 as "logits"
  update %w1.h = %5#1
  update %w1.s = %6
  update %x.h = %1#1
  update %x.s = %2
}
"#;

fn f32t(dims: &[u64]) -> TensorType {
    TensorType::fixed(DType::F32, dims)
}

/// `parse(print(g)) == g` and printing is stable.
#[track_caller]
fn assert_round_trip(g: &Graph) -> String {
    let text = print(g);
    let back = parse(&text).unwrap_or_else(|e| panic!("{e}\n--- text ---\n{text}"));
    assert!(
        back == *g,
        "graph changed in round trip\n--- text ---\n{text}\n--- reprinted ---\n{}",
        print(&back)
    );
    assert_eq!(print(&back), text);
    text
}

#[track_caller]
fn parse_err(text: &str) -> (usize, usize, String) {
    match parse(text) {
        Err(IrError::Parse { line, col, msg }) => (line, col, msg),
        Err(e) => panic!("expected a parse error, got {e}"),
        Ok(g) => panic!("expected a parse error, got a graph:\n{}", print(&g)),
    }
}
