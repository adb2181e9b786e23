//! One-op models against onnxruntime, through the real `fp8c run` command line.
//!
//! The models in `tests/models/ops/` (made by `scripts/fixtures/make_op_models.py` with onnx's
//! Python API and onnxruntime's dynamic quantizer) cover the ops fp8c imports by rewriting them —
//! Einsum, ConvTranspose, MatMulInteger, ConvInteger, DynamicQuantizeLinear, QLinearConv and
//! QLinearMatMul and the com.microsoft QGemm, QLinearAdd, QLinearMul, QLinearSigmoid,
//! QLinearLeakyRelu, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool and
//! QLinearSoftmax (onnxruntime's static quantizer, QOperator format), com.microsoft MatMulNBits
//! (its weight-only 2/4/8-bit quantizer; in QDQ format, INT4/UINT4 initializers behind a
//! blocked DequantizeLinear), GatherBlockQuantized (the same quantizer's embeddings, and
//! hand-made UINT8/INT4/UINT4 tables on other axes), LSTM, GRU and RNN (PyTorch's two exporters,
//! `scripts/fixtures/make_rnn_models.py`), onnxruntime's transformer-optimizer fusions
//! (SkipLayerNormalization, FastGelu, ..., and the com.microsoft Attention,
//! MultiHeadAttention, EmbedLayerNormalization and their quantized forms on every mask
//! format), onnxruntime-genai's GroupQueryAttention (prompt, decode, chunk) and
//! onnxruntime's RotaryEmbedding, what
//! onnxruntime's graph optimizer saves (FusedMatMul, FusedGemm, FusedConv,
//! DynamicQuantizeMatMul, MatMulIntegerToFloat), If (inlined),
//! LayerNormalization at opset 14, opset-23 Attention with fully
//! masked query rows (zero rows, as onnxruntime and PyTorch), LayerNormalization's
//! Mean/InvStdDev, integer Sign — TopK, and depthwise convolutions and a padded ceil-mode
//! MaxPool (direct CPU kernels), on shapes and attributes the ONNX node tests leave out, and
//! with symbolic dims where exports have them (`--dim` sizes the inputs). Each runs
//! on onnxruntime's deterministic inputs (`scripts/oracles/ort_reference.py --make-inputs`);
//! integer outputs must be equal, float outputs within 1e-5 relative L2.

mod support;

const MAX_REL_L2: f64 = 1e-5;

/// Runs `model` with `fp8c run FLAGS` and compares every output with onnxruntime's.
fn check(name: &str, ort_args: &[&str], flags: &[&str]) {
    check_against(name, name, ort_args, flags);
}

