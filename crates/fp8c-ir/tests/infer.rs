//! Type inference per op family, and the verifier.
//!
//! Types are written in the text form (`f32[batch,3,?]`): a number is a known size, `?` is
//! unknown and any other word a symbol. Each case builds a small graph with the builder and
//! reads the types `add_node` inferred.

use fp8c_ir::infer::{InferInput, infer};
use fp8c_ir::{
    AmaxSource, AutoPad, DType, Dim, GeluApprox, Graph, IrError, NodeId, Op, PadMode, Tensor,
    TensorType, Value, verify,
};
use proptest::prelude::*;

/// Parses `f32[2,batch,?]`.
fn ty(s: &str) -> TensorType {
    let (dtype, dims) = s
        .trim_end_matches(']')
        .split_once('[')
        .expect("dtype[dims]");
    let shape = dims
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| match d {
            "?" => Dim::Unknown,
            _ => d
                .parse()
                .map(Dim::Known)
                .unwrap_or_else(|_| Dim::Sym(d.to_string())),
        })
        .collect();
    TensorType::new(dtype.parse().expect("dtype"), shape)
}

/// One input of a test node: a graph input of some type, or a constant.
enum In {
    T(&'static str),
    C(Tensor),
}
use In::{C, T};

fn i64s(v: &[i64]) -> In {
    C(Tensor::from_i64(vec![v.len() as u64], v))
}

/// Builds a graph feeding `ins` to one `op` node; its output types, or the error text.
fn node(op: Op, ins: Vec<In>) -> Result<String, String> {
    let mut g = Graph::new("t");
    let mut vals = Vec::new();
    for (i, x) in ins.into_iter().enumerate() {
        vals.push(match x {
            T(s) => g.add_input(&format!("x{i}"), ty(s)).unwrap(),
            C(value) => g
                .add_node(&format!("c{i}"), Op::Constant { value }, &[])
                .unwrap()[0],
        });
    }
    let outs = g.add_node("n", op, &vals).map_err(|e| e.to_string())?;
    Ok(outs
        .iter()
        .map(|&v| g.value_type(v).to_string())
        .collect::<Vec<_>>()
        .join(", "))
}

#[track_caller]
fn ok(op: Op, ins: Vec<In>) -> String {
    node(op, ins).unwrap_or_else(|e| panic!("unexpected error: {e}"))
}

#[track_caller]
fn err(op: Op, ins: Vec<In>) -> String {
    match node(op, ins) {
        Ok(t) => panic!("expected an error, inferred {t}"),
        Err(e) => e,
    }
}

// ------------------------------------------------------------------ elementwise

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

// ------------------------------------------------------------------ linear algebra

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

// ------------------------------------------------------------------ conv and pooling

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

// ------------------------------------------------------------------ normalisation, reductions

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

#[test]
fn reductions() {
    let mean = |axes: Option<Vec<i64>>, keepdims| Op::ReduceMean { axes, keepdims };
    assert_eq!(ok(mean(None, false), vec![T("f32[2,3,4]")]), "f32[]");
    assert_eq!(ok(mean(None, true), vec![T("f32[2,3,4]")]), "f32[1,1,1]");
    assert_eq!(
        ok(mean(Some(vec![]), false), vec![T("f32[2,3,4]")]),
        "f32[]"
    );
    assert_eq!(
        ok(mean(Some(vec![1]), true), vec![T("f32[2,3,4]")]),
        "f32[2,1,4]"
    );
    assert_eq!(
        ok(
            Op::ReduceSum {
                axes: Some(vec![-1, 0]),
                keepdims: false
            },
            vec![T("f32[b,3,4]")]
        ),
        "f32[3]"
    );
    assert_eq!(
        ok(
            Op::ReduceMax {
                axes: Some(vec![1]),
                keepdims: false
            },
            vec![T("i64[b,3]")]
        ),
        "i64[b]"
    );
    assert!(
        err(mean(Some(vec![1, -2]), false), vec![T("f32[2,3,4]")])
            .contains("axes [1,-2] names axis 1 twice")
    );
    assert!(
        err(mean(Some(vec![3]), false), vec![T("f32[2,3,4]")]).contains("axes=3 is out of range")
    );
}

// ------------------------------------------------------------------ shape and data movement

#[test]
fn shape_op_slices_the_rank() {
    let shape = |start, end| Op::Shape { start, end };
    assert_eq!(ok(shape(0, None), vec![T("f32[batch,3,4]")]), "i64[3]");
    assert_eq!(ok(shape(-2, None), vec![T("f32[batch,3,4]")]), "i64[2]");
    assert_eq!(ok(shape(1, Some(-1)), vec![T("f32[batch,3,4]")]), "i64[1]");
    assert_eq!(ok(shape(5, None), vec![T("f32[batch,3,4]")]), "i64[0]");
    assert_eq!(ok(shape(-10, Some(10)), vec![T("f32[2,3]")]), "i64[2]");
    assert_eq!(ok(shape(2, Some(1)), vec![T("f32[2,3,4]")]), "i64[0]");
}

#[test]
fn reshape_with_constant_shapes() {
    let r = || Op::Reshape { allowzero: false };
    assert_eq!(ok(r(), vec![T("f32[2,3,4]"), i64s(&[0, -1])]), "f32[2,12]");
    assert_eq!(ok(r(), vec![T("f32[2,3,4]"), i64s(&[-1])]), "f32[24]");
    assert_eq!(
        ok(r(), vec![T("f32[2,3,4]"), i64s(&[4, -1, 2])]),
        "f32[4,3,2]"
    );
    assert_eq!(ok(r(), vec![T("f32[2,3,4]"), i64s(&[6, 4])]), "f32[6,4]");
    assert_eq!(ok(r(), vec![T("f32[0,3]"), i64s(&[-1, 3])]), "f32[0,3]");
    assert_eq!(
        ok(
            r(),
            vec![T("f32[2,3]"), C(Tensor::from_i32(vec![2], &[3, 2]))]
        ),
        "f32[3,2]"
    );
    // allowzero: 0 is a real zero size.
    assert_eq!(
        ok(
            Op::Reshape { allowzero: true },
            vec![T("f32[0,3]"), i64s(&[0, 5])]
        ),
        "f32[0,5]"
    );
}

#[test]
fn reshape_with_symbolic_dims() {
    let r = || Op::Reshape { allowzero: false };
    // 0 copies the symbol; heads split: [batch, seq, 768] → [batch, seq, 12, 64].
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[0, 0, 12, 64])]),
        "f32[batch,seq,12,64]"
    );
    // -1 recovers a symbol when the other dims cancel it exactly.
    assert_eq!(
        ok(r(), vec![T("f32[batch,768]"), i64s(&[-1, 12, 64])]),
        "f32[batch,12,64]"
    );
    assert_eq!(
        ok(r(), vec![T("f32[batch,12,64]"), i64s(&[0, -1])]),
        "f32[batch,768]"
    );
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[0, -1, 768])]),
        "f32[batch,seq,768]"
    );
    // batch·seq is not one dim; seq·768 neither.
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[-1, 768])]),
        "f32[?,768]"
    );
    assert_eq!(
        ok(r(), vec![T("f32[batch,seq,768]"), i64s(&[0, -1])]),
        "f32[batch,?]"
    );
    assert_eq!(ok(r(), vec![T("f32[?,768]"), i64s(&[-1, 64])]), "f32[?,64]");
    // A shape that is not a constant: rank from its static length, sizes unknown.
    assert_eq!(
        ok(r(), vec![T("f32[batch,768]"), T("i64[3]")]),
        "f32[?,?,?]"
    );
}

