//! Convolution: output sizes, symbolic spatial dims, and the errors.

use super::*;

fn conv(
    kernel: &[i64],
    strides: &[i64],
    pads: &[i64],
    dilations: &[i64],
    group: i64,
    auto_pad: AutoPad,
) -> Op {
    Op::Conv {
        kernel_shape: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        group,
        auto_pad,
    }
}

#[test]
fn conv_output_sizes() {
    use AutoPad::*;
    // ResNet stem: floor((224 + 3 + 3 − 7) / 2) + 1 = floor(223 / 2) + 1 = 112.
    let stem = conv(&[7, 7], &[2, 2], &[3, 3, 3, 3], &[], 1, NotSet);
    assert_eq!(
        ok(
            stem,
            vec![T("f32[1,3,224,224]"), T("f32[64,3,7,7]"), T("f32[64]")]
        ),
        "f32[1,64,112,112]"
    );
    // Empty kernel_shape/strides/pads/dilations: 3×3 from the weight, stride 1, no pad: 32 − 2 = 30.
    assert_eq!(
        ok(
            conv(&[], &[], &[], &[], 1, NotSet),
            vec![T("f32[2,3,32,32]"), T("f32[8,3,3,3]")]
        ),
        "f32[2,8,30,30]"
    );
    // Dilation 2: window 2·(3−1)+1 = 5 wide; floor((10 − 5) / 1) + 1 = 6.
    assert_eq!(
        ok(
            conv(&[], &[], &[], &[2], 1, NotSet),
            vec![T("f32[1,1,10]"), T("f32[1,1,3]")]
        ),
        "f32[1,1,6]"
    );
    // Asymmetric pads and stride 3 on 1-D: floor((10 + 2 + 0 − 3) / 3) + 1 = 3 + 1 = 4.
    assert_eq!(
        ok(
            conv(&[3], &[3], &[2, 0], &[], 1, NotSet),
            vec![T("f32[1,1,10]"), T("f32[4,1,3]")]
        ),
        "f32[1,4,4]"
    );
    // same_upper: ceil(225 / 2) = 113; valid: floor((225 − 3) / 2) + 1 = 112.
    assert_eq!(
        ok(
            conv(&[], &[2, 2], &[], &[], 1, SameUpper),
            vec![T("f32[1,3,225,225]"), T("f32[8,3,3,3]")]
        ),
        "f32[1,8,113,113]"
    );
    assert_eq!(
        ok(
            conv(&[], &[2, 2], &[], &[], 1, SameLower),
            vec![T("f32[1,3,225,8]"), T("f32[8,3,3,3]")]
        ),
        "f32[1,8,113,4]"
    );
    assert_eq!(
        ok(
            conv(&[], &[2, 2], &[9, 9, 9, 9], &[], 1, Valid),
            vec![T("f32[1,3,225,225]"), T("f32[8,3,3,3]")]
        ),
        "f32[1,8,112,112]"
    );
    // Depthwise: C_in 32 = group 32 · w.dim1 1; 3×3 pad 1 keeps 56.
    let dw = conv(&[3, 3], &[1, 1], &[1, 1, 1, 1], &[1, 1], 32, NotSet);
    assert_eq!(
        ok(dw, vec![T("f32[batch,32,56,56]"), T("f32[32,1,3,3]")]),
        "f32[batch,32,56,56]"
    );
}

#[test]
fn conv_symbolic_spatial_dims() {
    use AutoPad::*;
    // A 3×3, pad 1, stride 1 window preserves any size; stride 2 does not.
    let same = conv(&[3, 3], &[], &[1, 1, 1, 1], &[], 1, NotSet);
    assert_eq!(
        ok(same, vec![T("f32[n,3,h,w]"), T("f32[8,3,3,3]")]),
        "f32[n,8,h,w]"
    );
    let down = conv(&[3, 3], &[2, 2], &[1, 1, 1, 1], &[], 1, NotSet);
    assert_eq!(
        ok(down, vec![T("f32[n,3,h,16]"), T("f32[8,3,3,3]")]),
        "f32[n,8,?,8]"
    );
    assert_eq!(
        ok(
            conv(&[], &[], &[], &[], 1, SameUpper),
            vec![T("f32[n,3,h,w]"), T("f32[8,3,5,5]")]
        ),
        "f32[n,8,h,w]"
    );
    // A kernel size nobody knows gives an unknown output size.
    assert_eq!(
        ok(
            conv(&[], &[], &[], &[], 1, NotSet),
            vec![T("f32[1,3,9,9]"), T("f32[8,3,k,3]")]
        ),
        "f32[1,8,?,7]"
    );
}

#[test]
fn conv_errors() {
    use AutoPad::*;
    let e = err(
        conv(&[], &[], &[], &[], 2, NotSet),
        vec![T("f32[1,3,8,8]"), T("f32[16,3,3,3]")],
    );
    assert!(e.contains("input 1 (W) has shape f32[16,3,3,3], its dim 1 (3) times group (2) must equal input 0's channel dim (3)"), "{e}");
    let e = err(
        conv(&[], &[], &[], &[], 1, NotSet),
        vec![T("f32[1,3,8,8]"), T("f32[16,3,3,3]"), T("f32[8]")],
    );
    assert!(
        e.contains("input 2 (B) has shape f32[8], expected 16 elements"),
        "{e}"
    );
    let e = err(
        conv(&[5, 5], &[], &[], &[], 1, NotSet),
        vec![T("f32[1,3,8,8]"), T("f32[16,3,3,3]")],
    );
    assert!(
        e.contains("kernel dims disagree with attribute kernel_shape=[5,5]"),
        "{e}"
    );
    let e = err(
        conv(&[], &[1], &[], &[], 1, NotSet),
        vec![T("f32[1,3,8,8]"), T("f32[16,3,3,3]")],
    );
    assert!(
        e.contains("attribute strides=[1] has 1 values, expected 2"),
        "{e}"
    );
    let e = err(
        conv(&[], &[], &[1, 1], &[], 1, NotSet),
        vec![T("f32[1,3,8,8]"), T("f32[16,3,3,3]")],
    );
    assert!(
        e.contains("attribute pads=[1,1] has 2 values, expected 4"),
        "{e}"
    );
    let e = err(
        conv(&[], &[], &[], &[], 1, NotSet),
        vec![T("f32[1,3,2,8]"), T("f32[16,3,3,3]")],
    );
    assert!(e.contains("spatial axis 0: the window (kernel 3, dilation 1: 3 wide) is larger than the padded input (2 + 0 + 0 = 2)"), "{e}");
    assert!(
        err(
            conv(&[], &[], &[], &[], 0, NotSet),
            vec![T("f32[1,3,8,8]"), T("f32[16,3,3,3]")]
        )
        .contains("group=0")
    );
    assert!(
        err(
            conv(&[], &[], &[], &[], 1, NotSet),
            vec![T("f32[1,3]"), T("f32[16,3]")]
        )
        .contains("expected rank ≥ 3")
    );
    assert!(
        err(
            conv(&[], &[], &[], &[], 1, NotSet),
            vec![T("f32[1,3,8,8]"), T("f32[16,3,3]")]
        )
        .contains("expected rank 4")
    );
}
