//! Third-party models' ops on MLIR's JIT (a module of `tests/mlir/main.rs`, built with
//! `--features mlir`): each op as a one-node graph bit for bit against its CPU kernel
//! (`fp8c_eval::eval_op`), and the models that need it (sklearn's, onnxruntime's quantized and
//! f16/bf16 ones, onnxruntime-genai's Llama exports) against the CPU and onnxruntime.

use super::with_mlir::{rel_l2, values};
use super::*;
use fp8c_session::{Device, Tensor};
use std::collections::BTreeMap;

/// `op` on `inputs` (graph inputs) then `constants` (constant nodes, as an import folds
/// axes and shapes) run on the JIT and by the CPU kernel (`fp8c_eval::eval_op`): (JIT
/// outputs, CPU outputs), in output order.
fn one_op_on_the_jit(
    op: fp8c_ir::Op,
    inputs: &[&Tensor],
    constants: &[&Tensor],
) -> (Vec<Tensor>, Vec<Tensor>) {
    let mut g = fp8c_ir::Graph::new("one_op");
    let mut vals = Vec::new();
    let mut feed = BTreeMap::new();
    for (i, t) in inputs.iter().enumerate() {
        let name = format!("in{i}");
        vals.push(g.add_input(&name, t.ty()).unwrap());
        feed.insert(name, (*t).clone());
    }
    for (i, t) in constants.iter().enumerate() {
        let c = fp8c_ir::Op::Constant {
            value: (*t).clone(),
        };
        vals.push(g.add_node(&format!("c{i}"), c, &[]).unwrap()[0]);
    }
    let outs = g.add_node("op", op.clone(), &vals).unwrap();
    for (k, v) in outs.iter().enumerate() {
        g.set_output(&format!("out{k}"), *v).unwrap();
    }
    let mut exe = fp8c_mlir::prepare(&g, g.weights()).unwrap();
    let got = exe.run(&feed).unwrap();
    let all: Vec<&Tensor> = inputs.iter().chain(constants).copied().collect();
    let want = fp8c_eval::eval_op(&op, &all).unwrap();
    let got = (0..outs.len())
        .map(|k| got[&format!("out{k}")].clone())
        .collect();
    (got, want)
}

/// Asserts the JIT's outputs of `op` on `inputs` equal the CPU kernel's, bit for bit.
fn bit_exact_on_the_jit(what: &str, op: fp8c_ir::Op, inputs: &[&Tensor]) {
    bit_exact_with_constants(what, op, inputs, &[]);
}

/// [`bit_exact_on_the_jit`] with `constants` after the inputs (see [`one_op_on_the_jit`]).
fn bit_exact_with_constants(
    what: &str,
    op: fp8c_ir::Op,
    inputs: &[&Tensor],
    constants: &[&Tensor],
) {
    let (got, want) = one_op_on_the_jit(op, inputs, constants);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.ty(), w.ty(), "{what}: output {k}'s type");
        assert!(
            g.bytes() == w.bytes(),
            "{what}: output {k}: JIT {:?} vs CPU {:?}",
            g.to_f64_vec(),
            w.to_f64_vec()
        );
    }
}

/// A model of tests/models (`path` without `.onnx`), run on the inputs its npz (`npz`:
/// `ort` or `ref`) holds on the JIT and the CPU: see [`model_on_the_jit_is_bit_exact`].
fn model_is_bit_exact_on_the_jit(path: &str, npz: &str) {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models");
    let data: BTreeMap<String, Tensor> =
        fp8c_session::npy::read_npz(&base.join(format!("{path}.{npz}.npz")))
            .unwrap()
            .into_iter()
            .collect();
    model_on_the_jit_is_bit_exact(path, &data);
}

/// A model of tests/models (`path` without `.onnx`) compiled as `fp8c run` does (default
/// options, each input's shape from `data`), run on `data` on the JIT and the CPU: every
/// output equal bit for bit.
fn model_on_the_jit_is_bit_exact(path: &str, data: &BTreeMap<String, Tensor>) {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models");
    let model = Model::load(base.join(format!("{path}.onnx"))).unwrap();
    let mut opts = CompileOptions::default();
    let mut inputs = BTreeMap::new();
    for input in model.inputs() {
        let t = data[&input.name].clone();
        opts = opts.input_shape(&input.name, t.shape());
        inputs.insert(input.name, t);
    }
    let compiled = model.compile(&opts).unwrap();
    let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
    let got = compiled
        .prepare(Device::Mlir)
        .unwrap()
        .run(&inputs)
        .unwrap();
    for (k, want) in &cpu {
        assert_eq!(got[k].ty(), want.ty(), "{path}: {k}");
        assert!(got[k].bytes() == want.bytes(), "{path}: {k} differs");
    }
}

