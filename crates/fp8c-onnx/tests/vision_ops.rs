//! The vision ops imported by decomposition (Resize, Upsample, DepthToSpace, SpaceToDepth,
//! InstanceNormalization, GroupNormalization): which IR ops they become, and the error each
//! unsupported attribute or shape gives, naming the node and the attribute or input. Their
//! numbers are checked against onnxruntime by `tests/op_parity.rs`.

mod common;

use common::{import, import_err, op_names};
use fp8c_ir::{DType, Dim};
use fp8c_onnx::builder::{ModelBuilder, dim};

/// A Resize node "rs" on x f32[1, 2, h, 5] with constant `scales` (opset 19).
fn resize_scales(h: Dim, scales: &[f32]) -> ModelBuilder {
    ModelBuilder::new()
        .opset(19)
        .input("x", DType::F32, &[1.into(), 2.into(), h, 5.into()])
        .initializer_f32("scales", &[scales.len() as u64], scales)
        .node("Resize", &["x", "", "scales"], &["y"])
        .name("rs")
        .output_untyped("y")
}

#[test]
fn nearest_upsample_is_one_gather_per_resized_axis() {
    let b = resize_scales(4.into(), &[1.0, 1.0, 2.0, 2.0])
        .attr_str("mode", "nearest")
        .attr_str("coordinate_transformation_mode", "asymmetric")
        .attr_str("nearest_mode", "floor");
    let imp = import(b);
    assert_eq!(op_names(&imp.graph), ["gather", "gather"]);
    assert_eq!(common::output_ty(&imp, "y"), "f32[1,2,8,10]");
}

#[test]
fn bilinear_is_two_weighted_gathers_per_axis() {
    let b = resize_scales(4.into(), &[1.0, 1.0, 2.0, 2.0]).attr_str("mode", "linear");
    let imp = import(b);
    let per_axis = ["gather", "gather", "mul", "mul", "add"];
    assert_eq!(op_names(&imp.graph), [per_axis, per_axis].concat());
    assert_eq!(common::output_ty(&imp, "y"), "f32[1,2,8,10]");
}

#[test]
fn unchanged_axes_may_be_symbolic_and_same_size_is_identity() {
    let b = ModelBuilder::new()
        .opset(19)
        .input("x", DType::F32, &[dim("n"), 3.into(), 4.into()])
        .initializer_f32("scales", &[3], &[1.0, 1.0, 1.0])
        .node("Resize", &["x", "", "scales"], &["y"])
        .name("rs")
        .output_untyped("y");
    assert_eq!(op_names(&import(b).graph), ["identity"]);
}

#[test]
fn resize_cubic_is_a_weighted_sum_of_four_taps_per_axis() {
    let b = resize_scales(4.into(), &[1.0, 1.0, 2.0, 2.0]).attr_str("mode", "cubic");
    let imp = import(b);
    let per_axis = ["gather", "mul", "reduce_sum"];
    assert_eq!(op_names(&imp.graph), [per_axis, per_axis].concat());
    assert_eq!(common::output_ty(&imp, "y"), "f32[1,2,8,10]");
}

#[test]
fn antialias_widens_the_taps_and_exclude_outside_keeps_two() {
    // Halving with antialias: 4 taps per output position; exclude_outside alone: 2.
    let b = resize_scales(4.into(), &[1.0, 1.0, 0.5, 0.5])
        .attr_str("mode", "linear")
        .attr_int("antialias", 1);
    let imp = import(b);
    let per_axis = ["gather", "mul", "reduce_sum"];
    assert_eq!(op_names(&imp.graph), [per_axis, per_axis].concat());
    assert_eq!(common::output_ty(&imp, "y"), "f32[1,2,2,2]");
    let b = resize_scales(4.into(), &[1.0, 1.0, 0.5, 0.5])
        .attr_str("mode", "cubic")
        .attr_int("exclude_outside", 1);
    assert_eq!(common::output_ty(&import(b), "y"), "f32[1,2,2,2]");
    let b = resize_scales(4.into(), &[1.0, 1.0, 0.5, 0.5]).attr_int("antialias", 1);
    assert_eq!(
        import_err(b),
        r#"node "rs" (Resize): attribute `antialias` = 1 needs mode linear or cubic"#
    );
}

