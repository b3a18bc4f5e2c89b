//! A reply as any client library hands it over (arrays, numbers, strings, `null`), as the
//! `redis` crate's `Value` the Rust client's parsers read.
//!
//! Read straight from the JavaScript value ([`Reply`]): going through `serde_json::Value`
//! first made every reply twice, one allocation per array on each side, on every request.
//! Objects that are not arrays (a map under RESP3) and BigInts still take that way.

use napi::bindgen_prelude::{FromNapiValue, TypeName, ValidateNapiValue};
use napi::{check_status, sys, Error, Result, Status, ValueType};
use redis::Value;
use serde_json::Value as Json;

/// A reply read from a JavaScript value; `null` and `undefined` are `Nil`.
pub struct Reply(pub(crate) Value);

impl TypeName for Reply {
    fn type_name() -> &'static str {
        "unknown"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl ValidateNapiValue for Reply {}

impl FromNapiValue for Reply {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        // SAFETY: the caller's contract: `value` is a live value of `env`.
        unsafe { read(env, value) }.map(Reply)
    }
}

/// A reply or nothing (`null` and `undefined`: `None`), its type asked once.
pub struct MaybeReply(pub(crate) Option<Value>);

impl TypeName for MaybeReply {
    fn type_name() -> &'static str {
        "unknown"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl ValidateNapiValue for MaybeReply {}

impl FromNapiValue for MaybeReply {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> Result<Self> {
        // SAFETY: the caller's contract: `value` is a live value of `env`.
        let kind = unsafe { type_of(env, value) }?;
        Ok(Self(match kind {
            sys::ValueType::napi_null | sys::ValueType::napi_undefined => None,
            // SAFETY: as above.
            _ => Some(unsafe { read_of(env, value, kind) }?),
        }))
    }
}

/// # Safety
/// `value` is a live value of `env`, in the callback that got it.
unsafe fn type_of(env: sys::napi_env, value: sys::napi_value) -> Result<sys::napi_valuetype> {
    let mut kind = 0;
    check_status!(unsafe { sys::napi_typeof(env, value, &mut kind) })?;
    Ok(kind)
}

/// # Safety
/// `value` is a live value of `env`, in the callback that got it.
unsafe fn read(env: sys::napi_env, value: sys::napi_value) -> Result<Value> {
    // SAFETY: the caller's.
    unsafe { read_of(env, value, type_of(env, value)?) }
}

/// [`read`] of a value of type `kind`.
///
/// # Safety
/// As [`read`]'s; `kind` is `value`'s type.
unsafe fn read_of(
    env: sys::napi_env,
    value: sys::napi_value,
    kind: sys::napi_valuetype,
) -> Result<Value> {
    match kind {
        sys::ValueType::napi_number => {
            let mut f = 0.0;
            check_status!(unsafe { sys::napi_get_value_double(env, value, &mut f) })?;
            Ok(number(f))
        }
        sys::ValueType::napi_string => {
            let s = unsafe { String::from_napi_value(env, value) }?;
            Ok(string(s))
        }
        sys::ValueType::napi_null | sys::ValueType::napi_undefined => Ok(Value::Nil),
        sys::ValueType::napi_boolean => {
            let mut b = false;
            check_status!(unsafe { sys::napi_get_value_bool(env, value, &mut b) })?;
            Ok(Value::Int(i64::from(b)))
        }
        sys::ValueType::napi_object => {
            let mut is_array = false;
            check_status!(unsafe { sys::napi_is_array(env, value, &mut is_array) })?;
            if !is_array {
                return Ok(self::value(&unsafe { Json::from_napi_value(env, value) }?));
            }
            let mut len = 0;
            check_status!(unsafe { sys::napi_get_array_length(env, value, &mut len) })?;
            let mut items = Vec::with_capacity(len as usize);
            for i in 0..len {
                let mut item = std::ptr::null_mut();
                check_status!(unsafe { sys::napi_get_element(env, value, i, &mut item) })?;
                // Most items are numbers: read as one first (no call asking the type).
                let mut f = 0.0;
                if unsafe { sys::napi_get_value_double(env, item, &mut f) } == sys::Status::napi_ok
                {
                    items.push(number(f));
                } else {
                    items.push(unsafe { read(env, item) }?);
                }
            }
            Ok(Value::Array(items))
        }
        _ => Ok(self::value(&unsafe { Json::from_napi_value(env, value) }?)),
    }
}

/// A client that hands integers over as doubles (every JS number is one): a whole one is an
/// integer; any other stays text, which every parser refuses with the reply's shape in its
/// error.
fn number(f: f64) -> Value {
    #[allow(clippy::cast_possible_truncation)]
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        Value::Int(f as i64)
    } else {
        Value::SimpleString(f.to_string())
    }
}

