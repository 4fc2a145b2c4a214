//! SipHash-2-4 (Aumasson and Bernstein), the keyed 64-bit PRF that
//! authenticates connection-setup frames. Written out here because std's
//! hashers are unkeyed or may change between Rust releases, and ranks built
//! by different compilers must agree.

/// SipHash-2-4 of `data` under the 128-bit `key`.
pub fn siphash24(key: &[u8; 16], data: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(key[0..8].try_into().expect("8"));
    let k1 = u64::from_le_bytes(key[8..16].try_into().expect("8"));
    let mut v = [k0 ^ 0x736f_6d65_7073_6575, k1 ^ 0x646f_7261_6e64_6f6d, k0 ^ 0x6c79_6765_6e65_7261, k1 ^ 0x7465_6462_7974_6573];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut compress = |m: u64| {
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    };
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        compress(u64::from_le_bytes(c.try_into().expect("8")));
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    last[7] = data.len() as u8;
    compress(u64::from_le_bytes(last));
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
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