#[test]
fn tf_crop_and_resize_needs_its_roi() {
    let b = resize_scales(4.into(), &[1.0, 1.0, 2.0, 2.0])
        .attr_str("coordinate_transformation_mode", "tf_crop_and_resize");
    assert_eq!(
        import_err(b),
        r#"node "rs" (Resize): input 1 (`roi`) is required by tf_crop_and_resize"#
    );
}

#[test]
fn resize_refuses_scales_that_are_not_constant() {
    let b = ModelBuilder::new()
        .opset(19)
        .input("x", DType::F32, &[1.into(), 2.into(), 4.into(), 5.into()])
        .input("s", DType::F32, &[4.into()])
        .node("Relu", &["s"], &["scales"])
        .name("pos")
        .node("Resize", &["x", "", "scales"], &["y"])
        .name("rs")
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "rs" (Resize): input 2 (`scales`, value "scales") must be a constant: the resize is planned at import"#
    );
}

#[test]
fn resize_refuses_a_symbolic_resized_axis() {
    let b = resize_scales(dim("h"), &[1.0, 1.0, 2.0, 2.0]);
    assert_eq!(
        import_err(b),
        "node \"rs\" (Resize): X has type f32[1,2,h,5]: Resize needs a static size on resized \
         axis 2 (fix the input shape, e.g. --input-shape)"
    );
}

#[test]
fn keep_aspect_ratio_policies_scale_every_resized_axis_alike() {
    // sizes [1, 2, 8, 8] of [1, 2, 4, 5]: ratios 1, 1, 2, 1.6 over every axis.
    let b = |policy: &str| {
        ModelBuilder::new()
            .opset(19)
            .input("x", DType::F32, &[1.into(), 2.into(), 4.into(), 5.into()])
            .initializer_i64("sizes", &[4], &[1, 2, 8, 8])
            .node("Resize", &["x", "", "", "sizes"], &["y"])
            .name("rs")
            .attr_str("keep_aspect_ratio_policy", policy)
            .output_untyped("y")
    };
    // not_larger takes the smallest ratio (1): nothing changes.
    assert_eq!(op_names(&import(b("not_larger")).graph), ["identity"]);
    // not_smaller the largest (2), on every axis: round(2 · dim).
    assert_eq!(
        common::output_ty(&import(b("not_smaller")), "y"),
        "f32[2,4,8,10]"
    );
    assert_eq!(
        import_err(b("wider")),
        r#"node "rs" (Resize): attribute `keep_aspect_ratio_policy`: unknown value "wider" (stretch, not_larger and not_smaller are ONNX's)"#
    );
}

#[test]
fn resize_linear_refuses_integers() {
    let b = ModelBuilder::new()
        .opset(19)
        .input("x", DType::I32, &[1.into(), 4.into()])
        .initializer_f32("scales", &[2], &[1.0, 2.0])
        .node("Resize", &["x", "", "scales"], &["y"])
        .name("rs")
        .attr_str("mode", "linear")
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "rs" (Resize): attribute `mode` = "linear" needs a floating-point X, got i32"#
    );
}

/// A DepthToSpace node "d2s" (blocksize 2) on x f32[1, c, h, 3].
fn depth_to_space(c: u64, h: Dim, mode: &str) -> ModelBuilder {
    ModelBuilder::new()
        .input("x", DType::F32, &[1.into(), c.into(), h, 3.into()])
        .node("DepthToSpace", &["x"], &["y"])
        .name("d2s")
        .attr_int("blocksize", 2)
        .attr_str("mode", mode)
        .output_untyped("y")
}

