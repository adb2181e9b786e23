//! The explain report (`fp8c compile --report`): one row per GEMM-like node with its GEMM
//! dims, decision and reason, then totals, and for a training step what its planned memory
//! peak holds (filled in by the session, which lowers the graph: [`Memory`]).
//! `--report=json` prints the same with stable keys.

use crate::PassCx;
use crate::precision::{Decision, Precision};
use fp8c_ir::{Graph, Op};
use serde::Serialize;
use std::fmt::Write;

/// One report row.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Node name.
    pub name: String,
    /// Op name.
    pub op: String,
    /// GEMM M (None if not static).
    pub m: Option<u64>,
    /// GEMM N.
    pub n: Option<u64>,
    /// GEMM K.
    pub k: Option<u64>,
    /// `fp8`, `bf16` or `f32`.
    pub precision: Precision,
    /// Why.
    pub reason: String,
    /// The scaling the GEMM got instead of the recipe's, and why (`Decision::scaling_fallback`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling_fallback: Option<String>,
}

/// Report totals.
#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    /// Share of GEMM FLOPs (of GEMMs with static shapes) that run in FP8.
    pub fp8_flops_fraction: f64,
    /// Number of GEMM-like nodes in FP8.
    pub fp8_gemms: usize,
    /// Number of GEMM-like nodes.
    pub gemms: usize,
    /// Bytes of all parameters as stored in the model.
    pub weight_bytes_before: u64,
    /// Bytes of all parameters when every FP8-quantized weight is stored as FP8 (1 byte).
    pub weight_bytes_after: u64,
    /// amax + compute_scale + quantize nodes inserted by the scaling pass.
    pub inserted_nodes: usize,
    /// Whether the fusion pass ran (not with `--no-fuse` or `--stop-after` before it); if not,
    /// the `*_after_fusion` figures equal the `*_before_fusion` ones.
    pub fusion: bool,
    /// Kernel launches per step before the fusion pass (cost model: `fusion/cost.rs`).
    pub kernels_before_fusion: u64,
    /// Kernel launches per step after it.
    pub kernels_after_fusion: u64,
    /// Estimated bytes moved per step before fusion.
    pub bytes_before_fusion: u64,
    /// Estimated bytes moved per step after fusion.
    pub bytes_after_fusion: u64,
    /// Kernels that exist because of FP8 (they read or write FP8, or maintain scaling state:
    /// amax, compute_scale, history update, quantize, cast, FP8 GEMMs with what fused into
    /// them), per FP8 GEMM, before fusion (0 without FP8 GEMMs).
    pub fp8_kernels_per_gemm_before_fusion: f64,
    /// The same after fusion.
    pub fp8_kernels_per_gemm_after_fusion: f64,
    /// Bytes moved to quantize activations, per activation element, before fusion.
    pub act_quant_bytes_per_element_before_fusion: f64,
    /// The same after fusion (fused producers count only their FP8 output and amax).
    pub act_quant_bytes_per_element_after_fusion: f64,
    /// One read of the activation plus one FP8 write, per element (the standalone floor).
    pub act_quant_bytes_per_element_floor: f64,
}

/// Bytes of one role at the planned memory peak.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryRow {
    /// The role (`weights`, `gradients`, `optimizer state`, `saved activations`,
    /// `workspace`, `other`).
    pub role: String,
    /// Bytes.
    pub bytes: u64,
    /// What it counts.
    pub what: String,
}

/// What a training step's planned memory peak holds, by role (`fp8c_runtime`'s memory
/// breakdown).
#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    /// The step at which the planned arena peaks.
    pub peak_step: usize,
    /// The node that step runs.
    pub peak_node: String,
    /// Steps of the program.
    pub steps: usize,
    /// Resident bytes plus the arena bytes live at the peak.
    pub total_bytes: u64,
    /// By role.
    pub rows: Vec<MemoryRow>,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// One row per GEMM-like node (every node with `--report-all`).
    pub nodes: Vec<Row>,
    /// Totals.
    pub totals: Totals,
    /// A training step's memory at its planned peak (None for inference graphs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
}

fn row(d: &Decision) -> Row {
    Row {
        name: d.name.clone(),
        op: d.op.clone(),
        m: d.dims.m,
        n: d.dims.n,
        k: d.dims.k,
        precision: d.precision,
        reason: d.reason.clone(),
        scaling_fallback: d.scaling_fallback.clone(),
    }
}

