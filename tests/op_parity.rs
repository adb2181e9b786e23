//! One-op models against onnxruntime, through the real `fp8c run` command line.
//!
//! The models in `tests/models/ops/` (made by `scripts/make_op_models.py` with onnx's Python
//! API and onnxruntime's dynamic quantizer) cover the ops fp8c imports by rewriting them —
//! Einsum, ConvTranspose, MatMulInteger, ConvInteger, DynamicQuantizeLinear, LayerNormalization's
//! Mean/InvStdDev — TopK, and depthwise convolutions and a padded ceil-mode MaxPool (direct
//! CPU kernels), on shapes and attributes the ONNX node tests leave out. Each runs
//! on onnxruntime's deterministic inputs (`scripts/ort_reference.py --make-inputs`); integer
//! outputs must be equal, float outputs within 1e-5 relative L2.

mod support;

const MAX_REL_L2: f64 = 1e-5;

/// Runs `model` with `fp8c run FLAGS` and compares every output with onnxruntime's.
fn check(name: &str, ort_args: &[&str], flags: &[&str]) {
    let model = support::repo_root().join(format!("tests/models/ops/{name}.onnx"));
    let (inputs, reference) = support::ort_reference(&model, &format!("ops_{name}"), ort_args);
    let want = support::read_npz(&reference);
    let dir = support::scratch(&format!("op_parity_{name}_{}", flags.join("_")));
    let out = dir.join("out.npz");
    let mut args = vec![
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        inputs.as_os_str(),
        "--outputs".as_ref(),
        out.as_os_str(),
    ];
    args.extend(flags.iter().map(std::ffi::OsStr::new));
    let r = support::run_fp8c(args);
    assert!(r.ok, "{name}: fp8c run {flags:?} failed:\n{}", r.stderr);
    let got = support::read_npz(&out);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{name}: output names"
    );
    for (out_name, w) in &want {
        let g = &got[out_name];
        assert_eq!(g.ty(), w.ty(), "{name}: output \"{out_name}\" type");
        if !w.dtype().is_float() {
            assert_eq!(
                g.bytes(),
                w.bytes(),
                "{name}: output \"{out_name}\" differs"
            );
            eprintln!("{name} {flags:?}: \"{out_name}\" equal to onnxruntime's");
            continue;
        }
        let c = fp8c_runtime::compare(g, w).unwrap();
        eprintln!(
            "{name} {flags:?}: \"{out_name}\" rel_l2={:.3e} max_abs={:.3e}",
            c.rel_l2, c.max_abs
        );
        assert!(
            c.rel_l2 <= MAX_REL_L2,
            "{name}: output \"{out_name}\": rel L2 {:.3e} > {MAX_REL_L2:e}",
            c.rel_l2
        );
    }
}

macro_rules! op_tests {
    ($($test:ident: $model:literal $(, [$($arg:literal),*])?;)*) => {$(
        #[test]
        fn $test() {
            check($model, &[$($($arg),*)?], &["--precision", "f32"]);
        }
    )*};
}

op_tests! {
    einsum_attention: "einsum_attention";
    einsum_broadcast: "einsum_broadcast";
    einsum_three_operands: "einsum_three";
    einsum_trace_times_vector: "einsum_trace_outer";
    einsum_implicit_output: "einsum_implicit";
    einsum_bilinear: "einsum_bilinear";
    einsum_batched_trace: "einsum_sum_diag";
    top_k_largest: "top_k_largest";
    top_k_smallest_axis0: "top_k_smallest_axis0";
    conv_transpose_stride_pad_output_padding: "conv_transpose_stride_pad";
    conv_transpose_group_dilation: "conv_transpose_group_dilation";
    conv_transpose_1d_output_shape: "conv_transpose_1d_output_shape";
    matmul_integer_u8: "matmul_integer_u8";
    matmul_integer_u8_i8: "matmul_integer_u8_i8";
    conv_integer: "conv_integer";
    dynamic_quantize_linear: "dynamic_quantize_linear";
    layer_norm_mean_and_inv_std: "layer_norm_stats";
    dynamic_quant_mlp: "dynamic_quant_mlp", ["--dim", "batch=4"];
    conv_depthwise_5x5_stride: "conv_depthwise_5x5_stride";
    conv_depthwise_multiplier_dilation: "conv_depthwise_multiplier_dilation";
    conv_depthwise_1d_same_upper: "conv_depthwise_1d_same";
    conv_depthwise_3d: "conv_depthwise_3d";
    conv_single_channel_wide_pads: "conv_single_channel_wide_pads";
    max_pool_pads_ceil_mode: "max_pool_pads_ceil";
    conv_stride2_rows_of_16: "conv_stride2_rows_of_16";
    conv_depthwise_stride2_rows_of_20: "conv_depthwise_stride2_rows_of_20";
    max_pool_stride2_rows_of_16: "max_pool_stride2_rows_of_16";
}

/// ORT's dynamically quantized MLP under `--precision fp8`: its integer GEMMs keep their
/// type (the policy's `own type` rule), so the result is still onnxruntime's.
#[test]
fn dynamic_quant_mlp_keeps_integer_gemms_under_fp8() {
    check(
        "dynamic_quant_mlp",
        &["--dim", "batch=4"],
        &["--precision", "fp8"],
    );
}

/// Cast to FLOAT8E8M0 with each `round_mode` and `saturate` (opset 25) through
/// `fp8c run --data`: the codes equal onnx's reference evaluator's (onnxruntime cannot return
/// E8M0 to numpy), at rounding boundaries, subnormals, zero, inf, NaN and past 2^127.
#[test]
fn cast_to_e8m0_with_every_round_mode() {
    for mode in ["up", "down", "nearest"] {
        for suffix in ["", "_no_saturate"] {
            let name = format!("cast_e8m0_{mode}{suffix}");
            let dir = support::repo_root().join(format!("tests/models/ops/{name}"));
            let data = dir.join("test_data_set_0");
            let out = support::scratch(&format!("op_parity_{name}"));
            let r = support::run_fp8c([
                "run".as_ref(),
                dir.join("model.onnx").as_os_str(),
                "--data".as_ref(),
                data.as_os_str(),
                "--out-dir".as_ref(),
                out.as_os_str(),
            ]);
            assert!(r.ok, "{name}: fp8c run failed:\n{}", r.stderr);
            let got = fp8c_onnx::load_tensor_pb(&out.join("output_0.pb")).unwrap();
            let want = fp8c_onnx::load_tensor_pb(&data.join("output_0.pb")).unwrap();
            assert_eq!(got.ty(), want.ty(), "{name}");
            assert_eq!(got.bytes(), want.bytes(), "{name}: codes differ");
            eprintln!("{name}: {} codes equal to onnx's reference", want.len());
        }
    }
}
