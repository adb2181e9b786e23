//! The fusion rules at the egg level: terms in, extracted terms out (`fusion::fuse_terms`).
//! Each test states the identity it checks.

use fp8c_ir::{DType, TensorType};
use fp8c_passes::fusion::fuse_terms;

const Q: &str = "{to=f8e4m3,saturate=true}";

fn f32s(dims: &[u64]) -> TensorType {
    TensorType::fixed(DType::F32, dims)
}

fn scalar() -> TensorType {
    TensorType::scalar(DType::F32)
}

/// Replaces `Q` by the quantize attribute leaf, runs, and returns the extracted terms.
fn fuse(terms: &[&str], leaves: &[(&str, TensorType)]) -> Vec<String> {
    let terms: Vec<String> = terms.iter().map(|t| t.replace("{Q}", Q)).collect();
    let refs: Vec<&str> = terms.iter().map(String::as_str).collect();
    fuse_terms(&refs, leaves, &[])
        .unwrap()
        .into_iter()
        .map(|t| t.replace(Q, "{Q}"))
        .collect()
}

fn fp8s(dims: &[u64]) -> TensorType {
    TensorType::fixed(DType::F8E4M3, dims)
}

fn x_and_scale() -> Vec<(&'static str, TensorType)> {
    vec![("x", f32s(&[8, 16])), ("s", scalar())]
}

fn gemm_leaves() -> Vec<(&'static str, TensorType)> {
    vec![
        ("qa", fp8s(&[8, 16])),
        ("qb", fp8s(&[16, 32])),
        ("sa", scalar()),
        ("sb", scalar()),
        ("bias", f32s(&[32])),
        ("s", scalar()),
    ]
}

#[test]
fn quantize_and_amax_of_one_tensor_read_it_once() {
    // quantize(x, s), amax(x) = quantize_amax(x, s).0, .1
    let out = fuse(&["(quantize {Q} %x %s)", "(amax %x)"], &x_and_scale());
    assert_eq!(
        out,
        [
            "(proj 0 (quantize_amax {Q} %x %s))",
            "(proj 1 (quantize_amax {Q} %x %s))"
        ]
    );
}

#[test]
fn a_quantize_alone_stays() {
    // Nothing to share: a lone quantize is already one kernel.
    let out = fuse(&["(quantize {Q} %x %s)"], &x_and_scale());
    assert_eq!(out, ["(quantize {Q} %x %s)"]);
}

#[test]
fn transpose_of_a_quantized_tensor_is_cast_transpose() {
    // transpose(quantize(x, s)), amax(x) = cast_transpose(x, s).1, .2; the plain q is .0
    let out = fuse(
        &[
            "(transpose {perm=[1,0]} (quantize {Q} %x %s))",
            "(quantize {Q} %x %s)",
            "(amax %x)",
        ],
        &x_and_scale(),
    );
    let ct = "(cast_transpose {perm=[1,0]} {Q} %x %s)";
    assert_eq!(
        out,
        [
            format!("(proj 1 {ct})"),
            format!("(proj 0 {ct})"),
            format!("(proj 2 {ct})")
        ]
    );
}

#[test]
fn layer_norm_emits_fp8_and_keeps_its_output_for_other_readers() {
    // quantize(ln(x)), amax(ln(x)), ln(x) + x: one layer_norm_quantize, its y feeds the add.
    let ln = "(layer_norm {axis=-1,epsilon=1e-5} %x %g %b)";
    let out = fuse(
        &[
            &format!("(quantize {{Q}} {ln} %s)"),
            &format!("(amax {ln})"),
            &format!("(add {ln} %x)"),
        ],
        &[
            ("x", f32s(&[8, 16])),
            ("g", f32s(&[16])),
            ("b", f32s(&[16])),
            ("s", scalar()),
        ],
    );
    let lnq = "(layer_norm_quantize {axis=-1,epsilon=1e-5} {Q} %x %s %g %b)";
    assert_eq!(
        out,
        [
            format!("(proj 1 {lnq})"),
            format!("(proj 2 {lnq})"),
            format!("(add (proj 0 {lnq}) %x)")
        ]
    );
}