#[test]
fn reshape_errors() {
    let r = || Op::Reshape { allowzero: false };
    let e = err(r(), vec![T("f32[2,3,4]"), i64s(&[5, -1])]);
    assert!(e.contains("input 0 (data) f32[2,3,4] cannot be reshaped to [5,-1]: 24 elements cannot be split into a multiple of 5"), "{e}");
    let e = err(r(), vec![T("f32[2,3,4]"), i64s(&[5, 5])]);
    assert!(
        e.contains("cannot be reshaped to [5,5]: 24 elements vs 25"),
        "{e}"
    );
    assert!(err(r(), vec![T("f32[2,3,4]"), i64s(&[-1, -1])]).contains("at most one -1"));
    assert!(err(r(), vec![T("f32[2,3,4]"), i64s(&[-2, 12])]).contains("sizes must be ≥ -1"));
    assert!(
        err(r(), vec![T("f32[6]"), i64s(&[6, 0])])
            .contains("its 0 at position 1 copies a dim that input 0 (data) f32[6] does not have")
    );
    assert!(
        err(
            Op::Reshape { allowzero: true },
            vec![T("f32[6]"), i64s(&[0, -1])]
        )
        .contains("cannot hold both 0 and -1")
    );
    let e = err(r(), vec![T("f32[6]"), T("f32[2]")]);
    assert!(
        e.contains("input 1 (shape) has type f32[2], expected i64 or i32 (a 1-D list)"),
        "{e}"
    );
    assert!(
        err(r(), vec![T("f32[6]"), T("i64[2,2]")])
            .contains("input 1 (shape) has shape i64[2,2], expected a 1-D list")
    );
    assert!(err(r(), vec![T("f32[6]"), T("i64[n]")]).contains("its length is not known"));
    assert!(err(r(), vec![T("f32[6]"), T("i64[100]")]).contains("exceeds the maximum"));
}

#[test]
fn transpose_unsqueeze_squeeze_flatten() {
    assert_eq!(
        ok(
            Op::Transpose {
                perm: vec![0, 2, 1]
            },
            vec![T("f32[b,3,4]")]
        ),
        "f32[b,4,3]"
    );
    assert_eq!(
        ok(Op::Transpose { perm: vec![] }, vec![T("f32[b,3,4]")]),
        "f32[4,3,b]"
    );
    let e = err(
        Op::Transpose {
            perm: vec![0, 0, 1],
        },
        vec![T("f32[b,3,4]")],
    );
    assert!(
        e.contains("attribute perm=[0,0,1] is not a permutation of 0..3"),
        "{e}"
    );
    assert!(
        err(Op::Transpose { perm: vec![1, 0] }, vec![T("f32[b,3,4]")])
            .contains("not a permutation")
    );
    assert!(
        err(
            Op::Transpose {
                perm: vec![0, -1, 1]
            },
            vec![T("f32[b,3,4]")]
        )
        .contains("not a permutation")
    );

    // Unsqueeze axes count in the output (rank 4 here): 0 and -1 = 3.
    assert_eq!(
        ok(Op::Unsqueeze { axes: vec![0, -1] }, vec![T("f32[3,4]")]),
        "f32[1,3,4,1]"
    );
    assert_eq!(
        ok(Op::Unsqueeze { axes: vec![2, 0] }, vec![T("f32[3,4]")]),
        "f32[1,3,1,4]"
    );
    assert_eq!(
        ok(Op::Unsqueeze { axes: vec![0] }, vec![T("i64[]")]),
        "i64[1]"
    );
    assert!(
        err(Op::Unsqueeze { axes: vec![4] }, vec![T("f32[3,4]")])
            .contains("out of range for the output rank 3")
    );
    assert!(
        err(Op::Unsqueeze { axes: vec![1, 1] }, vec![T("f32[3,4]")])
            .contains("names output axis 1 twice")
    );

    assert_eq!(
        ok(Op::Squeeze { axes: None }, vec![T("f32[1,batch,1,4]")]),
        "f32[batch,4]"
    );
    assert_eq!(
        ok(
            Op::Squeeze {
                axes: Some(vec![1])
            },
            vec![T("f32[1,batch]")]
        ),
        "f32[1]"
    );
    assert_eq!(
        ok(
            Op::Squeeze {
                axes: Some(vec![-1, 0])
            },
            vec![T("f32[1,3,?]")]
        ),
        "f32[3]"
    );
    let e = err(
        Op::Squeeze {
            axes: Some(vec![1]),
        },
        vec![T("f32[1,4]")],
    );
    assert!(
        e.contains("axis 1 has size 4, only size-1 axes can be squeezed"),
        "{e}"
    );

    assert_eq!(
        ok(Op::Flatten { axis: 1 }, vec![T("f32[2,3,4]")]),
        "f32[2,12]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 0 }, vec![T("f32[2,3,4]")]),
        "f32[1,24]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 3 }, vec![T("f32[2,3,4]")]),
        "f32[24,1]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: -1 }, vec![T("f32[2,3,4]")]),
        "f32[6,4]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 1 }, vec![T("f32[batch,3,4]")]),
        "f32[batch,12]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 2 }, vec![T("f32[batch,3,4]")]),
        "f32[?,4]"
    );
    assert_eq!(
        ok(Op::Flatten { axis: 1 }, vec![T("f32[batch,0,4]")]),
        "f32[batch,0]"
    );
    assert!(
        err(Op::Flatten { axis: 4 }, vec![T("f32[2,3,4]")])
            .contains("axis=4 is out of range [-3, 3]")
    );
}

