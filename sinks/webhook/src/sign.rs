//! Request signatures: Standard Webhooks ([`standard_signature`]) and GitHub's
//! `X-Hub-Signature-256` ([`hub_signature_256`]).

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Header carrying the message id (the event's `id`).
pub(crate) const WEBHOOK_ID: &str = "webhook-id";
/// Header carrying the attempt's unix time in seconds.
pub(crate) const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying `v1,<base64 signature>`.
pub(crate) const WEBHOOK_SIGNATURE: &str = "webhook-signature";
/// GitHub-style body signature header.
pub(crate) const HUB_SIGNATURE_256: &str = "x-hub-signature-256";

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        unreachable!("HMAC accepts keys of every length")
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">` keyed with the decoded secret.
pub(crate) fn standard_signature(key: &[u8], id: &str, timestamp: u64, body: &[u8]) -> String {
    let timestamp = timestamp.to_string();
    let digest = hmac_sha256(
        key,
        &[id.as_bytes(), b".", timestamp.as_bytes(), b".", body],
    );
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// `sha256=<lower-case hex HMAC-SHA256 of body>`.
pub(crate) fn hub_signature_256(key: &[u8], body: &[u8]) -> String {
    let digest = hmac_sha256(key, &[body]);
    let mut out = String::with_capacity(7 + digest.len() * 2);
    out.push_str("sha256=");
    out.push_str(&hex(&digest));
    out
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0F)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::SigningConfig;

    /// The test vector published with the Standard Webhooks reference libraries.
    #[test]
    fn reproduces_the_standard_webhooks_test_vector() {
        let signing = SigningConfig::standard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            standard_signature(
                &signing.secret,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn the_signature_covers_id_timestamp_and_body() {
        let key = b"k";
        let base = standard_signature(key, "a", 1, b"{}");
        assert_ne!(base, standard_signature(key, "b", 1, b"{}"));
        assert_ne!(base, standard_signature(key, "a", 2, b"{}"));
        assert_ne!(base, standard_signature(key, "a", 1, b"{ }"));
        assert_ne!(base, standard_signature(b"K", "a", 1, b"{}"));
    }

    /// RFC 4231 test case 2 (key "Jefe"), as a GitHub-style header.
    #[test]
    fn hub_signature_is_hex_hmac_sha256_of_the_body() {
        assert_eq!(
            hub_signature_256(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn hex_is_lower_case_and_padded() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
    }
}
