//! Which examples each rank trains on: PyTorch's `DistributedSampler`, index for index.
//!
//! Per epoch, all ranks compute the same ordering of `0..len` (a permutation seeded by
//! `seed + epoch` when shuffling), make it divisible by the world size (pad by
//! repeating from the head, or drop the tail), and rank `r` takes every `R`-th index
//! starting at `r`. Nothing is communicated: agreement comes from determinism.
//!
//! **Shuffling is bit-for-bit PyTorch's.** `torch.randperm(n, generator=g)` on the CPU
//! (for `n` below 2³²/20) is a Fisher–Yates shuffle driven by a 32-bit Mersenne Twister
//! seeded with the low 32 bits of `g.manual_seed(s)`. [`randperm`] reimplements exactly
//! that in plain Rust (no libtorch, no global RNG state), so a Rust rank and a Python
//! rank with the same `(seed, epoch)` see the same examples; the tests check it against
//! the installed torch.
//!
//! [`Tail::Exact`] is for evaluation: no padding and no dropping, so every example is
//! counted exactly once and metrics summed over ranks are not skewed (ranks may then
//! differ in length by one).
//!
//! ```
//! use trainers::sampler::DistributedSampler;
//! let mut s = DistributedSampler::new(10, 4, 1)?.with_shuffle(false);
//! assert_eq!(s.indices(), [1, 5, 9]); // 10 padded to 12: [0..10, 0, 1]
//! s.set_epoch(1); // no effect without shuffling
//! assert_eq!(s.num_samples(), 3);
//! # Ok::<(), trainers::Error>(())
//! ```

use crate::{Error, Result};

/// How a data set whose length is not a multiple of the world size is evened out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tail {
    /// Repeat indices from the head up to `ceil(N/R)·R` (PyTorch `drop_last=False`).
    Pad,
    /// Drop the last `N mod R` indices (PyTorch `drop_last=True`).
    Drop,
    /// Neither: every index exactly once; ranks' lengths differ by at most one.
    Exact,
}

/// A `torch.utils.data.DistributedSampler` for one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributedSampler {
    len: usize,
    world_size: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    tail: Tail,
    epoch: u64,
}

impl DistributedSampler {
    /// A sampler over `0..len` for `rank` of `world_size`, with PyTorch's defaults:
    /// shuffled, seed 0, padded ([`Tail::Pad`]), epoch 0.
    pub fn new(len: usize, world_size: usize, rank: usize) -> Result<Self> {
        if world_size == 0 {
            return Err(Error::InvalidArgument(
                "world size must be at least 1".into(),
            ));
        }
        if rank >= world_size {
            return Err(Error::InvalidArgument(format!(
                "invalid rank {rank}, rank should be in the interval [0, {}]",
                world_size - 1
            )));
        }
        Ok(DistributedSampler {
            len,
            world_size,
            rank,
            shuffle: true,
            seed: 0,
            tail: Tail::Pad,
            epoch: 0,
        })
    }

    /// An evaluation sampler: in order, [`Tail::Exact`] (each index exactly once).
    pub fn for_eval(len: usize, world_size: usize, rank: usize) -> Result<Self> {
        Ok(Self::new(len, world_size, rank)?
            .with_shuffle(false)
            .with_tail(Tail::Exact))
    }

    /// Whether to shuffle (PyTorch `shuffle`).
    pub fn with_shuffle(mut self, shuffle: bool) -> Self {
        self.shuffle = shuffle;
        self
    }

    /// The shuffling seed; must be the same on every rank (PyTorch `seed`).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// PyTorch's `drop_last`: `true` is [`Tail::Drop`], `false` is [`Tail::Pad`].
    pub fn with_drop_last(mut self, drop_last: bool) -> Self {
        self.tail = if drop_last { Tail::Drop } else { Tail::Pad };
        self
    }

    /// How to even out the tail.
    pub fn with_tail(mut self, tail: Tail) -> Self {
        self.tail = tail;
        self
    }

    /// Selects the epoch, so that each epoch gets its own shuffle. Call it before
    /// [`indices`](Self::indices) every epoch, as with PyTorch, or every epoch repeats
    /// the same order.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This sampler's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The length of the data set sampled from.
    pub fn dataset_len(&self) -> usize {
        self.len
    }

    /// The tail policy.
    pub fn tail(&self) -> Tail {
        self.tail
    }

