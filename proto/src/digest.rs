//! Content digests (docs/api/digests.md), identical to the ones the Weave SDK and server compute.
//!
//! - file / string / object / table-row digests: SHA-256 → URL-safe base64 with `-` → `X`,
//!   `_` → `Y` and no padding (43 chars, alphanumeric);
//! - table digests: lowercase hex SHA-256 over the concatenated row digests (64 chars).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::canonical::canonical_json;

/// Length of a content digest (32-byte SHA-256 in unpadded base64).
pub const DIGEST_LEN: usize = 43;

/// Length of a table digest (32-byte SHA-256 in hex).
pub const TABLE_DIGEST_LEN: usize = 64;

/// SHA-256 of `b` → URL-safe base64 → `-` becomes `X`, `_` becomes `Y` → no `=` padding.
pub fn bytes_digest(b: &[u8]) -> String {
    let hash = Sha256::digest(b);
    let mut out = String::with_capacity(DIGEST_LEN);
    URL_SAFE_NO_PAD.encode_string(hash, &mut out);
    if out.bytes().any(|c| c == b'-' || c == b'_') {
        out = out
            .chars()
            .map(|c| match c {
                '-' => 'X',
                '_' => 'Y',
                c => c,
            })
            .collect();
    }
    out
}

/// [`bytes_digest`] of the UTF-8 bytes of `s`.
pub fn str_digest(s: &str) -> String {
    bytes_digest(s.as_bytes())
}

/// Digest of an object value: [`str_digest`] of its [`canonical_json`].
pub fn object_digest(v: &Value) -> String {
    str_digest(&canonical_json(v))
}

/// Digest of a table row; the same algorithm as [`object_digest`].
pub fn row_digest(v: &Value) -> String {
    object_digest(v)
}

