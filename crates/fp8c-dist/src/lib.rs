//! fp8c's collective layer: the [`Collective`] trait the training loop calls for its
//! reductions, a size-1 implementation ([`Single`], the default: every collective is the
//! identity), and implementations over existing engines behind cargo features — [`mpi`]
//! (feature `mpi`: CPU processes launched by `mpirun -np N`). No transport of our own.
//!
//! The trait holds the primitive collectives only (all-gather, all-to-all, MAX all-reduce,
//! broadcast); what the training loop builds from them — a gradient sum in an order that does
//! not depend on the number of ranks, the step's non-finite and stop decisions — lives with
//! the loop (`fp8c_session::train`), where it can be read in one place.
//!
//! [`init`] picks the implementation from the process's environment: under an MPI launcher
//! (OpenMPI's `OMPI_COMM_WORLD_SIZE`, PMI/PMIx's variables) the MPI one, which a build
//! without the `mpi` feature refuses with a clear error instead of running N independent
//! copies of the same training.

#![warn(missing_docs)]

#[cfg(feature = "mpi")]
pub mod mpi;

use std::fmt;

/// What went wrong in a collective.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// The launch asked for something this build or engine cannot do.
    #[error("{0}")]
    Unsupported(String),
    /// A collective was called with arguments that do not fit (lengths, ranks).
    #[error("{0}")]
    Invalid(String),
}

/// The result of a collective.
pub type Result<T, E = DistError> = std::result::Result<T, E>;

/// The collectives of one group of ranks. Every rank calls the same collectives in the same
/// order; each blocks until every rank has called it.
pub trait Collective: Send + Sync {
    /// This process's rank, 0-based.
    fn rank(&self) -> usize;
    /// How many ranks the group has.
    fn size(&self) -> usize;
    /// The engine's name (`single`, `mpi`).
    fn engine(&self) -> &'static str;
    /// Every rank's `mine`, in rank order (lengths may differ).
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Every rank's `mine`, in rank order (lengths may differ).
    fn all_gather_f32(&self, mine: &[f32]) -> Result<Vec<Vec<f32>>>;
    /// `parts[r]` goes to rank `r`; returns what each rank sent to this one, in rank order.
    fn all_to_all_f32(&self, parts: &[&[f32]]) -> Result<Vec<Vec<f32>>>;
    /// Replaces `buf` by the elementwise maximum of every rank's `buf` (same length on all).
    fn all_reduce_max_f32(&self, buf: &mut [f32]) -> Result<()>;
    /// Rank `root`'s `buf`, on every rank (its length included).
    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()>;
    /// Ends every rank of the group with `code` (after this rank printed why): no rank is
    /// left waiting in a collective.
    fn abort(&self, code: i32) -> !;
    /// Bytes this rank has sent through the collectives so far.
    fn bytes_sent(&self) -> u64;
}

impl fmt::Debug for dyn Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rank {} of {}",
            self.engine(),
            self.rank(),
            self.size()
        )
    }
}

/// One process alone: every collective is the identity.
#[derive(Debug, Default)]
pub struct Single;

impl Collective for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn engine(&self) -> &'static str {
        "single"
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }
    fn all_gather_f32(&self, mine: &[f32]) -> Result<Vec<Vec<f32>>> {
        Ok(vec![mine.to_vec()])
    }
    fn all_to_all_f32(&self, parts: &[&[f32]]) -> Result<Vec<Vec<f32>>> {
        match parts {
            [one] => Ok(vec![one.to_vec()]),
            _ => Err(DistError::Invalid(format!(
                "all-to-all over 1 rank given {} parts",
                parts.len()
            ))),
        }
    }
    fn all_reduce_max_f32(&self, _buf: &mut [f32]) -> Result<()> {
        Ok(())
    }
    fn broadcast_bytes(&self, _root: usize, _buf: &mut Vec<u8>) -> Result<()> {
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
    fn bytes_sent(&self) -> u64 {
        0
    }
}

/// The world size an MPI launcher gave this process, if it was started by one (OpenMPI's
/// `OMPI_COMM_WORLD_SIZE`, MPICH/Hydra's `PMI_SIZE`, PMIx's `PMIX_SIZE`).
pub fn launched_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The collective group of this process: MPI's world when launched by an MPI launcher (and
/// built with the `mpi` feature), else [`Single`]. A launch of more than one rank by a build
/// without MPI is an error (the ranks would each train the whole model on their own).
pub fn init() -> Result<std::sync::Arc<dyn Collective>> {
    match launched_size() {
        None => Ok(std::sync::Arc::new(Single)),
        Some(n) => init_launched(n),
    }
}

#[cfg(feature = "mpi")]
fn init_launched(_n: usize) -> Result<std::sync::Arc<dyn Collective>> {
    Ok(std::sync::Arc::new(mpi::Mpi::init()?))
}

#[cfg(not(feature = "mpi"))]
fn init_launched(n: usize) -> Result<std::sync::Arc<dyn Collective>> {
    if n <= 1 {
        return Ok(std::sync::Arc::new(Single));
    }
    Err(DistError::Unsupported(format!(
        "launched as one of {n} MPI ranks, but this fp8c was built without MPI: build it with \
         `cargo build --release -p fp8c --features mpi` (needs OpenMPI: scripts/env/mpi-env.sh)"
    )))
}
