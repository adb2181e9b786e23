//! The one loop over golden cases: each case runs on a device (`devices::outputs`: the CPU
//! evaluates the op, the other devices run it as a one-node program), and every output is
//! compared with the reference within the device's tolerance. Refusals the device states are counted by reason; everything else that goes
//! wrong is a failure, and all failures are reported together.

use crate::devices::{self, Refusal};
use fp8c_eval::golden::{self, mismatch};
use fp8c_session::Device;
use std::collections::BTreeMap;
use std::io::Write;

/// A case file and what every device must do with it.
pub struct CaseSet {
    /// For messages (`op cases`).
    pub what: &'static str,
    /// The file's text (`fp8c_eval::golden`'s format).
    pub json: &'static str,
    /// The fewest cases the file holds (a truncated file fails).
    pub min_cases: usize,
}

/// What one device did with a case set.
pub struct Tally {
    /// The names of the cases that ran (and matched, when there are no failures).
    pub ran: Vec<String>,
    /// Cases the device does not take, by stated reason.
    pub unsupported: BTreeMap<String, usize>,
    /// Why each failing case failed.
    pub failures: Vec<String>,
    /// Cases in the file.
    pub total: usize,
}

impl Tally {
    /// The cases the device refused.
    pub fn skipped(&self) -> usize {
        self.unsupported.values().sum()
    }
}

/// Runs every case of `set` on `device` and prints, past the test harness's capture (CI's log
/// shows it), how many ran and why the others did not.
pub fn run(set: &CaseSet, device: Device) -> Tally {
    let cases = golden::cases(set.json).unwrap_or_else(|e| panic!("{}: {e}", set.what));
    assert!(
        cases.len() >= set.min_cases,
        "{}: expected at least {} cases, got {}",
        set.what,
        set.min_cases,
        cases.len()
    );
    let mut t = Tally {
        ran: Vec::new(),
        unsupported: BTreeMap::new(),
        failures: Vec::new(),
        total: cases.len(),
    };
    for case in &cases {
        let got = match devices::outputs(device, case) {
            Ok(outs) => outs,
            Err(Refusal::Unsupported(why)) => {
                *t.unsupported.entry(why).or_default() += 1;
                continue;
            }
            Err(Refusal::Failed(e)) => {
                t.failures.push(format!("{}: {e}", case.name));
                continue;
            }
        };
        t.ran.push(case.name.clone());
        let (atol, rtol) = devices::tolerance(device, case);
        let want = case.outputs();
        if got.len() < want.len() {
            let n = got.len();
            t.failures
                .push(format!("{}: {n} outputs, want {}", case.name, want.len()));
            continue;
        }
        for (k, (got, want)) in got.iter().zip(&want).enumerate() {
            if let Some(why) = mismatch(got, want, atol, rtol) {
                t.failures.push(format!(
                    "{} (output {k}, from {}): {why}",
                    case.name, case.source
                ));
            }
        }
    }
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "{} of {} golden {} ran on {device}; {} refused as not supported{}",
        t.ran.len(),
        t.total,
        set.what,
        t.skipped(),
        if t.unsupported.is_empty() { "" } else { ":" }
    );
    for (why, n) in &t.unsupported {
        let _ = writeln!(err, "  {n} x {why}");
    }
    t
}

/// Fails with every failing case of `t` listed.
pub fn assert_no_failures(t: &Tally, set: &CaseSet, device: Device) {
    assert!(
        t.failures.is_empty(),
        "{} of {} golden {} failed on {device}:\n{}",
        t.failures.len(),
        t.total,
        set.what,
        t.failures.join("\n")
    );
}
