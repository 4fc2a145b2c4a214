//! What arrives at a rank's connection-setup socket, read without trusting
//! it: many connections at once (nonblocking, so a silent or slow one cannot
//! hold up the others), each with a deadline, at most MAX_PENDING of them,
//! and early messages kept within a bound. Everything dropped is counted by
//! reason.

use super::frame::{self, Header, Key, Reject, HEADER, MAX_PAYLOAD};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Connections read at once; a flood closes the oldest first.
pub const MAX_PENDING: usize = 64;
/// How long one connection may take to deliver its frame (a rank writes it
/// at once after connecting).
pub const CONN_TIMEOUT: Duration = Duration::from_secs(2);
/// Payload bytes of early messages kept at most, whatever nranks is.
pub const EARLY_MAX_BYTES: usize = 64 << 20;

/// The most an inbox holds for untrusted input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Early messages: one per peer, for the next collective only.
    pub early_count: usize,
    /// Their payload bytes.
    pub early_bytes: usize,
    /// Buffers of connections being read (MAX_PENDING frames at most).
    pub connection_bytes: usize,
}

impl Bound {
    pub fn total(&self) -> usize {
        self.early_bytes + self.connection_bytes
    }
}

/// The bound for `nranks` ranks.
pub fn memory_bound(nranks: u32) -> Bound {
    let early_count = nranks.saturating_sub(1) as usize;
    Bound {
        early_count,
        early_bytes: EARLY_MAX_BYTES.min(early_count.saturating_mul(MAX_PAYLOAD)),
        connection_bytes: MAX_PENDING * (HEADER + MAX_PAYLOAD),
    }
}

/// What an inbox has seen (tests, and the timeout and summary messages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub early_peak_count: usize,
    pub early_peak_bytes: usize,
    pub pending_peak: usize,
    pub dropped: BTreeMap<Reject, u64>,
}

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    header: Option<Header>,
    since: Instant,
}

enum Poll {
    Waiting,
    Done(Header, Vec<u8>),
    Failed(Reject),
}

impl Conn {
    /// Reads what is there; buffers grow only to a validated frame's size.
    fn poll(&mut self, scratch: &mut [u8], me: u32, nranks: u32) -> Poll {
        loop {
            let need = HEADER + self.header.map_or(0, |h| h.len);
            if self.buf.len() == need {
                match self.header {
                    Some(h) => return Poll::Done(h, self.buf.split_off(HEADER)),
                    None => {
                        let raw: &[u8; HEADER] = self.buf[..].try_into().expect("a whole header");
                        match frame::parse_header(raw, me, nranks) {
                            Ok(h) => {
                                self.buf.reserve_exact(h.len);
                                self.header = Some(h);
                            }
                            Err(r) => return Poll::Failed(r),
                        }
                        continue;
                    }
                }
            }
            let want = (need - self.buf.len()).min(scratch.len());
            match self.s.read(&mut scratch[..want]) {
                Ok(0) => return Poll::Failed(Reject::Truncated),
                Ok(k) => self.buf.extend_from_slice(&scratch[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Poll::Waiting,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return Poll::Failed(Reject::Truncated),
            }
        }
    }
}

/// One rank's inbox: connections being read, early messages, counters.
pub struct Inbox {
    me: u32,
    nranks: u32,
    key: Key,
    pending: VecDeque<Conn>,
    /// Authentic messages for the next collective, by sender.
    early: HashMap<u32, Vec<u8>>,
    early_tag: u64,
    early_bytes: usize,
    early_limit: usize,
    scratch: Vec<u8>,
    pub stats: Stats,
}

impl Inbox {
    pub fn new(me: u32, nranks: u32, key: Key) -> Inbox {
        Inbox {
            me,
            nranks,
            key,
            pending: VecDeque::new(),
            early: HashMap::new(),
            early_tag: 0,
            early_bytes: 0,
            early_limit: EARLY_MAX_BYTES,
            scratch: vec![0u8; 64 << 10],
            stats: Stats::default(),
        }
    }

    /// A lower bound on early bytes than EARLY_MAX_BYTES (tests reach it
    /// with a few ranks).
    pub fn limit_early_bytes(&mut self, bytes: usize) {
        self.early_limit = bytes.min(EARLY_MAX_BYTES);
    }

    fn drop_for(&mut self, r: Reject) {
        *self.stats.dropped.entry(r).or_default() += 1;
    }

    /// Starts collective `tag` (the next is `next`): the early messages kept
    /// for it move into `got`.
    pub fn begin(&mut self, tag: u64, next: u64, got: &mut [Option<Vec<u8>>]) {
        if self.early_tag == tag {
            for (from, p) in self.early.drain() {
                got[from as usize] = Some(p);
            }
        }
        self.early.clear();
        self.early_bytes = 0;
        self.early_tag = next;
    }

    /// How many connections to accept now: the free slots, or one (which
    /// closes the oldest) when all are taken. A burst thus waits in the
    /// kernel's accept queue instead of evicting connections not read yet.
    pub fn room(&self) -> usize {
        (MAX_PENDING - self.pending.len()).max(1)
    }

    pub fn add(&mut self, s: TcpStream) {
        if s.set_nonblocking(true).is_err() {
            return;
        }
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
            self.drop_for(Reject::TooManyConnections);
        }
        self.pending.push_back(Conn { s, buf: Vec::new(), header: None, since: Instant::now() });
        self.stats.pending_peak = self.stats.pending_peak.max(self.pending.len());
    }

    /// Reads every pending connection once; frames for `tag` fill `got`.
    /// Returns whether anything arrived.
    pub fn poll(&mut self, tag: u64, got: &mut [Option<Vec<u8>>]) -> bool {
        let mut progressed = false;
        let mut i = 0;
        while i < self.pending.len() {
            let (me, n) = (self.me, self.nranks);
            let outcome = self.pending[i].poll(&mut self.scratch, me, n);
            match outcome {
                Poll::Waiting if self.pending[i].since.elapsed() <= CONN_TIMEOUT => i += 1,
                Poll::Waiting => {
                    self.pending.remove(i);
                    self.drop_for(Reject::Slow);
                }
                Poll::Failed(r) => {
                    self.pending.remove(i);
                    self.drop_for(r);
                }
                Poll::Done(h, payload) => {
                    self.pending.remove(i);
                    progressed = true;
                    self.deliver(h, payload, tag, got);
                }
            }
        }
        progressed
    }

    fn deliver(&mut self, h: Header, payload: Vec<u8>, tag: u64, got: &mut [Option<Vec<u8>>]) {
        if frame::mac(&self.key, h.tag, h.from, self.me, &payload) != h.mac {
            return self.drop_for(Reject::BadMac);
        }
        let from = h.from as usize;
        if h.tag == tag && got[from].is_none() {
            got[from] = Some(payload);
        } else if h.tag == self.early_tag && !self.early.contains_key(&h.from) {
            if self.early_bytes + payload.len() > self.early_limit {
                return self.drop_for(Reject::OverBound);
            }
            self.early_bytes += payload.len();
            self.early.insert(h.from, payload);
            self.stats.early_peak_count = self.stats.early_peak_count.max(self.early.len());
            self.stats.early_peak_bytes = self.stats.early_peak_bytes.max(self.early_bytes);
        } else {
            // An old collective's, a duplicate, or more than one ahead: no
            // rank sends those (a peer is at most one collective ahead).
            self.drop_for(Reject::Stale);
        }
    }
}
