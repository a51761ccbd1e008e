//! SPEC section 2: where the bits of every weight live in `codes`.
//!
//! A block of `T` weights is a tail-biting stream of `T*k` bits. Weight `t` reads the
//! L-bit window starting at bit `(T-1-t)*k`, wrapping around the block, so
//! `s_{t+1} = ((s_t << k) mod 2^L) | next k bits`. Kernels read runs of 32 weights;
//! [`run_window_words`] is the formula the templates' run loads write out in their own
//! arithmetic (`decode.inc`'s `load_run`, `reduce_mma.kernel`), and its test proves
//! that those `k + 1` words hold every bit of the run.

/// Bit `i` of a block (`i < T*k`).
pub fn bit(block: &[u32], i: usize) -> u32 {
    (block[i >> 5] >> (i & 31)) & 1
}

/// State of weight `t` of a block of `t_len` weights at `k` bits, `l` state bits.
///
/// Reads at most two words (three when a window straddles the wrap point), so it is
/// the fast path the reference and the encoder share.
pub fn state(block: &[u32], t_len: usize, k: u32, l: u32, t: usize) -> u32 {
    let nbits = t_len * k as usize;
    let start = (t_len - 1 - t) * k as usize;
    let w = start >> 5;
    let off = (start & 31) as u32;
    let nwords = block.len();
    // 64-bit window from the word holding `start` and the next (wrapping) word; a
    // window of L <= 16 bits starting at offset <= 31 fits in 47 bits.
    let lo = block[w] as u64;
    let hi = block[(w + 1) % nwords] as u64;
    let mut s = ((lo | (hi << 32)) >> off) as u32;
    if start + l as usize > nbits {
        // The window wraps: bits from `nbits` onward come from the block start.
        let have = (nbits - start) as u32;
        s = (s & ((1u32 << have) - 1)) | (block[0] << have);
    }
    s & ((1u32 << l) - 1)
}

/// All `t_len` states of a block, in weight order.
pub fn block_states(block: &[u32], t_len: usize, k: u32, l: u32) -> Vec<u32> {
    (0..t_len).map(|t| state(block, t_len, k, l, t)).collect()
}

/// Pack a block from the new `k` bits of every state: weight `t` owns bits
/// `(T-1-t)*k .. (T-t)*k`. For a valid tail-biting state sequence this inverts
/// [`block_states`].
pub fn pack_block(states: &[u32], k: u32, out: &mut [u32]) {
    let t_len = states.len();
    debug_assert_eq!(out.len(), crate::geometry::words_per_block(t_len, k));
    out.iter_mut().for_each(|w| *w = 0);
    let mask = (1u32 << k) - 1;
    for (t, &s) in states.iter().enumerate() {
        let start = (t_len - 1 - t) * k as usize;
        let v = (s & mask) as u64;
        let w = start >> 5;
        let off = start & 31;
        let both = v << off;
        out[w] |= both as u32;
        if off + k as usize > 32 {
            out[w + 1] |= (both >> 32) as u32;
        }
    }
}

/// Whether a state sequence is a path of the bitshift trellis that closes on itself
/// (`s_{t+1} >> k == s_t mod 2^(L-k)` for every t, including `T-1 -> 0`).
pub fn is_tail_biting(states: &[u32], k: u32, l: u32) -> bool {
    let low = (1u32 << (l - k)) - 1;
    (0..states.len()).all(|t| states[(t + 1) % states.len()] >> k == states[t] & low)
}

/// The first word of a block that run `u` (weights `32u .. 32u+31`) of a `t_len`-weight
/// block reads, and the number of consecutive words (mod the block length) it needs.
/// Weight `32u+31` starts lowest, at bit `(T-32-32u)*k`; the run spans `32k + L - k`
/// bits from there, so `k + 1` words suffice when `L <= 32`.
pub fn run_window_words(t_len: usize, k: u32, u: usize) -> (usize, usize) {
    ((t_len - 32 - 32 * u) * k as usize / 32, k as usize + 1)
}

