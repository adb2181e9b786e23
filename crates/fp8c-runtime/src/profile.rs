//! Where a program's time goes (`fp8c run --profile`, `fp8c train --profile`; issue #19):
//! wall time per step of the program, from an observer of `run_observed`, summed per op kind
//! and per node over every run profiled, and printed as two tables with each row's share.
//!
//! The time of a step is the time from the previous step's observation (or the run's start)
//! to its own: on the CPU backend that is the step's evaluation; on CUDA, where an observed run
//! downloads every step's outputs, it includes that copy, so the shares there describe the
//! eager, observed run rather than a graph replay.

use crate::program::Step;
use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Accumulated step times.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    /// By node: (op kind, total time, calls), in first-seen order.
    nodes: Vec<(String, String, Duration, u64)>,
    index: BTreeMap<String, usize>,
    runs: u64,
    /// Time of whole runs (first step start to the run's end), summed.
    total: Duration,
}

/// One row of a profile table.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRow {
    /// The op kind (`matmul`) or the node's name.
    pub name: String,
    /// For a node row, its op kind; for an op-kind row, how many nodes have it.
    pub detail: String,
    /// Total time over the profiled runs.
    pub time: Duration,
    /// Share of the time of all steps.
    pub share: f64,
    /// Executions over the profiled runs.
    pub calls: u64,
}

/// Times one run: call [`RunTimer::observe`] from the run's observer, then
/// [`RunTimer::finish`].
#[derive(Debug)]
pub struct RunTimer<'p> {
    profile: &'p mut Profile,
    start: Instant,
    last: Instant,
    /// Steps counted with no time (computed when the program was prepared).
    precomputed: std::collections::BTreeSet<String>,
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Profile {
        Profile::default()
    }

    /// Starts timing a run now.
    pub fn start(&mut self) -> RunTimer<'_> {
        self.start_skipping(std::collections::BTreeSet::new())
    }

    /// Starts timing a run now, counting the steps named in `precomputed` (a backend's
    /// [`crate::Executable::precomputed_steps`]) with no time: the time before their
    /// observation is the backend showing them to the observer, not running them.
    pub fn start_skipping(
        &mut self,
        precomputed: std::collections::BTreeSet<String>,
    ) -> RunTimer<'_> {
        let now = Instant::now();
        RunTimer {
            profile: self,
            start: now,
            last: now,
            precomputed,
        }
    }

    fn add(&mut self, step: &Step, d: Duration) {
        let k = match self.index.get(&step.node) {
            Some(&k) => k,
            None => {
                self.nodes.push((
                    step.node.clone(),
                    step.op.name().to_string(),
                    Duration::ZERO,
                    0,
                ));
                self.index.insert(step.node.clone(), self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        self.nodes[k].2 += d;
        self.nodes[k].3 += 1;
    }

    /// Runs profiled.
    pub fn runs(&self) -> u64 {
        self.runs
    }

    /// The summed time of the profiled runs.
    pub fn total(&self) -> Duration {
        self.total
    }

    fn steps_time(&self) -> Duration {
        self.nodes.iter().map(|n| n.2).sum()
    }

    /// Time per op kind, largest first.
    pub fn by_op(&self) -> Vec<ProfileRow> {
        let all = self.steps_time().as_secs_f64().max(1e-12);
        let mut m: BTreeMap<&str, (Duration, u64, u64)> = BTreeMap::new();
        for (_, op, d, calls) in &self.nodes {
            let e = m.entry(op.as_str()).or_default();
            e.0 += *d;
            e.1 += calls;
            e.2 += 1;
        }
        let mut rows: Vec<ProfileRow> = m
            .into_iter()
            .map(|(op, (time, calls, nodes))| ProfileRow {
                name: op.to_string(),
                detail: format!("{nodes} node{}", if nodes == 1 { "" } else { "s" }),
                time,
                share: time.as_secs_f64() / all,
                calls,
            })
            .collect();
        rows.sort_by(|a, b| b.time.cmp(&a.time).then(a.name.cmp(&b.name)));
        rows
    }

    /// Time per node, largest first.
    pub fn by_node(&self) -> Vec<ProfileRow> {
        let all = self.steps_time().as_secs_f64().max(1e-12);
        let mut rows: Vec<ProfileRow> = self
            .nodes
            .iter()
            .map(|(node, op, time, calls)| ProfileRow {
                name: node.clone(),
                detail: op.clone(),
                time: *time,
                share: time.as_secs_f64() / all,
                calls: *calls,
            })
            .collect();
        rows.sort_by(|a, b| b.time.cmp(&a.time).then(a.name.cmp(&b.name)));
        rows
    }

    /// The two tables as text: every op kind, then the `top` slowest nodes (none for 0);
    /// times are the mean per profiled run.
    pub fn report(&self, top: usize) -> String {
        // Times are per run (the mean over the profiled runs), calls are totals.
        let runs = self.runs.max(1) as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / runs;
        let mut s = format!(
            "profile: {} run{}, per run {:.3} ms in all, {:.3} ms in steps\n",
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            ms(self.total),
            ms(self.steps_time())
        );
        s += &format!(
            "  {:<28} {:>10} {:>7} {:>9}  nodes\n",
            "op", "ms/run", "share", "calls"
        );
        for r in self.by_op() {
            s += &format!(
                "  {:<28} {:>10.3} {:>6.1}% {:>9}  {}\n",
                r.name,
                ms(r.time),
                100.0 * r.share,
                r.calls,
                r.detail
            );
        }
        if top == 0 {
            return s;
        }
        let nodes = self.by_node();
        s += &format!(
            "  slowest nodes ({} of {}):\n  {:>10} {:>7} {:>9}  {:<24} node\n",
            top.min(nodes.len()),
            nodes.len(),
            "ms/run",
            "share",
            "calls",
            "op"
        );
        for r in nodes.iter().take(top) {
            s += &format!(
                "  {:>10.3} {:>6.1}% {:>9}  {:<24} {}\n",
                ms(r.time),
                100.0 * r.share,
                r.calls,
                r.detail,
                r.name
            );
        }
        s
    }
}

impl RunTimer<'_> {
    /// Records `step` as having run since the previous observation.
    pub fn observe(&mut self, step: &Step, _inputs: &[&Tensor], _outputs: &[Tensor]) {
        let now = Instant::now();
        let d = if self.precomputed.contains(&step.node) {
            Duration::ZERO
        } else {
            now - self.last
        };
        self.last = now;
        self.profile.add(step, d);
    }

    /// Leaves the time since the last observation out of the profile (work the observer did
    /// for something else, such as `--stats`).
    pub fn reset(&mut self) {
        self.last = Instant::now();
    }

    /// Ends the run.
    pub fn finish(self) {
        self.profile.total += self.start.elapsed();
        self.profile.runs += 1;
    }
}
