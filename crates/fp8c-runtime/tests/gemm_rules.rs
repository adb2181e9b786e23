//! cuBLASLt's FP8 request rules (`cuda/gemm_rules.rs`), checked before planning and by the
//! emulated device: the type table, the bias type, TN, alignment, and the C type fp8c picks.
//! Pure checks on `GemmSpec`s, no GPU.

use fp8c_ir::DType;
use fp8c_runtime::cuda::gemm::{Epilogue, GemmSpec};
use fp8c_runtime::cuda::gemm_rules::{c_type, check, min_alignments};

/// A valid forward FP8 GEMM: E4M3 × E4M3 → f32, TN, 64×64×64, 256-byte aligned pointers.
fn spec() -> GemmSpec {
    GemmSpec {
        trans_b: true,
        a_scale: Some(0x4000),
        b_scale: Some(0x4004),
        fast_accum: true,
        ..GemmSpec::plain(
            64,
            64,
            64,
            0x1000,
            0x2000,
            0x3000,
            DType::F8E4M3,
            DType::F32,
        )
    }
}

fn refused(s: &GemmSpec, needle: &str) {
    let e = check(s).expect_err("refused");
    assert!(e.contains(needle), "{e}");
}

#[test]
fn the_fp8_type_table() {
    check(&spec()).unwrap();
    // FP8 D with its D scale and amax of D: E4M3 from anything, E5M2 only with an E5M2 operand.
    let fp8_out = |a, b, d| GemmSpec {
        a_type: a,
        b_type: b,
        d_type: d,
        d_scale: Some(0x5000),
        amax_d: Some(0x5004),
        ..spec()
    };
    check(&fp8_out(DType::F8E4M3, DType::F8E4M3, DType::F8E4M3)).unwrap();
    check(&fp8_out(DType::F8E5M2, DType::F8E4M3, DType::F8E5M2)).unwrap();
    check(&fp8_out(DType::F8E4M3, DType::F8E5M2, DType::F8E4M3)).unwrap();
    refused(
        &fp8_out(DType::F8E4M3, DType::F8E4M3, DType::F8E5M2),
        "an E5M2 D needs an E5M2 operand",
    );
    refused(
        &fp8_out(DType::F8E5M2, DType::F8E5M2, DType::F8E4M3),
        "E5M2 × E5M2",
    );
    refused(
        &GemmSpec {
            b_type: DType::BF16,
            ..spec()
        },
        "both operands in FP8",
    );
    refused(
        &GemmSpec {
            d_scale: Some(0x5000),
            ..spec()
        },
        "for an FP8 D",
    );
    refused(
        &GemmSpec {
            trans_b: false,
            ..spec()
        },
        "TN",
    );
}

/// Issue #15: C was BF16 for every FP8 D while an f16 bias was accepted; the table wants the
/// bias in C's type, so fp8c now picks C from the bias, and the check refuses a mismatch.
#[test]
fn the_bias_has_cs_type_and_c_follows_the_bias() {
    let with_bias = |d, t| GemmSpec {
        d_type: d,
        d_scale: d.is_fp8().then_some(0x5000),
        bias: Some((0x6000, t)),
        epilogue: Epilogue::Bias,
        ..spec()
    };
    let s = with_bias(DType::F8E4M3, DType::F16);
    assert_eq!(c_type(&s), DType::F16);
    check(&s).unwrap();
    assert_eq!(c_type(&with_bias(DType::F8E4M3, DType::BF16)), DType::BF16);
    check(&with_bias(DType::F8E4M3, DType::BF16)).unwrap();
    // f32 C takes a BF16 bias, not f32; BF16 C takes BF16; F16 C takes F16.
    check(&with_bias(DType::F32, DType::BF16)).unwrap();
    refused(&with_bias(DType::F32, DType::F32), "takes a bf16 bias");
    refused(&with_bias(DType::BF16, DType::F16), "takes a bf16 bias");
    check(&with_bias(DType::F16, DType::F16)).unwrap();
    refused(
        &GemmSpec {
            bias: None,
            epilogue: Epilogue::GeluBias,
            ..spec()
        },
        "needs a bias",
    );
}

