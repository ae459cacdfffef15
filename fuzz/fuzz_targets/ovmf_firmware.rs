#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| confboot_fuzz_targets::ovmf_firmware(data));
