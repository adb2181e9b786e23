//! A compiled model: the rewritten graph and what the passes recorded about it (notes, IR
//! dumps, precision decisions, scaling and fusion statistics); its text forms, the explain
//! report, and [`Compiled::prepare`], which lowers it and loads it on a [`Device`].

use crate::error::{Context, Error, Result};
use crate::files::Output;
use crate::runner::{Device, HostAccum, Runner};
use fp8c_ir::Graph;
use fp8c_passes::PassCx;
use fp8c_passes::precision::Decision;
use std::path::{Path, PathBuf};

/// A graph after the pass pipeline, with the passes' records.
#[derive(Debug)]
pub struct Compiled {
    /// The compiled graph (static shapes, FP8 casts and scaling inserted, fused).
    pub graph: Graph,
    /// What the passes recorded: notes, IR dumps, decisions, scaling and fusion statistics.
    pub passes: PassCx,
    path: Option<PathBuf>,
    /// How a host device runs the fast-accumulation GEMMs (from the compile options).
    host_accum: HostAccum,
}

impl Compiled {
    /// Wraps a compiled graph and its pass context (`path`: the model's file, for messages).
    pub(crate) fn new(
        graph: Graph,
        passes: PassCx,
        path: Option<PathBuf>,
        host_accum: HostAccum,
    ) -> Self {
        Compiled {
            graph,
            passes,
            path,
            host_accum,
        }
    }

    /// Notes the passes left (what `fp8c -v` logs).
    pub fn notes(&self) -> &[String] {
        &self.passes.notes
    }

    /// `(pass, IR text)` after each pass named in [`crate::CompileOptions::print_after`].
    pub fn dumps(&self) -> &[(String, String)] {
        &self.passes.dumps
    }

    /// The precision decision of every GEMM-like node.
    pub fn decisions(&self) -> &[Decision] {
        &self.passes.decisions
    }

    /// When FP8 was asked for, the GEMMs that stay in high precision, one line per reason
    /// class with its count and an example reason (`3 GEMMs stay f32: dims not multiples of
    /// 16 (M=360 ...); use --pad-to-16`). Empty when every GEMM is in FP8 or FP8 was not asked
    /// for. What `fp8c run` and `fp8c train` print, so no run is silently less FP8 than asked.
    pub fn high_precision_summary(&self) -> Vec<String> {
        high_precision_summary(self.decisions())
    }

    /// The IR text form (parses back with [`crate::Model::load`] from a `.fp8ir` file).
    pub fn ir_text(&self) -> String {
        fp8c_ir::text::print(&self.graph)
    }

    /// The IR as JSON (`fp8c_ir::GraphDef`).
    pub fn json(&self) -> String {
        fp8c_ir::text::to_json(&self.graph)
    }

    /// Writes the IR text to `path` and, when the graph has parameter data, the data to
    /// the sidecar [`weights_path`]`(path)`. Both targets are checked first (never a link, a
    /// device, or the model being compiled; `/dev/null` discards) and written atomically, the
    /// sidecar first.
    pub fn write_ir(&self, path: &Path) -> Result<()> {
        let inputs: Vec<&Path> = self.path.as_deref().into_iter().collect();
        let ir = Output::check("-o", path, &inputs)?;
        if ir.is_discard() {
            return Ok(());
        }
        if !self.graph.weights().is_empty() {
            let wp = weights_path(path);
            let sidecar = Output::check("-o", &wp, &inputs)?;
            sidecar.write(|w| {
                let mut w = w;
                fp8c_ir::text::write_weights(&self.graph, &mut w).context(wp.display())
            })?;
        }
        ir.write_bytes(self.ir_text().as_bytes())
    }

    /// Writes `text` (the JSON form, say) to `path`, checked and atomically like
    /// [`Compiled::write_ir`].
    pub fn write_text(&self, path: &Path, text: &str) -> Result<()> {
        let inputs: Vec<&Path> = self.path.as_deref().into_iter().collect();
        Output::check("-o", path, &inputs)?.write_bytes(text.as_bytes())
    }

    /// The explain report: one row per GEMM (every node with `all`), then totals; for a
    /// training step (a graph with training ops and static shapes) also what its planned
    /// memory peak holds.
    pub fn report(&self, all: bool) -> fp8c_passes::report::Report {
        let mut r = fp8c_passes::report::build(&self.graph, &self.passes, all);
        if crate::memory::is_training(&self.graph)
            && let Ok(p) = fp8c_runtime::lower(&self.graph)
        {
            r.memory = Some(crate::memory::memory_report(&p));
        }
        r
    }