/// Table digest: lowercase hex SHA-256 over the concatenation of the row digests, in order.
/// An empty table hashes to `e3b0c442…b855`.
pub fn table_digest<S: AsRef<str>>(row_digests: &[S]) -> String {
    let mut hasher = Sha256::new();
    for d in row_digests {
        hasher.update(d.as_ref().as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Whether `s` looks like a content digest: exactly 43 ASCII alphanumeric characters.
pub fn is_valid_digest(s: &str) -> bool {
    s.len() == DIGEST_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `s` looks like a table digest: exactly 64 lowercase hex characters.
pub fn is_valid_table_digest(s: &str) -> bool {
    s.len() == TABLE_DIGEST_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test input is valid JSON")
    }

    #[test]
    fn bytes_digest_contract_vectors() {
        let cases: &[(&[u8], &str)] = &[
            (b"hello", "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"),
            (b"", "47DEQpj8HBSaXYTImWX5JCeuQeRkm5NMpJWZG3hSuFU"),
        ];
        for (input, want) in cases {
            assert_eq!(bytes_digest(input), *want, "input {input:?}");
            assert!(is_valid_digest(want));
        }
        assert_eq!(str_digest("hello"), "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ");
    }

    /// Inputs whose plain URL-safe base64 contains `-` and `_`; expected values from Python.
    #[test]
    fn bytes_digest_replaces_dash_and_underscore() {
        let cases: &[(&[u8], &str)] = &[
            // raw 7DFoL95WGReVL_eKeore_9D-vDct0mhxkWxGxjA4G0U=
            (b"x1", "7DFoL95WGReVLYeKeoreY9DXvDct0mhxkWxGxjA4G0U"),
            // raw JApCN0-oHSRQhjgoKkFsRrL_fR3FKYcecVHl7v_XexM=
            (b"x8", "JApCN0XoHSRQhjgoKkFsRrLYfR3FKYcecVHl7vYXexM"),
            // raw BbtfBFC9euhD7PCwpZaY_ZPYOjkwaG63z88z-7Ju3eQ=
            (b"x9", "BbtfBFC9euhD7PCwpZaYYZPYOjkwaG63z88zX7Ju3eQ"),
        ];
        for (input, want) in cases {
            assert_eq!(bytes_digest(input), *want, "input {input:?}");
        }
    }

    /// `str_digest(json.dumps(json.loads(text), sort_keys=True))` computed by Python.
    #[test]
    fn object_digests_match_python() {
        let cases: &[(&str, &str)] = &[
            (r#"{}"#, "RBNvo1WzZ4oRRq0W9XhknpT7T8If536DEMBg9hyqY4o"),
            (r#"[]"#, "T1PNoYwrqgwDVLtfmj7L5e0Sq02OEbqHPC8RFhICuUU"),
            (r#"null"#, "dCNOmKYnSYX12vHzasLXiswzlGT5UHA7jAGYkvmCuQs"),
            (r#""é😀""#, "A7KKLaYDLPtMtgTkmAaBxrmIVDT4ojw69MUriJnfwc4"),
            (
                r#"{"z": [1, 2.5, 1e-07], "a": {"y": null, "b": "\u0001"}}"#,
                "Mgky5mYQwwQr781W5PzA9a4XCA3ap3mOQYIbJNYsXdY",
            ),
            (
                r#"{"_type": "Op", "name": "x", "files": {"obj.py": "abc"}}"#,
                "m8TdMrGBnafPbG8avQN8iDY5RkRWA1WU94SvxzjqlwQ",
            ),
            (r#"123456789012345678901234567890"#, "9U5cj4EGSOdjjSXrftbSS35ZmdWI6Igm8qqDfS7lLs0"),
            (r#"1e400"#, "0AZ8rZpj4IE3WaK7hBBRynNXDA2i4I6ECo60XbanoBA"),
        ];
        for (input, want) in cases {
            let v = parse(input);
            assert_eq!(object_digest(&v), *want, "input {input}");
            assert_eq!(row_digest(&v), *want, "input {input}");
        }
    }

    #[test]
    fn object_digest_contract_vector() {
        let v = parse(
            r#"{"b":1,"a":[1.0,"é",null,true,1e-05,1e16,123.456,-0.0,100000000000000000000]}"#,
        );
        assert_eq!(
            canonical_json(&v),
            r#"{"a": [1.0, "\u00e9", null, true, 1e-05, 1e+16, 123.456, -0.0, 100000000000000000000], "b": 1}"#
        );
        assert_eq!(object_digest(&v), "8cSIeZmxOV9VXxSrqTBKnzAwHg5YwslsznIRY9ik5sM");
    }

    #[test]
    fn table_digest_contract_vectors() {
        let rows = [parse(r#"{"a":1}"#), parse(r#"{"a":2}"#)];
        let digests: Vec<String> = rows.iter().map(row_digest).collect();
        assert_eq!(
            digests,
            [
                "XdhgKMbg1k4iUYb5astpM4ssWXZN95FiEH9cS7NNExA",
                "5anVsDAOD1DTcuWp3fokIIqsmpQM6aNvJHOHIhriBf4",
            ]
        );
        let table = table_digest(&digests);
        assert_eq!(table, "1c95cdc46a75d6e7e971986a80adfcd676dd22f2222a3405c7743f3db8df6785");
        assert!(is_valid_table_digest(&table));
        // `&str` slices work too.
        let strs: Vec<&str> = digests.iter().map(String::as_str).collect();
        assert_eq!(table_digest(&strs), table);
    }

    #[test]
    fn empty_table_digest() {
        let empty: [&str; 0] = [];
        assert_eq!(
            table_digest(&empty),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn digest_alphabet_has_no_dash_or_underscore() {
        for i in 0..2000u32 {
            let d = bytes_digest(&i.to_le_bytes());
            assert!(is_valid_digest(&d), "{d}");
        }
    }

    #[test]
    fn digest_validation() {
        let cases: &[(&str, bool)] = &[
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ", true),
            ("XdhgKMbg1k4iUYb5astpM4ssWXZN95FiEH9cS7NNExA", true),
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmC", false),
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQQ", false),
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLm-Q", false),
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLm_Q", false),
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmC=", false),
            ("", false),
        ];
        for (s, want) in cases {
            assert_eq!(is_valid_digest(s), *want, "{s:?}");
        }
        let table_cases: &[(&str, bool)] = &[
            ("1c95cdc46a75d6e7e971986a80adfcd676dd22f2222a3405c7743f3db8df6785", true),
            ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", true),
            ("1C95CDC46A75D6E7E971986A80ADFCD676DD22F2222A3405C7743F3DB8DF6785", false),
            ("1c95cdc46a75d6e7e971986a80adfcd676dd22f2222a3405c7743f3db8df678", false),
            ("1c95cdc46a75d6e7e971986a80adfcd676dd22f2222a3405c7743f3db8df6785a", false),
            ("1c95cdc46a75d6e7e971986a80adfcd676dd22f2222a3405c7743f3db8df678g", false),
            ("LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ", false),
            ("", false),
        ];
        for (s, want) in table_cases {
            assert_eq!(is_valid_table_digest(s), *want, "{s:?}");
        }
    }
}
