//! The emulated NIC's DMA into registered memory that may no longer be
//! mapped: a user that unmaps a buffer it registered (and then posts from
//! it) must get an error completion, as from a ConnectX whose page walk
//! fails, never a SIGSEGV that takes the job down (issue 26).
//!
//! Why this way: a registration cannot know about a later munmap, and a
//! check before the access (mincore, msync, /proc/self/maps) leaves a window
//! in which another thread unmaps; `process_vm_readv` on our own pid is
//! sound but costs a system call per access (≈ 1.6 µs measured here against
//! ≈ 5 ns for an 8-byte copy, several times an emulated put). So, as the
//! kernel's own `copy_from_user` does, the access runs in a few instructions
//! of assembly whose addresses a SIGSEGV/SIGBUS handler knows: a fault there
//! resumes at a fixup that reports how much was left, and any other fault
//! goes to the handler that was installed before (Rust's stack-overflow
//! report, the default action). The common case costs a `rep movsb`
//! (≈ 4 ns more than memcpy for 8 bytes, the same from 4 KiB on).
//!
//! The handler is installed with the first emulated NIC only (the hardware
//! providers never install it) and stays for the life of the process. A
//! handler that a later library installs without chaining to ours turns a
//! fault back into the crash it was. Other architectures use the system call.

/// The memory was not there: unmapped, or mapped without the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unmapped;

/// Copies `n` bytes from `src` to `dst`; on a fault some may have been copied.
///
/// # Safety
/// Where mapped, `[src, src+n)` may be read and `[dst, dst+n)` written (the
/// NIC's registered memory, checked against its MR table, or the NIC's own
/// buffers); the ranges do not overlap.
#[inline]
pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Unmapped> {
    if n == 0 {
        return Ok(());
    }
    // SAFETY: per the function contract.
    unsafe { imp::copy(dst, src, n) }
}

/// Adds `add` to the 8-aligned word at `addr` atomically; its old value.
///
/// # Safety
/// `addr` is 8-aligned and, where mapped, registered memory that others
/// access only atomically.
#[inline]
pub unsafe fn fetch_add(addr: *mut u64, add: u64) -> Result<u64, Unmapped> {
    // SAFETY: per the function contract.
    unsafe { imp::fetch_add(addr, add) }
}

/// Compare-and-swap on the 8-aligned word at `addr`; its old value.
///
/// # Safety
/// As for [`fetch_add`].
#[inline]
pub unsafe fn compare_swap(addr: *mut u64, compare: u64, swap: u64) -> Result<u64, Unmapped> {
    // SAFETY: per the function contract.
    unsafe { imp::compare_swap(addr, compare, swap) }
}

/// Installs the fault handler (once per process); the emulated NIC calls it
/// when it is created, and the accesses above call it too.
pub fn install() {
    imp::install();
}

/// The portable way: the kernel copies and reports a fault as EFAULT (on
/// either side: both lie in this process). Used where the assembly is not
/// written, and tested against it everywhere.
pub mod portable {
    use super::Unmapped;

