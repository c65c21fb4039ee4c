//! Property tests of everything the edge parses from a client: headers, the hidden path, the
//! campaign token, the login JWT and the token endpoint's body. Whatever the bytes, no panic,
//! and a refusal is always a 4xx with a code.

use plugins::checks::{input, signature};
use plugins::issue::captcha::{self, Solution};
use plugins::issue::EdgeKeys;
use plugins::issue::{JwtCheck, LoginAlg, LoginVerifier};
use plugins::Denial;
use proptest::prelude::*;
use protocol::defense::Defense;

fn is_4xx(d: &Denial) -> bool {
    (400..500).contains(&d.code.status()) && !d.code.as_str().is_empty()
}

fn keys() -> EdgeKeys {
    EdgeKeys::derive(b"property-master-key-0123456789").unwrap()
}

/// Bytes that look a little like what a client sends: JWT-ish, hex-ish, or anything.
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        "[A-Za-z0-9_.\\-]{0,200}".prop_map(String::into_bytes),
        "Bearer [A-Za-z0-9_\\-]{0,40}\\.[A-Za-z0-9_\\-]{0,80}\\.[A-Za-z0-9_\\-]{0,60}"
            .prop_map(String::into_bytes),
        "[0-9a-f]{0,80}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn signed_headers_never_panic(ts in proptest::option::of(header_bytes()),
                                  nonce in proptest::option::of(header_bytes()),
                                  sig in proptest::option::of(header_bytes()),
                                  now in any::<i32>()) {
        match signature::parse(ts.as_deref(), nonce.as_deref(), sig.as_deref()) {
            Ok(signed) => {
                if let Err(d) = signature::check_timestamp(&signed, i64::from(now), 30) {
                    prop_assert!(is_4xx(&d));
                }
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"k");
                let req = signature::Request { method: "POST", path: "/p", query: "", body: b"" };
                let d = signature::verify(&key, &req, &signed).unwrap_err();
                prop_assert!(is_4xx(&d));
            }
            Err(d) => prop_assert!(is_4xx(&d)),
        }
    }

    #[test]
    fn campaign_tokens_and_paths_never_panic(auth in proptest::option::of(header_bytes()),
                                             device in proptest::option::of("[a-z0-9\\-]{0,20}"),
                                             path in "\\PC{0,40}") {
        let k = keys();
        match k.verify(auth.as_deref(), "c1", device.as_deref()) {
            Ok(claims) => {
                if let Err(d) = k.check_path(&claims, &path) {
                    prop_assert!(is_4xx(&d));
                }
            }
            Err(d) => prop_assert!(is_4xx(&d)),
        }
    }

    /// Genuine tokens too (random bytes never form one, so the path check above rarely runs):
    /// a token issued to a user and device passes for them, its own path passes, any other
    /// path, campaign or device is a 4xx, and a token with a byte changed never passes.
    #[test]
    fn issued_tokens_pass_only_with_their_own_path_campaign_and_device(
        user in "[A-Za-z0-9_@.\\-]{1,40}",
        device in "[a-z0-9\\-]{1,20}",
        path in "\\PC{0,40}",
        flip in any::<prop::sample::Index>(),
    ) {
        let k = keys();
        let login = plugins::issue::Login { user: user.clone(), ..Default::default() };
        let issued = k.issue(&login, "c1", &device, 60, chrono::Utc::now().timestamp()).unwrap();
        let auth = format!("Bearer {}", issued.token);
        let claims = k.verify(Some(auth.as_bytes()), "c1", Some(&device));
        prop_assert!(claims.is_ok(), "{:?}", claims.err());
        let claims = claims.unwrap();
        prop_assert_eq!(&claims.sub, &user);
        prop_assert!(k.check_path(&claims, &issued.path).is_ok());
        if path != issued.path {
            let d = k.check_path(&claims, &path).unwrap_err();
            prop_assert!(is_4xx(&d));
        }
        for (campaign, dev) in [("c2", device.as_str()), ("c1", "another-device")] {
            let d = k.verify(Some(auth.as_bytes()), campaign, Some(dev)).unwrap_err();
            prop_assert!(is_4xx(&d));
        }
        let mut tampered = auth.into_bytes();
        let i = "Bearer ".len() + flip.index(issued.token.len());
        tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
        if let Ok(c) = k.verify(Some(&tampered), "c1", Some(&device)) {
            // Only a change in base64url padding bits can leave the token as it was.
            prop_assert_eq!(&c.jti, &claims.jti);
        }
    }

    #[test]
    fn login_jwts_never_panic(auth in proptest::option::of(header_bytes())) {
        let check = JwtCheck::new(LoginAlg::Hs256, b"login-secret-0123456789", "shop", "seckill", 5).unwrap();
        let d = LoginVerifier::new(check).verify(auth.as_deref()).unwrap_err();
        prop_assert!(is_4xx(&d));
    }

    #[test]
    fn device_and_query_never_panic(device in proptest::option::of(header_bytes()), query in proptest::option::of("\\PC{0,60}")) {
        if let Err(d) = input::device_id(device.as_deref()) {
            prop_assert!(is_4xx(&d));
        }
        if let Err(d) = input::qty(query.as_deref()) {
            prop_assert!(is_4xx(&d));
        }
    }

    #[test]
    fn token_bodies_never_panic(body in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..400),
        "\\{\"challenge\":\"[a-z0-9.]{0,60}\",\"answer\":\"[0-9]{0,12}\"\\}".prop_map(String::into_bytes),
        "\\{\"captcha_token\":\"[A-Za-z0-9._\\-]{0,80}\"\\}".prop_map(String::into_bytes),
    ]) {
        match Solution::parse(&body) {
            Ok(solution) => {
                let d = captcha::check(keys().challenge_key(), None, "c1", &Defense::default(), &solution, (0, 16))
                    .unwrap_err();
                prop_assert!(is_4xx(&d));
            }
            Err(d) => prop_assert!(is_4xx(&d)),
        }
    }
}

#[test]
fn a_genuine_token_passes_the_same_parsers() {
    let k = keys();
    let login = plugins::issue::Login { user: "u1".into(), ..Default::default() };
    let t = k.issue(&login, "c1", "d1", 60, chrono::Utc::now().timestamp()).unwrap();
    let claims = k.verify(Some(format!("Bearer {}", t.token).as_bytes()), "c1", Some("d1")).unwrap();
    assert!(k.check_path(&claims, &t.path).is_ok());
}