#[test]
fn arg_max_and_arg_min_run_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    let nan = f64::NAN;
    // Rows with ties, a leading NaN, a NaN in the middle, infinities and -0.0 vs 0.0.
    let rows: Vec<f64> = vec![
        1.0,
        3.0,
        3.0,
        2.0, //
        nan,
        5.0,
        1.0,
        5.0, //
        2.0,
        nan,
        7.0,
        -1.0, //
        -0.0,
        0.0,
        f64::NEG_INFINITY,
        f64::INFINITY, //
        4.0,
        4.0,
        4.0,
        4.0, //
        -3.0,
        9.0,
        -3.0,
        9.0,
    ];
    for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let x = Tensor::from_f64_as(d, vec![6, 4], &rows).unwrap();
        let x3 = Tensor::from_f64_as(d, vec![2, 3, 4], &rows).unwrap();
        for (max, axis, keepdims, last) in [
            (true, 1, true, false),
            (true, -1, false, true),
            (false, 1, false, false),
            (false, 0, true, true),
        ] {
            let op = if max {
                Op::ArgMax {
                    axis,
                    keepdims,
                    select_last_index: last,
                }
            } else {
                Op::ArgMin {
                    axis,
                    keepdims,
                    select_last_index: last,
                }
            };
            bit_exact_on_the_jit(&format!("{op:?} {d}"), op.clone(), &[&x]);
            bit_exact_on_the_jit(&format!("{op:?} {d} rank 3"), op, &[&x3]);
        }
    }
    // Integers: signed, unsigned (the high bit large) and i64 beyond 2^53.
    let ints: Vec<f64> = vec![3.0, -1.0, 3.0, 100.0, -100.0, 0.0, 7.0, 7.0];
    for d in [DType::I8, DType::I32, DType::U8, DType::U16] {
        let x = Tensor::from_f64_as(d, vec![2, 4], &ints).unwrap();
        for last in [false, true] {
            let op = Op::ArgMax {
                axis: 1,
                keepdims: true,
                select_last_index: last,
            };
            bit_exact_on_the_jit(&format!("{op:?} {d}"), op, &[&x]);
            let op = Op::ArgMin {
                axis: 0,
                keepdims: false,
                select_last_index: last,
            };
            bit_exact_on_the_jit(&format!("{op:?} {d}"), op, &[&x]);
        }
    }
    let big = (1i64 << 60) + 1;
    let x = Tensor::from_i64(vec![1, 4], &[big - 1, big, big - 2, -big]);
    let op = Op::ArgMax {
        axis: 1,
        keepdims: false,
        select_last_index: false,
    };
    bit_exact_on_the_jit("arg_max i64 beyond 2^53", op, &[&x]);
    // u64 compares as its f64 rounding, as the CPU: 2^60 + 1 ties 2^60.
    let x = Tensor::from_pod(DType::U64, vec![3], &[1u64 << 60, (1u64 << 60) + 1, 5]).unwrap();
    for last in [false, true] {
        let op = Op::ArgMax {
            axis: 0,
            keepdims: true,
            select_last_index: last,
        };
        bit_exact_on_the_jit("arg_max u64", op, &[&x]);
    }
    // sklearn classifiers end in arg_max: labels and probabilities equal the CPU's.
    for name in ["iris_gaussian_nb", "iris_logreg_binary"] {
        model_is_bit_exact_on_the_jit(&format!("sklearn/{name}"), "ort");
    }
    model_is_bit_exact_on_the_jit("sklearn/mlp_digits_clf", "ref");
}

