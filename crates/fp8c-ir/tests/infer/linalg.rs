//! Linear algebra: `matmul` (numpy shapes and their errors) and `gemm`.

use super::*;

#[test]
fn matmul_shapes() {
    assert_eq!(
        ok(Op::MatMul, vec![T("f32[8,128]"), T("f32[128,10]")]),
        "f32[8,10]"
    );
    // numpy 1-D promotion: the added axis is removed again.
    assert_eq!(ok(Op::MatMul, vec![T("f32[3]"), T("f32[3,4]")]), "f32[4]");
    assert_eq!(ok(Op::MatMul, vec![T("f32[2,3]"), T("f32[3]")]), "f32[2]");
    assert_eq!(ok(Op::MatMul, vec![T("f32[3]"), T("f32[3]")]), "f32[]");
    assert_eq!(
        ok(Op::MatMul, vec![T("f32[batch,1,2,3]"), T("f32[5,3,4]")]),
        "f32[batch,5,2,4]"
    );
    assert_eq!(
        ok(
            Op::MatMul,
            vec![T("bf16[batch,seq,768]"), T("bf16[768,3072]")]
        ),
        "bf16[batch,seq,3072]"
    );
    assert_eq!(
        ok(Op::MatMul, vec![T("f32[2,k]"), T("f32[5,4]")]),
        "f32[2,4]"
    );
}

#[test]
fn matmul_errors() {
    let e = err(Op::MatMul, vec![T("f32[8,128]"), T("f32[256,10]")]);
    assert!(e.contains("input 1 (B) has shape f32[256,10], its first dim (256) must equal input 0's last dim (128)"), "{e}");
    let e = err(Op::MatMul, vec![T("f32[2,8,3]"), T("f32[4,5,4]")]);
    assert!(
        e.contains("its dim 1 (5) must equal input 0's last dim (3)"),
        "{e}"
    );
    let e = err(Op::MatMul, vec![T("f32[2,3,4]"), T("f32[5,4,2]")]);
    assert!(e.contains("batch dims do not broadcast"), "{e}");
    assert!(
        err(Op::MatMul, vec![T("f32[2,3]"), T("f16[3,2]")])
            .contains("expected f32 like input 0 (A)")
    );
    assert!(err(Op::MatMul, vec![T("f8e4m3[2,3]"), T("f8e4m3[3,2]")]).contains("scaled_matmul"));
    assert!(
        err(Op::MatMul, vec![T("f32[]"), T("f32[3]")]).contains("matmul does not take scalars")
    );
}

#[test]
fn gemm_shapes() {
    let g = |ta, tb| Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: ta,
        trans_b: tb,
    };
    assert_eq!(
        ok(g(false, false), vec![T("f32[4,3]"), T("f32[3,5]")]),
        "f32[4,5]"
    );
    assert_eq!(
        ok(
            g(true, true),
            vec![T("f32[3,4]"), T("f32[5,3]"), T("f32[5]")]
        ),
        "f32[4,5]"
    );
    assert_eq!(
        ok(
            g(false, true),
            vec![T("f32[batch,3]"), T("f32[5,3]"), T("f32[batch,1]")]
        ),
        "f32[batch,5]"
    );
    let e = err(
        g(false, false),
        vec![T("f32[4,3]"), T("f32[3,5]"), T("f32[4]")],
    );
    assert!(
        e.contains(
            "input 2 (C) has shape f32[4], expected it to broadcast to the result shape [4,5]"
        ),
        "{e}"
    );
    let e = err(g(false, true), vec![T("f32[4,3]"), T("f32[3,5]")]);
    assert!(e.contains("input 1 (B) has shape f32[3,5], its dim 1 (5, trans_b=true) must equal input 0's dim 1 (3, trans_a=false)"), "{e}");
    assert!(
        err(g(false, false), vec![T("f32[4,3,1]"), T("f32[3,5]")])
            .contains("input 0 (A) has shape f32[4,3,1], expected rank 2")
    );
    assert!(
        err(g(false, false), vec![T("f32[4]")]).contains("expects 2 or 3 inputs (A, B, C), got 1")
    );
}
