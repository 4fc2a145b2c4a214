//! Whether an address range is memory this process may hand to a NIC: every
//! byte mapped, readable and writable. ibv_reg_mr pins the pages with write
//! access and fails with EFAULT otherwise; the emulated NIC pins nothing and
//! would fault on its first access, so registration checks first.
//!
//! Why /proc/self/maps and not mincore(2) or process_vm_readv(2): mincore
//! reports mapped pages only, not their protection, so a read-only or
//! PROT_NONE range would pass and a later RDMA write into it would still
//! crash the emulated NIC; process_vm_readv copies data (slow for large
//! ranges, and proves readability only). The maps file gives mapping and
//! protection for the whole range in one read, without touching the memory.
//! A concurrent munmap after the check is the caller's bug, as with verbs
//! (which would keep the old pages pinned).

use crate::error::{Error, Result};

/// One line of /proc/self/maps: [start, end) and whether it is rw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub read_write: bool,
}

/// Parses the maps format ("start-end perms offset dev inode path").
pub fn parse_maps(text: &str) -> Vec<Vma> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let (s, e) = f.next()?.split_once('-')?;
            let perms = f.next()?.as_bytes();
            Some(Vma {
                start: u64::from_str_radix(s, 16).ok()?,
                end: u64::from_str_radix(e, 16).ok()?,
                read_write: perms.len() >= 2 && perms[0] == b'r' && perms[1] == b'w',
            })
        })
        .collect()
}

/// Checks [addr, addr+len) against `vmas` (sorted by start, as the kernel
/// lists them). Errors name the registration's arguments, data and size.
pub fn check_range_in(vmas: &[Vma], addr: u64, len: u64) -> Result<()> {
    let end = addr
        .checked_add(len)
        .ok_or_else(|| Error::InvalidArgument(format!("data {addr:#x} + size {len} wraps the address space")))?;
    let mut at = addr;
    for v in vmas.iter().filter(|v| v.end > addr) {
        if at >= end {
            break;
        }
        if v.start > at {
            break; // a hole at `at`
        }
        if !v.read_write {
            return Err(Error::InvalidArgument(format!(
                "data {addr:#x}, size {len}: the range includes {:#x}..{:#x}, which is not readable and writable \
                 (ibv_reg_mr refuses it too)",
                v.start, v.end
            )));
        }
        at = v.end;
    }
    if at < end {
        let mapped = at - addr;
        return Err(Error::InvalidArgument(format!(
            "data {addr:#x}, size {len}: not mapped memory of this process from {at:#x} on (only {mapped} \
             bytes are; a size past the buffer, or an unmapped or freed pointer?)"
        )));
    }
    Ok(())
}

/// Checks [addr, addr+len) against this process's mappings now.
pub fn check_range(addr: u64, len: u64) -> Result<()> {
    let text = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Error::System(format!("cannot read /proc/self/maps to check data {addr:#x}, size {len}: {e}")))?;
    check_range_in(&parse_maps(&text), addr, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vma(start: u64, end: u64, read_write: bool) -> Vma {
        Vma { start, end, read_write }
    }

    #[test]
    fn parses_the_maps_format() {
        let text = "55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0          [heap]\n\
                    7f00aa000000-7f00aa001000 r--p 00001000 08:01 1234       /usr/lib/x.so\n\
                    garbage line\n";
        assert_eq!(
            parse_maps(text),
            [vma(0x55d0_c0a0_0000, 0x55d0_c0a2_1000, true), vma(0x7f00_aa00_0000, 0x7f00_aa00_1000, false)]
        );
    }

    #[test]
    fn a_range_across_adjacent_rw_mappings_passes() {
        let v = [vma(0x1000, 0x3000, true), vma(0x3000, 0x5000, true)];
        check_range_in(&v, 0x1800, 0x3000).unwrap();
        check_range_in(&v, 0x1000, 0x4000).unwrap();
    }

    #[test]
    fn holes_read_only_parts_and_wraps_are_refused() {
        let v = [vma(0x1000, 0x3000, true), vma(0x4000, 0x5000, true), vma(0x5000, 0x6000, false)];
        for (addr, len, words) in [
            (0x0, 0x10, "from 0x0 on (only 0 bytes"),
            (0x2000, 0x2000, "from 0x3000 on (only 4096 bytes"),
            (0x4000, 0x1001, "0x5000..0x6000, which is not readable and writable"),
            (0x6000, 1, "from 0x6000 on"),
            (0x1000, 1 << 62, "from 0x3000 on"),
            (u64::MAX - 1, 2, "wraps"),
        ] {
            let e = check_range_in(&v, addr, len).unwrap_err();
            assert_eq!(e.code(), crate::ffi::nccl::NCCL_INVALID_ARGUMENT, "{e}");
            assert!(e.message().contains(words), "[{addr:#x}+{len}]: {e}");
            assert!(e.message().contains("data") && e.message().contains("size"), "names the arguments: {e}");
        }
    }

    #[test]
    fn this_process_heap_passes_and_page_one_does_not() {
        let b = vec![1u8; 100_000];
        check_range(b.as_ptr() as u64, b.len() as u64).unwrap();
        assert!(check_range(0x1000, 4096).is_err());
    }
}