#[test]
fn fp8_of_f16_and_bf16_models_runs_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    // amax, quantize and quantize_amax of f16 / bf16 / f64 tensors (read as f32, as the
    // CPU), every special class included; dequantize to f16 / bf16.
    let mut v: Vec<f64> = values(60, 7)
        .iter()
        .map(|&x| f64::from(x) * 300.0)
        .collect();
    v.extend([
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        0.0,
        -0.0,
    ]);
    v.extend([1e-6, -3e-8, 65504.0, 448.0, 464.0, 57344.0]);
    let scale = Tensor::scalar_f32(0.75);
    for d in [DType::F16, DType::BF16, DType::F64] {
        let x = Tensor::from_f64_as(d, vec![8, 9], &v).unwrap();
        bit_exact_on_the_jit(&format!("amax {d}"), Op::Amax, &[&x]);
        let finite: Vec<f64> = v
            .iter()
            .map(|&a| if a.is_nan() { 1.0 } else { a })
            .collect();
        let xf = Tensor::from_f64_as(d, vec![8, 9], &finite).unwrap();
        bit_exact_on_the_jit(&format!("amax {d} without NaN"), Op::Amax, &[&xf]);
        for to in [DType::F8E4M3, DType::F8E5M2] {
            for saturate in [true, false] {
                let op = Op::Quantize { to, saturate };
                bit_exact_on_the_jit(&format!("{op:?} of {d}"), op, &[&x, &scale]);
                let op = Op::QuantizeAmax { to, saturate };
                bit_exact_on_the_jit(&format!("{op:?} of {d}"), op, &[&x, &scale]);
            }
        }
    }
    let codes: Vec<u8> = (0..=255).collect();
    for fmt in [DType::F8E4M3, DType::F8E5M2] {
        let q = Tensor::from_pod(fmt, vec![16, 16], &codes).unwrap();
        for to in [DType::F16, DType::BF16] {
            let op = Op::Dequantize { to };
            bit_exact_on_the_jit(&format!("{op:?} of {fmt}"), op, &[&q, &scale]);
        }
    }
    // The f16 and bf16 MLPs in FP8: amax, quantize and the scaled GEMMs with an f16 /
    // bf16 result and bias epilogue.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models/export");
    for (name, d) in [("mlp_f16", DType::F16), ("mlp_bf16", DType::BF16)] {
        let compiled = Model::load(dir.join(format!("{name}.onnx")))
            .unwrap()
            .compile(&CompileOptions::fp8().input_shape("x", &[4, 32]))
            .unwrap();
        let xs: Vec<f64> = values(128, 11)
            .iter()
            .map(|&a| f64::from(a) * 4.0)
            .collect();
        let x = Tensor::from_f64_as(d, vec![4, 32], &xs).unwrap();
        let inputs = BTreeMap::from([("x".to_string(), x)]);
        let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
        let got = compiled
            .prepare(Device::Mlir)
            .unwrap()
            .run(&inputs)
            .unwrap();
        for (k, want) in &cpu {
            assert_eq!(got[k].ty(), want.ty(), "{name}: {k}");
            assert!(got[k].bytes() == want.bytes(), "{name}: {k} differs");
        }
    }
}

#[test]
fn gather_elements_and_cum_sum_run_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    // gather_elements: indices of another shape than data (smaller off the axis, larger
    // along it), negative ones, i64 and i32 indices, float and integer data.
    let data: Vec<f64> = (0..12).map(|k| f64::from(k) * 1.5 - 4.0).collect();
    let idx = [0i64, -1, 2, 1, 3, -4, 2, 2, 0, 1, -2, 3, 1, 0, 0];
    for d in [DType::F32, DType::F16, DType::I64, DType::U8] {
        let x = Tensor::from_f64_as(
            d,
            vec![3, 4],
            &data.iter().map(|v| v.abs()).collect::<Vec<_>>(),
        )
        .unwrap();
        for (axis, shape, take) in [(1i64, vec![3u64, 5], 15usize), (-1, vec![2, 3], 6)] {
            let i = Tensor::from_i64(shape.clone(), &idx[..take]);
            let i32s: Vec<i32> = idx[..take].iter().map(|&v| v as i32).collect();
            let i32_idx = Tensor::from_i32(shape, &i32s);
            let op = Op::GatherElements { axis };
            bit_exact_on_the_jit(&format!("{op:?} {d}"), op.clone(), &[&x, &i]);
            bit_exact_on_the_jit(&format!("{op:?} {d} i32"), op, &[&x, &i32_idx]);
        }
        let i = Tensor::from_i64(vec![5, 2], &[0, 1, 2, -1, -3, 0, 1, 1, 2, 2]);
        let op = Op::GatherElements { axis: 0 };
        bit_exact_on_the_jit(&format!("{op:?} {d}"), op, &[&x, &i]);
    }
    // cum_sum: every exclusive / reverse mode along each axis; f32 values whose sums
    // round differently in another order; f16 / bf16 summed in f32, integers wrapping.
    let v: Vec<f64> = values(24, 5)
        .iter()
        .enumerate()
        .map(|(k, &a)| f64::from(a) * 10f64.powi(k as i32 % 7 - 3))
        .collect();
    for d in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I8,
    ] {
        let vals: Vec<f64> = if d.is_int() {
            v.iter()
                .map(|a| (a * 1000.0).round().clamp(-120.0, 120.0))
                .collect()
        } else {
            v.clone()
        };
        let x = Tensor::from_f64_as(d, vec![2, 3, 4], &vals).unwrap();
        for axis in [0i64, 1, -1] {
            for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)]
            {
                let op = Op::CumSum { exclusive, reverse };
                let a = Tensor::from_i64(vec![], &[axis]);
                bit_exact_with_constants(&format!("{op:?} axis {axis} {d}"), op, &[&x], &[&a]);
            }
        }
    }
    // Tree ensembles (sklearn's, through onnxruntime's TreeEnsemble import) use both.
    for name in [
        "iris_decision_tree",
        "iris_gradient_boosting",
        "reg_gradient_boosting",
    ] {
        model_is_bit_exact_on_the_jit(&format!("sklearn/{name}"), "ort");
    }
}