    /// As [`super::copy`].
    ///
    /// # Safety
    /// As [`super::copy`].
    pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Unmapped> {
        let local = libc::iovec { iov_base: dst as *mut libc::c_void, iov_len: n };
        let remote = libc::iovec { iov_base: src as *mut libc::c_void, iov_len: n };
        // SAFETY: the kernel checks both ranges and reports a fault instead
        // of taking it; our own pid needs no ptrace permission.
        let got = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if got == n as isize {
            Ok(())
        } else {
            Err(Unmapped)
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::Unmapped;
    use std::sync::{Once, OnceLock};

    // The accesses. Each `*_at` label is the one instruction that may fault
    // on the caller's memory, each `*_fix` where the handler resumes it.
    // SysV: arguments in rdi, rsi, rdx, rcx; the direction flag is clear.
    std::arch::global_asm!(
        ".pushsection .text.rust_gin_emu_guarded,\"ax\",@progbits",
        ".p2align 4",
        // rust_gin_emu_copy(dst, src, n) -> bytes not copied (0: all)
        ".globl rust_gin_emu_copy",
        ".hidden rust_gin_emu_copy",
        "rust_gin_emu_copy:",
        "    mov rcx, rdx",
        ".globl rust_gin_emu_copy_at",
        ".hidden rust_gin_emu_copy_at",
        "rust_gin_emu_copy_at:",
        "    rep movsb",
        "    xor eax, eax",
        "    ret",
        ".globl rust_gin_emu_copy_fix",
        ".hidden rust_gin_emu_copy_fix",
        "rust_gin_emu_copy_fix:",
        "    mov rax, rcx",
        "    ret",
        // rust_gin_emu_fetch_add(addr, add, *old) -> 0, or 1 on a fault
        ".globl rust_gin_emu_fetch_add",
        ".hidden rust_gin_emu_fetch_add",
        "rust_gin_emu_fetch_add:",
        ".globl rust_gin_emu_fetch_add_at",
        ".hidden rust_gin_emu_fetch_add_at",
        "rust_gin_emu_fetch_add_at:",
        "    lock xadd qword ptr [rdi], rsi",
        "    mov qword ptr [rdx], rsi",
        "    xor eax, eax",
        "    ret",
        ".globl rust_gin_emu_fetch_add_fix",
        ".hidden rust_gin_emu_fetch_add_fix",
        "rust_gin_emu_fetch_add_fix:",
        "    mov eax, 1",
        "    ret",
        // rust_gin_emu_compare_swap(addr, compare, swap, *old) -> 0, or 1 on a fault
        ".globl rust_gin_emu_compare_swap",
        ".hidden rust_gin_emu_compare_swap",
        "rust_gin_emu_compare_swap:",
        "    mov rax, rsi",
        ".globl rust_gin_emu_compare_swap_at",
        ".hidden rust_gin_emu_compare_swap_at",
        "rust_gin_emu_compare_swap_at:",
        "    lock cmpxchg qword ptr [rdi], rdx",
        "    mov qword ptr [rcx], rax",
        "    xor eax, eax",
        "    ret",
        ".globl rust_gin_emu_compare_swap_fix",
        ".hidden rust_gin_emu_compare_swap_fix",
        "rust_gin_emu_compare_swap_fix:",
        "    mov eax, 1",
        "    ret",
        ".popsection",
    );

    extern "C" {
        fn rust_gin_emu_copy(dst: *mut u8, src: *const u8, n: usize) -> usize;
        fn rust_gin_emu_fetch_add(addr: *mut u64, add: u64, old: *mut u64) -> u32;
        fn rust_gin_emu_compare_swap(addr: *mut u64, compare: u64, swap: u64, old: *mut u64) -> u32;
        static rust_gin_emu_copy_at: u8;
        static rust_gin_emu_copy_fix: u8;
        static rust_gin_emu_fetch_add_at: u8;
        static rust_gin_emu_fetch_add_fix: u8;
        static rust_gin_emu_compare_swap_at: u8;
        static rust_gin_emu_compare_swap_fix: u8;
    }

    pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Unmapped> {
        install();
        // SAFETY: per super::copy's contract; a fault resumes at the fixup.
        match unsafe { rust_gin_emu_copy(dst, src, n) } {
            0 => Ok(()),
            _ => Err(Unmapped),
        }
    }

    pub(super) unsafe fn fetch_add(addr: *mut u64, add: u64) -> Result<u64, Unmapped> {
        install();
        let mut old = 0u64;
        // SAFETY: per super::fetch_add's contract; `old` is our local.
        match unsafe { rust_gin_emu_fetch_add(addr, add, &mut old) } {
            0 => Ok(old),
            _ => Err(Unmapped),
        }
    }

    pub(super) unsafe fn compare_swap(addr: *mut u64, compare: u64, swap: u64) -> Result<u64, Unmapped> {
        install();
        let mut old = 0u64;
        // SAFETY: per super::compare_swap's contract; `old` is our local.
        match unsafe { rust_gin_emu_compare_swap(addr, compare, swap, &mut old) } {
            0 => Ok(old),
            _ => Err(Unmapped),
        }
    }

    /// Where a fault at `rip` resumes, when it is one of our accesses.
    fn fixup(rip: usize) -> Option<usize> {
        let table = [
            (&raw const rust_gin_emu_copy_at, &raw const rust_gin_emu_copy_fix),
            (&raw const rust_gin_emu_fetch_add_at, &raw const rust_gin_emu_fetch_add_fix),
            (&raw const rust_gin_emu_compare_swap_at, &raw const rust_gin_emu_compare_swap_fix),
        ];
        table.iter().find(|(at, _)| *at as usize == rip).map(|(_, fix)| *fix as usize)
    }

    /// The actions before ours, for SIGSEGV and SIGBUS.
    static PREVIOUS: [OnceLock<libc::sigaction>; 2] = [OnceLock::new(), OnceLock::new()];
    const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            for (sig, previous) in SIGNALS.iter().zip(&PREVIOUS) {
                // SAFETY: a zeroed sigaction is a valid value to fill in.
                let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
                ours.sa_sigaction = on_fault as *const () as usize;
                // On the alternate stack where there is one: a stack
                // overflow must still reach Rust's report.
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                // SAFETY: as above.
                let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
                // SAFETY: valid sigaction structures; replaces and returns
                // the previous action in one call.
                if unsafe { libc::sigaction(*sig, &ours, &mut old) } == 0 {
                    let _ = previous.set(old);
                }
            }
            keep_loaded();
        });
    }

    /// A handler must not be unloaded under the kernel: when this crate lives
    /// in a shared object (the RMA plugin, which RCCL may dlclose), pin it.
    fn keep_loaded() {
        // SAFETY: dladdr fills a zeroed Dl_info for an address of ours.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::dladdr(on_fault as *const libc::c_void, &mut info) } != 0 && !info.dli_fname.is_null() {
            // SAFETY: NOLOAD only takes another reference to an object that
            // is loaded (none for the main program); the handle is kept.
            unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
        }
    }

    extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo and ucontext to an
        // SA_SIGINFO handler; only registers of the interrupted thread are
        // read and its instruction pointer moved to our own fixup.
        unsafe {
            let from_fault = !info.is_null() && (*info).si_code > 0;
            let uc = ctx as *mut libc::ucontext_t;
            if from_fault && !uc.is_null() {
                let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
                if let Some(fix) = fixup(*rip as usize) {
                    *rip = fix as libc::greg_t;
                    return;
                }
            }
            chain(sig, info, ctx, from_fault);
        }
    }

    /// Hands a fault that is not ours to the action before ours.
    ///
    /// # Safety
    /// Called from on_fault with its arguments.
    unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, from_fault: bool) {
        let previous = SIGNALS.iter().position(|s| *s == sig).and_then(|i| PREVIOUS[i].get());
        match previous {
            Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
                if p.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: an SA_SIGINFO action's handler has this type.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(p.sa_sigaction) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: a plain action's handler has this type.
                    let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                    f(sig);
                }
            }
            _ => {
                // The default action: restored, it ends the process when the
                // faulting instruction runs again (or at once for a sent signal).
                // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
                let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
                // SAFETY: async-signal-safe calls with valid arguments.
                unsafe {
                    libc::sigaction(sig, &dfl, std::ptr::null_mut());
                    if !from_fault {
                        libc::raise(sig);
                    }
                }
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::Unmapped;

    pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) -> Result<(), Unmapped> {
        // SAFETY: per super::copy's contract.
        unsafe { super::portable::copy(dst, src, n) }
    }

    // No guarded atomic without assembly: the word is probed first, which
    // leaves a window for a concurrent munmap.
    pub(super) unsafe fn fetch_add(addr: *mut u64, add: u64) -> Result<u64, Unmapped> {
        let mut probe = 0u64;
        // SAFETY: per super::fetch_add's contract.
        unsafe { copy(&mut probe as *mut u64 as *mut u8, addr as *const u8, 8) }?;
        // SAFETY: per the contract, and mapped a moment ago.
        Ok(unsafe { std::sync::atomic::AtomicU64::from_ptr(addr) }.fetch_add(add, std::sync::atomic::Ordering::AcqRel))
    }

    pub(super) unsafe fn compare_swap(addr: *mut u64, compare: u64, swap: u64) -> Result<u64, Unmapped> {
        let mut probe = 0u64;
        // SAFETY: per super::compare_swap's contract.
        unsafe { copy(&mut probe as *mut u64 as *mut u8, addr as *const u8, 8) }?;
        // SAFETY: per the contract, and mapped a moment ago.
        let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(addr) };
        let o = std::sync::atomic::Ordering::AcqRel;
        Ok(word.compare_exchange(compare, swap, o, std::sync::atomic::Ordering::Acquire).unwrap_or_else(|v| v))
    }

    pub(super) fn install() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pages, the second unmapped: (base, page size).
    fn half_mapped() -> (*mut u8, usize) {
        // SAFETY: plain libc calls; results checked.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            let p = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::munmap((p as *mut u8).add(page) as *mut libc::c_void, page), 0);
            (p as *mut u8, page)
        }
    }

    #[test]
    fn copies_and_atomics_report_unmapped_memory_instead_of_faulting() {
        let (base, page) = half_mapped();
        let mut buf = vec![0u8; 64];
        // SAFETY (whole test): the first page is ours and mapped; the second
        // unmapped, which is what the accesses must survive.
        unsafe {
            std::ptr::write_bytes(base, 7, page);
            copy(buf.as_mut_ptr(), base.add(page - 64), 64).unwrap();
            assert!(buf.iter().all(|&b| b == 7));
            assert_eq!(copy(buf.as_mut_ptr(), base.add(page - 32), 64), Err(Unmapped), "read across the hole");
            assert_eq!(copy(base.add(page + 8), buf.as_ptr(), 8), Err(Unmapped), "write into the hole");
            for f in [portable::copy as unsafe fn(*mut u8, *const u8, usize) -> Result<(), Unmapped>, copy] {
                assert_eq!(f(buf.as_mut_ptr(), base.add(page), 8), Err(Unmapped));
                assert_eq!(f(base.add(page), buf.as_ptr(), 8), Err(Unmapped));
                f(buf.as_mut_ptr(), base, 8).unwrap();
            }
            let word = base as *mut u64;
            *word = 5;
            assert_eq!(fetch_add(word, 3), Ok(5));
            assert_eq!(compare_swap(word, 8, 1), Ok(8));
            assert_eq!(compare_swap(word, 8, 2), Ok(1), "a failed compare leaves the word");
            assert_eq!(*word, 1);
            let hole = base.add(page) as *mut u64;
            assert_eq!(fetch_add(hole, 1), Err(Unmapped));
            assert_eq!(compare_swap(hole, 0, 1), Err(Unmapped));
            libc::munmap(base as *mut libc::c_void, page);
        }
    }
}