    /// Lowers the graph to a program and loads it on `device` with its weights. A host device
    /// runs [`Compiled::graph_for`] it (fast accumulation as the compile options' [`HostAccum`]
    /// says).
    pub fn prepare(&self, device: Device) -> Result<Runner> {
        let graph = self.graph_for(device);
        let program = self.in_file(fp8c_runtime::lower(&graph))?;
        let backend = device.backend();
        backend.check()?;
        let exe = self.in_file(backend.prepare_graph(&graph, &program, graph.weights()))?;
        Ok(Runner::new(graph.into_owned(), program, exe, device))
    }

    /// The graph as an MLIR module (linalg / arith / math on tensors), verified by MLIR, for
    /// MLIR's engines on a host (fast accumulation as [`HostAccum`] says): `--emit mlir`.
    /// Needs a build with the `mlir` feature.
    pub fn mlir_text(&self) -> Result<String> {
        let graph = self.graph_for(Device::Mlir);
        let r = fp8c_mlir::emit(&graph).map_err(|e| Error::Invalid(format!("--emit mlir: {e}")));
        self.in_file(r)
    }

    /// The graph `device` runs: the compiled graph, with its GEMMs' fast accumulation
    /// cleared on a host device unless the compile options asked for [`HostAccum::Hopper`]
    /// (what `--emit mlir` writes, too).
    pub fn graph_for(&self, device: Device) -> std::borrow::Cow<'_, Graph> {
        self.host_accum.graph_for(&self.graph, device)
    }

    fn in_file<T, E: Into<Error>>(&self, r: std::result::Result<T, E>) -> Result<T> {
        match &self.path {
            Some(p) => r.with_context(|| p.display()),
            None => r.map_err(Into::into),
        }
    }
}

/// The sidecar file holding parameter data next to an IR text file: `FILE.safetensors`.
pub fn weights_path(ir: &Path) -> PathBuf {
    let mut s = ir.as_os_str().to_owned();
    s.push(".safetensors");
    PathBuf::from(s)
}

/// Where fp8c's earlier releases put the sidecar (`FILE.weights`, a format no longer read).
pub fn old_weights_path(ir: &Path) -> PathBuf {
    let mut s = ir.as_os_str().to_owned();
    s.push(".weights");
    PathBuf::from(s)
}

/// The GEMMs of `decisions` that stay in high precision although FP8 was asked for, one line
/// per reason class (see [`Compiled::high_precision_summary`]).
pub fn high_precision_summary(decisions: &[Decision]) -> Vec<String> {
    use fp8c_passes::precision::{Precision, Rule};
    let mut classes: Vec<(Rule, Precision, fp8c_ir::DType, usize, &str)> = Vec::new();
    for d in decisions {
        if d.precision == Precision::Fp8 || d.rule == Rule::Mode {
            continue;
        }
        match classes
            .iter_mut()
            .find(|c| c.0 == d.rule && c.1 == d.precision && c.2 == d.dtype)
        {
            Some(c) => c.3 += 1,
            None => classes.push((d.rule, d.precision, d.dtype, 1, &d.reason)),
        }
    }
    classes
        .into_iter()
        .map(|(_, precision, dtype, n, reason)| {
            // A high-precision GEMM keeps its own float type (an f16 model's stay f16).
            let own = dtype.to_string();
            let word = match precision {
                Precision::Bf16 => "bf16",
                Precision::Own => "in their own type",
                _ if dtype.is_float() => own.as_str(),
                _ => "f32",
            };
            let gemms = if n == 1 { "GEMM stays" } else { "GEMMs stay" };
            format!("{n} {gemms} {word}: {reason}")
        })
        .chain(scaling_fallbacks(decisions))
        .collect()
}

/// One line per distinct scaling fallback of FP8 GEMMs (a per-tile recipe's GEMM kept
/// per-tensor scaling: `1 FP8 GEMM (fc1) gets per-tensor scaling instead of block: K = 64 ...`).
fn scaling_fallbacks(decisions: &[Decision]) -> Vec<String> {
    let mut by_why: Vec<(&str, Vec<&str>)> = Vec::new();
    for d in decisions {
        let Some(why) = d.scaling_fallback.as_deref() else {
            continue;
        };
        match by_why.iter_mut().find(|(w, _)| *w == why) {
            Some((_, names)) => names.push(&d.name),
            None => by_why.push((why, vec![&d.name])),
        }
    }
    by_why
        .into_iter()
        .map(|(why, names)| {
            let n = names.len();
            let shown = if n > 3 {
                format!("{}, ...", names[..3].join(", "))
            } else {
                names.join(", ")
            };
            let gemms = if n == 1 {
                "FP8 GEMM gets"
            } else {
                "FP8 GEMMs get"
            };
            format!("{n} {gemms} {why} ({shown})")
        })
        .collect()
}