#[test]
fn concat_and_split() {
    assert_eq!(
        ok(
            Op::Concat { axis: 0 },
            vec![T("f32[2,3]"), T("f32[4,3]"), T("f32[1,3]")]
        ),
        "f32[7,3]"
    );
    assert_eq!(
        ok(
            Op::Concat { axis: -1 },
            vec![T("f32[batch,3]"), T("f32[batch,5]")]
        ),
        "f32[batch,8]"
    );
    assert_eq!(
        ok(Op::Concat { axis: 0 }, vec![T("f32[n,3]"), T("f32[2,3]")]),
        "f32[?,3]"
    );
    assert_eq!(
        ok(Op::Concat { axis: 1 }, vec![T("f32[?,3]"), T("f32[4,2]")]),
        "f32[4,5]"
    );
    assert_eq!(ok(Op::Concat { axis: 0 }, vec![T("i64[2]")]), "i64[2]");
    let e = err(Op::Concat { axis: 0 }, vec![T("f32[2,3]"), T("f32[2,4]")]);
    assert!(e.contains("input 1 has shape f32[2,4], its dim 1 (4) must equal the other inputs' (3); only axis 0 may differ"), "{e}");
    assert!(
        err(Op::Concat { axis: 0 }, vec![T("f32[2,3]"), T("f32[2]")])
            .contains("input 1 has shape f32[2], expected rank 2")
    );
    assert!(err(Op::Concat { axis: 0 }, vec![]).contains("at least 1 input"));

    let split = |axis, split: &[i64]| Op::Split {
        axis,
        split: split.to_vec(),
    };
    assert_eq!(
        ok(split(0, &[3, 7]), vec![T("f32[10,4]")]),
        "f32[3,4], f32[7,4]"
    );
    assert_eq!(
        ok(split(-1, &[2, 2, 0]), vec![T("f32[b,4]")]),
        "f32[b,2], f32[b,2], f32[b,0]"
    );
    assert_eq!(
        ok(split(0, &[3, 7]), vec![T("f32[n,4]")]),
        "f32[3,4], f32[7,4]"
    );
    let e = err(split(0, &[3, 6]), vec![T("f32[10,4]")]);
    assert!(
        e.contains("attribute split=[3,6] sums to 9, but axis 0 has size 10"),
        "{e}"
    );
    assert!(err(split(0, &[]), vec![T("f32[10,4]")]).contains("split is empty"));
}

fn slice_of(
    data: &'static str,
    starts: &[i64],
    ends: &[i64],
    axes: &[i64],
    steps: &[i64],
) -> Result<String, String> {
    node(
        Op::Slice,
        vec![T(data), i64s(starts), i64s(ends), i64s(axes), i64s(steps)],
    )
}

#[test]
fn slice_with_constants() {
    let big = i64::MAX;
    // Axis 0: 1..8 by 2 → 1,3,5,7 (4); axis 2: −5 → 25..30 (5).
    assert_eq!(
        slice_of("f32[10,20,30]", &[1, -5], &[8, big], &[0, 2], &[2, 1]).unwrap(),
        "f32[4,20,5]"
    );
    // Reversal: start −1, end −∞, step −1 → 20; step −2 from the end → 10.
    assert_eq!(
        slice_of("f32[10,20]", &[-1], &[i64::MIN], &[1], &[-1]).unwrap(),
        "f32[10,20]"
    );
    assert_eq!(
        slice_of("f32[10,20]", &[big], &[i64::MIN], &[-1], &[-2]).unwrap(),
        "f32[10,10]"
    );
    // Clamping: start past the end gives 0; end before start gives 0.
    assert_eq!(
        slice_of("f32[10]", &[12], &[20], &[0], &[1]).unwrap(),
        "f32[0]"
    );
    assert_eq!(
        slice_of("f32[10]", &[5], &[2], &[0], &[1]).unwrap(),
        "f32[0]"
    );
    // A symbolic dim survives a whole-range slice only.
    assert_eq!(
        slice_of("f32[batch,seq]", &[0, 1], &[big, 5], &[0, 1], &[1, 1]).unwrap(),
        "f32[batch,?]"
    );
    assert_eq!(
        slice_of("f32[batch]", &[-1], &[i64::MIN], &[0], &[-1]).unwrap(),
        "f32[batch]"
    );
}

#[test]
fn slice_without_constants_and_errors() {
    let (s, e, a, st) = (i64s(&[0]), i64s(&[2]), i64s(&[1]), i64s(&[1]));
    assert_eq!(
        ok(Op::Slice, vec![T("f32[4,5,6]"), T("i64[1]"), e, a, st]),
        "f32[4,?,6]"
    );
    assert_eq!(
        ok(
            Op::Slice,
            vec![T("f32[4,5,6]"), s, i64s(&[2]), T("i64[1]"), i64s(&[1])]
        ),
        "f32[?,?,?]"
    );
    let e = slice_of("f32[10]", &[0], &[5], &[0], &[0]).unwrap_err();
    assert!(e.contains("input 4 (steps) holds a 0 step"), "{e}");
    let e = slice_of("f32[10]", &[0, 1], &[5], &[0], &[1]).unwrap_err();
    assert!(
        e.contains("input 2 (ends) has shape i64[1], it has 1 entries but input 1 (starts) has 2"),
        "{e}"
    );
    assert!(
        slice_of("f32[10]", &[0], &[5], &[1], &[1])
            .unwrap_err()
            .contains("axes=1 is out of range")
    );
    assert!(
        slice_of("f32[10,3]", &[0, 0], &[5, 5], &[0, -2], &[1, 1])
            .unwrap_err()
            .contains("names axis 0 twice")
    );
}

