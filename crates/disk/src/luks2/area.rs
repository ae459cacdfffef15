//! Key-slot area encryption: `aes-xts-plain64` over 512-byte sectors, the
//! IV being the sector's index counted from the start of the area
//! (little-endian, as dm-crypt's `plain64`), as cryptsetup does for LUKS2
//! key slots. AES from RustCrypto's `aes`, XTS from `xts-mode`.

use aes::cipher::KeyInit;
use aes::{Aes128, Aes256};
use xts_mode::{Xts128, get_tweak_default};

use super::error::Luks2Error;

/// The sector size of key-slot area encryption.
pub const AREA_SECTOR: usize = 512;
/// The one cipher supported for key-slot areas and the data segment.
pub const CIPHER: &str = "aes-xts-plain64";

/// Checks a cipher name and key size (bytes): `aes-xts-plain64` with 32
/// (AES-128) or 64 (AES-256) bytes.
pub fn check(cipher: &str, key_size: usize, field: &str) -> Result<(), Luks2Error> {
    if cipher != CIPHER {
        return Err(Luks2Error::Unsupported {
            field: format!("{field}.encryption"),
            value: cipher.chars().take(32).collect(),
        });
    }
    if key_size != 32 && key_size != 64 {
        return Err(Luks2Error::Unsupported {
            field: format!("{field}.key_size"),
            value: key_size.to_string(),
        });
    }
    Ok(())
}

/// Which way [`crypt`] works.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Plaintext to ciphertext.
    Encrypt,
    /// Ciphertext to plaintext.
    Decrypt,
}

/// En- or decrypts `data` (a whole number of sectors) in place with `key`
/// (32 or 64 bytes, checked by [`check`]).
pub fn crypt(key: &[u8], data: &mut [u8], direction: Direction) -> Result<(), Luks2Error> {
    if !data.len().is_multiple_of(AREA_SECTOR) {
        return Err(Luks2Error::InvalidOption(
            "key-slot area is not whole sectors".into(),
        ));
    }
    let bad_key = || Luks2Error::InvalidOption("key-slot key size".into());
    let half = key.len() / 2;
    match key.len() {
        64 => {
            let xts = Xts128::new(
                Aes256::new_from_slice(&key[..half]).map_err(|_| bad_key())?,
                Aes256::new_from_slice(&key[half..]).map_err(|_| bad_key())?,
            );
            run(&xts, data, direction);
        }
        32 => {
            let xts = Xts128::new(
                Aes128::new_from_slice(&key[..half]).map_err(|_| bad_key())?,
                Aes128::new_from_slice(&key[half..]).map_err(|_| bad_key())?,
            );
            run(&xts, data, direction);
        }
        _ => return Err(bad_key()),
    }
    Ok(())
}

fn run<C>(xts: &Xts128<C>, data: &mut [u8], direction: Direction)
where
    C: aes::cipher::BlockCipherEncrypt<BlockSize = aes::cipher::consts::U16>
        + aes::cipher::BlockCipherDecrypt<BlockSize = aes::cipher::consts::U16>,
{
    match direction {
        Direction::Encrypt => xts.encrypt_area(data, AREA_SECTOR, 0, get_tweak_default),
        Direction::Decrypt => xts.decrypt_area(data, AREA_SECTOR, 0, get_tweak_default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ieee_1619_vector_4_with_plain64_iv() {
        // IEEE P1619/D16 XTS-AES-128 vector 4: key1 = 2718281828..., key2 =
        // 3141592653..., data unit sequence number 0, 512 bytes 00..ff 00..ff.
        let key = confboot_util::hex::decode(
            "27182818284590452353602874713526\
             31415926535897932384626433832795",
        )
        .unwrap();
        let mut data: Vec<u8> = (0..=255u8).cycle().take(512).collect();
        crypt(&key, &mut data, Direction::Encrypt).unwrap();
        assert_eq!(
            confboot_util::hex::encode(&data[..16]),
            "27a7479befa1d476489f308cd4cfa6e2"
        );
        crypt(&key, &mut data, Direction::Decrypt).unwrap();
        assert!(data.iter().zip((0..=255u8).cycle()).all(|(&b, i)| b == i));
    }
}