/// node-redis under RESP3 and some clients give integers in strings when asked to.
fn string(s: String) -> Value {
    match s.parse::<i64>() {
        Ok(i) => Value::Int(i),
        Err(_) => Value::BulkString(s.into_bytes()),
    }
}

/// The reply's value; a number that is not a whole `i64` stays a string, which every
/// parser refuses with the reply's shape in its error.
pub(crate) fn value(reply: &Json) -> Value {
    match reply {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Int(i64::from(*b)),
        Json::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => n
                .as_f64()
                .map_or_else(|| Value::SimpleString(n.to_string()), number),
        },
        Json::String(s) => string(s.clone()),
        Json::Array(items) => Value::Array(items.iter().map(value).collect()),
        Json::Object(map) => Value::Map(
            map.iter()
                .map(|(k, v)| (Value::BulkString(k.clone().into_bytes()), value(v)))
                .collect(),
        ),
    }
}

/// How `Flow.feedMany`'s replies come across: each reply (after its request's number) as
/// numbers in one `Float64Array` the middleware reuses, written by `ReplySlots` in
/// `ts/replies.ts`: one crossing for a batch instead of one per array and item (reading
/// RL.ALL's reply of four limits item by item was about 2 us a request in an application).
/// Each value is a tag and a number:
pub(crate) mod slot {
    /// A number: the next slot.
    pub const NUMBER: f64 = 0.0;
    /// An array: the next slot its length, then its items.
    pub const ARRAY: f64 = 1.0;
    /// `null` or `undefined`.
    pub const NIL: f64 = 2.0;
    /// Any other value (a string, a map, a BigInt...): the next slot its index in the
    /// batch's array of others, read as [`super::Reply`].
    pub const OTHER: f64 = 3.0;
}

/// A reader of the slots `ReplySlots` wrote (`others`: the values written as an index).
pub(crate) struct Slots<'a> {
    slots: &'a [f64],
    others: &'a mut [Option<Value>],
}

impl<'a> Slots<'a> {
    pub(crate) fn new(slots: &'a [f64], others: &'a mut [Option<Value>]) -> Self {
        Self { slots, others }
    }

    pub(crate) fn done(&self) -> bool {
        self.slots.is_empty()
    }

    /// The next slot.
    pub(crate) fn number(&mut self) -> Result<f64> {
        let (first, rest) = self
            .slots
            .split_first()
            .ok_or_else(|| Error::new(Status::InvalidArg, "feedMany: the slots end early"))?;
        self.slots = rest;
        Ok(*first)
    }

    /// The next value.
    pub(crate) fn value(&mut self) -> Result<Value> {
        let tag = self.number()?;
        if tag == slot::NIL {
            return Ok(Value::Nil);
        }
        let n = self.number()?;
        if tag == slot::NUMBER {
            return Ok(number(n));
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = n as usize;
        if tag == slot::ARRAY {
            // Each item takes a slot at least: a length past the slots left is not believed.
            let mut items = Vec::with_capacity(n.min(self.slots.len()));
            for _ in 0..n {
                items.push(self.value()?);
            }
            return Ok(Value::Array(items));
        }
        if tag == slot::OTHER {
            if let Some(other) = self.others.get_mut(n).and_then(Option::take) {
                return Ok(other);
            }
        }
        Err(Error::new(
            Status::InvalidArg,
            format!("feedMany: a slot tagged {tag} ({n})"),
        ))
    }
}