#[test]
fn layer_norm_without_bias_emits_fp8_too() {
    let ln = "(layer_norm {axis=-1,epsilon=1e-5} %x %g)";
    let out = fuse(
        &[
            &format!("(quantize {{Q}} {ln} %s)"),
            &format!("(amax {ln})"),
        ],
        &[("x", f32s(&[8, 16])), ("g", f32s(&[16])), ("s", scalar())],
    );
    let lnq = "(layer_norm_quantize {axis=-1,epsilon=1e-5} {Q} %x %s %g)";
    assert_eq!(out, [format!("(proj 1 {lnq})"), format!("(proj 2 {lnq})")]);
}

#[test]
fn an_elementwise_producer_emits_fp8() {
    // quantize(relu(x)), amax(relu(x)) = elementwise_quantize[relu](x, s).1, .2
    let out = fuse(
        &["(quantize {Q} (relu %x) %s)", "(amax (relu %x))"],
        &x_and_scale(),
    );
    let ewq = r#"(elementwise_quantize {expr="relu[a0]",to=f8e4m3,saturate=true} %x %s)"#;
    assert_eq!(out, [format!("(proj 1 {ewq})"), format!("(proj 2 {ewq})")]);
}

#[test]
fn a_dag_of_elementwise_producers_becomes_one_program() {
    // The decomposed erf-GELU reads x twice: the program reads it once (input a0).
    let gelu = "(mul (mul %x (add (erf (div %x %c1)) %c2)) %c3)";
    let out = fuse(
        &[
            &format!("(quantize {{Q}} {gelu} %s)"),
            &format!("(amax {gelu})"),
        ],
        &[
            ("x", f32s(&[8, 16])),
            ("c1", scalar()),
            ("c2", scalar()),
            ("c3", scalar()),
            ("s", scalar()),
        ],
    );
    let ewq = r#"(elementwise_quantize {expr="div[a0,a1];erf[t0];add[t1,a2];mul[a0,t2];mul[t3,a3]",to=f8e4m3,saturate=true} %x %c1 %c2 %c3 %s)"#;
    assert_eq!(out, [format!("(proj 1 {ewq})"), format!("(proj 2 {ewq})")]);
}

#[test]
fn bias_and_gelu_fuse_into_the_gemm_epilogue() {
    // gelu(scaled_matmul(..) + bias) = scaled_matmul_epilogue[add; gelu](.., bias)
    let out = fuse(
        &[
            "(gelu {approximate=none} (add (scaled_matmul {out=f32,fast_accum=true} %qa %qb %sa %sb) %bias))",
        ],
        &gemm_leaves(),
    );
    assert_eq!(
        out,
        [
            r#"(scaled_matmul_epilogue {out=f32,fast_accum=true,expr="add[a0,a1];gelu{approximate=none}[t0]",to=~,saturate=false} %qa %qb %sa %sb %bias)"#
        ]
    );
}

#[test]
fn a_quantized_gemm_result_uses_the_d_scale_and_amax_of_d() {
    // quantize(epilogue(..), s), amax(epilogue(..)) = the GEMM's FP8 output and amax of D.
    let d = "(gelu {approximate=none} (add (scaled_matmul {out=f32,fast_accum=true} %qa %qb %sa %sb) %bias))";
    let out = fuse(
        &[&format!("(quantize {{Q}} {d} %s)"), &format!("(amax {d})")],
        &gemm_leaves(),
    );
    let e = r#"(scaled_matmul_epilogue {out=f32,fast_accum=true,expr="add[a0,a1];gelu{approximate=none}[t0]",to=f8e4m3,saturate=true} %qa %qb %sa %sb %bias %s)"#;
    assert_eq!(out, [format!("(proj 1 {e})"), format!("(proj 2 {e})")]);
}

#[test]
fn a_bare_gemm_feeding_a_quantize_gets_a_d_scale() {
    let out = fuse(
        &["(quantize {Q} (scaled_matmul {out=f32,fast_accum=true} %qa %qb %sa %sb) %s)"],
        &gemm_leaves(),
    );
    assert_eq!(
        out,
        [
            r#"(proj 1 (scaled_matmul_epilogue {out=f32,fast_accum=true,expr="",to=f8e4m3,saturate=true} %qa %qb %sa %sb %s))"#
        ]
    );
}

