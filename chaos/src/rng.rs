//! A small seeded generator (SplitMix64), so that a seed reproduces a run's schedule exactly,
//! whatever version of a random-number crate is in the lock file.

/// SplitMix64: 64 bits of state, good enough to pick nodes and jitter sleeps.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix {
    state: u64,
}

impl SplitMix {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix { state: seed }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (`lo` when the range is empty).
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// `0..n` in a random order.
    pub(crate) fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = usize::try_from(self.range(0, i as u64)).unwrap_or(0);
            v.swap(i, j);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_reproduce_and_ranges_hold() {
        let a: Vec<u64> = (0..5).map(|_| SplitMix::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut r = SplitMix::new(42);
        assert!(
            (0..1000)
                .map(|_| r.range(3, 9))
                .all(|x| (3..=9).contains(&x))
        );
        assert_eq!(r.range(5, 5), 5);
        let mut p = r.permutation(5);
        p.sort_unstable();
        assert_eq!(p, [0, 1, 2, 3, 4]);
    }
}
