//! Request bodies read as JSON values whose objects name each field once.
//!
//! `serde_json` keeps the last of two fields of one name, so `{"token": "a…", "token": "b…"}`
//! would act on `b…` while a proxy, a log or another JSON library reading the same body may take
//! it to mean `a…`. The service refuses such a body instead, as I-JSON (RFC 7493) asks.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as one JSON value. An object, at any depth, that names a field twice is an
/// error of the data category (`serde_json::Error::is_data`) that names the field.
pub(crate) fn from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Unique>(bytes).map(|Unique(value)| value)
}

struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if fields.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "field {name:?} is given more than once"
                )));
            }
            let Unique(value) = map.next_value()?;
            fields.insert(name, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::from_slice;
    use serde_json::json;

    #[test]
    fn values_read_as_serde_json_reads_them() {
        let body = r#"{"a": [1, -2, 2.5, "s", null, true, {"b": {}}], "c": 18446744073709551615}"#;
        assert_eq!(
            from_slice(body.as_bytes()).unwrap(),
            serde_json::from_str::<serde_json::Value>(body).unwrap()
        );
        assert_eq!(from_slice(b"[]").unwrap(), json!([]));
    }

    #[test]
    fn a_field_named_twice_is_refused_at_any_depth() {
        for body in [
            r#"{"ttl_ms": 10000, "ttl_ms": 20}"#,
            r#"{"tokens": {"a": "x", "b": "y", "a": "z"}}"#,
            r#"[{"k": 1, "k": 1}]"#,
        ] {
            let e = from_slice(body.as_bytes()).unwrap_err();
            assert!(e.is_data(), "{body}: {e}");
            assert!(
                e.to_string().contains("given more than once"),
                "{body}: {e}"
            );
        }
        assert!(from_slice(br#"{"a": {"k": 1}, "b": {"k": 1}}"#).is_ok());
    }

    #[test]
    fn broken_json_is_still_a_syntax_error() {
        for body in [&b"{"[..], b"{\"a\": }", b"[1,]", b"\"\xff\""] {
            assert!(!from_slice(body).unwrap_err().is_data(), "{body:?}");
        }
    }
}