/// Builds the report from the compiled graph and what the passes recorded.
pub fn build(g: &Graph, cx: &PassCx, all: bool) -> Report {
    let mut nodes: Vec<Row> = cx.decisions.iter().map(row).collect();
    if all {
        nodes.extend(cx.others.iter().map(row));
    }
    let (mut total, mut fp8) = (0u128, 0u128);
    for d in &cx.decisions {
        if let Some(f) = d.flops {
            total += f as u128;
            if d.precision == Precision::Fp8 {
                fp8 += f as u128;
            }
        }
    }
    let mut before = 0u64;
    let mut after = 0u64;
    for &p in g.params() {
        let Op::Param { name } = &g.node(p).op else {
            continue;
        };
        let ty = &g.node(p).outputs[0];
        let bytes = ty.num_bytes().unwrap_or(0);
        before += bytes;
        after += if cx.scaling.quantized_params.contains(name) {
            ty.num_elements().unwrap_or(0)
        } else {
            bytes
        };
    }
    // Weights frozen at compile time (`freeze-weights`): the FP8 params that replaced f32
    // master weights are already counted in `after`; `before` held the f32 weights instead.
    let (dropped, added) = cx.frozen_weight_bytes;
    before = before - added.min(before) + dropped;
    let (fuse_before, fuse_after) = match &cx.fusion {
        Some(f) => (f.before.clone(), f.after.clone()),
        None => {
            let c = crate::fusion::step_cost(g);
            (c.clone(), c)
        }
    };
    let fp8_gemms = cx
        .decisions
        .iter()
        .filter(|d| d.precision == Precision::Fp8)
        .count();
    let per = |num: u64, den: u64| {
        if den == 0 {
            0.0
        } else {
            num as f64 / den as f64
        }
    };
    Report {
        nodes,
        totals: Totals {
            fp8_flops_fraction: if total == 0 {
                0.0
            } else {
                fp8 as f64 / total as f64
            },
            fp8_gemms,
            gemms: cx.decisions.len(),
            weight_bytes_before: before,
            weight_bytes_after: after,
            inserted_nodes: cx.scaling.inserted_nodes(),
            fusion: cx.fusion.is_some(),
            kernels_before_fusion: fuse_before.kernels,
            kernels_after_fusion: fuse_after.kernels,
            bytes_before_fusion: fuse_before.bytes,
            bytes_after_fusion: fuse_after.bytes,
            fp8_kernels_per_gemm_before_fusion: per(fuse_before.fp8_kernels, fp8_gemms as u64),
            fp8_kernels_per_gemm_after_fusion: per(fuse_after.fp8_kernels, fp8_gemms as u64),
            act_quant_bytes_per_element_before_fusion: per(
                fuse_before.act_quant_bytes,
                fuse_before.act_quant_elements,
            ),
            act_quant_bytes_per_element_after_fusion: per(
                fuse_after.act_quant_bytes,
                fuse_after.act_quant_elements,
            ),
            act_quant_bytes_per_element_floor: per(
                fuse_after.act_quant_floor_bytes,
                fuse_after.act_quant_elements,
            ),
        },
        memory: None,
    }
}

/// `bytes` in the largest binary unit that keeps it ≥ 1.
pub fn human_bytes(bytes: u64) -> String {
    const K: f64 = 1024.0;
    let f = bytes as f64;
    if f >= K * K * K {
        format!("{:.2} GiB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MiB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KiB", f / K)
    } else {
        format!("{bytes} B")
    }
}

impl std::fmt::Display for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "memory at the planned peak (step {} of {}, \"{}\"): {}",
            self.peak_step,
            self.steps,
            self.peak_node,
            human_bytes(self.total_bytes)
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "  {:<18} {:>10}  ({})",
                r.role,
                human_bytes(r.bytes),
                r.what
            )?;
        }
        Ok(())
    }
}

fn dim(v: Option<u64>) -> String {
    v.map_or("?".into(), |x| x.to_string())
}

impl Report {
    /// The human-readable table.
    pub fn to_table(&self) -> String {
        let w = self
            .nodes
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(4)
            .clamp(4, 80);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<w$}  {:<12} {:>20}  {:<9} reason",
            "node", "op", "MxNxK", "precision"
        );
        for r in &self.nodes {
            let mnk = if r.m.is_none() && r.n.is_none() && r.k.is_none() {
                "-".to_string()
            } else {
                format!("{}x{}x{}", dim(r.m), dim(r.n), dim(r.k))
            };
            let prec = serde_json::to_value(r.precision)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let reason = match &r.scaling_fallback {
                Some(f) => format!("{}; {f}", r.reason),
                None => r.reason.clone(),
            };
            let _ = writeln!(
                s,
                "{:<w$}  {:<12} {:>20}  {:<9} {}",
                r.name, r.op, mnk, prec, reason
            );
        }
        let t = &self.totals;
        let _ = writeln!(s);
        let _ = writeln!(s, "FP8 GEMMs:            {} of {}", t.fp8_gemms, t.gemms);
        let _ = writeln!(
            s,
            "FP8 share of GEMM FLOPs: {:.1}%",
            t.fp8_flops_fraction * 100.0
        );
        let _ = writeln!(
            s,
            "weight bytes:         {} -> {} (FP8 weights stored in 1 byte)",
            t.weight_bytes_before, t.weight_bytes_after
        );
        let _ = writeln!(
            s,
            "inserted amax/scale/quantize nodes: {}",
            t.inserted_nodes
        );
        // "a -> b after fusion", or just "a (fusion off)" when the pass did not run.
        let change = |before: String, after: String| {
            if t.fusion {
                format!("{before} -> {after} after fusion")
            } else {
                format!("{before} (fusion off)")
            }
        };
        let _ = writeln!(
            s,
            "kernels per step:     {}",
            change(
                t.kernels_before_fusion.to_string(),
                t.kernels_after_fusion.to_string()
            )
        );
        let _ = writeln!(
            s,
            "bytes moved per step (estimated): {}",
            change(
                t.bytes_before_fusion.to_string(),
                t.bytes_after_fusion.to_string()
            )
        );
        if t.fp8_gemms > 0 {
            let _ = writeln!(
                s,
                "FP8 kernels per FP8 GEMM (they read or write FP8 or update scales): {}",
                change(
                    format!("{:.2}", t.fp8_kernels_per_gemm_before_fusion),
                    format!("{:.2}", t.fp8_kernels_per_gemm_after_fusion)
                )
            );
        }
        if t.act_quant_bytes_per_element_floor > 0.0 {
            let _ = writeln!(
                s,
                "activation quantization bytes per element: {} (one read + one FP8 write: {:.2})",
                change(
                    format!("{:.2}", t.act_quant_bytes_per_element_before_fusion),
                    format!("{:.2}", t.act_quant_bytes_per_element_after_fusion)
                ),
                t.act_quant_bytes_per_element_floor
            );
        }
        if let Some(m) = &self.memory {
            let _ = write!(s, "\n{m}");
        }
        s
    }
}
