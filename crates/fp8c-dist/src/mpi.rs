//! The MPI implementation of [`Collective`] (feature `mpi`): rsmpi over the system's MPI
//! (Debian's OpenMPI), for CPU processes launched by `mpirun -np N`. MPI is initialised once
//! per process with `MPI_THREAD_SERIALIZED`; every call goes through one lock, so the handle
//! may be shared between threads while MPI sees one caller at a time.

use crate::{Collective, DistError, Result};
use mpi::collective::CommunicatorCollectives;
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::Root;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// MPI's world communicator.
pub struct Mpi {
    inner: Mutex<Inner>,
    rank: usize,
    size: usize,
    sent: AtomicU64,
}

struct Inner {
    world: SimpleCommunicator,
    // Finalizes MPI when the process's handle goes away; kept last.
    _universe: Universe,
}

// SAFETY: MPI is initialised with MPI_THREAD_SERIALIZED (checked in `init`), which allows
// calls from any thread as long as no two are concurrent; every use of the communicator goes
// through `inner`'s lock.
unsafe impl Send for Inner {}

impl Mpi {
    /// Initialises MPI and takes its world communicator.
    pub fn init() -> Result<Mpi> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Serialized)
            .ok_or_else(|| {
                DistError::Unsupported("MPI was already initialised in this process".into())
            })?;
        if threading < mpi::Threading::Serialized {
            return Err(DistError::Unsupported(format!(
                "the MPI library offers thread support {threading:?}; fp8c needs MPI_THREAD_SERIALIZED"
            )));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Mpi {
            inner: Mutex::new(Inner {
                world,
                _universe: universe,
            }),
            rank,
            size,
            sent: AtomicU64::new(0),
        })
    }

    fn with<T>(&self, f: impl FnOnce(&SimpleCommunicator) -> T) -> T {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&inner.world)
    }

    fn count(&self, bytes: usize) {
        self.sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Every rank's element count, in rank order.
    fn counts(&self, mine: usize) -> Result<Vec<i32>> {
        let mine = i32::try_from(mine)
            .map_err(|_| DistError::Invalid(format!("{mine} elements in one collective")))?;
        let mut all = vec![0i32; self.size];
        self.with(|w| w.all_gather_into(&mine, &mut all[..]));
        Ok(all)
    }
}

/// Displacements of consecutive blocks of `counts`.
fn displs(counts: &[i32]) -> Vec<i32> {
    counts
        .iter()
        .scan(0i32, |at, &c| {
            let d = *at;
            *at += c;
            Some(d)
        })
        .collect()
}

/// `flat` cut into blocks of `counts`.
fn split<T: Clone>(flat: &[T], counts: &[i32]) -> Vec<Vec<T>> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let block = flat[at..at + c as usize].to_vec();
            at += c as usize;
            block
        })
        .collect()
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn engine(&self) -> &'static str {
        "mpi"
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let counts = self.counts(mine.len())?;
        let d = displs(&counts);
        let total: i32 = counts.iter().sum();
        let mut flat = vec![0u8; total as usize];
        self.count(mine.len() * (self.size - 1));
        self.with(|w| {
            let mut part = PartitionMut::new(&mut flat[..], &counts[..], &d[..]);
            w.all_gather_varcount_into(mine, &mut part);
        });
        Ok(split(&flat, &counts))
    }

    fn all_gather_f32(&self, mine: &[f32]) -> Result<Vec<Vec<f32>>> {
        let counts = self.counts(mine.len())?;
        let d = displs(&counts);
        let total: i32 = counts.iter().sum();
        let mut flat = vec![0f32; total as usize];
        self.count(4 * mine.len() * (self.size - 1));
        self.with(|w| {
            let mut part = PartitionMut::new(&mut flat[..], &counts[..], &d[..]);
            w.all_gather_varcount_into(mine, &mut part);
        });
        Ok(split(&flat, &counts))
    }

    fn all_to_all_f32(&self, parts: &[&[f32]]) -> Result<Vec<Vec<f32>>> {
        if parts.len() != self.size {
            return Err(DistError::Invalid(format!(
                "all-to-all over {} ranks given {} parts",
                self.size,
                parts.len()
            )));
        }
        let send_counts: Vec<i32> = parts
            .iter()
            .map(|p| i32::try_from(p.len()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| DistError::Invalid("over 2^31 elements in one all-to-all part".into()))?;
        // Every rank learns what every other sends it: an all-to-all of the counts first.
        let mut recv_counts = vec![0i32; self.size];
        self.with(|w| w.all_to_all_into(&send_counts[..], &mut recv_counts[..]));
        let send: Vec<f32> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        let (sd, rd) = (displs(&send_counts), displs(&recv_counts));
        let total: i32 = recv_counts.iter().sum();
        let mut recv = vec![0f32; total as usize];
        let mine = parts.get(self.rank).map_or(0, |p| p.len());
        self.count(4 * (send.len() - mine));
        self.with(|w| {
            let s = Partition::new(&send[..], &send_counts[..], &sd[..]);
            let mut r = PartitionMut::new(&mut recv[..], &recv_counts[..], &rd[..]);
            w.all_to_all_varcount_into(&s, &mut r);
        });
        Ok(split(&recv, &recv_counts))
    }

    fn all_reduce_max_f32(&self, buf: &mut [f32]) -> Result<()> {
        let send = buf.to_vec();
        self.count(4 * buf.len());
        self.with(|w| w.all_reduce_into(&send[..], buf, mpi::collective::SystemOperation::max()));
        Ok(())
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        if root >= self.size {
            return Err(DistError::Invalid(format!(
                "broadcast from rank {root} of {}",
                self.size
            )));
        }
        let mut len = buf.len() as u64;
        self.with(|w| w.process_at_rank(root as i32).broadcast_into(&mut len));
        buf.resize(len as usize, 0);
        if self.rank == root {
            self.count(buf.len() * (self.size - 1));
        }
        self.with(|w| w.process_at_rank(root as i32).broadcast_into(&mut buf[..]));
        Ok(())
    }

    fn abort(&self, code: i32) -> ! {
        self.with(|w| w.abort(code))
    }

    fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}
