//! Saving a trained model as ONNX: the trained weights written into a copy of the source
//! model ([`fp8c_onnx::export::set_weights`]), saved atomically.

use crate::error::{Context, Error, Result};
use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes `weights` into a copy of the ONNX model at `src` and saves it to `dst`. Returns the
/// names found neither as an initializer nor as a `Constant` (their values are not saved).
/// Errors are prefixed with `src`.
///
/// The source's external data (a PyTorch dynamo export's `model.onnx.data`) is read in, so
/// the copy does not point at the source's files; it is saved as [`save_model`] saves: one
/// file, or its own `dst.data` past protobuf's 2 GiB.
pub fn save_onnx(
    src: &Path,
    dst: &Path,
    weights: &BTreeMap<String, Tensor>,
) -> Result<Vec<String>> {
    let bytes = std::fs::read(src)
        .map_err(|e| Error::io(format_args!("{}: cannot read", src.display()), e))?;
    let mut model = fp8c_onnx::decode_model(&bytes).with_context(|| src.display())?;
    let base = crate::files::parent_dir(src);
    fp8c_onnx::external_data::read_in(&mut model, Some(&base)).with_context(|| src.display())?;
    let missing =
        fp8c_onnx::export::set_weights(&mut model, weights).with_context(|| src.display())?;
    save_model(&model, &crate::files::Output::check("-o", dst, &[src])?)?;
    Ok(missing)
}

/// Writes `model` to `out`: one self-contained file below protobuf's 2 GiB limit, else the
/// weights go to `OUT.data` next to it (ONNX external data, as `onnx.save_model` with
/// `save_as_external_data` writes it). Returns the data file's path when one was written.
pub fn save_model(
    model: &fp8c_onnx::proto::ModelProto,
    out: &crate::files::Output,
) -> Result<Option<std::path::PathBuf>> {
    if prost::Message::encoded_len(model) <= fp8c_onnx::external_data::PROTOBUF_LIMIT {
        out.write_bytes(&prost::Message::encode_to_vec(model))?;
        return Ok(None);
    }
    let name = out
        .path()
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| {
            Error::invalid(format!(
                "{}: the model is over 2 GiB and needs an external data file named after it; give -o a UTF-8 file name",
                out.path().display()
            ))
        })?;
    let location = format!("{name}.data");
    let data_path = out.path().with_file_name(&location);
    let mut model = model.clone();
    // Initializers of 1 KiB and more go out (as onnx's default size_threshold).
    let data = fp8c_onnx::external_data::write_out(&mut model, &location, 1024);
    let bytes = prost::Message::encode_to_vec(&model);
    if bytes.len() > fp8c_onnx::external_data::PROTOBUF_LIMIT {
        return Err(Error::invalid(format!(
            "{}: the graph without its weights is still over 2 GiB ({} bytes)",
            out.path().display(),
            bytes.len()
        )));
    }
    if !out.is_discard() {
        crate::files::Output::check("-o's external data", &data_path, &[])?.write_bytes(&data)?;
    }
    out.write_bytes(&bytes)?;
    Ok(Some(data_path))
}

/// What [`fp8_onnx`] made; [`Fp8Onnx::save`] writes it.
#[derive(Clone, Debug)]
pub struct Fp8Onnx {
    /// The model, self-contained (the source's external data read in).
    model: fp8c_onnx::proto::ModelProto,
    /// Weights stored in FP8 (with a DequantizeLinear).
    pub weights: usize,
    /// Activations given a QuantizeLinear/DequantizeLinear pair.
    pub activations: usize,
    /// FP8 tensors calibrated, of how many.
    pub calibrated: (usize, usize),
    /// What calibration left out, one line per FP8 tensor with values that were not finite
    /// ([`crate::calibrate::Calibration::notes`]).
    pub calibration_notes: Vec<String>,
    /// Why GEMMs stayed in high precision (as `fp8c run` prints it), one line per reason.
    pub high_precision: Vec<String>,
    /// FP8 GEMMs of fp8c's graph the file keeps in high precision, one line each saying why
    /// (their operands are no ONNX node's inputs: an importer's helper GEMM).
    pub kept_high: Vec<String>,
}