    /// How many indices this rank gets per epoch (PyTorch `len(sampler)`).
    pub fn num_samples(&self) -> usize {
        let (n, r) = (self.len, self.world_size);
        match self.tail {
            Tail::Pad => n.div_ceil(r),
            Tail::Drop => n / r,
            // Positions rank, rank + R, ... below n.
            Tail::Exact => n.saturating_sub(self.rank).div_ceil(r),
        }
    }

    /// How many indices all ranks get together per epoch (PyTorch `total_size`).
    pub fn total_size(&self) -> usize {
        match self.tail {
            Tail::Pad | Tail::Drop => self.num_samples() * self.world_size,
            Tail::Exact => self.len,
        }
    }

    /// This rank's indices for the current epoch, in the order to visit them.
    pub fn indices(&self) -> Vec<usize> {
        let mut all = if self.shuffle {
            randperm(self.len, self.seed.wrapping_add(self.epoch))
        } else {
            (0..self.len).collect()
        };
        let total = self.total_size();
        match self.tail {
            Tail::Pad => {
                // Repeat the (shuffled) list from its head, as many times as needed:
                // with fewer examples than ranks the padding is longer than the list.
                let n = all.len();
                for k in 0..total.saturating_sub(n) {
                    all.push(all[k % n]);
                }
            }
            Tail::Drop => all.truncate(total),
            Tail::Exact => {}
        }
        all.into_iter()
            .skip(self.rank)
            .step_by(self.world_size)
            .collect()
    }
}

/// `torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()`,
/// reproduced exactly for `n < 2³²/20` (beyond that torch switches algorithm; this
/// function keeps the same one, still a uniform deterministic permutation).
///
/// Like torch, only the low 32 bits of `seed` matter.
pub fn randperm(n: usize, seed: u64) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..n).collect();
    let mut mt = Mt19937::new(seed as u32);
    // torch: for i in 0..n-1 { z = gen.random() % (n - i); swap(r[i], r[z + i]) }
    for i in 0..n.saturating_sub(1) {
        let z = (u64::from(mt.next_u32()) % (n - i) as u64) as usize;
        perm.swap(i, i + z);
    }
    perm
}

/// The 32-bit Mersenne Twister (MT19937), as `std::mt19937` and ATen's CPU generator.
struct Mt19937 {
    state: [u32; Self::N],
    next: usize,
}

impl Mt19937 {
    const N: usize = 624;
    const M: usize = 397;

    fn new(seed: u32) -> Self {
        let mut state = [0u32; Self::N];
        state[0] = seed;
        for j in 1..Self::N {
            let prev = state[j - 1];
            state[j] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(j as u32);
        }
        Mt19937 {
            state,
            next: Self::N,
        }
    }

