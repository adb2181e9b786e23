//! The explain report (`fp8c compile --report`): one row per GEMM-like node with its GEMM
//! dims, decision and reason, then totals. `--report=json` prints the same with stable keys.

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
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// One row per GEMM-like node (every node with `--report-all`).
    pub nodes: Vec<Row>,
    /// Totals.
    pub totals: Totals,
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
    Report {
        nodes,
        totals: Totals {
            fp8_flops_fraction: if total == 0 {
                0.0
            } else {
                fp8 as f64 / total as f64
            },
            fp8_gemms: cx
                .decisions
                .iter()
                .filter(|d| d.precision == Precision::Fp8)
                .count(),
            gemms: cx.decisions.len(),
            weight_bytes_before: before,
            weight_bytes_after: after,
            inserted_nodes: cx.scaling.inserted_nodes(),
        },
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
            let _ = writeln!(
                s,
                "{:<w$}  {:<12} {:>20}  {:<9} {}",
                r.name, r.op, mnk, prec, r.reason
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
        s
    }
}
