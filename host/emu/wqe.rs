//! Decoding a send WQE the way the NIC reads it. Pure functions over bytes:
//! whatever the bytes, the result is a decoded operation or the syndrome the
//! NIC reports, never a panic (tests/emu_fuzz.rs feeds it random bytes).

use crate::mlx5::wire::{
    ctrl, opcode, syndrome, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, RaddrSeg, DATAGRAM_SEG_SIZE, INLINE_SEG,
    INVALID_LKEY, SEND_DS_BYTES, SEND_WQE_BB,
};

/// One entry of a gather or scatter list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicKind {
    FetchAdd,
    CompareSwap,
}

/// A gather or scatter list: up to [`SgList::INLINE`] entries without an
/// allocation (the common case: one), more on the heap. A WQE holds at most
/// 61 data segments.
#[derive(Clone, Debug, Default)]
pub struct SgList {
    len: u8,
    inline: [Sge; SgList::INLINE],
    heap: Vec<Sge>,
}

impl SgList {
    pub const INLINE: usize = 1;

    pub fn one(s: Sge) -> SgList {
        let mut l = SgList::default();
        l.push(s);
        l
    }

    pub fn push(&mut self, s: Sge) {
        let n = self.len as usize;
        if n < Self::INLINE && self.heap.is_empty() {
            self.inline[n] = s;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline[..n]);
            }
            self.heap.push(s);
        }
        self.len = self.len.saturating_add(1);
    }
}

impl std::ops::Deref for SgList {
    type Target = [Sge];
    fn deref(&self) -> &[Sge] {
        if self.heap.is_empty() {
            &self.inline[..self.len as usize]
        } else {
            &self.heap
        }
    }
}

impl PartialEq for SgList {
    fn eq(&self, o: &SgList) -> bool {
        **self == **o
    }
}
impl Eq for SgList {}

/// A decoded operation; inline WRITE data is borrowed from the WQE's bytes
/// (no copy until it goes into a packet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WqeOp<'a> {
    Nop,
    /// RDMA WRITE (with immediate when `imm` is set); the payload comes from
    /// the gather list or is carried inline.
    Write { raddr: u64, rkey: u32, gather: SgList, inline: Option<&'a [u8]>, imm: Option<u32> },
    Read { raddr: u64, rkey: u32, scatter: SgList },
    Atomic { kind: AtomicKind, raddr: u64, rkey: u32, swap_add: u64, compare: u64, result: Sge },
    /// The NIC reads `source` from local memory (nothing goes on the wire):
    /// the flush after READs.
    Dump { source: Sge },
}

impl WqeOp<'_> {
    /// Bytes the operation moves.
    #[inline]
    pub fn length(&self) -> u64 {
        match self {
            WqeOp::Nop => 0,
            WqeOp::Write { gather, inline, .. } => match inline {
                Some(d) => d.len() as u64,
                None => gather.iter().map(|s| s.len).sum(),
            },
            WqeOp::Read { scatter, .. } => scatter.iter().map(|s| s.len).sum(),
            WqeOp::Atomic { .. } => 8,
            WqeOp::Dump { source } => source.len,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wqe<'a> {
    pub ctrl: CtrlSeg,
    pub op: WqeOp<'a>,
    /// WQEBBs the WQE occupies.
    pub wqebbs: u32,
}

/// A WQE the NIC refuses; the completion carries `syndrome`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WqeError {
    pub syndrome: u8,
    pub reason: String,
    /// WQEBBs to skip (at least 1), so the queue can be flushed past it.
    pub wqebbs: u32,
    pub opcode: u8,
}

/// WQEBBs a WQE with this DS value spans.
pub fn wqebbs_for_ds(ds: u8) -> u32 {
    ((ds as usize * SEND_DS_BYTES).div_ceil(SEND_WQE_BB)).max(1) as u32
}

/// mlx5 data segments: a byte count of 0 means 2^31 bytes.
fn data_len(byte_count: u32) -> u64 {
    if byte_count == 0 {
        1 << 31
    } else {
        byte_count as u64
    }
}

/// Largest message the NIC accepts (2 GiB, the RC limit).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// Decodes the WQE in `bytes` (its WQEBBs, gathered in order from the ring),
/// expected at producer index `index` of QP `qpn`.
pub fn decode(bytes: &[u8], index: u16, qpn: u32) -> Result<Wqe<'_>, WqeError> {
    decode_with(bytes, index, qpn, 0)
}

