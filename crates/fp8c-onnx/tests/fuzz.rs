//! Random bytes, truncations and byte flips of a valid model never panic the importer or
//! `inspect`: they give an error (or, rarely, a model).

use fp8c_ir::DType;
use fp8c_onnx::builder::{ModelBuilder, dim};
use fp8c_onnx::{ImportOptions, import_bytes, inspect_bytes};
use proptest::prelude::*;
use std::sync::OnceLock;

/// A small but varied valid model: params, constants, shape ops, several op families.
fn valid_model() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        ModelBuilder::new()
            .opset(17)
            .input("x", DType::F32, &[dim("batch"), 4.into()])
            .initializer_f32("w", &[4, 8], &[0.25; 32])
            .initializer_f32("b", &[8], &[0.5; 8])
            .initializer_i64("shape", &[3], &[0, 2, 4])
            .initializer_i64("axes", &[1], &[-1])
            .node("MatMul", &["x", "w"], &["h"])
            .node("Add", &["h", "b"], &["hb"])
            .node("Relu", &["hb"], &["r"])
            .node("Reshape", &["r", "shape"], &["rs"])
            .node("Softmax", &["rs"], &["sm"])
            .attr_int("axis", -1)
            .node("ReduceSum", &["sm", "axes"], &["s"])
            .attr_int("keepdims", 0)
            .node("Transpose", &["s"], &["t"])
            .node("LayerNormalization", &["hb", "b", "b"], &["ln"])
            .output("t", DType::F32, &[2.into(), dim("batch")])
            .output_untyped("ln")
            .to_bytes()
    })
}

fn try_everything(bytes: &[u8]) {
    let _ = import_bytes(bytes, None, &ImportOptions::default());
    let _ = inspect_bytes(bytes);
}

#[test]
fn the_valid_model_imports() {
    import_bytes(valid_model(), None, &ImportOptions::default()).unwrap();
}

#[test]
fn every_truncation_is_handled() {
    let m = valid_model();
    for n in 0..m.len() {
        try_everything(&m[..n]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        try_everything(&bytes);
    }

    #[test]
    fn flipped_bytes_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut m = valid_model().to_vec();
        for (pos, val) in flips {
            let n = m.len();
            m[pos % n] = val;
        }
        try_everything(&m);
    }

    #[test]
    fn spliced_bytes_never_panic(cut in any::<usize>(), insert in proptest::collection::vec(any::<u8>(), 0..32)) {
        let m = valid_model();
        let cut = cut % m.len();
        let mut spliced = m[..cut].to_vec();
        spliced.extend(insert);
        spliced.extend(&m[cut..]);
        try_everything(&spliced);
    }
}