#[test]
fn gather_expand_constant_of_shape() {
    assert_eq!(
        ok(Op::Gather { axis: 0 }, vec![T("f32[5,6]"), T("i64[]")]),
        "f32[6]"
    );
    assert_eq!(
        ok(Op::Gather { axis: 1 }, vec![T("f32[5,6]"), T("i32[2,3]")]),
        "f32[5,2,3]"
    );
    assert_eq!(
        ok(
            Op::Gather { axis: 0 },
            vec![T("f32[vocab,768]"), T("i64[batch,seq]")]
        ),
        "f32[batch,seq,768]"
    );
    // Gather on a shape-like i64 vector keeps its dtype.
    assert_eq!(
        ok(
            Op::Gather { axis: 0 },
            vec![T("i64[4]"), C(Tensor::scalar_i64(-1))]
        ),
        "i64[]"
    );
    let e = err(
        Op::Gather { axis: 0 },
        vec![T("f32[5,6]"), C(Tensor::scalar_i64(5))],
    );
    assert!(
        e.contains("input 1 (indices) holds index 5, out of range for axis 0 of size 5"),
        "{e}"
    );
    assert!(
        err(Op::Gather { axis: 0 }, vec![T("f32[5,6]"), T("f32[2]")])
            .contains("input 1 (indices) has type f32[2], expected i64 or i32")
    );

    assert_eq!(
        ok(Op::Expand, vec![T("f32[3,1]"), i64s(&[2, 1, 4])]),
        "f32[2,3,4]"
    );
    assert_eq!(
        ok(Op::Expand, vec![T("f32[batch,1]"), i64s(&[1, 5])]),
        "f32[batch,5]"
    );
    assert_eq!(
        ok(Op::Expand, vec![T("f32[3,1]"), T("i64[3]")]),
        "f32[?,3,?]"
    );
    let e = err(Op::Expand, vec![T("f32[3,2]"), i64s(&[4, 4])]);
    assert!(e.contains("input 1 (shape) is [4,4], which does not broadcast with input 0 (input) f32[3,2] (4 vs 3)"), "{e}");
    assert!(err(Op::Expand, vec![T("f32[1]"), i64s(&[1 << 40])]).contains("too large"));

    let cos = |value| Op::ConstantOfShape { value };
    assert_eq!(
        ok(cos(Tensor::scalar_f32(0.0)), vec![i64s(&[2, 3])]),
        "f32[2,3]"
    );
    assert_eq!(
        ok(cos(Tensor::from_i64(vec![1], &[7])), vec![i64s(&[])]),
        "i64[]"
    );
    assert_eq!(
        ok(cos(Tensor::scalar_f32(0.0)), vec![T("i64[2]")]),
        "f32[?,?]"
    );
    assert!(err(cos(Tensor::scalar_f32(0.0)), vec![i64s(&[2, -3])]).contains("sizes must be ≥ 0"));
    assert!(
        err(
            cos(Tensor::from_f32(vec![2], &[0.0, 1.0])),
            vec![i64s(&[2])]
        )
        .contains("expected one element")
    );
}

#[test]
fn range_pad_tile() {
    let i = |v| C(Tensor::scalar_i64(v));
    let f = |v| C(Tensor::scalar_f32(v));
    // ceil((10 − 0) / 3) = 4; ceil((0 − 1) / −0.5) = 2; ceil((0 − 5) / 1) < 0 → 0.
    assert_eq!(ok(Op::Range, vec![i(0), i(10), i(3)]), "i64[4]");
    assert_eq!(ok(Op::Range, vec![f(1.0), f(0.0), f(-0.5)]), "f32[2]");
    assert_eq!(ok(Op::Range, vec![i(5), i(0), i(1)]), "i64[0]");
    assert_eq!(ok(Op::Range, vec![T("i64[]"), i(10), i(1)]), "i64[?]");
    assert!(err(Op::Range, vec![i(0), i(10), i(0)]).contains("input 2 (delta) is 0"));
    assert!(
        err(Op::Range, vec![i(0), f(10.0), i(1)])
            .contains("input 1 (limit) has type f32[], expected i64 like input 0 (start)")
    );
    assert!(err(Op::Range, vec![f(0.0), f(f32::INFINITY), f(1.0)]).contains("no finite length"));
    assert!(err(Op::Range, vec![i(0), i(i64::MAX), i(1)]).contains("more than the maximum"));

    let pad = || Op::Pad {
        mode: PadMode::Constant,
    };
    // [begin_0, begin_1, end_0, end_1] = [1, 0, 1, 2]: 2+1+1 = 4, 3+0+2 = 5.
    assert_eq!(
        ok(pad(), vec![T("f32[2,3]"), i64s(&[1, 0, 1, 2]), T("f32[]")]),
        "f32[4,5]"
    );
    assert_eq!(
        ok(pad(), vec![T("f32[b,3]"), i64s(&[0, -1, 0, 0]), T("f32[]")]),
        "f32[b,2]"
    );
    assert_eq!(
        ok(pad(), vec![T("f32[b,3]"), i64s(&[1, 0, 0, 0]), T("f32[]")]),
        "f32[?,3]"
    );
    assert_eq!(
        ok(pad(), vec![T("f32[b,3]"), T("i64[4]"), T("f32[]")]),
        "f32[?,?]"
    );
    assert!(
        err(pad(), vec![T("f32[2,3]"), i64s(&[1, 0]), T("f32[]")])
            .contains("input 1 (pads) has shape i64[2], expected 4 entries")
    );
    assert!(
        err(pad(), vec![T("f32[2,3]"), i64s(&[-3, 0, 0, 0]), T("f32[]")])
            .contains("would have size -1")
    );
    assert!(
        err(pad(), vec![T("f32[2,3]"), i64s(&[0, 0, 0, 0]), T("f16[]")])
            .contains("input 2 (constant_value) has type f16[]")
    );

    assert_eq!(
        ok(Op::Tile, vec![T("f32[2,batch]"), i64s(&[3, 1])]),
        "f32[6,batch]"
    );
    assert_eq!(
        ok(Op::Tile, vec![T("f32[2,batch]"), i64s(&[1, 2])]),
        "f32[2,?]"
    );
    assert_eq!(ok(Op::Tile, vec![T("f32[2,3]"), T("i64[2]")]), "f32[?,?]");
    assert!(err(Op::Tile, vec![T("f32[2,3]"), i64s(&[2])]).contains("expected 2 entries"));
    assert!(err(Op::Tile, vec![T("f32[2,3]"), i64s(&[2, -1])]).contains("repeats must be ≥ 0"));
}

// ------------------------------------------------------------------ quantization

#[test]
fn onnx_quantize_dequantize_linear() {
    let q = |to| Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to,
    };
    assert_eq!(
        ok(
            q(DType::F8E4M3),
            vec![T("f32[4,8]"), T("f32[]"), T("f8e4m3[]")]
        ),
        "f8e4m3[4,8]"
    );
    assert_eq!(
        ok(q(DType::I8), vec![T("f32[4,8]"), T("f32[8]"), T("i8[8]")]),
        "i8[4,8]"
    );
    assert_eq!(ok(q(DType::U8), vec![T("f16[4,8]"), T("f16[]")]), "u8[4,8]");
    let e = err(q(DType::I8), vec![T("f32[4,8]"), T("f32[4]"), T("i8[4]")]);
    assert!(e.contains("input 1 (y_scale) has shape f32[4], a per-axis scale needs 8 entries (axis 1 of input 0 (x))"), "{e}");
    let e = err(q(DType::F8E4M3), vec![T("f32[4,8]"), T("f32[]"), T("i8[]")]);
    assert!(
        e.contains("input 2 (y_zero_point) has type i8[], expected f8e4m3"),
        "{e}"
    );
    assert!(
        err(q(DType::F32), vec![T("f32[4,8]"), T("f32[]")])
            .contains("attribute to=f32, expected a quantized type")
    );

    let dq = Op::DequantizeLinear { axis: 0 };
    assert_eq!(
        ok(dq.clone(), vec![T("i8[4,8]"), T("f16[]"), T("i8[]")]),
        "f16[4,8]"
    );
    assert_eq!(
        ok(dq.clone(), vec![T("f8e5m2[4,8]"), T("f32[4]")]),
        "f32[4,8]"
    );
    assert!(
        err(dq, vec![T("f32[4,8]"), T("f32[]")])
            .contains("input 0 (x) has type f32[4,8], expected a quantized type")
    );
}

