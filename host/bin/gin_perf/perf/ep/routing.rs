//! Routing of the expert-parallel workload: which ranks each token goes to,
//! and where every copy lands, computed once per point from a seed.
//!
//! Each of `ranks` ranks holds `tokens` tokens; each token picks `topk`
//! distinct experts of `experts` (seeded, either uniformly or with a few hot
//! experts), and expert `e` lives on rank `e / (experts / ranks)`. A token
//! is sent ONCE to each rank that owns at least one of its experts (the
//! rank-deduplicated traffic of DeepEP's normal mode; its low-latency mode
//! sends one copy per expert, up to `topk` per token, which the sweep's
//! figures do not model), its own rank included (a loopback through the NIC,
//! where a GPU would use its own memory or the intra-node fabric).
//!
//! Layout (in token slots of `hidden` bytes):
//! - receiver `p` keeps the tokens from sender `s` at
//!   `recv_off[p][s] .. + sends[s][p].len()`, senders in rank order;
//! - sender `r`'s copies, packed per destination (the high-throughput
//!   mode's send buffer) and, mirrored, the combine results coming back, at
//!   `comb_off[r][p] .. + sends[r][p].len()`.

/// How experts are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skew {
    /// Every expert equally likely.
    Uniform,
    /// The first [`HOT_EXPERTS`] experts are drawn with [`HOT_WEIGHT`] times
    /// the weight of the others (they live on the first rank or two), so the
    /// receivers' load is uneven, as with a model's popular experts.
    Hot,
}

pub const HOT_EXPERTS: usize = 8;
pub const HOT_WEIGHT: f64 = 20.0;

#[derive(Clone, Debug)]
pub struct Plan {
    pub ranks: usize,
    pub tokens: usize,
    /// sends[r][p]: the tokens rank r sends to rank p, ascending.
    pub sends: Vec<Vec<Vec<u32>>>,
    pub recv_off: Vec<Vec<usize>>,
    pub comb_off: Vec<Vec<usize>>,
    /// The most tokens any rank receives (its receive region, in slots).
    pub recv_slots: usize,
    /// The most copies any rank sends (its packed send and combine regions).
    pub comb_slots: usize,
}

/// splitmix64: a small, seeded generator, the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Plan {
    /// Routes `tokens` tokens per rank to `topk` of `experts` experts.
    pub fn route(ranks: usize, tokens: usize, experts: usize, topk: usize, skew: Skew, seed: u64) -> Result<Plan, String> {
        if ranks == 0 || experts == 0 || experts % ranks != 0 {
            return Err(format!("{experts} experts do not divide evenly over {ranks} ranks"));
        }
        if topk == 0 || topk > experts {
            return Err(format!("top-k {topk} must be in 1..={experts} (the number of experts)"));
        }
        let per_rank = experts / ranks;
        let weight = |e: usize| if skew == Skew::Hot && e < HOT_EXPERTS { HOT_WEIGHT } else { 1.0 };
        let total: f64 = (0..experts).map(weight).sum();
        let mut rng = Rng::new(seed ^ (ranks as u64) << 32 ^ tokens as u64);
        let mut sends = vec![vec![Vec::new(); ranks]; ranks];
        let mut chosen = vec![false; experts];
        for row in sends.iter_mut() {
            for t in 0..tokens {
                chosen.iter_mut().for_each(|c| *c = false);
                let mut picked = 0;
                let mut left = total;
                while picked < topk {
                    // Weighted draw without replacement over the experts not yet
                    // chosen; rounding that runs past the end takes the last free one.
                    let mut x = rng.unit() * left;
                    let mut e = usize::MAX;
                    for i in (0..experts).filter(|&i| !chosen[i]) {
                        e = i;
                        if x < weight(i) {
                            break;
                        }
                        x -= weight(i);
                    }
                    chosen[e] = true;
                    left -= weight(e);
                    picked += 1;
                }
                let mut last = usize::MAX;
                for (e, _) in chosen.iter().enumerate().filter(|(_, c)| **c) {
                    let p = e / per_rank;
                    if p != last {
                        row[p].push(t as u32);
                        last = p;
                    }
                }
            }
        }
        let mut recv_off = vec![vec![0; ranks]; ranks];
        let mut comb_off = vec![vec![0; ranks]; ranks];
        let (mut recv_slots, mut comb_slots) = (0, 0);
        for p in 0..ranks {
            let mut acc = 0;
            for s in 0..ranks {
                recv_off[p][s] = acc;
                acc += sends[s][p].len();
            }
            recv_slots = recv_slots.max(acc);
        }
        for r in 0..ranks {
            let mut acc = 0;
            for p in 0..ranks {
                comb_off[r][p] = acc;
                acc += sends[r][p].len();
            }
            comb_slots = comb_slots.max(acc);
        }
        Ok(Plan { ranks, tokens, sends, recv_off, comb_off, recv_slots, comb_slots })
    }

    /// Token copies sent in one dispatch (each one put in low-latency mode).
    pub fn copies(&self) -> usize {
        self.sends.iter().flatten().map(|v| v.len()).sum()
    }

    /// Tokens each rank receives in one dispatch.
    pub fn received(&self) -> Vec<usize> {
        (0..self.ranks).map(|p| (0..self.ranks).map(|s| self.sends[s][p].len()).sum()).collect()
    }

    /// Puts of a chunked (high-throughput) dispatch: ceil(count / chunk) per
    /// (sender, receiver) pair with tokens.
    pub fn chunked_puts(&self, chunk: usize) -> usize {
        self.sends.iter().flatten().map(|v| v.len().div_ceil(chunk)).sum()
    }

    /// Pairs (sender, receiver) with no token: each gets a signal alone.
    pub fn empty_pairs(&self) -> usize {
        self.sends.iter().flatten().filter(|v| v.is_empty()).count()
    }
}

/// The first 8 bytes of a token copy: which iteration, sender and token it is.
pub fn stamp(iteration: u64, rank: usize, token: u32) -> u64 {
    0x5eed_0000_0000_0000 ^ (iteration << 36) ^ ((rank as u64) << 16) ^ token as u64
}

/// Byte `i` (>= 8) of token `token` of rank `rank`: the rest of the payload.
pub fn pattern(rank: usize, token: u32, i: usize) -> u8 {
    (rank.wrapping_mul(131) ^ (token as usize).wrapping_mul(31) ^ i.wrapping_mul(7)) as u8
}