    fn twist(&mut self) {
        for k in 0..Self::N {
            let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % Self::N] & 0x7fff_ffff);
            let mut v = self.state[(k + Self::M) % Self::N] ^ (y >> 1);
            if y & 1 == 1 {
                v ^= 0x9908_b0df;
            }
            self.state[k] = v;
        }
        self.next = 0;
    }

    fn next_u32(&mut self) -> u32 {
        if self.next >= Self::N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::process::Command;

    const LENS: [usize; 16] = [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 13, 16, 17, 64, 101];
    const WORLDS: [usize; 7] = [1, 2, 3, 4, 5, 7, 8];
    const TAILS: [Tail; 3] = [Tail::Pad, Tail::Drop, Tail::Exact];

    fn all_ranks(
        len: usize,
        world: usize,
        f: impl Fn(DistributedSampler) -> DistributedSampler,
    ) -> Vec<Vec<usize>> {
        (0..world)
            .map(|r| f(DistributedSampler::new(len, world, r).unwrap()).indices())
            .collect()
    }

    #[test]
    fn mt19937_matches_the_reference_10000th_output() {
        // The C++ standard requires the 10000th output of a default-seeded
        // std::mt19937 (seed 5489) to be 4123659995.
        let mut mt = Mt19937::new(5489);
        let last = (0..10_000).map(|_| mt.next_u32()).last();
        assert_eq!(last, Some(4_123_659_995));
    }

    #[test]
    fn bad_world_or_rank_is_an_error() {
        assert!(DistributedSampler::new(10, 0, 0).is_err());
        let err = DistributedSampler::new(10, 4, 4).unwrap_err().to_string();
        assert!(
            err.contains("invalid rank 4") && err.contains("[0, 3]"),
            "{err}"
        );
    }

    /// Every property the trainers rely on, over many lengths, worlds, tails, seeds.
    #[test]
    fn sampler_properties_hold_for_every_shape() {
        for len in LENS {
            for world in WORLDS {
                for tail in TAILS {
                    for seed in [0u64, 1, 12345] {
                        for shuffle in [false, true] {
                            let ctx = format!(
                                "len {len} world {world} {tail:?} seed {seed} shuffle {shuffle}"
                            );
                            let ranks = all_ranks(len, world, |s| {
                                s.with_tail(tail).with_seed(seed).with_shuffle(shuffle)
                            });
                            check_shape(len, world, tail, &ranks, &ctx);
                        }
                    }
                }
            }
        }
    }

    fn check_shape(len: usize, world: usize, tail: Tail, ranks: &[Vec<usize>], ctx: &str) {
        let sampler = DistributedSampler::new(len, world, 0)
            .unwrap()
            .with_tail(tail);
        let mut count = vec![0usize; len];
        for (r, idx) in ranks.iter().enumerate() {
            let s = sampler.clone().with_tail(tail);
            let s = DistributedSampler { rank: r, ..s };
            assert_eq!(
                idx.len(),
                s.num_samples(),
                "{ctx}: rank {r} length vs num_samples"
            );
            for &i in idx {
                assert!(i < len, "{ctx}: index {i} out of range");
                count[i] += 1;
            }
        }
        let total: usize = ranks.iter().map(Vec::len).sum();
        assert_eq!(total, sampler.total_size(), "{ctx}: total_size");
        let lens: Vec<usize> = ranks.iter().map(Vec::len).collect();
        let (min, max) = (lens.iter().min().copied(), lens.iter().max().copied());
        match tail {
            Tail::Pad => {
                assert_eq!(min, max, "{ctx}: ranks differ in length {lens:?}");
                assert_eq!(total, len.div_ceil(world) * world, "{ctx}");
                if len > 0 {
                    // Every index at least once; the extra copies are exactly the padding,
                    // spread as evenly as repetition allows.
                    assert!(
                        count.iter().all(|&c| c >= 1),
                        "{ctx}: not covered {count:?}"
                    );
                    assert_eq!(count.iter().sum::<usize>() - len, total - len, "{ctx}");
                    let (lo, hi) = (count.iter().min().unwrap(), count.iter().max().unwrap());
                    assert!(hi - lo <= 1, "{ctx}: uneven repeats {count:?}");
                }
            }
            Tail::Drop => {
                assert_eq!(min, max, "{ctx}: ranks differ in length {lens:?}");
                assert!(
                    len - total < world,
                    "{ctx}: dropped {} >= world",
                    len - total
                );
                assert_eq!(total % world, 0, "{ctx}");
                assert!(count.iter().all(|&c| c <= 1), "{ctx}: duplicates {count:?}");
            }
            Tail::Exact => {
                assert!(
                    count.iter().all(|&c| c == 1),
                    "{ctx}: not a partition {count:?}"
                );
                if let (Some(min), Some(max)) = (min, max) {
                    assert!(max - min <= 1, "{ctx}: lengths {lens:?}");
                }
            }
        }
    }

    #[test]
    fn same_seed_and_epoch_give_the_same_order_on_every_rank() {
        for world in [2usize, 3, 8] {
            let len = 1000;
            let make = |epoch, seed| {
                (0..world)
                    .map(|r| {
                        let mut s = DistributedSampler::new(len, world, r)
                            .unwrap()
                            .with_seed(seed);
                        s.set_epoch(epoch);
                        s.indices()
                    })
                    .collect::<Vec<_>>()
            };
            let a = make(3, 9);
            // Recomputed (as another process would): identical.
            assert_eq!(a, make(3, 9));
            // Interleaving the ranks' lists rebuilds one shared permutation.
            let mut merged = vec![0; len.div_ceil(world) * world];
            for (r, idx) in a.iter().enumerate() {
                for (k, &i) in idx.iter().enumerate() {
                    merged[k * world + r] = i;
                }
            }
            let perm = randperm(len, 9 + 3);
            assert_eq!(merged[..len], perm[..], "world {world}");
            assert_ne!(a, make(4, 9), "epochs 3 and 4 gave the same order");
            assert_ne!(a, make(3, 10), "seeds 9 and 10 gave the same order");
        }
    }

    #[test]
    fn different_epochs_give_different_orders() {
        let mut s = DistributedSampler::new(500, 4, 2).unwrap();
        let mut seen = std::collections::HashSet::new();
        for epoch in 0..20 {
            s.set_epoch(epoch);
            assert!(seen.insert(s.indices()), "epoch {epoch} repeated an order");
        }
    }

    #[test]
    fn shuffle_off_ignores_epoch_and_seed() {
        let mut s = DistributedSampler::new(10, 3, 1)
            .unwrap()
            .with_shuffle(false)
            .with_seed(5);
        let first = s.indices();
        s.set_epoch(7);
        assert_eq!(s.indices(), first);
        // 10 padded to 12 with [0, 1]: rank 1 gets positions 1, 4, 7, 10 (= index 0).
        assert_eq!(first, [1, 4, 7, 0]);
    }

    #[test]
    fn padding_longer_than_the_data_repeats_the_list() {
        // 3 examples over 8 ranks: [0 1 2 | 0 1 2 0 1].
        let ranks = all_ranks(3, 8, |s| s.with_shuffle(false));
        let flat: Vec<usize> = ranks.into_iter().flatten().collect();
        assert_eq!(flat, [0, 1, 2, 0, 1, 2, 0, 1]);
    }

    #[test]
    fn eval_mode_partitions_exactly() {
        let ranks = all_ranks(10, 4, |s| s.with_shuffle(false).with_tail(Tail::Exact));
        assert_eq!(
            ranks,
            [vec![0, 4, 8], vec![1, 5, 9], vec![2, 6], vec![3, 7]]
        );
        let s = DistributedSampler::for_eval(2, 4, 3).unwrap();
        assert_eq!((s.indices(), s.num_samples()), (vec![], 0));
    }

    #[test]
    fn randperm_uses_only_the_low_32_bits_of_the_seed() {
        assert_eq!(randperm(50, 5), randperm(50, (1 << 32) + 5));
        assert_ne!(randperm(50, 5), randperm(50, 6));
        let mut sorted = randperm(1000, 77);
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert!(randperm(0, 1).is_empty() && randperm(1, 1) == [0]);
    }

    fn venv_python() -> PathBuf {
        let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.ringside/venv/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run `cargo xtask setup` (it installs torch {} and links its venv \
             at .ringside/venv)",
            python.display(),
            torch_link::TORCH_VERSION
        );
        python
    }

    /// The real `torch.utils.data.DistributedSampler`, shuffled and not, against ours.
    #[test]
    fn indices_equal_pytorch_distributed_sampler() {
        let lens = [0usize, 1, 2, 3, 5, 7, 10, 11, 16, 17, 100, 1001];
        let worlds = [1usize, 2, 3, 4, 7, 8];
        let mut cases = Vec::new();
        for len in lens {
            for world in worlds {
                for drop_last in [false, true] {
                    cases.push((len, world, drop_last, false, 0u64, 0u64));
                    for (seed, epoch) in [(0, 0), (0, 1), (7, 3), ((1 << 32) + 2, 5)] {
                        cases.push((len, world, drop_last, true, seed, epoch));
                    }
                }
            }
        }
        let spec: String = cases
            .iter()
            .map(|(n, w, d, s, seed, e)| format!("{n} {w} {} {} {seed} {e}\n", *d as u8, *s as u8))
            .collect();
        let script = r#"
import sys
from torch.utils.data.distributed import DistributedSampler
for line in sys.stdin.read().split("\n"):
    if not line:
        continue
    n, w, d, s, seed, e = map(int, line.split())
    for r in range(w):
        smp = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=bool(s), seed=seed, drop_last=bool(d))
        smp.set_epoch(e)
        print(line, r, ":", " ".join(map(str, smp)))
"#;
        let mut child = Command::new(venv_python())
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(spec.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "python failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut torch: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let (key, vals) = line
                .split_once(" : ")
                .or_else(|| line.strip_suffix(" :").map(|k| (k, "")))
                .unwrap();
            let vals = vals
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect();
            torch.insert(key.to_owned(), vals);
        }
        let mut checked = 0;
        for &(n, w, d, s, seed, e) in &cases {
            for r in 0..w {
                let key = format!("{n} {w} {} {} {seed} {e} {r}", d as u8, s as u8);
                let mut ours = DistributedSampler::new(n, w, r)
                    .unwrap()
                    .with_drop_last(d)
                    .with_shuffle(s)
                    .with_seed(seed);
                ours.set_epoch(e);
                let want = torch
                    .get(&key)
                    .unwrap_or_else(|| panic!("torch printed nothing for {key}"));
                assert_eq!(&ours.indices(), want, "case {key}");
                assert_eq!(ours.num_samples(), want.len(), "len() for {key}");
                checked += 1;
            }
        }
        assert_eq!(checked, torch.len());
    }
}