#[test]
fn depth_to_space_is_reshape_transpose_reshape() {
    let imp = import(depth_to_space(8, 2.into(), "CRD"));
    assert_eq!(op_names(&imp.graph), ["reshape", "transpose", "reshape"]);
    assert_eq!(common::output_ty(&imp, "y"), "f32[1,2,4,6]");
}

#[test]
fn depth_to_space_errors_name_the_node() {
    assert_eq!(
        import_err(depth_to_space(8, 2.into(), "XYZ")),
        r#"node "d2s" (DepthToSpace): attribute `mode`: unknown value "XYZ" (DCR or CRD)"#
    );
    assert_eq!(
        import_err(depth_to_space(6, 2.into(), "DCR")),
        r#"node "d2s" (DepthToSpace): X has type f32[1,6,2,3]: its 6 channels are not a multiple of blocksize² = 4"#
    );
    assert_eq!(
        import_err(depth_to_space(8, dim("h"), "DCR")),
        "node \"d2s\" (DepthToSpace): X has type f32[1,8,h,3]; expected [N, C, H, W] with static \
         C, H and W (fix the input shape, e.g. --input-shape)"
    );
}

#[test]
fn space_to_depth_needs_divisible_height_and_width() {
    let b = ModelBuilder::new()
        .input("x", DType::F32, &[1.into(), 2.into(), 4.into(), 3.into()])
        .node("SpaceToDepth", &["x"], &["y"])
        .name("s2d")
        .attr_int("blocksize", 2)
        .output_untyped("y");
    assert_eq!(
        import_err(b),
        r#"node "s2d" (SpaceToDepth): X has type f32[1,2,4,3]: its height and width are not multiples of blocksize 2"#
    );
}

/// A normalisation node "norm" of `op` on x f32[2, 6, 4] with scale and bias of `n` entries.
fn norm(op: &str, opset: i64, n: u64) -> ModelBuilder {
    let p = vec![1.0; n as usize];
    ModelBuilder::new()
        .opset(opset)
        .input("x", DType::F32, &[2.into(), 6.into(), 4.into()])
        .initializer_f32("scale", &[n], &p)
        .initializer_f32("bias", &[n], &p)
        .node(op, &["x", "scale", "bias"], &["y"])
        .name("norm")
        .output_untyped("y")
}

#[test]
fn instance_norm_is_reductions_and_elementwise() {
    let imp = import(norm("InstanceNormalization", 17, 6));
    assert_eq!(
        op_names(&imp.graph),
        [
            "reduce_mean",
            "sub",
            "mul",
            "reduce_mean",
            "add",
            "sqrt",
            "div",
            "unsqueeze",
            "unsqueeze",
            "mul",
            "add"
        ]
    );
    assert_eq!(common::output_ty(&imp, "y"), "f32[2,6,4]");
}

#[test]
fn instance_norm_wants_one_scale_per_channel() {
    assert_eq!(
        import_err(norm("InstanceNormalization", 17, 4)),
        r#"node "norm" (InstanceNormalization): input 1 ("scale") has type f32[4]; expected 1-D, one entry per channel of X (6)"#
    );
}

#[test]
fn group_norm_checks_groups_and_per_version_parameters() {
    let b = norm("GroupNormalization", 21, 6).attr_int("num_groups", 4);
    assert_eq!(
        import_err(b),
        r#"node "norm" (GroupNormalization): attribute `num_groups` = 4 does not divide the channels of X f32[2,6,4]"#
    );
    // opset 18's scale and bias are per group
    let b = norm("GroupNormalization", 18, 6).attr_int("num_groups", 3);
    assert_eq!(
        import_err(b),
        r#"node "norm" (GroupNormalization): input 1 ("scale") has type f32[6]; expected 1-D, one entry per group (GroupNormalization-18) (3)"#
    );
    let imp = import(norm("GroupNormalization", 18, 3).attr_int("num_groups", 3));
    assert_eq!(common::output_ty(&imp, "y"), "f32[2,6,4]");
}
