//! The registry as data, for code that cannot link the core: a Lua table for the Lua twin,
//! JSON for the Python package (its extension hands it over as text) and anything else.
//!
//! Both list every algorithm in registry order with its names, tag, parameters and options
//! with their ranges, `UPTO` support, what each parameter is in a configured rate
//! (`limit`, `window_ms`, `burst`, `burst_or_limit`), how the local fallback shares it, and
//! the log's exact local bound. The error text of a number outside a range is
//! `<name> must be an integer between <min> and <max>` ([`crate::ParamError`]; for a range
//! with a `spelling`: an `offset` shows `min - bias` and `max - bias`; `words` reads
//! `<name> must be A, B or C`).

use std::fmt::Write as _;

use crate::limits::{self, Range, Spelling};
use crate::rate::RateField;
use crate::registry::{Kind, SpecNames};

/// One value in the output, written as Lua or JSON.
enum Value {
    Str(String),
    Int(u64),
    Bool(bool),
    Nil,
    List(Vec<Value>),
    Map(Vec<(&'static str, Value)>),
}

fn s(text: &str) -> Value {
    Value::Str(text.to_string())
}

fn range(r: &Range) -> Value {
    let mut fields = vec![
        ("name", s(r.name)),
        ("min", Value::Int(r.min)),
        ("max", Value::Int(r.max)),
    ];
    fields.extend(spelling(r));
    Value::Map(fields)
}

/// How a number is written, for the ranges that are not plain integers: `offset` (a signed
/// integer carried as `value + bias`) or `words` (carried as the word's position from 1).
fn spelling(r: &Range) -> Vec<(&'static str, Value)> {
    match r.spelling {
        Spelling::Integer => vec![],
        Spelling::Offset(bias) => vec![("spelling", s("offset")), ("bias", Value::Int(bias))],
        Spelling::Words(words) => vec![
            ("spelling", s("words")),
            ("words", Value::List(words.iter().map(|w| s(w)).collect())),
        ],
    }
}

fn rate_field(f: RateField) -> Value {
    s(match f {
        RateField::Limit => "limit",
        RateField::WindowMs => "window_ms",
        RateField::BurstOrLimit => "burst_or_limit",
        RateField::Burst => "burst",
        RateField::Period => "period",
        RateField::Tz => "tz",
        RateField::Anchor => "anchor",
    })
}

fn algorithm(k: Kind) -> Value {
    let options = k
        .options()
        .iter()
        .map(|o| {
            let mut fields = vec![
                ("token", s(o.token)),
                ("value", s(o.value)),
                ("name", s(o.range.name)),
                ("min", Value::Int(o.range.min)),
                ("max", Value::Int(o.range.max)),
            ];
            fields.extend(spelling(&o.range));
            Value::Map(fields)
        })
        .collect();
    let local_exact_max = match k.local_exact_max() {
        Some((max, other)) => Value::Map(vec![
            ("max", Value::Int(max)),
            ("runs_as", s(other.config_name())),
        ]),
        None => Value::Nil,
    };
    Value::Map(vec![
        ("config_name", s(k.config_name())),
        ("spec_name", s(k.spec_name())),
        ("command", s(k.command())),
        ("label", s(k.name())),
        ("tag", s(&char::from(k.tag()).to_string())),
        ("limiter", Value::Bool(k.is_limiter())),
        ("upto", Value::Bool(k.upto())),
        (
            "params",
            Value::List(k.params().iter().map(range).collect()),
        ),
        ("options", Value::List(options)),
        (
            "rate",
            Value::List(k.rate_fields().iter().copied().map(rate_field).collect()),
        ),
        ("share", k.share().map_or(Value::Nil, |sh| s(sh.name()))),
        ("local_exact_max", local_exact_max),
    ])
}

fn registry() -> Value {
    Value::Map(vec![
        ("max_count", Value::Int(limits::MAX_COUNT)),
        ("max_duration_ms", Value::Int(limits::MAX_DURATION_MS)),
        ("cost", range(&limits::COST)),
        ("spec_names", s(&SpecNames.to_string())),
        (
            "algorithms",
            Value::List(Kind::ALL.iter().copied().map(algorithm).collect()),
        ),
    ])
}

fn quoted(text: &str) -> String {
    format!("{text:?}")
}

fn lua_value(v: &Value, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent + 1);
    match v {
        Value::Str(t) => out.push_str(&quoted(t)),
        Value::Int(n) => out.push_str(&n.to_string()),
        Value::Bool(b) => out.push_str(&b.to_string()),
        Value::Nil => out.push_str("nil"),
        Value::List(items) => {
            out.push_str("{\n");
            for item in items {
                out.push_str(&pad);
                lua_value(item, indent + 1, out);
                out.push_str(",\n");
            }
            let _ = write!(out, "{}}}", "  ".repeat(indent));
        }
        Value::Map(fields) => {
            out.push_str("{\n");
            for (key, item) in fields {
                let _ = write!(out, "{pad}{key} = ");
                lua_value(item, indent + 1, out);
                out.push_str(",\n");
            }
            let _ = write!(out, "{}}}", "  ".repeat(indent));
        }
    }
}

fn json_value(v: &Value, out: &mut String) {
    match v {
        Value::Str(t) => out.push_str(&quoted(t)),
        Value::Int(n) => out.push_str(&n.to_string()),
        Value::Bool(b) => out.push_str(&b.to_string()),
        Value::Nil => out.push_str("null"),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_value(item, out);
            }
            out.push(']');
        }
        Value::Map(fields) => {
            out.push('{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:", quoted(key));
                json_value(item, out);
            }
            out.push('}');
        }
    }
}

/// The registry as a Lua chunk that returns one table.
pub fn lua() -> String {
    let mut out = String::from(
        "-- The registry of algorithms, generated from core/src/registry.rs by\n\
         -- `cargo run -q -p redis-rl-core --example registry -- lua`: do not edit.\n\
         return ",
    );
    lua_value(&registry(), 0, &mut out);
    out.push('\n');
    out
}

/// The registry as one JSON object.
pub fn json() -> String {
    let mut out = String::new();
    json_value(&registry(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_forms_list_every_algorithm() {
        for k in crate::Kind::ALL {
            let name = format!("{:?}", k.config_name());
            assert!(super::json().contains(&name));
            assert!(super::lua().contains(&format!("config_name = {name}")));
        }
        assert!(super::json().contains(r#""rate":["limit","window_ms","burst"]"#));
    }
}