impl Fp8Onnx {
    /// The encoded model as one file, or `None` past protobuf's 2 GiB, which only
    /// [`Fp8Onnx::save`] writes (with an external data file).
    pub fn bytes(&self) -> Option<Vec<u8>> {
        let len = prost::Message::encoded_len(&self.model);
        (len <= fp8c_onnx::external_data::PROTOBUF_LIMIT)
            .then(|| prost::Message::encode_to_vec(&self.model))
    }

    /// Writes the model to `out`: one self-contained file below protobuf's 2 GiB limit, else
    /// the weights go to `OUT.data` next to it (ONNX external data, as `onnx.save_model`
    /// with `save_as_external_data` writes it). Returns the data file's path when one was
    /// written.
    pub fn save(&self, out: &crate::files::Output) -> Result<Option<std::path::PathBuf>> {
        save_model(&self.model, out)
    }
}

/// The model as standard FP8 Q/DQ ONNX (see `fp8c_onnx::qdq`), compiled with `opts` (FP8).
///
/// Under delayed scaling it is calibrated on `calibration` through the f32 path
/// (TransformerEngine's `fp8_calibration`), then every input of every FP8 GEMM is quantized
/// with its calibrated scale — weights stored in FP8, activations given Q/DQ pairs — in a copy
/// of the source ONNX model. Under current scaling (per tensor or per tile: rowwise, block,
/// mxfp8) nothing is frozen and `calibration` is not used: each weight is stored quantized by
/// its own tiles, and each activation's scales are computed by the exported graph
/// (`fp8c_onnx::qdq_current`), blocked Q/DQ of opset 21 for the per-tile recipes.
pub fn fp8_onnx(
    model: &crate::Model,
    opts: &crate::CompileOptions,
    calibration: &BTreeMap<String, Tensor>,
) -> Result<Fp8Onnx> {
    use fp8c_passes::precision::{Precision, Rule};
    let src = model.path().ok_or_else(|| {
        Error::invalid(
            "the FP8 ONNX export rewrites the source ONNX model: load the model from a file",
        )
    })?;
    let fp8c_core::Recipe::Delayed(recipe) = opts.recipe else {
        return current_onnx(model, src, opts);
    };
    // Unfused, every FP8 GEMM reads its operands' scales straight from their state entries.
    let fp8 = model.compile(&opts.clone().no_fuse(true))?;
    if !has_fp8_gemm(&fp8) {
        // Nothing to calibrate or quantize: the file is the model as it is.
        return rewrite(src, &[], (0, 0), &fp8);
    }
    let f32 = model.compile(&opts.clone().with_precision(crate::PrecisionMode::F32))?;
    let mut runner = fp8.prepare(crate::Device::Cpu)?;
    let mut reference = f32.prepare(crate::Device::Cpu)?;
    let cal = crate::calibrate::calibrate(&mut runner, &mut reference, calibration, &recipe)
        .context("calibration")?;
    let state = runner.state();
    let to = match recipe.fp8_format.forward() {
        fp8c_core::Fp8Format::E4M3 => fp8c_ir::DType::F8E4M3,
        fp8c_core::Fp8Format::E5M2 => fp8c_ir::DType::F8E5M2,
    };
    let mut qdq = Vec::new();
    for d in fp8.decisions() {
        // Expert GEMMs read their weights gathered per token, scaled per expert: static
        // per-tensor Q/DQ has no form for them, so they stay in float in the export.
        if d.precision != Precision::Fp8 || matches!(d.rule, Rule::AlreadyFp8 | Rule::ExpertGemm) {
            continue;
        }
        for input in 0..2 {
            let t = scale_state(&fp8.graph, &d.name, input).ok_or_else(|| {
                Error::invalid(format!(
                    "GEMM \"{}\": cannot find the scaling state of its input {input}",
                    d.name
                ))
            })?;
            let scale = state
                .get(&format!("{t}.scale"))
                .and_then(|s| s.to_f32_vec().ok())
                .and_then(|v| v.first().copied())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "GEMM \"{}\": no scale for its input {input} ({t}) after calibration",
                        d.name
                    ))
                })?;
            qdq.push(fp8c_onnx::qdq::QdqInput {
                node: d.name.clone(),
                input,
                scale: fp8c_onnx::qdq::QdqScale::Static(scale),
                to,
                dtype: operand_dtype(model.graph(), &fp8.graph, &d.name, input),
            });
        }
    }
    let mut out = rewrite(src, &qdq, (cal.calibrated, cal.total), &fp8)?;
    out.calibration_notes = cal.notes();
    Ok(out)
}

