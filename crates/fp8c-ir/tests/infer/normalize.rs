//! Normalisation: batch and layer norm, and the softmax axis.

use super::*;

#[test]
fn batch_norm_and_layer_norm() {
    let bn = || Op::BatchNormalization { epsilon: 1e-5 };
    let p = "f32[64]";
    assert_eq!(
        ok(bn(), vec![T("f32[n,64,h,w]"), T(p), T(p), T(p), T(p)]),
        "f32[n,64,h,w]"
    );
    let e = err(
        bn(),
        vec![T("f32[n,64,h,w]"), T(p), T(p), T("f32[32]"), T(p)],
    );
    assert!(
        e.contains("input 3 (input_mean) has shape f32[32], expected [64] (input 0's channel dim)"),
        "{e}"
    );
    let ln = |axis| Op::LayerNormalization {
        axis,
        epsilon: 1e-5,
    };
    assert_eq!(
        ok(
            ln(-1),
            vec![T("f32[batch,seq,768]"), T("f32[768]"), T("f32[768]")]
        ),
        "f32[batch,seq,768]"
    );
    assert_eq!(
        ok(ln(-2), vec![T("f32[batch,seq,768]"), T("f32[seq,768]")]),
        "f32[batch,seq,768]"
    );
    let e = err(ln(-1), vec![T("f32[batch,seq,768]"), T("f32[512]")]);
    assert!(e.contains("input 1 (Scale) has shape f32[512], expected the normalised dims [768] of input 0 (axis=-1)"), "{e}");
    let e = err(ln(1), vec![T("f32[batch,seq,768]"), T("f32[768]")]);
    assert!(e.contains("expected the normalised dims [seq,768]"), "{e}");
    assert!(
        err(ln(3), vec![T("f32[2,3,4]"), T("f32[4]")]).contains("axis=3 is out of range [-3, 2]")
    );
    assert!(
        err(ln(-1), vec![T("f32[2,4]"), T("f32[4]"), T("f16[4]")])
            .contains("input 2 (B) has type f16[4]")
    );
}

#[test]
fn softmax_axis_is_checked() {
    assert_eq!(
        ok(Op::Softmax { axis: -1 }, vec![T("f32[batch,10]")]),
        "f32[batch,10]"
    );
    assert_eq!(
        ok(Op::LogSoftmax { axis: 0 }, vec![T("f32[batch,10]")]),
        "f32[batch,10]"
    );
    let e = err(Op::Softmax { axis: 2 }, vec![T("f32[2,10]")]);
    assert!(
        e.contains("input 0 (input) has shape f32[2,10], axis=2 is out of range [-2, 1]"),
        "{e}"
    );
    assert!(err(Op::Softmax { axis: 0 }, vec![T("f32[]")]).contains("a scalar has no axes"));
}
