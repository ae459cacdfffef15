//! The anti-forensic splitter (LUKS1's AF, kept by LUKS2 as `"af": {"type":
//! "luks1"}`): a key becomes `stripes` blocks of its size, all needed to get
//! it back, so that destroying any part of a key slot's area destroys the
//! key. Block i (but the last) is random; `d` runs as d ← H(d ⊕ s_i), and the
//! last block is d ⊕ key. `H` is the "diffuse" function: the block hashed in
//! digest-sized pieces, each prefixed by its big-endian index.

use super::hash::Hash;
use super::secret::Secret;

/// The diffuse function, in place.
fn diffuse(block: &mut [u8], hash: Hash) {
    let ds = hash.digest().output_len();
    for (i, piece) in (0u32..).zip(block.chunks_mut(ds)) {
        let mut ctx = ring::digest::Context::new(hash.digest());
        ctx.update(&i.to_be_bytes());
        ctx.update(piece);
        let out = ctx.finish();
        let n = piece.len();
        piece.copy_from_slice(&out.as_ref()[..n]);
    }
}

fn xor_into(d: &mut [u8], s: &[u8]) {
    d.iter_mut().zip(s).for_each(|(a, b)| *a ^= b);
}

/// Splits `key` into `stripes` blocks; `random` is `(stripes - 1) * key.len()`
/// random bytes (the first blocks). The result is `stripes * key.len()` bytes.
pub fn split(key: &[u8], stripes: usize, hash: Hash, random: &[u8]) -> Secret {
    let n = key.len();
    debug_assert_eq!(random.len(), (stripes - 1) * n);
    let mut out = Secret::zeroed(stripes * n);
    let mut d = Secret::zeroed(n);
    let buf = out.expose_mut();
    buf[..random.len()].copy_from_slice(random);
    for s in buf[..random.len()].chunks(n) {
        xor_into(d.expose_mut(), s);
        diffuse(d.expose_mut(), hash);
    }
    let last = &mut buf[random.len()..];
    last.copy_from_slice(d.expose());
    xor_into(last, key);
    out
}

/// Merges `stripes` blocks of `key_len` bytes back into the key.
pub fn merge(split: &[u8], key_len: usize, stripes: usize, hash: Hash) -> Secret {
    debug_assert!(split.len() >= stripes * key_len);
    let mut d = Secret::zeroed(key_len);
    for s in split[..(stripes - 1) * key_len].chunks(key_len) {
        xor_into(d.expose_mut(), s);
        diffuse(d.expose_mut(), hash);
    }
    xor_into(
        d.expose_mut(),
        &split[(stripes - 1) * key_len..stripes * key_len],
    );
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_then_merge_gives_the_key_and_every_stripe_matters() {
        let key: Vec<u8> = (0..64).collect();
        let random: Vec<u8> = (0..63 * 64u32)
            .map(|i| u8::try_from(i * 7 % 251).unwrap())
            .collect();
        let s = split(&key, 64, Hash::Sha256, &random);
        assert_eq!(merge(s.expose(), 64, 64, Hash::Sha256).expose(), &key[..]);
        let mut bad = s.expose().to_vec();
        bad[5] ^= 1;
        assert_ne!(merge(&bad, 64, 64, Hash::Sha256).expose(), &key[..]);
        assert_ne!(merge(s.expose(), 64, 64, Hash::Sha1).expose(), &key[..]);
    }
}
