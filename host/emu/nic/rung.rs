//! The QPs rung since the NIC's last step: one bit per QP, set by the
//! doorbell with one atomic OR and taken by the step a word at a time.
//!
//! It replaces a per-QP "queued" flag plus a mutex-guarded list of QP
//! numbers: each doorbell then paid a swap, a lock, a push and an unlock,
//! and every step a lock, on lines the ringing core and the NIC's core
//! traded back and forth (docs/performance.md, "The doorbell's rung set").
//!
//! QP numbers are handed out in order from QPN_BASE, so a QP's bit is its
//! slot (qpn - QPN_BASE). A word is allocated the first time a QP needs a
//! bit in it and lives as long as the NIC (the set) or a bell holding it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A QP's bit, held by its doorbell.
pub(super) struct RungBit {
    word: Arc<AtomicU64>,
    mask: u64,
}

impl RungBit {
    /// Marks the QP rung. Release: a step that takes the bit (acquire) sees
    /// the WQEs and the doorbell record written before the doorbell. An OR
    /// on every doorbell, even one that finds the bit set, so that the step
    /// that takes it is ordered after this doorbell's writes too.
    pub(super) fn set(&self) {
        self.word.fetch_or(self.mask, Ordering::AcqRel);
    }
}

/// The step's side: every word of the NIC's QPs.
#[derive(Default)]
pub(super) struct RungSet {
    words: Vec<Arc<AtomicU64>>,
}

impl RungSet {
    /// The bit of the QP in `slot` (words are added as slots grow).
    pub(super) fn bit(&mut self, slot: usize) -> RungBit {
        let w = slot / 64;
        while self.words.len() <= w {
            self.words.push(Arc::new(AtomicU64::new(0)));
        }
        RungBit { word: self.words[w].clone(), mask: 1 << (slot % 64) }
    }

    /// Clears every set bit and hands its slot to `f`, in slot order. A
    /// doorbell from the moment its bit is cleared marks the QP again (the
    /// step reads the send queue after this). A word with no bit set costs
    /// one load.
    pub(super) fn take(&self, mut f: impl FnMut(usize)) {
        for (w, word) in self.words.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::AcqRel);
            while bits != 0 {
                f(w * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rung_slot_is_taken_once_in_slot_order() {
        let mut set = RungSet::default();
        let bits: Vec<_> = (0..200).map(|s| set.bit(s)).collect();
        for s in [130, 3, 64, 199, 3, 0] {
            bits[s].set();
        }
        let mut got = vec![];
        set.take(|s| got.push(s));
        assert_eq!(got, vec![0, 3, 64, 130, 199]);
        let mut again = vec![];
        set.take(|s| again.push(s));
        assert!(again.is_empty(), "taken bits are cleared: {again:?}");
        bits[65].set();
        set.take(|s| again.push(s));
        assert_eq!(again, vec![65]);
    }

    #[test]
    fn a_step_that_takes_a_bit_sees_what_was_written_before_its_doorbell() {
        // Two ringers each publish a counter and ring their QP's bit; the
        // step takes bits while they run and reads the counters of the
        // slots it took. After the ringers end, one last take: every
        // ringer's last value must have been seen (no doorbell lost), and
        // never a value ahead of what was published (no bit taken early).
        const ROUNDS: u64 = 20_000;
        let mut set = RungSet::default();
        let slots = [5usize, 70];
        let bits: Vec<_> = slots.iter().map(|&s| set.bit(s)).collect();
        let published: Vec<AtomicU64> = (0..2).map(|_| AtomicU64::new(0)).collect();
        let mut seen = [0u64; 2];
        let look = |set: &RungSet, seen: &mut [u64; 2]| {
            set.take(|s| {
                let t = slots.iter().position(|&x| x == s).expect("only rung slots are taken");
                let v = published[t].load(Ordering::Relaxed);
                assert!(v >= seen[t], "slot {s}: {v} after {}", seen[t]);
                seen[t] = v;
            })
        };
        let done = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for t in 0..2 {
                let (bits, published, done) = (&bits, &published, &done);
                sc.spawn(move || {
                    for r in 1..=ROUNDS {
                        published[t].store(r, Ordering::Relaxed);
                        bits[t].set();
                    }
                    done.fetch_add(1, Ordering::Release);
                });
            }
            while done.load(Ordering::Acquire) < 2 {
                look(&set, &mut seen);
            }
        });
        look(&set, &mut seen);
        assert_eq!(seen, [ROUNDS, ROUNDS], "every ringer's last doorbell was taken after its write");
    }
}