#[test]
fn integer_quantize_linear_and_dequantize_linear_run_on_mlirs_jit_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    // Halves (ties to even), NaN, infinities, values past the range, −0.0.
    let mut v: Vec<f64> = values(30, 3)
        .iter()
        .map(|&a| f64::from(a) * 200.0)
        .collect();
    v.extend([
        0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, 254.5, 255.5,
    ]);
    v.extend([
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        -0.0,
        1e9,
        -1e9,
        3e4,
        7e4,
    ]);
    assert_eq!(v.len(), 49);
    let per_tensor = Tensor::scalar_f32(0.5);
    let per_axis = Tensor::from_f32(vec![7], &[0.5, 1.0, 0.25, 3.0, 0.1, 1.0, 2.0]);
    for xt in [DType::F32, DType::F16, DType::F64, DType::I32] {
        let xv: Vec<f64> = if xt == DType::I32 {
            v.iter()
                .map(|a| if a.is_finite() { a.round() } else { 7.0 })
                .collect()
        } else {
            v.clone()
        };
        let x = Tensor::from_f64_as(xt, vec![7, 7], &xv).unwrap();
        for to in [DType::I8, DType::U8, DType::I16, DType::U16] {
            let op = Op::QuantizeLinear {
                axis: 0,
                saturate: true,
                to,
                block_size: 0,
            };
            let what = format!("quantize_linear {xt} → {to}");
            bit_exact_on_the_jit(&what, op.clone(), &[&x, &per_tensor]);
            let zp = Tensor::from_f64_as(to, vec![], &[3.0]).unwrap();
            bit_exact_on_the_jit(&what, op.clone(), &[&x, &per_tensor, &zp]);
            let zps =
                Tensor::from_f64_as(to, vec![7], &[0.0, 1.0, 2.0, 100.0, 7.0, 0.0, 9.0]).unwrap();
            bit_exact_on_the_jit(&what, op, &[&x, &per_axis, &zps]);
        }
    }
    // Dequantize: every integer input type, per tensor and per axis, with and without
    // a zero point.
    for xt in [DType::I8, DType::U8, DType::I16, DType::U16, DType::I32] {
        let xv: Vec<f64> = (0..49).map(|k| f64::from(k * 37 % 256)).collect();
        let x = Tensor::from_f64_as(xt, vec![7, 7], &xv).unwrap();
        let what = format!("dequantize_linear {xt}");
        for axis in [0i64, 1] {
            let op = Op::DequantizeLinear {
                axis,
                block_size: 0,
            };
            bit_exact_on_the_jit(&what, op.clone(), &[&x, &per_tensor]);
            let zps =
                Tensor::from_f64_as(xt, vec![7], &[0.0, 1.0, 2.0, 100.0, 7.0, 0.0, 9.0]).unwrap();
            bit_exact_on_the_jit(&what, op, &[&x, &per_axis, &zps]);
        }
    }
}