#[test]
fn fp8_ops() {
    assert_eq!(ok(Op::Amax, vec![T("bf16[batch,768]")]), "f32[]");
    assert_eq!(ok(Op::Amax, vec![T("f8e4m3[4]")]), "f32[]");
    assert!(err(Op::Amax, vec![T("i32[4]")]).contains("expected a float type"));

    let cs = |fmt, source| Op::ComputeScale {
        fmt,
        margin: 0.0,
        source,
        epsilon: 0.0,
        power_2: false,
    };
    assert_eq!(
        ok(
            cs(DType::F8E4M3, AmaxSource::HistoryMax),
            vec![T("f32[16]"), T("f32[]")]
        ),
        "f32[], f32[]"
    );
    assert_eq!(
        ok(
            cs(DType::F8E5M2, AmaxSource::Current),
            vec![T("f32[]"), T("f32[]")]
        ),
        "f32[], f32[]"
    );
    let e = err(
        cs(DType::F8E4M3, AmaxSource::Current),
        vec![T("f32[16]"), T("f32[]")],
    );
    assert!(
        e.contains("input 0 (amax) has shape f32[16], expected a scalar (rank 0)"),
        "{e}"
    );
    let e = err(
        cs(DType::F8E4M3, AmaxSource::HistoryMostRecent),
        vec![T("f32[]"), T("f32[]")],
    );
    assert!(
        e.contains("input 0 (amax_history) has shape f32[], expected rank 1"),
        "{e}"
    );
    assert!(
        err(
            cs(DType::F16, AmaxSource::HistoryMax),
            vec![T("f32[16]"), T("f32[]")]
        )
        .contains("attribute fmt=f16, expected an FP8 type")
    );
    assert!(
        err(
            cs(DType::F8E4M3, AmaxSource::HistoryMax),
            vec![T("f32[16]"), T("f16[]")]
        )
        .contains("input 1 (prev_scale) has type f16[], expected f32 of rank 0")
    );

    assert_eq!(
        ok(Op::AmaxHistoryUpdate, vec![T("f32[16]"), T("f32[]")]),
        "f32[16], f32[16]"
    );
    assert!(
        err(Op::AmaxHistoryUpdate, vec![T("f32[16]"), T("f32[1]")])
            .contains("input 1 (amax) has shape f32[1], expected a scalar")
    );

    let quant = |to| Op::Quantize { to, saturate: true };
    assert_eq!(
        ok(quant(DType::F8E4M3), vec![T("bf16[batch,256]"), T("f32[]")]),
        "f8e4m3[batch,256]"
    );
    assert!(
        err(quant(DType::I8), vec![T("f32[4]"), T("f32[]")])
            .contains("attribute to=i8, expected an FP8 type")
    );
    assert!(
        err(quant(DType::F8E5M2), vec![T("f8e4m3[4]"), T("f32[]")])
            .contains("input 0 (x) has type f8e4m3[4]")
    );
    assert_eq!(
        ok(
            Op::Dequantize { to: DType::BF16 },
            vec![T("f8e5m2[4,4]"), T("f32[]")]
        ),
        "bf16[4,4]"
    );
    assert!(
        err(
            Op::Dequantize { to: DType::F32 },
            vec![T("i8[4]"), T("f32[]")]
        )
        .contains("input 0 (q) has type i8[4], expected an FP8 type")
    );

    let smm = |out| Op::ScaledMatMul { out };
    let f = T("f32[]");
    assert_eq!(
        ok(
            smm(DType::F32),
            vec![T("f8e4m3[batch,256]"), T("f8e4m3[256,512]"), f, T("f32[]")]
        ),
        "f32[batch,512]"
    );
    assert_eq!(
        ok(
            smm(DType::BF16),
            vec![T("f8e5m2[256]"), T("f8e4m3[256,8]"), T("f32[]"), T("f32[]")]
        ),
        "bf16[8]"
    );
    let e = err(
        smm(DType::F32),
        vec![
            T("f8e4m3[8,128]"),
            T("f8e4m3[256,10]"),
            T("f32[]"),
            T("f32[]"),
        ],
    );
    assert!(e.contains("input 1 (qb) has shape f8e4m3[256,10], its first dim (256) must equal input 0's last dim (128)"), "{e}");
    assert!(
        err(
            smm(DType::F32),
            vec![T("f32[8,128]"), T("f8e4m3[128,10]"), T("f32[]"), T("f32[]")]
        )
        .contains("input 0 (qa) has type f32[8,128], expected an FP8 type")
    );
    assert!(
        err(
            smm(DType::F8E4M3),
            vec![
                T("f8e4m3[8,128]"),
                T("f8e4m3[128,10]"),
                T("f32[]"),
                T("f32[]")
            ]
        )
        .contains("attribute out=f8e4m3")
    );
}

#[test]
fn constants_and_interface_ops() {
    assert_eq!(
        ok(
            Op::Constant {
                value: Tensor::from_f32(vec![2], &[1.0, 2.0])
            },
            vec![]
        ),
        "f32[2]"
    );
    let t = TensorType::scalar(DType::F32);
    assert!(
        infer(&Op::Input { name: "x".into() }, &[])
            .unwrap_err()
            .contains("declared types")
    );
    assert!(
        infer(
            &Op::Constant {
                value: Tensor::scalar_f32(1.0)
            },
            &[InferInput::new(&t)]
        )
        .unwrap_err()
        .contains("expects no inputs, got 1")
    );
}

// ------------------------------------------------------------------ never panics

/// Every op, its attributes drawn from `ints`, `flag` and `dtype` (often garbage).
/// A small elementwise program for the fused ops: `gelu(a0 + a1)` or `relu(a0)`.
fn fused_expr(two_inputs: bool) -> fp8c_ir::EwExpr {
    let text = if two_inputs {
        "add[a0,a1];gelu{approximate=none}[t0]"
    } else {
        "relu[a0]"
    };
    fp8c_ir::EwExpr::parse(text).expect("a valid elementwise program")
}

