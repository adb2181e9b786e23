//! The memory plan: byte offsets in one arena for every arena buffer, reusing bytes once a
//! buffer's last reader has run.
//!
//! Offsets come from "greedy by size" (Pisarchyk & Lee, *Efficient Memory Management for Deep
//! Neural Net Inference*, 2020; TFLite's arena planner): buffers are placed largest first,
//! each in the smallest gap left between already placed buffers whose live ranges overlap
//! its own, or after the last of them. Sizes are rounded up to [`ARENA_ALIGN`]. The result is
//! deterministic (ties broken by definition step, then id) and usually within a few percent
//! of the live peak, the lower bound any plan must reach.
//!
//! [`check_no_overlap`] is the independent check that two buffers live at the same time never
//! share a byte; [`crate::Program::validate`] runs it, and the CUDA backend allocates from the
//! plan, so it must hold.

use crate::RuntimeError;
use crate::program::{ARENA_ALIGN, Buffer, MemoryPlan};

fn aligned(bytes: u64) -> u64 {
    bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

/// Assigns `offset` to every arena buffer (those with a live range) and returns the sizes.
pub(crate) fn assign_offsets(buffers: &mut [Buffer], steps: usize) -> MemoryPlan {
    let mut order: Vec<usize> = (0..buffers.len())
        .filter(|&i| buffers[i].live.is_some())
        .collect();
    order.sort_by_key(|&i| {
        let b = &buffers[i];
        (std::cmp::Reverse(aligned(b.bytes)), b.live.map(|l| l.0), i)
    });
    // Placed buffers: (offset, aligned size, live range).
    let mut placed: Vec<(u64, u64, (usize, usize))> = Vec::with_capacity(order.len());
    let mut arena = 0u64;
    for &i in &order {
        let size = aligned(buffers[i].bytes);
        let live = buffers[i].live.expect("filtered on live");
        if size == 0 {
            buffers[i].offset = Some(0);
            continue;
        }
        let mut conflicts: Vec<(u64, u64)> = placed
            .iter()
            .filter(|p| overlaps(p.2, live))
            .map(|p| (p.0, p.1))
            .collect();
        conflicts.sort_unstable();
        let mut best: Option<(u64, u64)> = None; // (gap size, offset)
        let mut end = 0u64;
        for (off, sz) in conflicts {
            if off > end {
                let gap = off - end;
                if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, end));
                }
            }
            end = end.max(off + sz);
        }
        let offset = best.map_or(end, |(_, o)| o);
        buffers[i].offset = Some(offset);
        placed.push((offset, size, live));
        arena = arena.max(offset + size);
    }
    // The live peak: the largest sum of aligned sizes live at one step.
    let mut delta = vec![0i128; steps + 2];
    let mut no_reuse = 0u64;
    for b in buffers.iter() {
        if let Some((d, l)) = b.live {
            let s = aligned(b.bytes);
            no_reuse += s;
            delta[d] += i128::from(s);
            delta[l + 1] -= i128::from(s);
        }
    }
    let (mut cur, mut live_peak) = (0i128, 0i128);
    for d in delta {
        cur += d;
        live_peak = live_peak.max(cur);
    }
    let resident = buffers
        .iter()
        .filter(|b| b.live.is_none())
        .map(|b| b.bytes)
        .sum();
    MemoryPlan {
        arena_bytes: arena,
        live_peak_bytes: live_peak as u64,
        resident_bytes: resident,
        no_reuse_bytes: no_reuse,
    }
}

/// Checks that no two arena buffers live at the same step share a byte.
pub(crate) fn check_no_overlap(buffers: &[Buffer]) -> Result<(), RuntimeError> {
    let mut arena: Vec<&Buffer> = buffers
        .iter()
        .filter(|b| b.live.is_some() && b.bytes > 0)
        .collect();
    arena.sort_by_key(|b| (b.offset, b.id));
    for (i, a) in arena.iter().enumerate() {
        let (Some(a_off), Some(a_live)) = (a.offset, a.live) else {
            return Err(RuntimeError::Plan(format!("{} has no offset", a.id)));
        };
        let a_end = a_off + a.bytes;
        for b in &arena[i + 1..] {
            let (Some(b_off), Some(b_live)) = (b.offset, b.live) else {
                return Err(RuntimeError::Plan(format!("{} has no offset", b.id)));
            };
            if b_off >= a_end {
                break;
            }
            if overlaps(a_live, b_live) {
                return Err(RuntimeError::Plan(format!(
                    "{} `{}` [{a_off}, {a_end}) live {}..={} overlaps {} `{}` [{b_off}, {}) live {}..={}",
                    a.id,
                    a.name,
                    a_live.0,
                    a_live.1,
                    b.id,
                    b.name,
                    b_off + b.bytes,
                    b_live.0,
                    b_live.1
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{BufId, BufferKind};
    use fp8c_ir::{DType, TensorType};

    fn buf(id: u32, bytes: u64, live: (usize, usize)) -> Buffer {
        Buffer {
            id: BufId(id),
            name: format!("v{id}"),
            ty: TensorType::fixed(DType::U8, &[bytes]),
            dims: vec![bytes],
            bytes,
            kind: BufferKind::Temp,
            live: Some(live),
            offset: None,
        }
    }

    #[test]
    fn greedy_by_size_fills_gaps_and_never_overlaps() {
        // Two big buffers live at different times share bytes; a small one fits beside.
        let mut bs = vec![
            buf(0, 1000, (0, 1)),
            buf(1, 1000, (2, 3)),
            buf(2, 100, (1, 2)),
            buf(3, 0, (0, 3)),
        ];
        let plan = assign_offsets(&mut bs, 4);
        check_no_overlap(&bs).unwrap();
        assert_eq!(bs[0].offset, bs[1].offset);
        assert_eq!(plan.arena_bytes, 1024 + 256);
        assert_eq!(plan.live_peak_bytes, 1024 + 256);
        assert_eq!(plan.no_reuse_bytes, 2 * 1024 + 256);
    }

    #[test]
    fn overlap_is_detected() {
        let mut bs = vec![buf(0, 300, (0, 2)), buf(1, 10, (2, 3))];
        bs[0].offset = Some(0);
        bs[1].offset = Some(256);
        let e = check_no_overlap(&bs).unwrap_err().to_string();
        assert!(
            e.contains("b0 `v0`") && e.contains("overlaps b1 `v1`"),
            "{e}"
        );
        bs[1].live = Some((3, 3));
        check_no_overlap(&bs).unwrap();
    }
}