/// Bit of a run's words (counted from [`run_window_words`]'s first word) where weight `j`
/// (0..32) of the run starts: `(31 - j) k`. The run's first weight starts at a multiple of
/// 32 bits from the block's (`T - 32 - 32u` weights of `k` bits), so this is the same
/// for every run.
pub fn run_bit(j: u32, k: u32) -> u32 {
    (31 - j) * k
}

/// [`run_bit`] as the C expression the templates' state macros write, of the macro
/// arguments named `j` and `k`: the formula has one source here.
pub fn run_bit_c(j: &str, k: &str) -> String {
    format!("((31u - ({j})) * ({k}))")
}

/// The C declarations of run `u`'s place (`u` counts the runs of a row, 32 weights
/// each): its block `blk` and its first weight `t0` in that block, for blocks of `runs`
/// runs (`T / 32`, a number, as the templates hold it).
pub fn run_position_c(runs: impl std::fmt::Display) -> String {
    format!("const uint blk = u / {runs}u, t0 = (u - blk * {runs}u) * 32u;")
}

/// [`run_window_words`]'s first word as the C expression the templates' run loads write,
/// for `t_len`-weight blocks at `k` bits (numbers, as the templates hold them) and the
/// run's first weight named `t0` (32 u).
pub fn run_first_word_c(
    t_len: impl std::fmt::Display,
    t0: &str,
    k: impl std::fmt::Display,
) -> String {
    format!("({t_len}u - 32u - {t0}) * {k}u / 32u")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The SPEC formula, one bit at a time.
    fn naive_state(block: &[u32], t_len: usize, k: u32, l: u32, t: usize) -> u32 {
        let nbits = t_len * k as usize;
        (0..l as usize)
            .map(|j| bit(block, ((t_len - 1 - t) * k as usize + j) % nbits) << j)
            .sum()
    }

    fn geometry() -> impl Strategy<Value = (usize, u32, u32)> {
        (1usize..=8, 1u32..=8)
            .prop_flat_map(|(blocks32, k)| ((k + 1)..=16).prop_map(move |l| (blocks32 * 32, k, l)))
    }

    proptest! {
        #[test]
        fn state_matches_bitwise_spec(((t_len, k, l), seed) in (geometry(), any::<u64>())) {
            let words = t_len * k as usize / 32;
            let mut x = seed | 1;
            let block: Vec<u32> = (0..words).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u32 }).collect();
            for t in 0..t_len {
                prop_assert_eq!(state(&block, t_len, k, l, t), naive_state(&block, t_len, k, l, t));
            }
        }

        #[test]
        fn pack_inverts_states_and_stream_tail_bites(((t_len, k, l), seed) in (geometry(), any::<u64>())) {
            let words = t_len * k as usize / 32;
            let mut x = seed | 1;
            let block: Vec<u32> = (0..words).map(|_| { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x as u32 }).collect();
            let states = block_states(&block, t_len, k, l);
            prop_assert!(is_tail_biting(&states, k, l));
            let mut packed = vec![0u32; words];
            pack_block(&states, k, &mut packed);
            prop_assert_eq!(packed, block);
        }

        #[test]
        fn run_window_covers_every_bit_of_the_run(((t_len, k, l), u) in (geometry(), 0usize..8)) {
            let u = u % (t_len / 32);
            let (w0, n) = run_window_words(t_len, k, u);
            let nbits = t_len * k as usize;
            let words = nbits / 32;
            for t in 32 * u..32 * u + 32 {
                for j in 0..l as usize {
                    let b = ((t_len - 1 - t) * k as usize + j) % nbits;
                    let off = (b / 32 + words - w0) % words;
                    prop_assert!(off < n.min(words), "t {} bit {} word offset {}", t, b, off);
                }
                // The run's weight t - 32 u starts at run_bit from the run's first word.
                let start = (t_len - 1 - t) * k as usize - 32 * w0;
                prop_assert_eq!(start, run_bit((t - 32 * u) as u32, k) as usize);
            }
        }
    }
}