#[test]
fn integer_and_f64_matmuls_and_qoperator_models_run_on_mlirs_jit_like_the_cpu() {
    use fp8c_ir::{DType, Op};
    // Integer matmuls wrap in their type (the CPU's wrapping i64 sum cast back).
    let av: Vec<f64> = (0..2 * 3 * 5)
        .map(|k| f64::from((k * 53 % 255) - 127))
        .collect();
    let bv: Vec<f64> = (0..5 * 4)
        .map(|k| f64::from((k * 29 % 251) - 125))
        .collect();
    for d in [DType::I32, DType::I8, DType::U8, DType::I64, DType::I16] {
        let (a, b) = if d == DType::U8 {
            let u = |v: &[f64]| v.iter().map(|x| x + 127.0).collect::<Vec<_>>();
            (u(&av), u(&bv))
        } else {
            (av.clone(), bv.clone())
        };
        let a2 = Tensor::from_f64_as(d, vec![6, 5], &a).unwrap();
        let a3 = Tensor::from_f64_as(d, vec![2, 3, 5], &a).unwrap();
        let b = Tensor::from_f64_as(d, vec![5, 4], &b).unwrap();
        bit_exact_on_the_jit(&format!("matmul {d}"), Op::MatMul, &[&a2, &b]);
        bit_exact_on_the_jit(&format!("batched matmul {d}"), Op::MatMul, &[&a3, &b]);
    }
    // i32 sums past 2^31 wrap.
    let big = Tensor::from_i32(vec![1, 2], &[i32::MAX, 3]);
    let k = Tensor::from_i32(vec![2, 1], &[2, i32::MAX]);
    bit_exact_on_the_jit("matmul i32 wrapping", Op::MatMul, &[&big, &k]);
    // f64: integer-valued operands (exact in any order) bit for bit; other values within
    // f64 rounding (fma in K order against the CPU's GEMM).
    let a = Tensor::from_f64_as(DType::F64, vec![6, 5], &av).unwrap();
    let b = Tensor::from_f64_as(DType::F64, vec![5, 4], &bv).unwrap();
    bit_exact_on_the_jit("matmul f64 of integers", Op::MatMul, &[&a, &b]);
    let fa: Vec<f64> = values(64 * 48, 21)
        .iter()
        .map(|&v| f64::from(v) / 3.0)
        .collect();
    let fb: Vec<f64> = values(48 * 8, 22)
        .iter()
        .map(|&v| f64::from(v) / 7.0)
        .collect();
    let a = Tensor::from_f64(vec![64, 48], &fa);
    let b = Tensor::from_f64(vec![48, 8], &fb);
    let (got, want) = one_op_on_the_jit(Op::MatMul, &[&a, &b], &[]);
    assert_eq!(got[0].ty(), want[0].ty());
    let err = rel_l2(&got[0], &want[0]);
    assert!(err < 1e-15, "f64 matmul: {err:e}");
    // f64 elementwise arithmetic (the correctly rounded ops) and a constant operand.
    let x = Tensor::from_f64(vec![2, 3], &[1.0 / 3.0, -2.5, f64::NAN, 1e300, -0.0, 7.0]);
    let c = Tensor::from_f64(vec![3], &[0.1, -1e300, 3.0]);
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min] {
        bit_exact_with_constants(&format!("{op:?} f64"), op, &[&x], &[&c]);
    }
    for op in [Op::Neg, Op::Abs, Op::Sqrt, Op::Floor, Op::Ceil, Op::Round] {
        bit_exact_on_the_jit(&format!("{op:?} f64"), op, &[&x]);
    }
    // onnxruntime's QOperator models (QLinearConv's f64 integer sums, QLinearMatMul and
    // MatMulInteger's i32 sums, integer Q/DQ) and dynamic quantization, bit for bit.
    let image = |n: usize, seed| Tensor::from_f32(vec![2, 3, 10, 10], &values(n, seed));
    for name in ["static_qop_cnn_u8", "static_qop_cnn_s8"] {
        let data = BTreeMap::from([("x".to_string(), image(600, 31))]);
        model_on_the_jit_is_bit_exact(&format!("ops/{name}"), &data);
    }
    let x = Tensor::from_f32(vec![4, 32], &values(128, 32));
    let data = BTreeMap::from([("x".to_string(), x)]);
    model_on_the_jit_is_bit_exact("ops/dynamic_quant_mlp", &data);
    let codes: Vec<u8> = (0..64u32).map(|k| (k * 97 % 256) as u8).collect();
    let a = Tensor::from_pod(DType::U8, vec![2, 4, 8], &codes).unwrap();
    let data = BTreeMap::from([("a".to_string(), a)]);
    model_on_the_jit_is_bit_exact("ops/matmul_integer_u8", &data);
    // sklearn's SVCs: f64 kernel sums (constants, matmul, add) before the f32 scores.
    for name in ["iris_svc_rbf", "iris_svc_poly_binary", "iris_nusvc_sigmoid"] {
        model_is_bit_exact_on_the_jit(&format!("sklearn/{name}"), "ort");
    }
}

