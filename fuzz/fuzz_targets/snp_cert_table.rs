#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| confboot_fuzz_targets::snp_cert_table(data));