/// Runs `name` with `fp8c run FLAGS` and compares every output with onnxruntime's outputs of
/// `reference` (the same model, or one onnxruntime can run that computes the same function
/// of the same inputs) on inputs made for `reference`.
fn check_against(name: &str, reference: &str, ort_args: &[&str], flags: &[&str]) {
    let model = support::repo_root().join(format!("tests/models/ops/{name}.onnx"));
    let ref_model = support::repo_root().join(format!("tests/models/ops/{reference}.onnx"));
    let (inputs, reference) =
        support::ort_reference(&ref_model, &format!("ops_{reference}"), ort_args);
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
    layer_norm_at_opset_14: "layer_norm_opset14";
    dynamic_quant_mlp: "dynamic_quant_mlp", ["--dim", "batch=4"];
    static_qop_cnn_u8: "static_qop_cnn_u8", ["--dim", "batch=3"];
    static_qop_cnn_s8_per_channel: "static_qop_cnn_s8", ["--dim", "batch=3"];
    static_qop_contrib_ops_u8: "static_qop_full_u8", ["--dim", "batch=3"];
    static_qop_contrib_ops_s8_per_channel: "static_qop_full_s8", ["--dim", "batch=3"];
    static_qop_attention_u8: "static_qop_attention_u8", ["--dim", "batch=2"];
    static_qop_attention_s8_infinite_scale: "static_qop_attention_s8_inf", ["--dim", "batch=2"];
    rnn_lstm_ts: "rnn_lstm_ts";
    rnn_lstm_symbolic_sequence: "rnn_lstm_dynseq_ts", ["--dim", "batch=2", "--dim", "seq=9"];
    rnn_lstm_dyn: "rnn_lstm_dyn";
    rnn_lstm_bi_2l_ts: "rnn_lstm_bi_2l_ts";
    rnn_lstm_bi_2l_dyn: "rnn_lstm_bi_2l_dyn";
    rnn_lstm_bf_2l_ts: "rnn_lstm_bf_2l_ts";
    rnn_lstm_bf_2l_dyn: "rnn_lstm_bf_2l_dyn";
    rnn_gru_bf_ts: "rnn_gru_bf_ts";
    rnn_gru_bf_dyn: "rnn_gru_bf_dyn";
    rnn_gru_bi_ts: "rnn_gru_bi_ts";
    rnn_gru_bi_dyn: "rnn_gru_bi_dyn";
    rnn_rnn_relu_ts: "rnn_rnn_relu_ts";
    rnn_rnn_relu_dyn: "rnn_rnn_relu_dyn";
    ms_skip_layer_norm: "ms_skip_layer_norm";
    ms_skip_layer_norm_sum: "ms_skip_layer_norm_sum";
    ms_skip_simplified_layer_norm: "ms_skip_simplified_layer_norm";
    ms_simplified_layer_norm: "ms_simplified_layer_norm";
    ms_bias_gelu: "ms_bias_gelu";
    ms_fast_gelu_bias: "ms_fast_gelu_bias";
    ms_fast_gelu: "ms_fast_gelu";
    ms_gelu: "ms_gelu";
    ms_quick_gelu: "ms_quick_gelu";
    ms_attention_no_mask: "ms_attention_no_mask";
    ms_attention_raw_mask_with_padding: "ms_attention_raw_mask_padding";
    ms_attention_raw_mask_input_symbolic_dims: "ms_attention_raw_mask_runtime", ["--dim", "batch=3", "--dim", "seq=7"];
    ms_attention_mask_index_end_positions: "ms_attention_mask_index_ends";
    ms_attention_mask_index_end_and_start_positions: "ms_attention_mask_index_ends_starts";
    ms_attention_mask_3d: "ms_attention_mask_3d";
    ms_attention_unidirectional_left_padding: "ms_attention_unidirectional_left_padding";
    ms_attention_qkv_hidden_sizes: "ms_attention_qkv_hidden_sizes";
    ms_attention_past_present_causal: "ms_attention_past_causal";
    ms_attention_bias_causal: "ms_attention_bias_causal";
    ms_attention_filter_value_scale_all_masked_row: "ms_attention_filter_value_scale_all_masked_row";
    ms_mha_key_padding_mask_cross: "ms_mha_key_padding_mask";
    ms_mha_lengths_past_causal_qk: "ms_mha_lengths_past_causal_qk";
    ms_mha_mask_3d_scale: "ms_mha_mask_3d_scale";
    ms_mha_projected_kv: "ms_mha_projected_kv";
    ms_embed_layer_norm: "ms_embed_layer_norm";
    ms_embed_layer_norm_position_ids: "ms_embed_layer_norm_position_ids";
    ms_embed_layer_norm_batch_position_ids: "ms_embed_layer_norm_batch_position_ids";
    ms_q_attention_uint8_weights_raw_mask: "ms_q_attention_u8", ["--dim", "batch=2"];
    ms_q_attention_int8_weights_mask_index: "ms_q_attention_s8", ["--dim", "batch=2"];
    ms_gqa_prompt_window_softcap: "ms_gqa_prompt_window_softcap";
    ms_gqa_prompt_packed_interleaved_rotary: "ms_gqa_prompt_packed_rotary";
    ms_gqa_decode_ragged_rows_partial_rotary: "ms_gqa_decode_ragged_rotary_partial";
    ms_gqa_chunk_after_past: "ms_gqa_chunk_after_past";
    ms_fused_matmul_trans_a_alpha: "ms_fused_matmul_trans_alpha";
    ms_fused_matmul_trans_b: "ms_fused_matmul_trans_b";
    ms_fused_gemm_leaky_relu: "ms_fused_gemm_leaky_relu";
    ms_fused_conv_hard_sigmoid: "ms_fused_conv_hard_sigmoid";
    ms_fused_conv_sum_relu: "ms_fused_conv_sum_relu";
    ms_dynamic_quantize_matmul_int8_per_column: "ms_dynamic_quantize_matmul";
    ms_dynamic_quantize_matmul_uint8: "ms_dynamic_quantize_matmul_u8";
    ms_matmul_integer_to_float: "ms_matmul_integer_to_float";
    ms_rotary_embedding_offset_3d: "ms_rotary_offset_3d";
    ms_rotary_embedding_ids_4d_interleaved_partial: "ms_rotary_ids_4d_interleaved_partial";
    ms_rotary_embedding_heads_from_the_cache: "ms_rotary_3d_heads_from_cache";
    ms_q_embed_layer_norm: "ms_q_embed_layer_norm";
    if_runtime_condition_both_branches: "if_runtime_cond";
    if_static_condition_one_branch: "if_static_cond";
    attention_fully_masked_rows_give_zeros: "attention_fully_masked_rows";
    attention_fully_masked_causal_gqa: "attention_fully_masked_rows_causal_gqa";
    matmul_nbits_4bit_symmetric: "nbits4_sym_b32", ["--dim", "batch=5"];
    matmul_nbits_4bit_zero_points_block16: "nbits4_asym_b16", ["--dim", "batch=5"];
    matmul_nbits_8bit_zero_points: "nbits8_asym_b32", ["--dim", "batch=5"];
    int4_weights_behind_blocked_dequantize_linear: "nbits4_qdq_int4_sym", ["--dim", "batch=5"];
    uint4_weights_and_zero_points_behind_dequantize_linear: "nbits4_qdq_uint4_zero_points", ["--dim", "batch=5"];
    matmul_nbits_act_order_g_idx: "nbits4_g_idx", ["--dim", "batch=3"];
    matmul_nbits_act_order_g_idx_zero_points: "nbits4_g_idx_zero_points", ["--dim", "batch=3"];
    gather_block_quantized_uint8_4bit: "gbq_u8_4bit", ["--vocab", "6"];
    gather_block_quantized_uint8_4bit_packed_zero_points: "gbq_u8_4bit_zero_points", ["--vocab", "6"];
    gather_block_quantized_uint8_8bit_zero_points: "gbq_u8_8bit_zero_points", ["--vocab", "6"];
    gather_block_quantized_int4_axis1_f16_scales: "gbq_int4_axis1_f16", ["--vocab", "7"];
    gather_block_quantized_uint4_3d_zero_points: "gbq_uint4_3d_zero_points", ["--vocab", "3"];
    gather_block_quantized_embedding_int4: "gbq_embedding_int4", ["--vocab", "50", "--dim", "b=2", "--dim", "s=5"];
    gather_block_quantized_embedding_uint4: "gbq_embedding_uint4_zero_points", ["--vocab", "50", "--dim", "b=2", "--dim", "s=5"];
    conv_depthwise_5x5_stride: "conv_depthwise_5x5_stride";
    conv_depthwise_multiplier_dilation: "conv_depthwise_multiplier_dilation";
    conv_depthwise_1d_same_upper: "conv_depthwise_1d_same";
    conv_depthwise_3d: "conv_depthwise_3d";
    conv_single_channel_wide_pads: "conv_single_channel_wide_pads";
    max_pool_pads_ceil_mode: "max_pool_pads_ceil";
    conv_stride2_rows_of_16: "conv_stride2_rows_of_16";
    conv_depthwise_stride2_rows_of_20: "conv_depthwise_stride2_rows_of_20";
    max_pool_stride2_rows_of_16: "max_pool_stride2_rows_of_16";
    sign_int64: "sign_int64";
    sign_int32: "sign_int32";
    sign_uint8: "sign_uint8";
    einsum_linear_with_symbolic_batch_and_time: "einsum_linear_symbolic", ["--dim", "b=2", "--dim", "t=3"];
    einsum_symbolic_flattened_groups: "einsum_symbolic_groups", ["--dim", "b=2", "--dim", "s=3", "--dim", "t=4"];
    conv_transpose_symbolic_batch: "conv_transpose_symbolic_batch", ["--dim", "batch=2"];
}