fn make_op(kind: usize, ints: &[i64], flag: bool, dtype: DType) -> Op {
    let i = |k: usize| ints.get(k).copied().unwrap_or(0);
    let list = ints.to_vec();
    let axes = if flag { Some(list.clone()) } else { None };
    match kind {
        0 => Op::Identity,
        1 => Op::Neg,
        2 => Op::Abs,
        3 => Op::Sqrt,
        4 => Op::Reciprocal,
        5 => Op::Exp,
        6 => Op::Log,
        7 => Op::Erf,
        8 => Op::Tanh,
        9 => Op::Sigmoid,
        10 => Op::Relu,
        11 => Op::Floor,
        12 => Op::Ceil,
        13 => Op::Sin,
        14 => Op::Cos,
        15 => Op::Gelu {
            approximate: GeluApprox::None,
        },
        16 => Op::LeakyRelu { alpha: 0.1 },
        17 => Op::Not,
        18 => Op::IsNaN,
        19 => Op::IsInf {
            detect_negative: flag,
            detect_positive: true,
        },
        20 => Op::Add,
        21 => Op::Sub,
        22 => Op::Mul,
        23 => Op::Div,
        24 => Op::Pow,
        25 => Op::Max,
        26 => Op::Min,
        27 => Op::Mod { fmod: flag },
        28 => Op::Equal,
        29 => Op::Less,
        30 => Op::LessOrEqual,
        31 => Op::Greater,
        32 => Op::GreaterOrEqual,
        33 => Op::And,
        34 => Op::Or,
        35 => Op::Xor,
        36 => Op::Where,
        37 => Op::Clip,
        38 => Op::Cast {
            to: dtype,
            saturate: flag,
        },
        39 => Op::MatMul,
        40 => Op::Gemm {
            alpha: 1.0,
            beta: 1.0,
            trans_a: flag,
            trans_b: i(0) > 0,
        },
        41 => Op::Conv {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(1).take(2).copied().collect(),
            pads: list.iter().skip(2).copied().collect(),
            dilations: if flag {
                vec![]
            } else {
                list.iter().take(2).copied().collect()
            },
            group: i(3),
            auto_pad: [
                AutoPad::NotSet,
                AutoPad::SameUpper,
                AutoPad::SameLower,
                AutoPad::Valid,
            ][i(4).rem_euclid(4) as usize],
        },
        42 => Op::MaxPool {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(1).take(2).copied().collect(),
            pads: list.iter().skip(2).copied().collect(),
            dilations: vec![],
            ceil_mode: flag,
            auto_pad: [AutoPad::NotSet, AutoPad::SameUpper, AutoPad::Valid]
                [i(3).rem_euclid(3) as usize],
        },
        43 => Op::AveragePool {
            kernel_shape: list.iter().take(1).copied().collect(),
            strides: list.iter().skip(1).take(1).copied().collect(),
            pads: list.iter().skip(2).take(2).copied().collect(),
            dilations: list.iter().skip(4).copied().collect(),
            ceil_mode: flag,
            count_include_pad: flag,
            auto_pad: AutoPad::NotSet,
        },
        44 => Op::GlobalAveragePool,
        45 => Op::GlobalMaxPool,
        46 => Op::BatchNormalization { epsilon: 1e-5 },
        47 => Op::LayerNormalization {
            axis: i(0),
            epsilon: 1e-5,
        },
        48 => Op::Softmax { axis: i(0) },
        49 => Op::LogSoftmax { axis: i(0) },
        50 => Op::ReduceMean {
            axes,
            keepdims: flag,
        },
        51 => Op::ReduceSum {
            axes,
            keepdims: !flag,
        },
        52 => Op::ReduceMax {
            axes,
            keepdims: flag,
        },
        53 => Op::ReduceMin {
            axes,
            keepdims: flag,
        },
        54 => Op::ReduceProd {
            axes,
            keepdims: flag,
        },
        55 => Op::Shape {
            start: i(0),
            end: flag.then(|| i(1)),
        },
        56 => Op::Reshape { allowzero: flag },
        57 => Op::Transpose { perm: list },
        58 => Op::Unsqueeze { axes: list },
        59 => Op::Squeeze { axes },
        60 => Op::Flatten { axis: i(0) },
        61 => Op::Concat { axis: i(0) },
        62 => Op::Split {
            axis: i(0),
            split: list.into_iter().skip(1).collect(),
        },
        63 => Op::Slice,
        64 => Op::Gather { axis: i(0) },
        65 => Op::Expand,
        66 => Op::ConstantOfShape {
            value: if flag {
                Tensor::scalar_f32(1.0)
            } else {
                Tensor::zeros(dtype, vec![i(0).clamp(0, 3) as u64]).unwrap()
            },
        },
        67 => Op::Range,
        68 => Op::Pad {
            mode: PadMode::Reflect,
        },
        69 => Op::Tile,
        70 => Op::QuantizeLinear {
            axis: i(0),
            saturate: flag,
            to: dtype,
        },
        71 => Op::DequantizeLinear { axis: i(0) },
        72 => Op::Amax,
        73 => Op::ComputeScale {
            fmt: dtype,
            margin: i(0) as f32,
            source: [
                AmaxSource::HistoryMax,
                AmaxSource::HistoryMostRecent,
                AmaxSource::Current,
            ][i(1).rem_euclid(3) as usize],
            epsilon: i(2) as f32,
            power_2: flag,
        },
        74 => Op::AmaxHistoryUpdate,
        75 => Op::Quantize {
            to: dtype,
            saturate: flag,
        },
        76 => Op::Dequantize { to: dtype },
        77 => Op::ScaledMatMul { out: dtype },
        // ---- training ops ----
        78 => Op::GatherGrad {
            axis: i(0),
            size: i(1),
        },
        79 => Op::LayerNormGrad {
            axis: i(0),
            epsilon: 1e-5,
        },
        80 => Op::SoftmaxGrad {
            axis: i(0),
            log: flag,
        },
        81 => Op::GeluGrad {
            approximate: if flag {
                GeluApprox::Tanh
            } else {
                GeluApprox::None
            },
        },
        82 => Op::ConvGradInput {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: vec![],
            pads: list.iter().skip(2).copied().collect(),
            dilations: vec![],
            group: i(1),
            auto_pad: AutoPad::NotSet,
            input_shape: list.clone(),
        },
        83 => Op::ConvGradWeight {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(1).take(2).copied().collect(),
            pads: vec![],
            dilations: vec![],
            group: i(0),
            auto_pad: AutoPad::SameUpper,
        },
        84 => Op::MaxPoolGrad {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: vec![],
            pads: vec![],
            dilations: vec![],
            ceil_mode: flag,
            auto_pad: AutoPad::NotSet,
        },
        85 => Op::AveragePoolGrad {
            kernel_shape: list.iter().take(2).copied().collect(),
            strides: list.iter().skip(2).take(2).copied().collect(),
            pads: vec![],
            dilations: vec![],
            ceil_mode: flag,
            count_include_pad: !flag,
            auto_pad: AutoPad::Valid,
        },
        86 => Op::SoftmaxCrossEntropy,
        87 => Op::SoftmaxCrossEntropyGrad,
        88 => Op::AllFinite,
        89 => Op::SgdUpdate {
            momentum: 0.9,
            weight_decay: i(0) as f32,
            nesterov: flag,
        },
        90 => Op::AdamwUpdate {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: i(0) as f32,
        },
        // ---- fused ops ----
        91 => Op::QuantizeAmax {
            to: dtype,
            saturate: flag,
        },
        92 => Op::CastTranspose {
            perm: list,
            to: dtype,
            saturate: flag,
        },
        93 => Op::LayerNormQuantize {
            axis: i(0),
            epsilon: 1e-5,
            to: dtype,
            saturate: flag,
        },
        94 => Op::ElementwiseQuantize {
            expr: fused_expr(flag),
            to: dtype,
            saturate: flag,
        },
        95 => Op::ScaledMatMulEpilogue {
            out: dtype,
            expr: fused_expr(!flag),
            to: flag.then_some(DType::F8E4M3),
            saturate: flag,
        },
        96 => Op::BatchedScaleUpdate {
            fmt: dtype,
            margin: i(0) as f32,
            source: AmaxSource::HistoryMax,
            epsilon: 0.0,
            power_2: flag,
        },
        97 => Op::Input { name: "x".into() },
        _ => Op::Constant {
            value: Tensor::scalar_f32(1.0),
        },
    }
}

