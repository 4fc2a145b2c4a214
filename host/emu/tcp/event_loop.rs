//! The TCP fabric's one thread: accepts and opens connections, writes the
//! peers' send buffers, reads frames into the local NICs' inboxes, sends
//! heartbeats and declares silent or broken peers unreachable. It never
//! blocks on a socket (mio, edge-triggered) and never waits on a NIC.

use super::frame::{self, Frame};
use super::{Peer, Shared, INBOX_LIMIT};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(0);
pub(super) const WAKER: Token = Token(1);
const FIRST_CONN: usize = 2;
/// Bytes read from a socket at a time.
const CHUNK: usize = 256 << 10;
/// How long a closing fabric keeps writing what its NICs sent last.
const LAST_FLUSH: Duration = Duration::from_millis(200);

struct Conn {
    stream: TcpStream,
    /// Known from the start for a connection we open, after its HELLO for
    /// one we accept.
    peer: Option<usize>,
    outgoing: bool,
    connected: bool,
    /// Bytes read and not yet taken are rbuf[rstart..rend]; the rest of
    /// rbuf is room (zeroed once, not per read).
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// Bytes at the front of `wbuf` that the peer's `queued` does not count
    /// (our HELLO).
    uncounted: usize,
    last_rx: Instant,
    opened: Instant,
    next_seq: u64,
    /// Reading stopped while a local inbox is over INBOX_LIMIT.
    paused: bool,
}

struct Loop {
    poll: Poll,
    listener: TcpListener,
    sh: Arc<Shared>,
    conns: Vec<Option<Conn>>,
    /// The connection we opened to each peer, by peer index.
    outgoing: Vec<Option<usize>>,
}

pub(super) fn run(poll: Poll, listener: TcpListener, sh: Arc<Shared>) {
    let mut l = Loop { poll, listener, sh, conns: Vec::new(), outgoing: Vec::new() };
    if let Err(e) = l.poll.registry().register(&mut l.listener, LISTENER, Interest::READABLE) {
        tracing::warn!(error = %e, "emulated TCP fabric: cannot watch the listening socket; no peer can connect");
    }
    l.run();
}

