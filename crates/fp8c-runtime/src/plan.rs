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
//! `program.rs`'s `check_no_overlap` is the independent check that two buffers live at the
//! same time never share a byte; [`crate::Program::validate`] runs it, and the CUDA backend allocates from the
//! plan, so it must hold.

use crate::program::{ARENA_ALIGN, Buffer, MemoryPlan};

fn aligned(bytes: u64) -> u64 {
    bytes.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
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
    // Placed buffers, by index: (offset, aligned size); `index` finds those whose live
    // ranges overlap a range without scanning them all (a long chain has 10^6 of them).
    let mut placed: Vec<(u64, u64)> = vec![(0, 0); buffers.len()];
    let mut index = LiveIndex::new(buffers);
    let mut hits = Vec::new();
    let mut arena = 0u64;
    for &i in &order {
        let size = aligned(buffers[i].bytes);
        let live = buffers[i].live.expect("filtered on live");
        if size == 0 {
            buffers[i].offset = Some(0);
            continue;
        }
        hits.clear();
        index.overlapping(live, &mut hits);
        let mut conflicts: Vec<(u64, u64)> = hits.iter().map(|&j| placed[j]).collect();
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
        placed[i] = (offset, size);
        index.place(i, live.1);
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

/// The placed arena buffers' live ranges, for [`assign_offsets`]: every arena buffer has a
/// slot, slots sorted by first step, and a max-tree over the slots holds each placed buffer's
/// last step (`-1` until it is placed). The placed buffers whose range overlaps `(d, l)` (first
/// step at most `l`, last at least `d`) are found in O((hits + 1) · log n).
struct LiveIndex {
    /// Slot → (first step, buffer index), sorted.
    slots: Vec<(usize, usize)>,
    /// Buffer index → its slot.
    slot_of: Vec<usize>,
    /// Leaves from `width`; each inner node the max of its children.
    tree: Vec<i64>,
    width: usize,
}

impl LiveIndex {
    fn new(buffers: &[Buffer]) -> LiveIndex {
        let mut slots: Vec<(usize, usize)> = buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.live.map(|l| (l.0, i)))
            .collect();
        slots.sort_unstable();
        let mut slot_of = vec![usize::MAX; buffers.len()];
        for (k, &(_, i)) in slots.iter().enumerate() {
            slot_of[i] = k;
        }
        let width = slots.len().next_power_of_two().max(1);
        LiveIndex {
            slots,
            slot_of,
            tree: vec![-1; 2 * width],
            width,
        }
    }

    /// Records buffer `i` as placed, live until step `last`.
    fn place(&mut self, i: usize, last: usize) {
        let mut k = self.width + self.slot_of[i];
        self.tree[k] = last as i64;
        while k > 1 {
            k /= 2;
            self.tree[k] = self.tree[2 * k].max(self.tree[2 * k + 1]);
        }
    }

    /// Pushes onto `out` every placed buffer whose live range overlaps `(d, l)`.
    fn overlapping(&self, (d, l): (usize, usize), out: &mut Vec<usize>) {
        // Slots [0, k) start at or before `l`.
        let k = self.slots.partition_point(|&(s, _)| s <= l);
        let mut stack = vec![(1usize, 0usize, self.width)];
        while let Some((node, lo, hi)) = stack.pop() {
            if lo >= k || self.tree[node] < d as i64 {
                continue;
            }
            if hi - lo == 1 {
                out.push(self.slots[lo].1);
                continue;
            }
            let mid = (lo + hi) / 2;
            stack.push((2 * node + 1, mid, hi));
            stack.push((2 * node, lo, mid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{BufId, BufferKind, check_no_overlap};
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

    fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
        a.0 <= b.1 && b.0 <= a.1
    }

    /// The placement by its definition: each buffer, largest first, against every placed
    /// buffer (quadratic; what `assign_offsets` computes with its index).
    fn naive_offsets(buffers: &[Buffer]) -> Vec<Option<u64>> {
        let mut order: Vec<usize> = (0..buffers.len()).collect();
        order.sort_by_key(|&i| {
            let b = &buffers[i];
            (std::cmp::Reverse(aligned(b.bytes)), b.live.map(|l| l.0), i)
        });
        let mut placed: Vec<(u64, u64, (usize, usize))> = Vec::new();
        let mut out = vec![None; buffers.len()];
        for &i in &order {
            let (size, live) = (aligned(buffers[i].bytes), buffers[i].live.unwrap());
            if size == 0 {
                out[i] = Some(0);
                continue;
            }
            let mut conflicts: Vec<(u64, u64)> = placed
                .iter()
                .filter(|p| overlaps(p.2, live))
                .map(|p| (p.0, p.1))
                .collect();
            conflicts.sort_unstable();
            let (mut best, mut end): (Option<(u64, u64)>, u64) = (None, 0);
            for (off, sz) in conflicts {
                if off > end && off - end >= size && best.is_none_or(|(g, _)| off - end < g) {
                    best = Some((off - end, end));
                }
                end = end.max(off + sz);
            }
            let offset = best.map_or(end, |(_, o)| o);
            out[i] = Some(offset);
            placed.push((offset, size, live));
        }
        out
    }

    #[test]
    fn the_indexed_placement_is_the_quadratic_one_and_the_sweep_finds_every_overlap() {
        // A deterministic pseudo-random stream (no dependency): sizes and live ranges.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..200 {
            let n = 1 + next(60) as usize;
            let steps = 1 + next(40) as usize;
            let mut bs: Vec<Buffer> = (0..n)
                .map(|i| {
                    let d = next(steps as u64) as usize;
                    let l = d + next((steps - d) as u64) as usize;
                    let bytes = [0, 1, 100, 256, 300, 1000, 4096][next(7) as usize];
                    buf(i as u32, bytes, (d, l))
                })
                .collect();
            let want = naive_offsets(&bs);
            assign_offsets(&mut bs, steps);
            let got: Vec<Option<u64>> = bs.iter().map(|b| b.offset).collect();
            assert_eq!(got, want, "round {round}");
            check_no_overlap(&bs).unwrap();
            // Move one buffer onto another live at the same time: the sweep must see it.
            let pair = (0..n)
                .flat_map(|i| (0..n).map(move |j| (i, j)))
                .find(|&(i, j)| {
                    i != j
                        && bs[i].bytes > 0
                        && bs[j].bytes > 0
                        && overlaps(bs[i].live.unwrap(), bs[j].live.unwrap())
                });
            if let Some((i, j)) = pair {
                bs[i].offset = bs[j].offset;
                assert!(check_no_overlap(&bs).is_err(), "round {round}");
            }
        }
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
