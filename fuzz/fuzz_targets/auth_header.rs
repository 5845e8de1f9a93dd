//! Fuzzes the `Authorization` header parser and the policy behind it: any text yields
//! credentials or an error, never a panic; credentials re-encode to a header that parses to
//! themselves; and the policy decides them without panicking.
#![no_main]

use isochron_auth::{Access, AuthSection, Authority, Credentials, Permission, UserSection};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(c) = Credentials::from_authorization(text) else { return };
    if let Some(header) = c.to_authorization() {
        assert_eq!(Credentials::from_authorization(&header).as_ref(), Ok(&c));
    }
    let section = AuthSection {
        anonymous: vec![],
        users: vec![UserSection {
            name: "u".into(),
            password: Some("p".into()),
            password_hash: None,
            token: Some("0123456789abcdef".into()),
            permissions: vec![Permission::Read],
            objects: vec!["a*".into()],
        }],
    };
    let authority = Authority::new(&section, [3; 32]).expect("a valid policy");
    for trusted_peer in [false, true] {
        let _ = authority.check(&Access {
            permission: Permission::Read,
            object: Some(text),
            credentials: Some(&c),
            trusted_peer,
            secure: false,
            method: "DESCRIBE",
            now_unix_s: 1_000_000,
        });
    }
});
