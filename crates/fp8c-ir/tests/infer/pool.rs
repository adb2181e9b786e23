//! Pooling: output sizes (ceil mode, auto_pad) and the errors.

use super::*;

fn max_pool(
    kernel: &[i64],
    strides: &[i64],
    pads: &[i64],
    ceil_mode: bool,
    auto_pad: AutoPad,
) -> Op {
    Op::MaxPool {
        kernel_shape: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: vec![],
        ceil_mode,
        auto_pad,
    }
}

#[test]
fn pool_output_sizes() {
    use AutoPad::*;
    // ResNet max pool: floor((112 + 1 + 1 − 3) / 2) + 1 = floor(111 / 2) + 1 = 56.
    assert_eq!(
        ok(
            max_pool(&[3, 3], &[2, 2], &[1, 1, 1, 1], false, NotSet),
            vec![T("f32[n,64,112,112]")]
        ),
        "f32[n,64,56,56]"
    );
    // ceil_mode: (6 − 3) / 2 = 1.5 → floor 1 + 1 = 2, ceil 2 + 1 = 3 (last window starts at 4 < 6).
    assert_eq!(
        ok(
            max_pool(&[3], &[2], &[], false, NotSet),
            vec![T("f32[1,1,6]")]
        ),
        "f32[1,1,2]"
    );
    assert_eq!(
        ok(
            max_pool(&[3], &[2], &[], true, NotSet),
            vec![T("f32[1,1,6]")]
        ),
        "f32[1,1,3]"
    );
    // ceil_mode with end padding: in 4, k 2, s 2, pads (0,1): ceil((5 − 2) / 2) + 1 = 3, but the
    // third window would start at 4, past the input and the left padding (4 ≥ 4 + 0): 2.
    assert_eq!(
        ok(
            max_pool(&[2], &[2], &[0, 1], true, NotSet),
            vec![T("f32[1,1,4]")]
        ),
        "f32[1,1,2]"
    );
    // ...with begin padding instead the third window starts at 4 < 4 + 1: kept, 3.
    assert_eq!(
        ok(
            max_pool(&[2], &[2], &[1, 0], true, NotSet),
            vec![T("f32[1,1,4]")]
        ),
        "f32[1,1,3]"
    );
    // same_upper: ceil(7 / 2) = 4; valid: floor((7 − 3) / 2) + 1 = 3.
    assert_eq!(
        ok(
            max_pool(&[3], &[2], &[], false, SameUpper),
            vec![T("f32[1,1,7]")]
        ),
        "f32[1,1,4]"
    );
    assert_eq!(
        ok(
            max_pool(&[3], &[2], &[], false, Valid),
            vec![T("f32[1,1,7]")]
        ),
        "f32[1,1,3]"
    );
    assert_eq!(
        ok(
            max_pool(&[2, 2], &[2, 2], &[], false, NotSet),
            vec![T("i8[1,1,4,4]")]
        ),
        "i8[1,1,2,2]"
    );
    let avg = Op::AveragePool {
        kernel_shape: vec![2, 2],
        strides: vec![2, 2],
        pads: vec![],
        dilations: vec![2, 2],
        ceil_mode: false,
        count_include_pad: false,
        auto_pad: NotSet,
    };
    // Dilation 2: window 3 wide; floor((9 − 3) / 2) + 1 = 4.
    assert_eq!(ok(avg, vec![T("f16[1,2,9,9]")]), "f16[1,2,4,4]");
    assert_eq!(
        ok(Op::GlobalAveragePool, vec![T("f32[n,512,7,7]")]),
        "f32[n,512,1,1]"
    );
    assert_eq!(
        ok(Op::GlobalMaxPool, vec![T("f32[n,512,h]")]),
        "f32[n,512,1]"
    );
}

#[test]
fn pool_errors() {
    use AutoPad::*;
    assert!(
        err(
            max_pool(&[], &[], &[], false, NotSet),
            vec![T("f32[1,1,4,4]")]
        )
        .contains("kernel_shape=[] has 0 values, expected 2")
    );
    assert!(
        err(
            max_pool(&[2, 0], &[], &[], false, NotSet),
            vec![T("f32[1,1,4,4]")]
        )
        .contains("values must be ≥ 1")
    );
    assert!(
        err(max_pool(&[2], &[], &[], false, NotSet), vec![T("f32[4,4]")])
            .contains("input 0 (X) has shape f32[4,4], expected rank ≥ 3")
    );
    assert!(err(Op::GlobalAveragePool, vec![T("f32[4,4]")]).contains("expected rank ≥ 3"));
}
