//! Elementwise ops: unary dtype rules, broadcasting (known and symbolic dims), comparisons,
//! logic, mod, pow, `where`, `clip`, `cast`.

use super::*;

#[test]
fn unary_ops_keep_the_type_or_give_bool() {
    assert_eq!(ok(Op::Relu, vec![T("f32[batch,3]")]), "f32[batch,3]");
    assert_eq!(ok(Op::Relu, vec![T("i32[2]")]), "i32[2]");
    assert_eq!(
        ok(
            Op::Gelu {
                approximate: GeluApprox::Tanh
            },
            vec![T("bf16[2,?]")]
        ),
        "bf16[2,?]"
    );
    assert_eq!(ok(Op::Identity, vec![T("f8e4m3[4]")]), "f8e4m3[4]");
    assert_eq!(ok(Op::Not, vec![T("bool[4]")]), "bool[4]");
    assert_eq!(ok(Op::IsNaN, vec![T("f16[4]")]), "bool[4]");
    assert_eq!(
        ok(
            Op::IsInf {
                detect_negative: true,
                detect_positive: false
            },
            vec![T("f32[]")]
        ),
        "bool[]"
    );
    assert_eq!(ok(Op::Abs, vec![T("u8[3]")]), "u8[3]");
}

#[test]
fn unary_ops_check_dtypes() {
    let e = err(Op::Not, vec![T("f32[2]")]);
    assert!(
        e.contains("node \"n\" (not): input 0 (X) has type f32[2], expected bool"),
        "{e}"
    );
    assert!(err(Op::Exp, vec![T("i64[2]")]).contains("expected a float type other than FP8"));
    assert!(err(Op::Exp, vec![T("f8e4m3[2]")]).contains("has type f8e4m3[2]"));
    assert!(err(Op::Neg, vec![T("u8[2]")]).contains("signed"));
    assert!(err(Op::Relu, vec![]).contains("expects 1 input (X), got 0"));
}

#[test]
fn binary_ops_broadcast() {
    assert_eq!(ok(Op::Add, vec![T("f32[2,3]"), T("f32[3]")]), "f32[2,3]");
    assert_eq!(ok(Op::Mul, vec![T("f32[]"), T("f32[4,1,5]")]), "f32[4,1,5]");
    assert_eq!(ok(Op::Sub, vec![T("f32[4,1]"), T("f32[1,5]")]), "f32[4,5]");
    assert_eq!(ok(Op::Div, vec![T("i64[0]"), T("i64[1]")]), "i64[0]");
}

#[test]
fn broadcasting_symbolic_dims() {
    // Sym vs 1 → Sym; Sym vs same Sym → Sym; Sym vs n≠1 → n; different Syms → ?; ? stays ?.
    assert_eq!(
        ok(Op::Add, vec![T("f32[batch,1]"), T("f32[1,seq]")]),
        "f32[batch,seq]"
    );
    assert_eq!(
        ok(Op::Add, vec![T("f32[batch,4]"), T("f32[batch,4]")]),
        "f32[batch,4]"
    );
    assert_eq!(
        ok(Op::Add, vec![T("f32[batch,4]"), T("f32[8,4]")]),
        "f32[8,4]"
    );
    assert_eq!(ok(Op::Add, vec![T("f32[a]"), T("f32[b]")]), "f32[?]");
    assert_eq!(ok(Op::Add, vec![T("f32[?]"), T("f32[1]")]), "f32[?]");
    assert_eq!(ok(Op::Add, vec![T("f32[?]"), T("f32[a]")]), "f32[?]");
    assert_eq!(ok(Op::Add, vec![T("f32[?,3]"), T("f32[7,1]")]), "f32[7,3]");
}

#[test]
fn binary_op_errors_name_the_input() {
    let e = err(Op::Add, vec![T("f32[2,3]"), T("f32[4]")]);
    assert!(e.contains("input 1 (B) has shape f32[4], which does not broadcast with input 0 (A) f32[2,3] (4 vs 3)"), "{e}");
    let e = err(Op::Add, vec![T("f32[3]"), T("f16[3]")]);
    assert!(
        e.contains("input 1 (B) has type f16[3], expected f32 like input 0 (A)"),
        "{e}"
    );
    assert!(err(Op::Add, vec![T("bool[3]"), T("bool[3]")]).contains("expected a numeric type"));
    assert!(err(Op::Add, vec![T("f32[3]")]).contains("expects 2 inputs (A, B), got 1"));
}

#[test]
fn comparisons_logic_mod_and_pow() {
    assert_eq!(ok(Op::Less, vec![T("f32[2,3]"), T("f32[]")]), "bool[2,3]");
    assert_eq!(ok(Op::Equal, vec![T("bool[2]"), T("bool[2]")]), "bool[2]");
    assert_eq!(ok(Op::And, vec![T("bool[2,1]"), T("bool[3]")]), "bool[2,3]");
    assert!(err(Op::Or, vec![T("i32[2]"), T("i32[2]")]).contains("expected bool"));
    assert_eq!(
        ok(Op::Mod { fmod: false }, vec![T("i32[4]"), T("i32[]")]),
        "i32[4]"
    );
    assert_eq!(
        ok(Op::Mod { fmod: true }, vec![T("f32[4]"), T("f32[]")]),
        "f32[4]"
    );
    assert!(err(Op::Mod { fmod: false }, vec![T("f32[4]"), T("f32[]")]).contains("fmod=true"));
    // The exponent may have another dtype; the result has the base's.
    assert_eq!(ok(Op::Pow, vec![T("f16[2,3]"), T("i64[]")]), "f16[2,3]");
}

#[test]
fn where_clip_cast() {
    assert_eq!(
        ok(
            Op::Where,
            vec![T("bool[batch,1]"), T("f32[1,4]"), T("f32[]")]
        ),
        "f32[batch,4]"
    );
    let e = err(Op::Where, vec![T("f32[2]"), T("f32[2]"), T("f32[2]")]);
    assert!(
        e.contains("input 0 (condition) has type f32[2], expected bool"),
        "{e}"
    );
    let e = err(Op::Where, vec![T("bool[2]"), T("f32[2]"), T("f32[3]")]);
    assert!(
        e.contains(
            "input 2 (Y) has shape f32[3], which does not broadcast with the broadcast shape [2]"
        ),
        "{e}"
    );
    assert_eq!(
        ok(Op::Clip, vec![T("f32[2,3]"), T("f32[]"), T("f32[1]")]),
        "f32[2,3]"
    );
    assert!(
        err(Op::Clip, vec![T("f32[2,3]"), T("f16[]"), T("f32[]")])
            .contains("input 1 (min) has type f16[]")
    );
    assert!(
        err(Op::Clip, vec![T("f32[2,3]"), T("f32[]"), T("f32[2]")])
            .contains("input 2 (max) has shape f32[2], expected a scalar")
    );
    assert_eq!(
        ok(
            Op::Cast {
                to: DType::F16,
                saturate: true
            },
            vec![T("i64[batch,3]")]
        ),
        "f16[batch,3]"
    );
}
