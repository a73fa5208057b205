//! A fast hasher for a pass's own caches (the waiting messages, the tenant index), whose keys are
//! short tuples of numbers and names hashed tens of thousands of times per pass: the standard
//! library's SipHash was most of what those lookups cost (a tenth of the 100000/500 bench case).
//!
//! Each word is mixed in multiply-rotate style (as rustc's FxHash) and the result finished with
//! murmur3's 64-bit mixer, so keys that differ only in high bits (the bits of an `f64`) still
//! spread over the table's low bits. The state starts from a seed drawn from the standard
//! library's random keys per map, so a queue's names cannot be chosen to collide ahead of time
//! as easily as with a fixed function. Nothing depends on iteration order: the maps are looked
//! up, never walked.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};

/// A `HashMap` with [`FastState`].
pub(super) type FastMap<K, V> = HashMap<K, V, FastState>;

/// Builds [`FastHasher`]s from one random seed.
#[derive(Debug, Clone)]
pub(super) struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> Self {
        FastState {
            seed: RandomState::new().hash_one(0x5eed_u64),
        }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;

    fn build_hasher(&self) -> FastHasher {
        FastHasher { hash: self.seed }
    }
}

/// The hasher: one multiply per word.
#[derive(Debug, Clone, Copy)]
pub(super) struct FastHasher {
    hash: u64,
}

const K: u64 = 0x517c_c1b7_2722_0a95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0_u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0_u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            // The length keeps "a" and "a\0" apart.
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // murmur3's fmix64: every input bit reaches every output bit.
        let mut h = self.hash;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys that differ in one field hash apart, names of every length included, and equal keys
    /// hash alike (what the caches rely on; a map works with any hash, so this guards speed).
    #[test]
    fn distinct_keys_spread_and_equal_keys_agree() {
        let state = FastState::default();
        let mut seen = std::collections::HashSet::new();
        let names = [
            "",
            "a",
            "a\0",
            "h200",
            "pool-00",
            "pool-000",
            "a-much-longer-name",
        ];
        for name in names {
            for bits in [0.0_f64, 1.0, 2.0, 1024.0, 0.5] {
                for n in 0..8_u32 {
                    let key = (name, Some(name), n, bits.to_bits());
                    assert_eq!(state.hash_one(key), state.hash_one(key));
                    seen.insert(state.hash_one(key) & 0xffff);
                }
            }
        }
        // 280 keys over 65,536 low-bit values: a good mix collides a handful of times at most.
        assert!(seen.len() > 270, "{} distinct low bits", seen.len());
        let mut map: FastMap<(&str, u32), u32> = FastMap::default();
        for (k, name) in names.iter().enumerate() {
            map.insert((name, 7), k as u32);
        }
        for (k, name) in names.iter().enumerate() {
            assert_eq!(map.get(&(*name, 7)), Some(&(k as u32)));
        }
    }
}