#[test]
fn rms_norm_runs_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::Op;
    // Rows of 7, 15 and 5·3 elements (the CPU's four lane sums, a remainder), magnitudes
    // spread so that another summation order would change the last bits.
    let v: Vec<f32> = values(2 * 3 * 5 * 7, 41)
        .iter()
        .enumerate()
        .map(|(k, &a)| a * 10f32.powi(k as i32 % 9 - 4))
        .collect();
    for (shape, axis, sshape) in [
        (vec![30u64, 7], -1i64, vec![7u64]),
        (vec![14, 15], 1, vec![15]),
        (vec![2, 3, 5, 7], 2, vec![5, 7]),
        (vec![6, 35], 0, vec![6, 35]),
    ] {
        let x = Tensor::from_f32(shape.clone(), &v);
        let n: u64 = sshape.iter().product();
        let scale = Tensor::from_f32(sshape.clone(), &values(n as usize, 42));
        let op = Op::RmsNormalization {
            axis,
            epsilon: 1e-6,
        };
        bit_exact_on_the_jit(
            &format!("rms_norm {shape:?} axis {axis}"),
            op,
            &[&x, &scale],
        );
    }
    // onnxruntime's SimplifiedLayerNormalization (and its skip form) import as rms_norm.
    let x = Tensor::from_f32(vec![2, 3, 16], &v[..96]);
    let data = BTreeMap::from([("x".to_string(), x)]);
    model_on_the_jit_is_bit_exact("ops/ms_simplified_layer_norm", &data);
    let x = Tensor::from_f32(vec![3, 16], &v[..48]);
    let skip = Tensor::from_f32(vec![3, 16], &v[100..148]);
    let data = BTreeMap::from([("x".to_string(), x), ("skip".to_string(), skip)]);
    model_on_the_jit_is_bit_exact("ops/ms_skip_simplified_layer_norm", &data);
}

#[test]
fn top_k_runs_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    // Many ties (ties go to the lower index), NaNs (above every number), ±0, ±inf.
    let mut v: Vec<f64> = (0..60).map(|k| f64::from(k * 7 % 5 - 2)).collect();
    for (at, x) in [
        (1, f64::NAN),
        (7, f64::NAN),
        (3, -0.0),
        (11, f64::INFINITY),
        (13, -f64::INFINITY),
        (22, f64::NAN),
    ] {
        v[at] = x;
    }
    for d in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U8,
    ] {
        let vals: Vec<f64> = if d.is_int() {
            v.iter()
                .map(|&a| if a.is_finite() { a + 2.0 } else { 9.0 })
                .collect()
        } else {
            v.clone()
        };
        let x = Tensor::from_f64_as(d, vec![3, 4, 5], &vals).unwrap();
        // Every case in f32; two in the other types (each case is one JIT compile).
        let cases: &[(i64, i64, bool)] = if d == DType::F32 {
            &[
                (-1, 3, true),
                (-1, 3, false),
                (1, 4, true),
                (1, 4, false),
                (0, 2, true),
                (0, 3, false),
                (2, 5, true),
                (1, 0, false),
            ]
        } else {
            &[(-1, 3, true), (1, 4, false)]
        };
        for &(axis, k, largest) in cases {
            let op = Op::TopK {
                axis,
                largest,
                sorted: true,
            };
            let kt = Tensor::from_i64(vec![1], &[k]);
            let what = format!("{op:?} k={k} {d}");
            bit_exact_with_constants(&what, op, &[&x], &[&kt]);
        }
    }
    // One-node exports (sklearn's k-nearest-neighbours models select with top_k too, and
    // match the same way, but their hundreds of nodes take the JIT 25–50 s to compile).
    let x = Tensor::from_f64_as(DType::F32, vec![3, 10], &v[..30]).unwrap();
    let data = BTreeMap::from([("x".to_string(), x)]);
    model_on_the_jit_is_bit_exact("ops/top_k_largest", &data);
    let x = Tensor::from_f64_as(DType::F32, vec![6, 4, 2], &v[..48]).unwrap();
    let data = BTreeMap::from([("x".to_string(), x)]);
    model_on_the_jit_is_bit_exact("ops/top_k_smallest_axis0", &data);
}

/// Every `(what, op, x)` case as one node of one graph (input `x{k}`, output `y{k}`), run on
/// the JIT once and each node by its CPU kernel: every output equal bit for bit.
fn unary_cases_bit_exact_in_one_graph(cases: &[(String, fp8c_ir::Op, Tensor)]) {
    let mut g = fp8c_ir::Graph::new("cases");
    let mut feed = BTreeMap::new();
    for (k, (what, op, x)) in cases.iter().enumerate() {
        let name = format!("x{k}");
        let v = g.add_input(&name, x.ty()).unwrap();
        feed.insert(name, x.clone());
        let y = g.add_node(what, op.clone(), &[v]).unwrap()[0];
        g.set_output(&format!("y{k}"), y).unwrap();
    }
    let mut exe = fp8c_mlir::prepare(&g, g.weights()).unwrap();
    let got = exe.run(&feed).unwrap();
    for (k, (what, op, x)) in cases.iter().enumerate() {
        let want = &fp8c_eval::eval_op(op, &[x]).unwrap()[0];
        let g = &got[&format!("y{k}")];
        assert_eq!(g.ty(), want.ty(), "{what}: type");
        assert!(
            g.bytes() == want.bytes(),
            "{what}: JIT {:?} vs CPU {:?}",
            g.to_f64_vec(),
            want.to_f64_vec()
        );
    }
}