const OP_KINDS: usize = 99;

#[test]
fn the_fuzzer_covers_every_op() {
    let mut names: Vec<&str> = (0..OP_KINDS)
        .map(|k| make_op(k, &[0, 1, 2], true, DType::F32).name())
        .collect();
    names.sort();
    names.dedup();
    let mut all = Op::NAMES.to_vec();
    all.retain(|n| !["param", "state"].contains(n));
    all.sort();
    assert_eq!(names, all);
}

fn arb_int() -> impl Strategy<Value = i64> {
    prop_oneof![
        12 => -4i64..8,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(i64::from(i32::MAX)),
        1 => Just(1 << 40),
    ]
}

fn arb_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        8 => (0u64..6).prop_map(Dim::Known),
        2 => Just(Dim::Sym("a".into())),
        1 => Just(Dim::Sym("b".into())),
        2 => Just(Dim::Unknown),
        1 => Just(Dim::Known(u64::MAX)),
        1 => Just(Dim::Known(1 << 40)),
    ]
}

fn arb_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![
        4 => Just(DType::F32),
        3 => Just(DType::I64),
        1 => proptest::sample::select(DType::ALL.to_vec()),
    ]
}

/// A typed input or a small constant (int lists, scalars): (type, value).
fn arb_input() -> impl Strategy<Value = (TensorType, Option<Tensor>)> {
    let typed = (arb_dtype(), prop::collection::vec(arb_dim(), 0..5))
        .prop_map(|(d, s)| (TensorType::new(d, s), None));
    let int_const = (
        prop::collection::vec(arb_int(), 0..5),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(v, scalar, i32s)| {
            let t = match (scalar, i32s) {
                (true, _) => Tensor::scalar_i64(v.first().copied().unwrap_or(0)),
                (false, false) => Tensor::from_i64(vec![v.len() as u64], &v),
                (false, true) => {
                    let w: Vec<i32> = v
                        .iter()
                        .map(|&x| x.clamp(i32::MIN.into(), i32::MAX.into()) as i32)
                        .collect();
                    Tensor::from_i32(vec![w.len() as u64], &w)
                }
            };
            (t.ty(), Some(t))
        });
    let float_const = prop_oneof![
        -4.0f32..8.0,
        Just(f32::NAN),
        Just(f32::INFINITY),
        Just(1e30f32),
        Just(0.0f32)
    ]
    .prop_map(|v| (TensorType::scalar(DType::F32), Some(Tensor::scalar_f32(v))));
    prop_oneof![6 => typed, 3 => int_const, 1 => float_const]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn infer_never_panics(
        kind in 0..OP_KINDS,
        ints in prop::collection::vec(arb_int(), 0..6),
        flag in any::<bool>(),
        dtype in arb_dtype(),
        inputs in prop::collection::vec(arb_input(), 0..6),
    ) {
        let op = make_op(kind, &ints, flag, dtype);
        let ins: Vec<InferInput<'_>> = inputs.iter().map(|(ty, value)| InferInput { ty, value: value.as_ref() }).collect();
        let first = infer(&op, &ins);
        // Deterministic, and errors always say something.
        prop_assert_eq!(&first, &infer(&op, &ins));
        if let Err(e) = &first {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn binary_broadcast_is_symmetric_in_shape(
        a in prop::collection::vec(arb_dim(), 0..4),
        b in prop::collection::vec(arb_dim(), 0..4),
    ) {
        let (ta, tb) = (TensorType::new(DType::F32, a), TensorType::new(DType::F32, b));
        let ab = infer(&Op::Add, &[InferInput::new(&ta), InferInput::new(&tb)]);
        let ba = infer(&Op::Add, &[InferInput::new(&tb), InferInput::new(&ta)]);
        prop_assert_eq!(ab.is_ok(), ba.is_ok());
        if let (Ok(x), Ok(y)) = (ab, ba) {
            prop_assert_eq!(x, y);
        }
    }
}

// ------------------------------------------------------------------ verifier

/// x → fc (matmul) → relu, with FP8 scaling of x and state for its amax history.
fn small_graph() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.add_input("x", ty("f32[batch,256]")).unwrap();
    let w = g
        .add_param(
            "w",
            ty("f32[256,512]"),
            Some(Tensor::zeros(DType::F32, vec![256, 512]).unwrap()),
        )
        .unwrap();
    let h = g.add_state("x.h", ty("f32[16]"), 0.0).unwrap();
    let prev = g.add_state("x.s", ty("f32[]"), 1.0).unwrap();
    let amax = g.add_node("x.amax", Op::Amax, &[x]).unwrap()[0];
    let upd = g
        .add_node("x.hist", Op::AmaxHistoryUpdate, &[h, amax])
        .unwrap();
    let cs = Op::ComputeScale {
        fmt: DType::F8E4M3,
        margin: 0.0,
        source: AmaxSource::HistoryMax,
        epsilon: 0.0,
        power_2: false,
    };
    let scale = g.add_node("x.scale", cs, &[upd[0], prev]).unwrap();
    let q = g
        .add_node(
            "x.q",
            Op::Quantize {
                to: DType::F8E4M3,
                saturate: true,
            },
            &[x, scale[0]],
        )
        .unwrap()[0];
    let dq = g
        .add_node("x.dq", Op::Dequantize { to: DType::F32 }, &[q, scale[1]])
        .unwrap()[0];
    let fc = g.add_node("fc", Op::MatMul, &[dq, w]).unwrap()[0];
    let y = g.add_node("relu", Op::Relu, &[fc]).unwrap()[0];
    g.set_output("y", y).unwrap();
    g.set_state_update("x.h", upd[1]).unwrap();
    g.set_state_update("x.s", scale[0]).unwrap();
    g
}

fn verify_errors(g: &Graph) -> Vec<String> {
    match verify(g) {
        Ok(()) => vec![],
        Err(IrError::Verify(errs)) => errs.iter().map(ToString::to_string).collect(),
        Err(other) => panic!("verify must return IrError::Verify, got {other}"),
    }
}

#[track_caller]
fn assert_has(errors: &[String], needle: &str) {
    assert!(
        errors.iter().any(|e| e.contains(needle)),
        "no error contains {needle:?}; errors:\n{}",
        errors.join("\n")
    );
}

#[test]
fn a_well_formed_graph_verifies() {
    assert_eq!(verify(&small_graph()), Ok(()));
    let mut g = Graph::new("empty");
    g.add_input("x", ty("f32[2]")).unwrap();
    assert_eq!(verify(&g), Ok(()));
}

/// Output 0 of a node.
fn out0(id: NodeId) -> Value {
    Value::new(id, 0)
}

#[test]
fn verifier_reports_every_problem() {
    let mut g = small_graph();
    let x = out0(g.find_interface("x").unwrap());
    // 1. A node whose declared type disagrees with inference.
    g.add_node_typed("bad_relu", Op::Relu, &[x], vec![ty("f16[batch,256]")])
        .unwrap();
    // 2. A node whose inference fails.
    let z = g.add_input("z", ty("f32[3,4]")).unwrap();
    g.add_node_typed("bad_mm", Op::MatMul, &[z, z], vec![ty("f32[3,4]")])
        .unwrap();
    // 3. A state update of the wrong type.
    let amax = out0(g.find_node("x.amax").unwrap());
    g.set_state_update("x.h", amax).unwrap();
    // 4. A weight whose type no longer matches its param.
    let v = g
        .add_param(
            "v",
            ty("f32[2]"),
            Some(Tensor::from_f32(vec![2], &[1.0, 2.0])),
        )
        .unwrap();
    g.set_interface_type(v.node, ty("f32[3]")).unwrap();
    // 5. A cycle: relu reads itself through a second relu.
    let relu = g.find_node("relu").unwrap();
    let again = g.add_node("again", Op::Relu, &[out0(relu)]).unwrap()[0];
    g.set_input(relu, 0, again).unwrap();
    // 6. An input referring to an output slot that no longer exists.
    let split = g
        .add_node(
            "split",
            Op::Split {
                axis: 1,
                split: vec![128, 128],
            },
            &[x],
        )
        .unwrap();
    g.add_node("use_second", Op::Relu, &[split[1]]).unwrap();
    g.set_op(
        split[0].node,
        Op::Split {
            axis: 1,
            split: vec![256],
        },
        vec![ty("f32[batch,256]")],
    );
    // 7. An output count that disagrees with the op.
    g.set_op(amax.node, Op::Amax, vec![ty("f32[]"), ty("f32[]")]);

    let errors = verify_errors(&g);
    assert_has(
        &errors,
        "node \"bad_relu\" (relu): output 0 is declared f16[batch,256], but inference gives f32[batch,256]",
    );
    assert_has(
        &errors,
        "node \"bad_mm\" (matmul): input 1 (B) has shape f32[3,4], its first dim (3) must equal input 0's last dim (4)",
    );
    assert_has(
        &errors,
        "node \"x.h\" (state): its update has type f32[], but the state is declared f32[16]",
    );
    assert_has(
        &errors,
        "node \"v\" (param): its weight data has type f32[2], but the param is declared f32[3]",
    );
    assert_has(&errors, "graph has a cycle through nodes: again, relu");
    assert_has(
        &errors,
        "node \"use_second\" (relu): input 0 refers to output 1 of node \"split\", which has 1 output(s)",
    );
    assert_has(
        &errors,
        "node \"x.amax\" (amax): declares 2 output(s), but the op gives 1",
    );
    assert_eq!(errors.len(), 7, "{errors:#?}");
    // The whole error prints as one list.
    let all = verify(&g).unwrap_err().to_string();
    assert!(
        all.starts_with("verification failed with 7 error(s):\n  - node"),
        "{all}"
    );
}

#[test]
fn verifier_checks_the_interface_lists() {
    let g = small_graph();
    let mut def = g.to_def();
    // Drop the input and the second state from their lists.
    def.inputs.clear();
    let xs = def.nodes.iter().position(|n| n.name == "x.s").unwrap();
    def.state.retain(|&(i, _)| i != xs);
    def.state_updates.remove("x.s");
    let g2 = Graph::from_def(&def).unwrap();
    let errors = verify_errors(&g2);
    assert_has(
        &errors,
        "node \"x\" (input): is not listed among the graph's inputs",
    );
    assert_has(
        &errors,
        "node \"x.s\" (state): is not listed among the graph's states",
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");

    // A param listed as an input, and a param listed twice.
    let mut def = g.to_def();
    let w = def.nodes.iter().position(|n| n.name == "w").unwrap();
    def.inputs.push(w);
    def.params.push(w);
    let errors = verify_errors(&Graph::from_def(&def).unwrap());
    assert_has(
        &errors,
        "node \"w\" (param): is listed among the graph's inputs but is a param node",
    );
    assert_has(
        &errors,
        "node \"w\" (param): is listed more than once among the graph's params",
    );
}

#[test]
fn declared_types_may_refine_but_not_contradict_inference() {
    let mut g = Graph::new("t");
    let x = g.add_input("x", ty("f32[6]")).unwrap();
    let s = g.add_input("s", ty("i64[2]")).unwrap();
    // Inference gives f32[?,?] (the shape is not a constant): declaring [2,3] refines it.
    let r = g
        .add_node_typed(
            "r",
            Op::Reshape { allowzero: false },
            &[x, s],
            vec![ty("f32[2,3]")],
        )
        .unwrap()[0];
    g.set_output("r", r).unwrap();
    assert_eq!(verify(&g), Ok(()));
    // A known size or a symbol must be kept as inferred.
    g.add_node_typed("n", Op::Relu, &[x], vec![ty("f32[?]")])
        .unwrap();
    g.add_node_typed("m", Op::Relu, &[r], vec![ty("f32[2,?,1]")])
        .unwrap();
    let errors = verify_errors(&g);
    assert_has(
        &errors,
        "node \"n\" (relu): output 0 is declared f32[?], but inference gives f32[6]",
    );
    assert_has(
        &errors,
        "node \"m\" (relu): output 0 is declared f32[2,?,1], but inference gives f32[2,3]",
    );
    assert_eq!(errors.len(), 2);
}
