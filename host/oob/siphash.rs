//! SipHash-2-4 (Aumasson and Bernstein), the keyed 64-bit PRF that
//! authenticates connection-setup frames, from the `siphasher` crate (std's
//! hashers are unkeyed or may change between Rust releases, and ranks built
//! by different compilers must agree). The test pins the paper's vectors.

use std::hash::Hasher;

/// SipHash-2-4 of `data` under the 128-bit `key`.
pub fn siphash24(key: &[u8; 16], data: &[u8]) -> u64 {
    let mut h = siphasher::sip::SipHasher24::new_with_key(key);
    h.write(data);
    h.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reference_vectors() {
        // The paper's appendix A, and the first and 64th of its vectors.
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let msg: Vec<u8> = (0..15).collect();
        assert_eq!(super::siphash24(&key, &msg), 0xa129_ca61_49be_45e5);
        assert_eq!(super::siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
        let msg: Vec<u8> = (0..63).collect();
        assert_eq!(super::siphash24(&key, &msg), 0x958a_324c_eb06_4572);
    }
}
