use super::*;

fn authority(toml_text: &str) -> Authority {
    let s: AuthSection = toml::from_str(toml_text).unwrap();
    Authority::new(&s, [9; 32]).unwrap()
}

fn access<'a>(
    permission: Permission,
    credentials: Option<&'a Credentials>,
    trusted_peer: bool,
) -> Access<'a> {
    Access {
        permission,
        object: None,
        credentials,
        trusted_peer,
        secure: false,
        method: "GET",
        now_unix_s: 1_000_000,
    }
}

fn basic(user: &str, password: &str) -> Credentials {
    Credentials::Basic { user: user.into(), password: password.into() }
}

const USERS: &str = r#"
    anonymous = []
    [[users]]
    name = "ops"
    password = "s3cret"
    permissions = ["read", "record", "admin"]
    [[users]]
    name = "cam"
    token = "0123456789abcdef0123"
    permissions = ["record"]
    objects = ["cam-*"]
    [[users]]
    name = "viewer"
    password = "view"
    permissions = ["read"]
    objects = ["public-*"]
"#;

#[test]
fn with_no_users_only_trusted_peers_write_and_anyone_reads() {
    let a = Authority::default();
    assert!(!a.has_users());
    assert!(a.notice().contains("open only to loopback"), "{}", a.notice());
    for p in [Permission::Record, Permission::Admin] {
        assert_eq!(a.check(&access(p, None, true)), Decision::Allow { user: None });
        assert_eq!(
            a.check(&access(p, None, false)),
            Decision::Unauthorized(format!(
                "{p} is open only to loopback until users are configured ([auth] users)"
            ))
        );
    }
    assert_eq!(a.check(&access(Permission::Read, None, false)), Decision::Allow { user: None });
}

#[test]
fn users_need_their_credentials_and_permissions_everywhere() {
    let a = authority(USERS);
    let ops = basic("ops", "s3cret");
    // Loopback needs credentials too once users exist.
    assert_eq!(
        a.check(&access(Permission::Admin, None, true)),
        Decision::Unauthorized("admin needs credentials".into())
    );
    assert_eq!(
        a.check(&access(Permission::Admin, Some(&ops), true)),
        Decision::Allow { user: Some("ops".into()) }
    );
    // Anonymous may not even read here.
    assert!(matches!(a.check(&access(Permission::Read, None, true)), Decision::Unauthorized(_)));
    // A wrong password and an unknown user read alike.
    for c in [basic("ops", "nope"), basic("nobody", "s3cret")] {
        assert_eq!(
            a.check(&access(Permission::Read, Some(&c), true)),
            Decision::Unauthorized("wrong user name, password or token".into())
        );
    }
    // Known but not allowed: 403.
    let viewer = basic("viewer", "view");
    assert_eq!(
        a.check(&access(Permission::Admin, Some(&viewer), true)),
        Decision::Forbidden("user viewer may not admin".into())
    );
}

#[test]
fn basic_is_refused_in_the_clear_from_elsewhere_and_tokens_are_not() {
    let a = authority(USERS);
    let ops = basic("ops", "s3cret");
    assert!(matches!(
        a.check(&access(Permission::Admin, Some(&ops), false)),
        Decision::Unauthorized(m) if m.contains("only over TLS")
    ));
    let tls = Access { secure: true, ..access(Permission::Admin, Some(&ops), false) };
    assert_eq!(a.check(&tls), Decision::Allow { user: Some("ops".into()) });
    let cam = Credentials::Bearer("0123456789abcdef0123".into());
    let rec = Access { object: Some("cam-3"), ..access(Permission::Record, Some(&cam), false) };
    assert_eq!(a.check(&rec), Decision::Allow { user: Some("cam".into()) });
    let bad = Credentials::Bearer("0123456789abcdef0124".into());
    assert!(matches!(
        a.check(&access(Permission::Record, Some(&bad), false)),
        Decision::Unauthorized(_)
    ));
}

#[test]
fn object_globs_limit_read_and_record() {
    let a = authority(USERS);
    let cam = Credentials::Bearer("0123456789abcdef0123".into());
    let other = Access { object: Some("movie"), ..access(Permission::Record, Some(&cam), false) };
    assert_eq!(a.check(&other), Decision::Forbidden("user cam may not record \"movie\"".into()));
    let viewer = basic("viewer", "view");
    let public =
        Access { object: Some("public-1"), ..access(Permission::Read, Some(&viewer), true) };
    assert!(matches!(a.check(&public), Decision::Allow { .. }));
    let private = Access { object: Some("secret"), ..public };
    assert!(matches!(a.check(&private), Decision::Forbidden(_)));
}

#[test]
fn a_password_hash_verifies_and_a_bad_one_is_named() {
    let hash = hash_password("correct horse", &[7; 16]).unwrap();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    let a = authority(&format!(
        "[[users]]\nname = \"h\"\npassword_hash = \"{hash}\"\npermissions = [\"admin\"]\n"
    ));
    let ok = basic("h", "correct horse");
    assert!(matches!(a.check(&access(Permission::Admin, Some(&ok), true)), Decision::Allow { .. }));
    let no = basic("h", "wrong horse");
    assert!(matches!(
        a.check(&access(Permission::Admin, Some(&no), true)),
        Decision::Unauthorized(_)
    ));
    // The right password is remembered (an HMAC of it), the wrong one never; a remembered one
    // is hashed again after BASIC_CACHE_S.
    let cached = || a.verified.lock().unwrap().values().copied().collect::<Vec<u64>>();
    assert_eq!(cached(), [1_000_000 + BASIC_CACHE_S]);
    assert!(matches!(a.check(&access(Permission::Admin, Some(&ok), true)), Decision::Allow { .. }));
    assert_eq!(cached().len(), 1);
    let later = Access {
        now_unix_s: 1_000_000 + BASIC_CACHE_S,
        ..access(Permission::Admin, Some(&ok), true)
    };
    assert!(matches!(a.check(&later), Decision::Allow { .. }));
    assert_eq!(cached(), [1_000_000 + 2 * BASIC_CACHE_S]);
    let s: AuthSection = toml::from_str(
        "[[users]]\nname = \"h\"\npassword_hash = \"md5:abc\"\npermissions = [\"admin\"]\n",
    )
    .unwrap();
    let e = Authority::new(&s, [9; 32]).unwrap_err();
    assert_eq!(e.key, "auth.users[0].password_hash");
}

