//! Fuzzes the configuration file (`isochron_server::config`): any text parses to a config or a
//! named error, and a parsed config validates to settings or an error naming its key, never a
//! panic. TLS files are left out (validation would read them from the fuzzer's paths).
#![no_main]

use std::path::Path;

use isochron_server::config::{ConfigError, ConfigFile, TlsSection};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut file = match ConfigFile::parse(text, Path::new("fuzz.toml")) {
        Ok(f) => f,
        Err(e) => {
            assert!(e.to_string().starts_with("config file fuzz.toml"), "{e}");
            return;
        }
    };
    file.tls = TlsSection::default();
    match file.validate() {
        Ok(_) => {}
        Err(ConfigError::Invalid { key, .. }) => assert!(key.contains('.'), "{key}"),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
