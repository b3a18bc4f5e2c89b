//! A reply as any client library hands it over (arrays, numbers, strings, `null`), as the
//! `redis` crate's `Value` the Rust client's parsers read.

use redis::Value;
use serde_json::Value as Json;

/// The reply's value; a number that is not a whole `i64` stays a string, which every
/// parser refuses with the reply's shape in its error.
pub(crate) fn value(reply: &Json) -> Value {
    match reply {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Int(i64::from(*b)),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => match n.as_f64() {
                // A client that hands integers over as doubles (every JS number is one).
                #[allow(clippy::cast_possible_truncation)]
                Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
                    Value::Int(f as i64)
                }
                _ => Value::SimpleString(n.to_string()),
            },
        },
        // node-redis under RESP3 and some clients give integers in strings when asked to.
        Json::String(s) => match s.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BulkString(s.clone().into_bytes()),
        },
        Json::Array(items) => Value::Array(items.iter().map(value).collect()),
        Json::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| (Value::BulkString(k.clone().into_bytes()), value(v)))
                .collect(),
        ),
    }
}