/// Issue #15: per-image conv pointers can be 2-byte aligned, which faults in an FP8 kernel;
/// the check names the operand instead.
#[test]
fn pointers_and_leading_dimensions_are_16_byte_aligned() {
    refused(
        &GemmSpec {
            a: 0x1002,
            ..spec()
        },
        "operand A at 0x1002 is not 16-byte aligned",
    );
    refused(
        &GemmSpec {
            d: 0x3008,
            ..spec()
        },
        "operand D",
    );
    refused(&GemmSpec { k: 40, ..spec() }, "K = 40");
    refused(
        &GemmSpec {
            n: 4 + 64,
            d_type: DType::BF16,
            ..spec()
        },
        "not a multiple of 16 bytes",
    );
    // f32 D rows of 4 columns are 16 bytes: fine.
    check(&GemmSpec { n: 4, ..spec() }).unwrap();
    refused(
        &GemmSpec {
            batch: 2,
            stride_a: 64 * 64 + 8,
            ..spec()
        },
        "A's batch stride",
    );
    refused(
        &GemmSpec {
            a_scale: Some(0x4002),
            ..spec()
        },
        "A's scale",
    );
    // Non-FP8 GEMMs have no such rules here (cuBLASLt handles any alignment for them).
    check(&GemmSpec {
        a_type: DType::BF16,
        b_type: DType::BF16,
        a: 0x1002,
        k: 40,
        trans_b: false,
        a_scale: None,
        b_scale: None,
        ..spec()
    })
    .unwrap();
}

/// Issue #15: cuBLASLt was never told the real pointer alignment, so its heuristic could pick
/// a kernel assuming 16 bytes for a 2-byte aligned per-image pointer. The preferences now carry
/// each operand's alignment (cuBLAS's A is our B), batch strides included.
#[test]
fn the_heuristic_is_told_each_operands_real_alignment() {
    let s = GemmSpec::plain(8, 8, 8, 0x1002, 0x2000, 0x3010, DType::BF16, DType::BF16);
    assert_eq!(min_alignments(&s), [256, 2, 16, 16]);
    // Batched: entry i sits at base + i·stride bytes, so the stride limits the alignment.
    let batched = GemmSpec {
        batch: 4,
        stride_a: 64 * 3, // 384 bytes of bf16: 128-byte aligned entries
        stride_b: 5,      // 10 bytes: 2-byte aligned entries
        stride_d: 64,
        ..GemmSpec::plain(8, 8, 8, 0x1000, 0x2000, 0x3000, DType::BF16, DType::BF16)
    };
    assert_eq!(min_alignments(&batched), [2, 128, 128, 128]);
}

/// Issue #16: cuBLASLt's block-scaled FP8 modes on Hopper (12.9+) and fp8c's stricter layout
/// rules for them.
#[test]
fn block_scaled_modes() {
    use fp8c_runtime::cuda::gemm::ScaleMode::*;
    let block = |a, b| GemmSpec {
        m: 256,
        n: 256,
        k: 512,
        fast_accum: false,
        a_scale_mode: a,
        b_scale_mode: b,
        ..spec()
    };
    for (a, b) in [(Vec128, Blk128), (Vec128, Vec128), (OuterVec, OuterVec)] {
        check(&block(a, b)).unwrap();
    }
    refused(&block(Blk128, Vec128), "no FP8 GEMM with A scaled Blk128");
    refused(
        &block(OuterVec, Vec128),
        "no FP8 GEMM with A scaled OuterVec",
    );
    refused(
        &GemmSpec {
            fast_accum: true,
            ..block(Vec128, Blk128)
        },
        "no fast accumulation",
    );
    refused(
        &GemmSpec {
            k: 512 + 16,
            ..block(Vec128, Vec128)
        },
        "K a multiple of 128",
    );
    refused(
        &GemmSpec {
            m: 102,
            ..block(Vec128, Vec128)
        },
        "m a multiple of 4",
    );
    refused(
        &GemmSpec {
            k: 384,
            ..block(Vec128, Blk128)
        },
        "K/128 a multiple of 4",
    );
    // Rowwise has no K rule beyond FP8's own.
    check(&GemmSpec {
        m: 102,
        k: 384,
        ..block(OuterVec, OuterVec)
    })
    .unwrap();
}