/// MultiHeadAttention with packed QKV (`[B, S, N, 3, H]`) and packed KV inputs, which
/// onnxruntime's CPU kernel refuses: against onnxruntime on the same inputs unpacked by
/// Gather and Reshape into separate query, key and value (`*_ref` models).
#[test]
fn ms_mha_packed_inputs_match_the_unpacked_form() {
    for name in ["ms_mha_packed_qkv", "ms_mha_packed_kv"] {
        check_against(name, &format!("{name}_ref"), &[], &["--precision", "f32"]);
    }
}

/// `fp8c compile` of models with symbolic dims, without input shapes: an Einsum that is a
/// Linear layer imports as one broadcasting matmul that keeps the symbols; a ConvTranspose
/// (whose IR op records its output shape) waits for the shapes, says so naming the node and
/// input, and compiles once `--input-shape` gives them.
#[test]
fn symbolic_dims_reach_the_importer_through_input_shape() {
    let ops = support::repo_root().join("tests/models/ops");
    let compile = |model: &str, extra: &[&str]| {
        let path = ops.join(format!("{model}.onnx"));
        let mut args = vec!["compile".as_ref(), path.as_os_str()];
        args.extend(["--precision", "f32"].iter().map(std::ffi::OsStr::new));
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        support::run_fp8c(args)
    };
    let r = compile("einsum_linear_symbolic", &[]);
    assert!(r.ok, "einsum_linear_symbolic: {}", r.stderr);
    assert!(
        r.stdout.contains("f32[b,t,6] = matmul"),
        "expected one matmul keeping b and t:\n{}",
        r.stdout
    );
    let r = compile("conv_transpose_symbolic_batch", &[]);
    assert!(!r.ok, "compiled without a batch size:\n{}", r.stdout);
    for part in [
        "node \"ConvTranspose_0\" (ConvTranspose)",
        "X (\"x\") has type f32[batch,3,4,5]",
        "dim 0 (batch) is symbolic",
        "--input-shape",
    ] {
        assert!(
            r.stderr.contains(part),
            "missing {part:?} in:\n{}",
            r.stderr
        );
    }
    let r = compile(
        "conv_transpose_symbolic_batch",
        &["--input-shape", "x=3x3x4x5"],
    );
    assert!(r.ok, "with --input-shape: {}", r.stderr);
    assert!(
        r.stdout.contains("input_shape=[3,2,8,10]"),
        "expected the output shape of batch 3:\n{}",
        r.stdout
    );
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

// Vision ops imported by decomposition (scripts/fixtures/make_vision_op_models.py): instance and
// group normalisation as reductions and elementwise ops, DepthToSpace/SpaceToDepth as reshape,
// transpose, reshape, Resize/Upsample as gathers of constant positions (and a weighted add
// for `linear`; a weighted sum of taps for cubic, antialias and crops), MaxPool's Indices as
// a gather of window taps and an arg_max, one model per mode and attribute combination the
// importer accepts.
op_tests! {
    instance_norm_2d: "instance_norm_2d";
    instance_norm_1d_epsilon: "instance_norm_1d_epsilon";
    instance_norm_3d: "instance_norm_3d";
    group_norm_21_per_channel_affine: "group_norm_21";
    group_norm_21_one_group_1d: "group_norm_21_one_group_1d";
    group_norm_18_per_group_affine: "group_norm_18_per_group";
    depth_to_space_dcr: "depth_to_space_dcr";
    depth_to_space_crd: "depth_to_space_crd";
    space_to_depth: "space_to_depth";
    resize_nearest_asymmetric_floor: "resize_nearest_asymmetric_floor";
    resize_nearest_half_pixel_round_prefer_floor: "resize_nearest_half_pixel_prefer_floor";
    resize_nearest_half_pixel_round_prefer_ceil: "resize_nearest_half_pixel_prefer_ceil";
    resize_nearest_align_corners_round_prefer_ceil_sizes: "resize_nearest_align_corners_prefer_ceil";
    resize_nearest_align_corners_round_prefer_floor_sizes: "resize_nearest_align_corners_prefer_floor";
    resize_nearest_pytorch_half_pixel_ceil: "resize_nearest_pytorch_half_pixel_ceil";
    resize_nearest_tf_half_pixel_for_nn_sizes: "resize_nearest_tf_half_pixel_for_nn";
    resize_nearest_asymmetric_ceil_downsample: "resize_nearest_asymmetric_ceil_down";
    resize_nearest_half_pixel_symmetric_floor: "resize_nearest_half_pixel_symmetric_floor";
    resize_nearest_opset18_axes_int32: "resize_nearest_axes_int32";
    resize_linear_pytorch_half_pixel: "resize_linear_pytorch_half_pixel";
    resize_linear_pytorch_half_pixel_to_length_one: "resize_linear_pytorch_half_pixel_to_one";
    resize_linear_align_corners: "resize_linear_align_corners";
    resize_linear_align_corners_downsample_sizes: "resize_linear_align_corners_down";
    resize_linear_align_corners_downsample_scales: "resize_linear_align_corners_scales_down";
    resize_linear_half_pixel_up_and_down: "resize_linear_half_pixel_up_down";
    resize_linear_asymmetric: "resize_linear_asymmetric";
    resize_linear_half_pixel_symmetric: "resize_linear_half_pixel_symmetric";
    resize_linear_trilinear_5d: "resize_linear_trilinear";
    resize_linear_2d_input: "resize_linear_2d";
    resize_opset10_nearest: "resize10_nearest";
    resize_opset10_linear: "resize10_linear";
    upsample_opset9_nearest: "upsample9_nearest";
    upsample_opset9_linear: "upsample9_linear";
    upsample_opset7_nearest: "upsample7_nearest";
    resize_cubic_half_pixel_up: "resize_cubic_half_pixel_up";
    resize_cubic_align_corners_up: "resize_cubic_align_corners_up";
    resize_cubic_coefficient_exclude_outside_down: "resize_cubic_exclude_outside_down";
    resize_cubic_antialias_down: "resize_cubic_antialias_down";
    resize_linear_antialias_down: "resize_linear_antialias_down";
    resize_tf_crop_and_resize_extrapolated: "resize_crop_linear_extrapolated";
    resize_nearest_keep_aspect_not_smaller: "resize_nearest_not_smaller";
    resize_linear_keep_aspect_not_larger: "resize_linear_not_larger";
    max_pool_indices_dilated_ceil_column_major: "max_pool_indices_dilated_ceil_col_major";
    max_pool_indices_3d_same_upper: "max_pool_indices_3d_same_upper";
    max_pool_indices_1d: "max_pool_indices_1d";
}