fn tick_of(dead_after: Duration) -> Duration {
    (dead_after / 4).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

impl Loop {
    fn run(&mut self) {
        let mut events = Events::with_capacity(256);
        let tick = tick_of(self.sh.opts.dead_after);
        let mut next_tick = Instant::now() + tick;
        loop {
            let now = Instant::now();
            let paused = self.conns.iter().flatten().any(|c| c.paused);
            let wait = if paused { Duration::from_millis(1) } else { next_tick.saturating_duration_since(now) };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != ErrorKind::Interrupted {
                    tracing::warn!(error = %e, "emulated TCP fabric: poll failed");
                    std::thread::sleep(Duration::from_millis(1));
                }
                continue;
            }
            if self.sh.stop.load(Ordering::Acquire) {
                self.last_flush();
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) => {
                        let i = t - FIRST_CONN;
                        if ev.is_writable() || ev.is_readable() || ev.is_error() {
                            self.check_connected(i);
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.read(i);
                        }
                        if ev.is_writable() {
                            self.write(i);
                        }
                    }
                }
            }
            if self.sh.pending.swap(false, Ordering::AcqRel) {
                self.flush_peers();
            }
            if paused {
                for i in 0..self.conns.len() {
                    if self.conns[i].as_ref().is_some_and(|c| c.paused) {
                        self.read(i);
                    }
                }
            }
            if Instant::now() >= next_tick {
                self.heartbeats_and_timeouts();
                next_tick = Instant::now() + tick;
            }
        }
    }

    fn conn(&mut self, i: usize) -> Option<&mut Conn> {
        self.conns.get_mut(i).and_then(Option::as_mut)
    }

    fn add(&mut self, mut stream: TcpStream, peer: Option<usize>, outgoing: bool, connected: bool) -> Option<usize> {
        let i = self.conns.iter().position(Option::is_none).unwrap_or(self.conns.len());
        let r = self.poll.registry().register(&mut stream, Token(i + FIRST_CONN), Interest::READABLE | Interest::WRITABLE);
        if let Err(e) = r {
            tracing::warn!(error = %e, "emulated TCP fabric: cannot watch a connection");
            return None;
        }
        let now = Instant::now();
        let c = Conn {
            stream,
            peer,
            outgoing,
            connected,
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            uncounted: 0,
            last_rx: now,
            opened: now,
            next_seq: 0,
            paused: false,
        };
        if i == self.conns.len() {
            self.conns.push(Some(c));
        } else {
            self.conns[i] = Some(c);
        }
        Some(i)
    }

    fn close(&mut self, i: usize) {
        if let Some(mut c) = self.conns.get_mut(i).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if c.outgoing {
                if let Some(p) = c.peer {
                    if self.outgoing.get(p) == Some(&Some(i)) {
                        self.outgoing[p] = None;
                    }
                }
            }
        }
    }

    /// Marks peer `p` unreachable (the first reason stays), drops what
    /// waits for it and closes its connections. `warn`: a fault (a closed
    /// connection at the end of a job is reported at info level; the
    /// NICs WARN for any operation it affects).
    fn fail(&mut self, p: usize, why: String, warn: bool) {
        let peer = self.sh.peer(p);
        if peer.dead.set(why.clone()).is_ok() {
            if warn {
                tracing::warn!(peer = %peer.addr, why = %why, "emulated TCP fabric: peer unreachable; operations towards it fail");
            } else {
                tracing::info!(peer = %peer.addr, why = %why, "emulated TCP fabric: peer gone");
            }
        }
        {
            let mut out = super::lock(&peer.out);
            out.buf = Vec::new();
        }
        peer.queued.store(0, Ordering::Release);
        let mine: Vec<usize> =
            (0..self.conns.len()).filter(|&i| self.conns[i].as_ref().is_some_and(|c| c.peer == Some(p))).collect();
        for i in mine {
            self.close(i);
        }
    }

    /// Fails the connection's peer, or just closes it when no HELLO named one.
    fn fail_conn(&mut self, i: usize, why: String, warn: bool) {
        match self.conn(i).and_then(|c| c.peer) {
            Some(p) => self.fail(p, why, warn),
            None => {
                tracing::debug!(why = %why, "emulated TCP fabric: closing a connection that never said hello");
                self.close(i)
            }
        }
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nodelay(true);
                    self.add(s, None, false, true);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "emulated TCP fabric: accept failed");
                    return;
                }
            }
        }
    }

    /// A connection we opened: has the connect finished, or failed?
    fn check_connected(&mut self, i: usize) {
        let Some(c) = self.conn(i) else { return };
        if c.connected {
            return;
        }
        let res = match c.stream.take_error() {
            Ok(Some(e)) | Err(e) => Err(e),
            Ok(None) => match c.stream.peer_addr() {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
        };
        match res {
            Ok(true) => {
                c.connected = true;
                c.last_rx = Instant::now();
                let _ = c.stream.set_nodelay(true);
                self.write(i);
            }
            Ok(false) => {}
            Err(e) => self.fail_conn(i, format!("connect failed: {e}"), true),
        }
    }

    /// Opens connections peers need and writes what their NICs sent.
    fn flush_peers(&mut self) {
        let peers: Vec<Arc<Peer>> = self.sh.peers.read().unwrap_or_else(|e| e.into_inner()).clone();
        self.outgoing.resize(peers.len(), None);
        for (p, peer) in peers.iter().enumerate() {
            if !peer.flush.swap(false, Ordering::AcqRel) || peer.dead.get().is_some() {
                continue;
            }
            let i = match self.outgoing[p] {
                Some(i) => i,
                None => match self.open(p, peer) {
                    Some(i) => i,
                    None => continue,
                },
            };
            self.write(i);
        }
    }

    fn open(&mut self, p: usize, peer: &Peer) -> Option<usize> {
        let s = match TcpStream::connect(peer.addr) {
            Ok(s) => s,
            Err(e) => {
                self.fail(p, format!("connect failed: {e}"), true);
                return None;
            }
        };
        let i = self.add(s, Some(p), true, false)?;
        let (listen, fabric) = (self.sh.listen, self.sh.opts.fabric_id);
        let c = self.conn(i).expect("just added");
        frame::push_hello(&mut c.wbuf, listen, fabric);
        c.uncounted = c.wbuf.len();
        self.outgoing[p] = Some(i);
        Some(i)
    }

    fn write(&mut self, i: usize) {
        let sh = self.sh.clone();
        let Some(c) = self.conn(i) else { return };
        if !c.connected {
            return;
        }
        let peer = c.peer.filter(|_| c.outgoing).map(|p| sh.peer(p));
        let err = loop {
            if c.wpos == c.wbuf.len() {
                c.wbuf.clear();
                c.wpos = 0;
                c.uncounted = 0;
                if let Some(peer) = &peer {
                    // Trade buffers with the senders: no copy.
                    std::mem::swap(&mut c.wbuf, &mut super::lock(&peer.out).buf);
                }
                if c.wbuf.is_empty() {
                    break None;
                }
            }
            match c.stream.write(&c.wbuf[c.wpos..]) {
                Ok(0) => break Some("the connection accepts no more bytes".to_string()),
                Ok(n) => {
                    c.wpos += n;
                    let free = n.min(c.uncounted);
                    c.uncounted -= free;
                    if let Some(peer) = &peer {
                        peer.queued.fetch_sub(n - free, Ordering::AcqRel);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => break Some(format!("write failed: {e}")),
            }
        };
        if let Some(why) = err {
            self.fail_conn(i, why, true);
        }
    }

    fn inbox_full(&self) -> bool {
        self.sh.local.any_backlog_over(INBOX_LIMIT)
    }

    fn read(&mut self, i: usize) {
        let full = self.inbox_full();
        let Some(c) = self.conn(i) else { return };
        if !c.connected {
            return;
        }
        if full {
            // We are the slow side: not hearing the peer is our choice.
            c.paused = true;
            c.last_rx = Instant::now();
            return;
        }
        c.paused = false;
        let mut fault: Option<(String, bool)> = None;
        loop {
            let c = self.conn(i).expect("live");
            if c.rend == c.rbuf.len() {
                // Out of room: move what is left to the front, or grow.
                c.rbuf.copy_within(c.rstart..c.rend, 0);
                c.rend -= c.rstart;
                c.rstart = 0;
                if c.rbuf.len() - c.rend < CHUNK {
                    c.rbuf.resize(c.rend + 2 * CHUNK, 0);
                }
            }
            let r = c.stream.read(&mut c.rbuf[c.rend..]);
            match r {
                Ok(0) => {
                    fault = Some(("closed the connection (its process ended, or closed the fabric)".into(), false));
                    break;
                }
                Ok(n) => {
                    c.rend += n;
                    c.last_rx = Instant::now();
                    if let Err(e) = self.frames(i) {
                        fault = Some((e, true));
                        break;
                    }
                    if self.inbox_full() {
                        let c = self.conn(i).expect("live");
                        c.paused = true;
                        break;
                    }
                }
                Err(e) => match e.kind() {
                    ErrorKind::WouldBlock => break,
                    ErrorKind::Interrupted => continue,
                    _ => {
                        fault = Some((format!("read failed: {e}"), true));
                        break;
                    }
                },
            }
        }
        if let Some((why, warn)) = fault {
            self.fail_conn(i, why, warn);
        }
    }

    /// Delivers the whole frames read so far on connection `i`.
    fn frames(&mut self, i: usize) -> Result<(), String> {
        let sh = self.sh.clone();
        let c = self.conn(i).expect("live");
        let mut batch: VecDeque<crate::emu::packet::Packet> = VecDeque::new();
        let mut batch_dst = u32::MAX;
        let mut result = Ok(());
        loop {
            let (f, n) = match frame::take(&c.rbuf[c.rstart..c.rend], &mut c.next_seq) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    result = Err(format!("{e}"));
                    break;
                }
            };
            c.rstart += n;
            match f {
                Frame::Heartbeat => {}
                Frame::Hello { addr, fabric } => {
                    if c.outgoing || c.peer.is_some() {
                        result = Err("a second hello".into());
                        break;
                    }
                    if fabric != sh.opts.fabric_id {
                        result = Err(format!("{addr} is on another fabric (RCCL_RUST_GIN_EMU_FABRIC differs)"));
                        break;
                    }
                    let p = sh.peer_index(addr);
                    if let Some(why) = sh.peer(p).dead.get() {
                        result = Err(format!("{addr} was declared unreachable before ({why})"));
                        break;
                    }
                    c.peer = Some(p);
                }
                Frame::Data(mut p) => {
                    let Some(peer) = c.peer.filter(|_| !c.outgoing) else {
                        result = Err("data before hello, or on our own connection".into());
                        break;
                    };
                    p.src_node = match sh.alias(peer, p.src_node) {
                        Ok(a) => a,
                        Err(e) => {
                            result = Err(format!("{e}"));
                            break;
                        }
                    };
                    if p.dst_node != batch_dst && !batch.is_empty() {
                        deliver(&sh, batch_dst, &mut batch);
                    }
                    batch_dst = p.dst_node;
                    batch.push_back(p);
                }
            }
        }
        if c.rstart == c.rend {
            c.rstart = 0;
            c.rend = 0;
        }
        if !batch.is_empty() {
            deliver(&sh, batch_dst, &mut batch);
        }
        result
    }

    fn heartbeats_and_timeouts(&mut self) {
        let dead_after = self.sh.opts.dead_after;
        let now = Instant::now();
        for i in 0..self.conns.len() {
            let Some(c) = self.conn(i) else { continue };
            if !c.connected {
                if now.duration_since(c.opened) > dead_after {
                    self.fail_conn(i, format!("could not connect within {} ms", dead_after.as_millis()), true);
                }
                continue;
            }
            if c.peer.is_none() && now.duration_since(c.opened) > dead_after {
                self.fail_conn(i, "no hello".into(), false);
                continue;
            }
            if c.paused {
                c.last_rx = now;
            } else if now.duration_since(c.last_rx) > dead_after {
                let why = format!(
                    "nothing heard for {} ms, not even a heartbeat (a host that died, a partition, or a half-open connection)",
                    now.duration_since(c.last_rx).as_millis()
                );
                self.fail_conn(i, why, true);
                continue;
            }
            if c.outgoing {
                if let Some(p) = c.peer {
                    let peer = self.sh.peer(p);
                    let mut out = super::lock(&peer.out);
                    let before = out.buf.len();
                    frame::push_heartbeat(&mut out.buf);
                    peer.queued.fetch_add(out.buf.len() - before, Ordering::AcqRel);
                }
            } else {
                frame::push_heartbeat(&mut c.wbuf);
            }
            self.write(i);
        }
    }

    /// A closing fabric: what the NICs sent last still goes out, for a
    /// bounded time.
    fn last_flush(&mut self) {
        let end = Instant::now() + LAST_FLUSH;
        let mut events = Events::with_capacity(64);
        while Instant::now() < end {
            self.flush_all();
            let left = self.conns.iter().flatten().any(|c| c.outgoing && c.connected && c.wpos < c.wbuf.len());
            let queued = self.sh.peers.read().unwrap_or_else(|e| e.into_inner()).iter().any(|p| !super::lock(&p.out).buf.is_empty() && p.dead.get().is_none());
            if !left && !queued {
                return;
            }
            let _ = self.poll.poll(&mut events, Some(Duration::from_millis(5)));
            for ev in events.iter() {
                let Token(t) = ev.token();
                if t >= FIRST_CONN {
                    self.check_connected(t - FIRST_CONN);
                }
            }
        }
    }

    fn flush_all(&mut self) {
        let peers = self.sh.peers.read().unwrap_or_else(|e| e.into_inner()).len();
        for p in 0..peers {
            self.sh.peer(p).flush.store(true, Ordering::Release);
        }
        self.flush_peers();
    }
}

fn deliver(sh: &Shared, dst: u32, batch: &mut VecDeque<crate::emu::packet::Packet>) {
    if let Err(e) = sh.local.deliver(dst, batch) {
        // The NIC left (its process closed it): as on the other fabrics.
        tracing::debug!(dst, dropped = batch.len(), error = %e, "emulated TCP fabric: packets for a NIC that is gone");
        batch.clear();
    }
}