/// A tensor of `d` holding each of `values` wrapped to `d`'s width (its low bytes).
fn wrapped(d: fp8c_ir::DType, shape: Vec<u64>, values: &[i64]) -> Tensor {
    let bytes = values
        .iter()
        .flat_map(|v| v.to_le_bytes()[..d.size()].to_vec())
        .collect();
    Tensor::from_bytes(d, shape, bytes).unwrap()
}

#[test]
fn integer_reductions_run_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    // The five reductions of every integer type (and max / min of bool) over several axis
    // sets, kept and dropped: values at the type's extremes make sums and products wrap
    // (in i64, then to the type), small negative ones give means that truncate toward zero.
    let reductions = |axes: Option<Vec<i64>>, keepdims: bool| {
        [
            Op::ReduceSum {
                axes: axes.clone(),
                keepdims,
            },
            Op::ReduceMean {
                axes: axes.clone(),
                keepdims,
            },
            Op::ReduceProd {
                axes: axes.clone(),
                keepdims,
            },
            Op::ReduceMax {
                axes: axes.clone(),
                keepdims,
            },
            Op::ReduceMin { axes, keepdims },
        ]
    };
    let axis_sets = [
        (None, false),
        (Some(vec![]), true),
        (Some(vec![1]), false),
        (Some(vec![-1, 0]), true),
        (Some(vec![2]), true),
    ];
    let mut cases = Vec::new();
    for d in [
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
    ] {
        let bits = 8 * d.size() as u32;
        let (max, min) = if bits == 64 {
            (i64::MAX, i64::MIN)
        } else {
            ((1i64 << (bits - 1)) - 1, -(1i64 << (bits - 1)))
        };
        let v: Vec<i64> = values(60, u64::from(bits))
            .iter()
            .enumerate()
            .map(|(k, &r)| match k % 9 {
                0 => max,
                4 => min,
                7 => max - 1,
                _ => (r * 9.0).round() as i64,
            })
            .collect();
        let x = wrapped(d, vec![3, 4, 5], &v);
        for (axes, keepdims) in axis_sets.clone() {
            for op in reductions(axes.clone(), keepdims) {
                let what = format!("{} {d} axes {axes:?} keepdims {keepdims}", op.name());
                cases.push((what, op, x.clone()));
            }
        }
    }
    // Means that truncate toward zero: −7/2 → −3, 7/2 → 3, −10/2 → −5; a sum past i32's
    // range divided back into it; no elements: 0 (sum, mean), 1 (prod), the type's range.
    let means = Tensor::from_i64(vec![3, 2], &[-7, 0, 7, 0, -9, -1]);
    let wide = Tensor::from_i32(vec![1, 3], &[i32::MAX, i32::MAX, i32::MAX - 3]);
    let mean1 = Op::ReduceMean {
        axes: Some(vec![1]),
        keepdims: false,
    };
    cases.push(("negative means".into(), mean1.clone(), means.clone()));
    cases.push(("i32 mean of a sum past i32".into(), mean1.clone(), wide));
    for d in [DType::I64, DType::I32, DType::U8] {
        let empty = wrapped(d, vec![2, 0, 3], &[]);
        for op in reductions(Some(vec![1]), false) {
            let what = format!("{} {d} over no elements", op.name());
            cases.push((what, op, empty.clone()));
        }
    }
    // bool: max is any, min is all.
    let b: Vec<bool> = (0..24).map(|k| k % 5 != 0 && k % 7 != 3).collect();
    let b = Tensor::from_bool(vec![2, 3, 4], &b);
    for (axes, keepdims) in axis_sets.clone() {
        for op in reductions(axes.clone(), keepdims).into_iter().skip(3) {
            let what = format!("{} bool axes {axes:?}", op.name());
            cases.push((what, op, b.clone()));
        }
    }
    // f32 with empty axes (ONNX's absent axes input) reduces every axis, as on the CPU.
    let f = Tensor::from_f32(vec![3, 4], &values(12, 9));
    for op in reductions(Some(vec![]), false) {
        cases.push((format!("{} f32 axes []", op.name()), op, f.clone()));
    }
    unary_cases_bit_exact_in_one_graph(&cases);
    // The values themselves, for the record.
    let mut g = fp8c_ir::Graph::new("mean");
    let x = g.add_input("x", means.ty()).unwrap();
    let y = g.add_node("mean", mean1, &[x]).unwrap()[0];
    g.set_output("y", y).unwrap();
    let mut exe = fp8c_mlir::prepare(&g, g.weights()).unwrap();
    let got = exe
        .run(&BTreeMap::from([("x".to_string(), means)]))
        .unwrap();
    assert_eq!(got["y"].to_i64_vec().unwrap(), [-3, 3, -5]);
    // sklearn's ordinal-encoded categories (an i32 reduce_max) on onnxruntime's inputs.
    model_is_bit_exact_on_the_jit("sklearn/cats_ordinal", "ort");
}

