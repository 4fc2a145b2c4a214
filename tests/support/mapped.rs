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

/// One test per bad range, each calling `$check(data, size, words)`, which
/// asserts the refusal (words: what its WARN line must name) and that the
/// plugin still works: the same cases for every vtable that registers.
macro_rules! refused_range_tests {
    ($check:ident) => {
        #[test]
        fn reg_of_an_unmapped_address_is_refused() {
            $check(mapped::NEVER_MAPPED, 4096, &["data 0x1000", "size 4096", "not mapped"]);
        }

        #[test]
        fn reg_of_a_freed_mapping_is_refused() {
            let m = mapped::Mapping::new(4, libc::PROT_READ | libc::PROT_WRITE);
            let (addr, len) = (m.addr, m.len);
            drop(m);
            $check(addr, len, &["data", "size 16384", "not mapped"]);
        }

        #[test]
        fn reg_of_2_pow_62_bytes_over_a_64k_buffer_is_refused() {
            let buf = vec![0u8; 64 << 10];
            // Past the buffer lies either a hole or a guard region (thread
            // arenas): either reason is right, the sizes must be named.
            $check(buf.as_ptr() as usize, 1 << 62, &["data 0x", "size 4611686018427387904"]);
        }

        #[test]
        fn reg_of_a_range_one_page_past_its_mapping_is_refused() {
            let m = mapped::Mapping::new(2, libc::PROT_READ | libc::PROT_WRITE);
            $check(m.addr, m.len + 4096, &["size 12288", &format!("from {:#x}", m.end()), "8192 bytes are"]);
        }

        #[test]
        fn reg_of_read_only_memory_is_refused() {
            let m = mapped::Mapping::new(2, libc::PROT_READ);
            $check(m.addr, m.len, &["size 8192", "not readable and writable"]);
        }

        #[test]
        fn reg_of_inaccessible_memory_is_refused() {
            let m = mapped::Mapping::new(1, libc::PROT_NONE);
            $check(m.addr, m.len, &["size 4096", "not readable and writable"]);
        }
    };
}