#[test]
fn delayed_scale_updates_of_a_step_are_one_kernel() {
    // Every amax_history_update + compute_scale pair = one batched_scale_update.
    let cs = "{fmt=f8e4m3,margin=0.0,source=history_max,epsilon=0.0,power_2=false}";
    let mut terms = Vec::new();
    for t in ["1", "2"] {
        let hist = format!("(amax_history_update %h{t} (amax %x{t}))");
        let scale = format!("(compute_scale {cs} (proj 0 {hist}) %s{t})");
        terms.push(format!("(proj 1 {hist})"));
        terms.push(format!("(proj 0 {scale})"));
        terms.push(format!("(proj 1 {scale})"));
    }
    let refs: Vec<&str> = terms.iter().map(String::as_str).collect();
    let hist = TensorType::fixed(DType::F32, &[16]);
    let leaves = [
        ("h1", hist.clone()),
        ("h2", hist),
        ("x1", f32s(&[8, 16])),
        ("x2", f32s(&[16, 32])),
        ("s1", scalar()),
        ("s2", scalar()),
    ];
    let out = fuse_terms(&refs, &leaves, &["h1", "h2"]).unwrap();
    let b = format!("(batched_scale_update {cs} %h1 (amax %x1) %s1 %h2 (amax %x2) %s2)");
    let want: Vec<String> = (0..6).map(|k| format!("(proj {k} {b})")).collect();
    assert_eq!(out, want);
    // Without histories to batch, the updates stay as they are.
    let out = fuse_terms(&refs, &leaves, &[]).unwrap();
    assert_eq!(out, terms);
}

#[test]
fn current_scaling_keeps_quantize_after_amax() {
    // quantize(x, compute_scale(amax(x))) cannot be quantize_amax(x, ..): its scale needs the
    // amax first. Extraction refuses the cycle and keeps the graph.
    let t = "(quantize {Q} %x (proj 0 (compute_scale {fmt=f8e4m3,margin=0.0,source=current,epsilon=0.0,power_2=false} (amax %x) %one)))";
    let out = fuse(&[t], &[("x", f32s(&[8, 16])), ("one", scalar())]);
    assert_eq!(out, [t]);
}

#[test]
fn an_epilogue_never_broadcasts_the_product() {
    // An epilogue computes one value per GEMM output element: an add that broadcasts the
    // product to a larger shape stays a separate kernel.
    let mut leaves = gemm_leaves();
    leaves.push(("big", f32s(&[4, 8, 32])));
    let t = "(add (scaled_matmul {out=f32,fast_accum=true} %qa %qb %sa %sb) %big)";
    assert_eq!(fuse(&[t], &leaves), [t]);
}

const BQ: &str = "{to=f8e4m3,saturate=true,rows=1,cols=8,scaling=pow2,epsilon=0.0}";

#[test]
fn an_elementwise_producer_emits_per_tile_fp8() {
    // block_quantize[1×8](relu(x)) = elementwise_block_quantize[relu](x).1, .2
    let t = format!("(block_quantize {BQ} (relu %x))");
    let out = fuse(
        &[&format!("(proj 0 {t})"), &format!("(proj 1 {t})")],
        &[("x", f32s(&[8, 16]))],
    );
    let ewbq = r#"(elementwise_block_quantize {expr="relu[a0]",to=f8e4m3,saturate=true,cols=8,scaling=pow2,epsilon=0.0} %x)"#;
    assert_eq!(
        out,
        [format!("(proj 1 {ewbq})"), format!("(proj 2 {ewbq})")]
    );
}

#[test]
fn per_tile_fp8_of_a_batched_activation_grows_the_program() {
    // block_quantize[1×8](mul(w, mul(x, r))) for x [2, 4, 16] (an RMSNorm's last two steps):
    // the whole chain emits the tiles; the scaling pass flattens the codes afterwards.
    let y = "(mul %w (mul %x %r))";
    let t = format!("(block_quantize {BQ} {y})");
    let out = fuse(
        &[&format!("(proj 0 {t})"), &format!("(proj 1 {t})")],
        &[
            ("x", f32s(&[2, 4, 16])),
            ("r", f32s(&[2, 4, 1])),
            ("w", f32s(&[16])),
        ],
    );
    let ewbq = r#"(elementwise_block_quantize {expr="mul[a1,a2];mul[a0,t0]",to=f8e4m3,saturate=true,cols=8,scaling=pow2,epsilon=0.0} %w %x %r)"#;
    assert_eq!(
        out,
        [format!("(proj 1 {ewbq})"), format!("(proj 2 {ewbq})")]
    );
}
