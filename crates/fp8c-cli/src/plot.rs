//! `fp8c plot`: overlay the loss curves of several training logs (CSV) in one plot.

use anyhow::{Result, anyhow, bail};
use clap::Args;
use fp8c_session::plot;
use std::path::PathBuf;

/// `fp8c plot`.
#[derive(Args, Debug)]
pub struct PlotArgs {
    /// Training logs (CSV with `step` and `loss` columns), one curve each.
    #[arg(required = true, value_name = "LOG.csv")]
    pub logs: Vec<PathBuf>,
    /// The plot (.svg, or .png without text).
    #[arg(short = 'o', long = "out", alias = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Curve labels, in order (default: the file names).
    #[arg(long = "label", value_name = "NAME")]
    pub labels: Vec<String>,
    /// Moving-average window in steps (1: raw).
    #[arg(long, default_value_t = 10)]
    pub smooth: usize,
    /// Plot title.
    #[arg(long, default_value = "training loss")]
    pub title: String,
}

/// `fp8c plot`.
pub fn plot_cmd(a: PlotArgs) -> Result<()> {
    if !a.labels.is_empty() && a.labels.len() != a.logs.len() {
        bail!(
            "{} --label given for {} logs: give one per log or none",
            a.labels.len(),
            a.logs.len()
        );
    }
    let mut series = Vec::new();
    for (i, p) in a.logs.iter().enumerate() {
        let label = a.labels.get(i).cloned().unwrap_or_else(|| {
            p.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string())
        });
        series.push(plot::read_csv(p, &label).map_err(|e| anyhow!(e))?);
    }
    plot::plot(&series, &a.title, a.smooth, &a.output).map_err(|e| anyhow!(e))?;
    eprintln!("fp8c plot: wrote {}", a.output.display());
    Ok(())
}