#[test]
fn config_errors_name_their_key() {
    let err = |t: &str| {
        let s: AuthSection = toml::from_str(t).unwrap();
        Authority::new(&s, [9; 32]).unwrap_err().to_string()
    };
    assert_eq!(
        err("[[users]]\nname = \"a\"\npermissions = []\n"),
        "auth.users[0].password: a user needs a password, password_hash or token"
    );
    assert_eq!(
        err(
            "[[users]]\nname = \"a\"\npassword = \"x\"\npermissions = []\n[[users]]\nname = \"a\"\npassword = \"y\"\npermissions = []\n"
        ),
        "auth.users[1].name: \"a\" is configured twice"
    );
    assert_eq!(
        err("[[users]]\nname = \"a\"\ntoken = \"short\"\npermissions = []\n"),
        "auth.users[0].token: at least 16 characters, no spaces or controls"
    );
    assert_eq!(
        err("[[users]]\nname = \"a:b\"\npassword = \"x\"\npermissions = []\n"),
        "auth.users[0].name: \"a:b\": empty, or with ':' or a control"
    );
    // Unknown keys and permissions are refused by the parser.
    // `publish` names the record permission (publishing a live feed).
    let s: AuthSection = toml::from_str("anonymous = [\"read\", \"publish\"]").unwrap();
    assert_eq!(s.anonymous, [Permission::Read, Permission::Record]);
    assert!(toml::from_str::<AuthSection>("anonymus = []").is_err());
    assert!(toml::from_str::<AuthSection>("anonymous = [\"write\"]").is_err());
}

#[test]
fn authorization_headers_parse_and_round_trip() {
    let c = basic("ops", "pa:ss");
    assert_eq!(Credentials::from_authorization(&c.to_authorization().unwrap()), Ok(c));
    let t = Credentials::Bearer("tok".into());
    assert_eq!(Credentials::from_authorization("bearer tok"), Ok(t));
    assert_eq!(
        Credentials::from_authorization("Negotiate abc"),
        Err(CredentialsError::Scheme("Negotiate".into()))
    );
    assert_eq!(Credentials::from_authorization("Basic !!!"), Err(CredentialsError::Malformed));
    assert_eq!(format!("{:?}", basic("u", "p")), "Basic(\"u\", <password>)");
}

proptest::proptest! {
    #[test]
    fn arbitrary_headers_never_panic(s in "\\PC{0,64}") {
        let _ = Credentials::from_authorization(&s);
        let _ = Credentials::from_authorization(&format!("Basic {s}"));
    }
}

#[test]
fn digest_answers_a_challenge_of_this_server_only() {
    use crate::digest::Algorithm;
    let a = authority(USERS);
    let [md5, _] = a.digest_challenges(1_000_000, false);
    let nonce = md5.split("nonce=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let answer = |user: &str, pass: &str, nonce: &str| {
        let h = |s: String| {
            use md5::Digest as _;
            md5::Md5::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let ha1 = h(format!("{user}:isochron:{pass}"));
        let ha2 = h("DESCRIBE:rtsp://h/demo".into());
        let r = h(format!("{ha1}:{nonce}:{ha2}"));
        Credentials::from_authorization(&format!(
            "Digest username=\"{user}\", realm=\"isochron\", nonce=\"{nonce}\", \
             uri=\"rtsp://h/demo\", response=\"{r}\""
        ))
        .unwrap()
    };
    let _ = Algorithm::Md5;
    let at = |c: &Credentials, now: u64| {
        a.check(&Access {
            method: "DESCRIBE",
            now_unix_s: now,
            object: Some("public-1"),
            ..access(Permission::Read, Some(c), false)
        })
    };
    let good = answer("viewer", "view", &nonce);
    assert_eq!(at(&good, 1_000_010), Decision::Allow { user: Some("viewer".into()) });
    assert!(matches!(at(&answer("viewer", "nope", &nonce), 1_000_010), Decision::Unauthorized(_)));
    // Expired: stale, so the client retries with a fresh nonce.
    assert!(a.is_stale(Some(&good), 1_000_000 + NONCE_LIFETIME_S + 1));
    assert!(matches!(at(&good, 1_000_000 + NONCE_LIFETIME_S + 1), Decision::Unauthorized(_)));
    // Another server's nonce.
    let other = Authority::new(&toml::from_str(USERS).unwrap(), [8; 32]).unwrap();
    let [theirs, _] = other.digest_challenges(1_000_000, false);
    let theirs = theirs.split("nonce=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    assert!(
        matches!(at(&answer("viewer", "view", &theirs), 1_000_010), Decision::Unauthorized(m) if m.contains("not issued"))
    );
}
