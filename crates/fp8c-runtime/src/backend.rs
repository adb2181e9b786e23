//! The contract between a lowered [`Program`] and the machines that run it.
//!
//! A [`Backend`] turns a program and its parameter data into an [`Executable`]; the executable
//! runs steps on inputs and owns the scaling state between runs. The CPU reference backend
//! ([`crate::CpuBackend`]) and the CUDA backend implement the same traits, so every test is
//! written once and the CPU result is the oracle for the GPU one.
//!
//! Errors are one [`RuntimeError`] enum; every message names what it is about (the node, the
//! input, the parameter or the state entry), so the CLI can print it as it is.

use crate::Program;
use crate::program::Step;
use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use thiserror::Error;

/// Everything that can go wrong lowering, preparing or running a program.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum RuntimeError {
    /// A node cannot be lowered or failed to execute.
    #[error("node \"{node}\" ({op}): {message}")]
    Node {
        /// The node's name.
        node: String,
        /// The op's text name.
        op: &'static str,
        /// What went wrong.
        message: String,
    },
    /// A caller-provided input is missing, unknown or of the wrong type.
    #[error("input \"{name}\": {message}")]
    Input {
        /// The input's name (as the caller gave it, or as the graph declares it).
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// Parameter data is missing or does not match the parameter's type.
    #[error("param \"{name}\": {message}")]
    Param {
        /// The parameter's name.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// A state entry is unknown or a new value does not match its type.
    #[error("state \"{name}\": {message}")]
    State {
        /// The state entry's name.
        name: String,
        /// What is wrong with it.
        message: String,
    },
    /// The memory plan is inconsistent (a bug in the planner; reported, never ignored).
    #[error("memory plan: {0}")]
    Plan(String),
    /// The backend cannot run here (no driver, no device, not built).
    #[error("backend `{backend}` is unavailable: {message}")]
    Unavailable {
        /// The backend's name.
        backend: &'static str,
        /// Why.
        message: String,
    },
    /// Anything else, with a sentence saying what.
    #[error("{0}")]
    Other(String),
}

impl RuntimeError {
    /// A node error.
    pub fn node(node: impl Into<String>, op: &'static str, message: impl Into<String>) -> Self {
        RuntimeError::Node {
            node: node.into(),
            op,
            message: message.into(),
        }
    }

    /// An input error.
    pub fn input(name: impl Into<String>, message: impl Into<String>) -> Self {
        RuntimeError::Input {
            name: name.into(),
            message: message.into(),
        }
    }
}

/// The observer `run_observed` calls after each step with the step, its inputs and outputs.
pub type Observer<'a> = dyn FnMut(&Step, &[&Tensor], &[Tensor]) + Send + 'a;

/// A machine that can run programs.
pub trait Backend {
    /// Short name (`cpu`, `cuda`).
    fn name(&self) -> &'static str;
    /// Checks that the backend can run here (driver, device); an `Err`, never a panic.
    fn check(&self) -> Result<(), RuntimeError>;
    /// Loads `p` with its parameter data (by param name) and allocates what it needs.
    fn prepare(
        &self,
        p: &Program,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<Box<dyn Executable>, RuntimeError>;
    /// Loads `graph`, whose lowering is `p`: backends that compile the graph itself rather
    /// than the lowered program (MLIR's JIT) override this; the others run `p`.
    fn prepare_graph(
        &self,
        graph: &fp8c_ir::Graph,
        p: &Program,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        let _ = graph;
        self.prepare(p, weights)
    }
}

/// A prepared program: runs steps, keeps the scaling state between runs.
pub trait Executable {
    /// Runs one step of the program on `inputs` (by graph input name) and returns the graph
    /// outputs (by output name). Inputs are validated first: every graph input must be given
    /// with its exact dtype and shape, and no other name may appear; errors name the input.
    /// State updates are applied in place at the end, so scaling state persists across calls.
    fn run(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.run_observed(inputs, &mut |_, _, _| {})
    }

    /// [`Executable::run`], calling `obs` after every step with the step, its inputs and its
    /// outputs (for `--stats`, debugging, GPU-versus-CPU checks).
    fn run_observed(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        obs: &mut Observer<'_>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError>;

    /// The current value of every state entry, by name (an entry that cannot be read is left
    /// out; see [`Executable::try_state`]).
    fn state(&self) -> BTreeMap<String, Tensor>;

    /// Every state entry, or the error that kept one from being read (a failed device
    /// download): what a checkpoint must use, so that it is never silently incomplete.
    fn try_state(&self) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        Ok(self.state())
    }

    /// Replaces a state entry's value (same dtype and shape as declared).
    fn set_state(&mut self, name: &str, value: Tensor) -> Result<(), RuntimeError>;

    /// The current value of one state entry (None: no such entry, or it cannot be read).
    fn state_entry(&self, name: &str) -> Option<Tensor> {
        self.state().remove(name)
    }

    /// The node names of the steps computed once, when the program was prepared (their
    /// inputs never change): an observer still sees them at the start of every run, but
    /// whatever the backend does to show them is not their time, and a profiler leaves it
    /// out ([`crate::Profile::start_skipping`]).
    fn precomputed_steps(&self) -> std::collections::BTreeSet<String> {
        std::collections::BTreeSet::new()
    }
}
