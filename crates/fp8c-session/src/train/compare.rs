//! Loss parity (`fp8c train --compare f32,bf16,fp8 [--seeds 0,1,2]`): the same initial
//! weights trained on the same data order once per precision and data order, then a table of
//! the final losses and their gaps to the first precision — with several orders the gap's
//! mean and standard error, next to the first precision's own spread across the orders (the
//! noise floor a gap must exceed to mean anything) — and one plot of every mean curve.

use super::fit::Fit;
use super::job::TrainConfig;
use crate::error::{Error, Result, bail};
use crate::options::precision_name;
use crate::plot;
use fp8c_passes::precision::PrecisionMode;
use std::fmt::Write;
use std::path::Path;

/// A parity comparison: the runs to make and, as they finish, their results.
#[derive(Clone, Debug)]
pub struct Parity {
    modes: Vec<PrecisionMode>,
    seeds: Vec<u64>,
    /// `runs[p][s]`: precision `p` trained with data order `seeds[s]`.
    runs: Vec<Vec<Fit>>,
    steps: u64,
}

impl Parity {
    /// A comparison of `modes` over data orders `seeds` (empty: `config`'s own seed) for
    /// `config`, which must be a single run without outputs of its own.
    pub fn new(config: &TrainConfig, modes: &[PrecisionMode], seeds: &[u64]) -> Result<Parity> {
        if modes.is_empty() {
            bail!("--compare: name at least one precision (e.g. f32,bf16,fp8)");
        }
        for (flag, set) in [
            ("--log", config.log.is_some()),
            ("--checkpoint", config.checkpoint.is_some()),
            ("--resume", config.resume.is_some()),
            ("-o", config.save_onnx.is_some()),
        ] {
            if set {
                bail!(
                    "--compare trains several runs: {flag} is for one run (train each precision on its own for it)"
                );
            }
        }
        if let Some(p) = &config.plot {
            plot::check_target(p).map_err(|e| Error::Invalid(format!("--plot {e}")))?;
        }
        let seeds = if seeds.is_empty() {
            vec![config.train.seed.unwrap_or(0)]
        } else {
            seeds.to_vec()
        };
        Ok(Parity {
            modes: modes.to_vec(),
            seeds,
            runs: modes.iter().map(|_| Vec::new()).collect(),
            steps: 0,
        })
    }

    /// The runs to make, in order (data order outer, precision inner): `(precision index,
    /// the run's config)`.
    pub fn configs(&self, config: &TrainConfig) -> Vec<(usize, TrainConfig)> {
        let mut v = Vec::new();
        for &seed in &self.seeds {
            for (p, &mode) in self.modes.iter().enumerate() {
                let mut one = config.clone();
                one.plot = None;
                one.train.seed = Some(seed);
                one.compile.precision = mode;
                v.push((p, one));
            }
        }
        v
    }

    /// A run's name in messages (`the bf16 run (seed 1)`).
    pub fn run_name(&self, p: usize, config: &TrainConfig) -> String {
        format!(
            "the {} run (seed {})",
            precision_name(self.modes[p]),
            config.train.seed.unwrap_or(0)
        )
    }

    /// Records the result of precision `p`'s next run; `steps` is the run's total steps.
    pub fn add(&mut self, p: usize, fit: Fit, steps: u64) {
        self.steps = steps;
        self.runs[p].push(fit);
    }

    /// How many steps the final loss averages: a fifth of the run, 1 to 50.
    fn tail(&self) -> usize {
        (self.steps as usize / 5).clamp(1, 50)
    }

    fn finals(&self) -> Vec<Vec<f64>> {
        let tail = self.tail();
        self.runs
            .iter()
            .map(|r| r.iter().map(|f| f.tail_loss(tail.max(1))).collect())
            .collect()
    }

    /// The Markdown table: one row per precision and data order, and with several orders one
    /// summary row per precision (mean final loss, the gap's mean ± standard error), then the
    /// first precision's seed-to-seed spread.
    pub fn table(&self) -> String {
        let (finals, tail) = (self.finals(), self.tail());
        let first = precision_name(self.modes[0]);
        let mut t = String::new();
        let _ = writeln!(
            t,
            "| precision | seed | final loss (mean of the last {tail} steps) | gap to {first} | steps/s |"
        );
        let _ = writeln!(t, "|---|---:|---:|---:|---:|");
        for (p, mode) in self.modes.iter().enumerate() {
            for (s, seed) in self.seeds.iter().enumerate() {
                let (f, base) = (finals[p][s], finals[0][s]);
                let _ = writeln!(
                    t,
                    "| {} | {seed} | {f:.4} | {:+.2}% | {:.2} |",
                    precision_name(*mode),
                    (f - base) / base * 100.0,
                    self.runs[p][s].steps_per_s()
                );
            }
        }
        if self.seeds.len() > 1 {
            for (p, mode) in self.modes.iter().enumerate() {
                let gaps: Vec<f64> = finals[p]
                    .iter()
                    .zip(&finals[0])
                    .map(|(f, b)| (f - b) / b * 100.0)
                    .collect();
                let (mean, se) = mean_and_standard_error(&gaps);
                let loss = finals[p].iter().sum::<f64>() / finals[p].len() as f64;
                let _ = writeln!(
                    t,
                    "| {} | mean of {} | {loss:.4} | {mean:+.2}% ± {se:.2}% | |",
                    precision_name(*mode),
                    self.seeds.len()
                );
            }
            let spread = relative_spread(&finals[0]);
            let _ = write!(
                t,
                "\n{first} seed-to-seed spread (std / mean of its final losses): {:.2}%; a gap within about \
                 twice its standard error is not resolved by {} data orders\n",
                spread * 100.0,
                self.seeds.len()
            );
        }
        t
    }

    /// Plots each precision's mean curve over the data orders to `path`.
    pub fn plot(&self, path: &Path) -> Result<()> {
        let series: Vec<plot::Series> = self
            .modes
            .iter()
            .zip(&self.runs)
            .map(|(mode, r)| plot::Series {
                label: precision_name(*mode).into(),
                points: mean_curve(r),
            })
            .collect();
        let title = if self.seeds.len() > 1 {
            format!("training loss (mean of {} data orders)", self.seeds.len())
        } else {
            "training loss".to_string()
        };
        plot::plot(&series, &title, 10, path).map_err(Error::Invalid)
    }
}

/// Mean and standard error of the mean.
fn mean_and_standard_error(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

/// Sample standard deviation over the mean.
fn relative_spread(v: &[f64]) -> f64 {
    let (mean, se) = mean_and_standard_error(v);
    se * (v.len() as f64).sqrt() / mean
}

/// The step-wise mean of several loss curves (as long as the shortest).
fn mean_curve(runs: &[Fit]) -> Vec<(f64, f64)> {
    let n = runs.iter().map(|r| r.losses.len()).min().unwrap_or(0);
    (0..n)
        .map(|i| {
            let l = runs.iter().map(|r| r.losses[i].1).sum::<f64>() / runs.len() as f64;
            (runs[0].losses[i].0 as f64, l)
        })
        .collect()
}