/// Decodes a DC initiator's WQE: WRITE, READ and atomics carry the
/// datagram segment (the target's address vector, DCT number and DC key)
/// right after the control segment, as rdma-core's mlx5_send_wr_set_dc_addr
/// writes it; NOP and DUMP go nowhere and carry none. Returns the target
/// (None for those) with the operation.
pub fn decode_dc(bytes: &[u8], index: u16, qpn: u32) -> Result<(Wqe<'_>, Option<DatagramSeg>), WqeError> {
    let local = bytes.len() >= 16 && matches!(CtrlSeg::parse(&bytes[..16]).opcode, opcode::NOP | opcode::DUMP);
    if local {
        return decode_with(bytes, index, qpn, 0).map(|w| (w, None));
    }
    let w = decode_with(bytes, index, qpn, DATAGRAM_SEG_SIZE)?;
    let av = DatagramSeg::parse(&bytes[16..16 + DATAGRAM_SEG_SIZE]);
    if !av.ext {
        // The 48-byte AV without its "extended" bit is not what a DCI's
        // WQE holds (the NIC would read a short AV): refused as malformed.
        let e = err(syndrome::LOCAL_QP_OP_ERR, "datagram segment without MLX5_EXTENDED_UD_AV", w.wqebbs, w.ctrl.opcode);
        return Err(e);
    }
    Ok((w, Some(av)))
}

/// `transport` bytes of transport segment (DC: the datagram segment) sit
/// between the control segment and the rest.
fn decode_with(bytes: &[u8], index: u16, qpn: u32, transport: usize) -> Result<Wqe<'_>, WqeError> {
    if bytes.len() < 16 {
        return Err(err(syndrome::LOCAL_QP_OP_ERR, "WQE shorter than a control segment", 1, 0));
    }
    let c = CtrlSeg::parse(&bytes[0..16]);
    let wqebbs = wqebbs_for_ds(c.ds);
    let fail = |synd: u8, reason: String| Err(err(synd, &reason, wqebbs, c.opcode));
    if c.wqe_index != index {
        return fail(
            syndrome::LOCAL_QP_OP_ERR,
            format!("control segment names WQE index {:#x}, expected {index:#x}", c.wqe_index),
        );
    }
    if c.qpn != qpn {
        return fail(syndrome::LOCAL_QP_OP_ERR, format!("control segment names QP {:#x}, not {qpn:#x}", c.qpn));
    }
    if c.ds == 0 {
        return fail(syndrome::LOCAL_QP_OP_ERR, "DS is 0".into());
    }
    if c.opmod != 0 {
        return fail(syndrome::LOCAL_QP_OP_ERR, format!("opcode modifier {:#x} not supported", c.opmod));
    }
    let need = c.ds as usize * SEND_DS_BYTES;
    if bytes.len() < need {
        return fail(syndrome::LOCAL_QP_OP_ERR, format!("DS {} runs past the bytes given", c.ds));
    }
    if need < 16 + transport {
        return fail(syndrome::LOCAL_QP_OP_ERR, format!("DS {} leaves no room for the datagram segment", c.ds));
    }
    let segs = &bytes[16 + transport..need];
    let tds = (transport / SEND_DS_BYTES) as u8;
    let op = match c.opcode {
        opcode::NOP => WqeOp::Nop,
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
            if segs.len() < 16 {
                return fail(syndrome::LOCAL_QP_OP_ERR, "WRITE without a remote-address segment".into());
            }
            let r = RaddrSeg::parse(&segs[0..16]);
            let (gather, inline) = match decode_payload(&segs[16..]) {
                Ok(p) => p,
                Err(e) => return fail(e.0, e.1),
            };
            let imm = (c.opcode == opcode::RDMA_WRITE_IMM).then_some(c.imm);
            WqeOp::Write { raddr: r.raddr, rkey: r.rkey, gather, inline, imm }
        }
        opcode::RDMA_READ => {
            if segs.len() < 16 {
                return fail(syndrome::LOCAL_QP_OP_ERR, "READ without a remote-address segment".into());
            }
            let r = RaddrSeg::parse(&segs[0..16]);
            let scatter = match decode_payload(&segs[16..]) {
                Ok((g, None)) => g,
                Ok((_, Some(_))) => return fail(syndrome::LOCAL_QP_OP_ERR, "inline data in a READ".into()),
                Err(e) => return fail(e.0, e.1),
            };
            WqeOp::Read { raddr: r.raddr, rkey: r.rkey, scatter }
        }
        opcode::ATOMIC_FA | opcode::ATOMIC_CS => {
            if c.ds != 4 + tds {
                return fail(syndrome::LOCAL_QP_OP_ERR, format!("atomic WQE with DS {} (expected {})", c.ds, 4 + tds));
            }
            let r = RaddrSeg::parse(&segs[0..16]);
            let a = AtomicSeg::parse(&segs[16..32]);
            let d = DataSeg::parse(&segs[32..48]);
            if d.byte_count & INLINE_SEG != 0 {
                return fail(syndrome::LOCAL_QP_OP_ERR, "inline result segment in an atomic".into());
            }
            if d.byte_count != 8 {
                return fail(syndrome::LOCAL_LENGTH_ERR, format!("atomic result length {} (expected 8)", d.byte_count));
            }
            let kind = if c.opcode == opcode::ATOMIC_FA { AtomicKind::FetchAdd } else { AtomicKind::CompareSwap };
            WqeOp::Atomic {
                kind,
                raddr: r.raddr,
                rkey: r.rkey,
                swap_add: a.swap_add,
                compare: a.compare,
                result: Sge { addr: d.addr, len: 8, lkey: d.lkey },
            }
        }
        opcode::DUMP => {
            // ctrl + one data segment, as DOCA GPUNetIO's prepare_dump writes it.
            if c.ds != 2 {
                return fail(syndrome::LOCAL_QP_OP_ERR, format!("DUMP WQE with DS {} (expected 2)", c.ds));
            }
            match decode_payload(segs) {
                Ok((g, None)) if g.len() == 1 => WqeOp::Dump { source: g[0] },
                Ok(_) => return fail(syndrome::LOCAL_QP_OP_ERR, "DUMP without one data segment".into()),
                Err(e) => return fail(e.0, e.1),
            }
        }
        other => return fail(syndrome::LOCAL_QP_OP_ERR, format!("unsupported opcode {other:#x}")),
    };
    // Only a list can add up past 2 GiB (inline data fits in the WQE).
    let listed = matches!(&op, WqeOp::Write { inline: None, .. } | WqeOp::Read { .. });
    if listed && op.length() > MAX_MESSAGE {
        return fail(syndrome::LOCAL_LENGTH_ERR, format!("message of {} bytes exceeds 2 GiB", op.length()));
    }
    Ok(Wqe { ctrl: c, op, wqebbs })
}

