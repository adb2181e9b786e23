//! Shared by the per-pass tests (`tests/<pass>.rs`): read a small `.fp8ir` from `tests/<pass>/`,
//! run the pass (after the passes whose results it reads from the context, which leave the IR
//! as it is), and snapshot what the pass did: its output IR text, and what it records
//! in the context. Running twice must give the same text (the passes are deterministic).
//! Re-bless with `INSTA_UPDATE=always cargo test -p fp8c-passes --test <pass>`; review the
//! `.snap` diff like code.

#![allow(dead_code)]

use fp8c_ir::Graph;
use fp8c_passes::precision::{Decision, PolicyOptions};
use fp8c_passes::{Pass, PassCx, PassManager, PassOptions};
use std::fmt::Write;
use std::path::PathBuf;

/// `tests/<dir>/<file>`'s graph, parsed from its text.
pub fn load(dir: &str, file: &str) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir)
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    fp8c_ir::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Options for a pass test: the given policy, every GEMM eligible by size (`min_fp8_flops`
/// 0, so a small test graph decides as a large one would), the given recipe.
pub fn options(policy: PolicyOptions, recipe: fp8c_core::Recipe) -> PassOptions {
    PassOptions {
        policy: PolicyOptions {
            min_fp8_flops: policy.min_fp8_flops.or(Some(0)),
            ..policy
        },
        recipe,
        ..Default::default()
    }
}

/// Runs `passes` in order on `g` with the manager (which verifies the graph after each).
pub fn run(g: &Graph, passes: Vec<Box<dyn Pass>>, options: PassOptions) -> (Graph, PassCx) {
    let mut g = g.clone();
    let mut cx = PassCx::new(options);
    PassManager::with_passes(passes)
        .run(&mut g, &mut cx)
        .unwrap_or_else(|e| panic!("{e}"));
    (g, cx)
}

/// [`run`] twice, checking the output text is the same both times; returns the first run.
pub fn run_deterministic(
    g: &Graph,
    passes: impl Fn() -> Vec<Box<dyn Pass>>,
    options: PassOptions,
) -> (Graph, PassCx) {
    let (a, cx) = run(g, passes(), options.clone());
    let (b, _) = run(g, passes(), options);
    assert_eq!(
        fp8c_ir::print(&a),
        fp8c_ir::print(&b),
        "two runs of the same passes on the same graph differ"
    );
    (a, cx)
}

/// One line per decision: node, op, GEMM dims (for GEMMs), precision and the reason.
pub fn decisions(ds: &[Decision]) -> String {
    let mut s = String::new();
    for d in ds {
        let dim = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        let (m, n, k) = (d.dims.m, d.dims.n, d.dims.k);
        let dims = if [m, n, k].iter().any(Option::is_some) {
            format!(", m={} n={} k={}", dim(m), dim(n), dim(k))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "{} ({}{dims}): {:?}{} — {}",
            d.name,
            d.op,
            d.precision,
            if d.pad { ", padded to 16" } else { "" },
            d.reason
        );
    }
    s
}

/// Snapshots `text` as `tests/<dir>/snapshots/<name>.snap`, recording the input file.
pub fn snapshot(dir: &str, input: &str, name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(dir)
        .join("snapshots");
    insta::with_settings!({
        snapshot_path => path,
        prepend_module_to_snapshot => false,
        input_file => format!("passes/tests/{dir}/{input}"),
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}
