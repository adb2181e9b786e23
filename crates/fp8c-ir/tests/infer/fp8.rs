//! Quantization: ONNX Q/DQ and fp8c's FP8 scaling ops.

use super::*;

#[test]
fn onnx_quantize_dequantize_linear() {
    let q = |to| Op::QuantizeLinear {
        axis: 1,
        saturate: true,
        to,
        block_size: 0,
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

    let dq = Op::DequantizeLinear {
        axis: 0,
        block_size: 0,
    };
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

    let smm = |out| Op::ScaledMatMul {
        out,
        fast_accum: false,
    };
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