/// Whether the policy put any GEMM of `compiled` in FP8 (a model already in FP8 does not
/// count: its scales are its own).
pub fn has_fp8_gemm(compiled: &crate::Compiled) -> bool {
    use fp8c_passes::precision::{Precision, Rule};
    compiled
        .decisions()
        .iter()
        .any(|d| d.precision == Precision::Fp8 && d.rule != Rule::AlreadyFp8)
}

/// [`fp8_onnx`] under current scaling: the tiles of every FP8 GEMM's operands, read from the
/// compiled graph (a `block_scaled_matmul`'s tiling and its `block_quantize`'s scale rule; a
/// GEMM that kept per-tensor scaling is tensorwise).
fn current_onnx(model: &crate::Model, src: &Path, opts: &crate::CompileOptions) -> Result<Fp8Onnx> {
    use fp8c_ir::{BlockScaling, Op};
    use fp8c_onnx::qdq::{QdqInput, QdqScale};
    use fp8c_onnx::qdq_current::CurrentTiles;
    use fp8c_passes::precision::{Precision, Rule};
    let fp8c_core::Recipe::Current(recipe) = opts.recipe else {
        unreachable!("current_onnx is called for current scaling");
    };
    let fp8 = model.compile(&opts.clone().no_fuse(true))?;
    let g = &fp8.graph;
    let forward = match recipe.fp8_format.forward() {
        fp8c_core::Fp8Format::E4M3 => fp8c_ir::DType::F8E4M3,
        fp8c_core::Fp8Format::E5M2 => fp8c_ir::DType::F8E5M2,
    };
    let tensorwise = CurrentTiles {
        k_block: 0,
        other: 0,
        scaling: if recipe.power_2_scale {
            BlockScaling::Pow2
        } else {
            BlockScaling::Fp32
        },
        epsilon: recipe.amax_epsilon,
    };
    let mut qdq = Vec::new();
    for d in fp8.decisions() {
        if d.precision != Precision::Fp8 || d.rule == Rule::AlreadyFp8 {
            continue;
        }
        let block = g.find_node(&format!("{}.fp8", d.name)).and_then(|id| {
            let n = g.node(id);
            let Op::BlockScaledMatMul {
                k_block,
                a_rows,
                b_cols,
                ..
            } = n.op
            else {
                return None;
            };
            let mut qa = g.node(n.inputs().first()?.node);
            // One-row tiles are quantized before the activation is flattened to 2-D.
            if let Op::Reshape { .. } = qa.op {
                qa = g.node(qa.inputs().first()?.node);
            }
            let Op::BlockQuantize {
                to,
                scaling,
                epsilon,
                ..
            } = qa.op
            else {
                return None;
            };
            let tiles = |other| CurrentTiles {
                k_block,
                other,
                scaling,
                epsilon,
            };
            Some(((tiles(a_rows), tiles(b_cols)), to))
        });
        let ((a, b), to) = block.unwrap_or(((tensorwise, tensorwise), forward));
        for (input, tiles) in [(0, a), (1, b)] {
            qdq.push(QdqInput {
                node: d.name.clone(),
                input,
                scale: QdqScale::Current(tiles),
                to,
                dtype: operand_dtype(model.graph(), g, &d.name, input),
            });
        }
    }
    rewrite(src, &qdq, (0, 0), &fp8)
}

