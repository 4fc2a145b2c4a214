//! Address ranges with known mappings, for the registration tests. They sit
//! low in the address space (from 512 MiB up, placed with
//! MAP_FIXED_NOREPLACE) where Linux's top-down mmap never puts anything on
//! its own, so a hole left there stays a hole while other test threads
//! allocate.

#![allow(dead_code)]

const PAGE: usize = 4096;

/// An anonymous mapping of `pages` pages followed by one unmapped page.
pub struct Mapping {
    pub addr: usize,
    pub len: usize,
}

impl Mapping {
    pub fn new(pages: usize, prot: i32) -> Mapping {
        let len = pages * PAGE;
        for k in 0..256usize {
            let hint = 0x2000_0000 + k * 0x10_0000;
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping;
            // it fails with EEXIST instead, and then the next hint is tried.
            let p = unsafe {
                libc::mmap(
                    hint as *mut libc::c_void,
                    len + PAGE,
                    prot,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                continue;
            }
            assert_eq!(p as usize, hint, "a kernel without MAP_FIXED_NOREPLACE (Linux < 4.17) ignored the hint");
            // SAFETY: the last page of the mapping just made.
            assert_eq!(unsafe { libc::munmap((hint + len) as *mut libc::c_void, PAGE) }, 0);
            return Mapping { addr: hint, len };
        }
        panic!("no free low address range for a test mapping of {pages} pages");
    }

    /// The first address past the mapping: unmapped.
    pub fn end(&self) -> usize {
        self.addr + self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// An unmapped address: below vm.mmap_min_addr (64 KiB by default), and a
/// page nothing maps unless a program asks for it explicitly.
pub const NEVER_MAPPED: usize = 0x1000;