/// onnxruntime-genai's tiny Llama export `model` (tests/models/genai, `llama-fp32` or
/// `llama-int4`: GroupQueryAttention over an i64 attention mask summed per row, MatMulNBits
/// in the int4 one) compiled in f32 for the shapes of `step`'s inputs: on the JIT every
/// output equals the CPU's bit for bit and is within `tol` (relative L2) of onnxruntime's.
fn genai_step_on_the_jit(model: &str, step: &str, tol: f64) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/models/genai")
        .join(model);
    let read = |f: &str| fp8c_session::npy::read_npz(&dir.join(f)).unwrap();
    let inputs: BTreeMap<String, Tensor> =
        read(&format!("{step}.inputs.npz")).into_iter().collect();
    let ort: BTreeMap<String, Tensor> = read(&format!("{step}.ort.npz")).into_iter().collect();
    let model_ = Model::load(dir.join("model.onnx")).unwrap();
    // The JIT runs attention decomposed; the CPU compares on the same (unfused) graph.
    let mut opts = CompileOptions::f32().no_fuse_attention(true);
    for (name, t) in &inputs {
        opts = opts.input_shape(name, t.shape());
    }
    let compiled = model_.compile(&opts).unwrap();
    let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
    let got = compiled
        .prepare(Device::Mlir)
        .unwrap()
        .run(&inputs)
        .unwrap();
    assert_eq!(got.len(), ort.len(), "{model} {step}: outputs");
    for (k, want) in &ort {
        let what = format!("{model} {step}: {k}");
        assert_eq!(got[k].ty(), cpu[k].ty(), "{what}");
        assert!(
            got[k].bytes() == cpu[k].bytes(),
            "{what}: JIT and CPU differ"
        );
        let err = rel_l2(&got[k], want);
        assert!(err <= tol, "{what}: {err:.2e} from onnxruntime");
    }
}

#[test]
fn onnxruntime_genai_llama_exports_run_on_mlirs_jit_like_the_cpu_and_onnxruntime() {
    // The first prompt (no past), one decode step and a chunked prompt after a past, each
    // within 1e-5 of onnxruntime (measured: ≤ 3.3e-7).
    for model in ["llama-fp32", "llama-int4"] {
        for step in ["prompt", "decode", "chunk"] {
            genai_step_on_the_jit(model, step, 1e-5);
        }
    }
}

#[test]
fn integer_and_f64_clip_run_on_mlirs_jit_like_the_cpu_bit_for_bit() {
    use fp8c_ir::{DType, Op};
    // Bounds inside the values' range and around it; unsigned values above the signed range.
    let v: Vec<i64> = (0..24).map(|k| (k * 37 % 23) - 11).collect();
    for d in [
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::U32,
        DType::F64,
    ] {
        let x = if d == DType::F64 {
            Tensor::from_f64(
                vec![4, 6],
                &v.iter().map(|&a| a as f64 / 3.0).collect::<Vec<_>>(),
            )
        } else {
            wrapped(d, vec![4, 6], &v)
        };
        let bound = |b: i64| {
            if d == DType::F64 {
                Tensor::from_f64(vec![], &[b as f64 / 3.0])
            } else {
                wrapped(d, vec![], &[b])
            }
        };
        // (-4, 7) wraps to lo > hi in the unsigned types: hi wins, as on the CPU.
        for (lo, hi) in [(-4, 7), (0, 100)] {
            let (l, h) = (bound(lo), bound(hi));
            bit_exact_on_the_jit(&format!("clip {d} {lo} {hi}"), Op::Clip, &[&x, &l, &h]);
        }
    }
}