/// The source model at `src` with the GEMM inputs in `qdq` quantized, with what the compiled
/// `fp8` graph says about the rest.
fn rewrite(
    src: &Path,
    qdq: &[fp8c_onnx::qdq::QdqInput],
    calibrated: (usize, usize),
    fp8: &crate::Compiled,
) -> Result<Fp8Onnx> {
    let bytes = std::fs::read(src)
        .map_err(|e| Error::io(format_args!("{}: cannot read", src.display()), e))?;
    let source = fp8c_onnx::decode_model(&bytes).with_context(|| src.display())?;
    let base_dir = match src.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let out =
        fp8c_onnx::qdq::export_qdq(&source, qdq, Some(base_dir)).with_context(|| src.display())?;
    Ok(Fp8Onnx {
        model: out.model,
        weights: out.weights,
        activations: out.activations,
        calibrated,
        calibration_notes: Vec::new(),
        high_precision: fp8.high_precision_summary(),
        kept_high: out.kept_high,
    })
}

/// The element type of input `input` of GEMM `gemm` in the source model: read from the
/// imported graph `imported` (the importer keeps ONNX's types), else the type the compiled
/// graph `compiled` gives the GEMM's result (ONNX's GEMMs take and give one type).
fn operand_dtype(
    imported: &fp8c_ir::Graph,
    compiled: &fp8c_ir::Graph,
    gemm: &str,
    input: usize,
) -> fp8c_ir::DType {
    let from_import = imported.find_node(gemm).and_then(|id| {
        let v = *imported.node(id).inputs().get(input)?;
        Some(imported.value_type(v).dtype)
    });
    let from_result = || {
        let id = compiled.find_node(gemm)?;
        Some(compiled.node(id).outputs.first()?.dtype)
    };
    from_import
        .or_else(from_result)
        .filter(|d| d.is_float())
        .unwrap_or(fp8c_ir::DType::F32)
}

/// The scaling-state tensor (`fc1.x`: its `.scale`, `.scale_inv`, `.amax_history`) that
/// quantizes input `input` of the GEMM called `gemm` in an unfused FP8 graph: the GEMM is a
/// `scaled_matmul` reading `scale_inv` states as inputs 2 and 3, or (convolutions) reads
/// `dequantize(q, scale_inv)` operands.
fn scale_state(g: &fp8c_ir::Graph, gemm: &str, input: usize) -> Option<String> {
    // The scaling pass names the FP8 product `{gemm}.fp8` when the GEMM keeps a high-precision
    // epilogue under the original name (Gemm's bias, a convolution's), else `{gemm}`.
    [format!("{gemm}.fp8"), gemm.to_string()]
        .iter()
        .find_map(|name| scale_state_of(g, name, input))
}

fn scale_state_of(g: &fp8c_ir::Graph, gemm: &str, input: usize) -> Option<String> {
    use fp8c_ir::Op;
    let id = g
        .node_ids()
        .into_iter()
        .find(|&id| g.node(id).name == gemm)?;
    let n = g.node(id);
    let scale_inv = match &n.op {
        Op::ScaledMatMul { .. } | Op::ScaledMatMulEpilogue { .. } => *n.inputs().get(2 + input)?,
        _ => {
            let mut v = *n.inputs().get(input)?;
            // Through views, casts and transposes to the dequantize that made the operand.
            loop {
                let p = g.node(v.node);
                match &p.op {
                    Op::Dequantize { .. } => break *p.inputs().get(1)?,
                    op if op.props().view
                        || matches!(op, Op::Cast { .. } | Op::Transpose { .. }) =>
                    {
                        v = *p.inputs().first()?
                    }
                    _ => return None,
                }
            }
        }
    };
    match &g.node(scale_inv.node).op {
        Op::State { name } => name.strip_suffix(".scale_inv").map(str::to_string),
        _ => None,
    }
}