type SegError = (u8, String);

/// The segments after the remote address: data segments, or one inline
/// segment.
fn decode_payload(segs: &[u8]) -> Result<(SgList, Option<&[u8]>), SegError> {
    if segs.len() >= 4 {
        let first = u32::from_be_bytes([segs[0], segs[1], segs[2], segs[3]]);
        if first & INLINE_SEG != 0 {
            let len = (first & !INLINE_SEG) as usize;
            if 4 + len > segs.len() {
                return Err((syndrome::LOCAL_LENGTH_ERR, format!("inline length {len} exceeds the WQE")));
            }
            return Ok((SgList::default(), Some(&segs[4..4 + len])));
        }
    }
    let mut gather = SgList::default();
    for chunk in segs.chunks(16) {
        if chunk.len() < 16 {
            return Err((syndrome::LOCAL_QP_OP_ERR, "partial data segment".into()));
        }
        let d = DataSeg::parse(chunk);
        if d.byte_count & INLINE_SEG != 0 {
            return Err((syndrome::LOCAL_QP_OP_ERR, "inline segment after data segments".into()));
        }
        if d.lkey == INVALID_LKEY {
            return Err((syndrome::LOCAL_PROT_ERR, "data segment with the invalid lkey".into()));
        }
        gather.push(Sge { addr: d.addr, len: data_len(d.byte_count), lkey: d.lkey });
    }
    Ok((gather, None))
}

fn err(syndrome: u8, reason: &str, wqebbs: u32, opcode: u8) -> WqeError {
    WqeError { syndrome, reason: reason.to_string(), wqebbs: wqebbs.max(1), opcode }
}

/// Whether the WQE asks for a CQE.
pub fn wants_cqe(c: &CtrlSeg) -> bool {
    c.cq_update()
}

/// Fence a WQE waits for before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence {
    None,
    /// Prior READs and atomics must have completed.
    Small,
    /// Every prior WQE must have completed.
    Strong,
}

pub fn fence_of(c: &CtrlSeg) -> Fence {
    match c.fence_mode() {
        0 => Fence::None,
        ctrl::INITIATOR_SMALL_FENCE => Fence::Small,
        _ => Fence::Strong,
    }
}
