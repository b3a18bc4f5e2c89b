//! Where an entry of a YAML document starts, for error messages (`file:line:column:`).
//! serde_yaml_ng's `Value` keeps no positions, but its deserializer marks every error with
//! the position of the node it was reading: walking the document to the entry and failing
//! there gives that entry's line and column, with the parser the configuration is read with.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step from a node to an entry below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The value under a key of a map.
    Value(String),
    /// The key itself (last step only: an unknown or misspelled key).
    Key(String),
    /// An item of a list.
    Item(usize),
}

/// The 1-based line and column where the entry at `path` starts in `text` (the document
/// itself for an empty path), or None when there is no such entry.
pub fn locate(text: &str, path: &[Step]) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match Find(path).deserialize(de) {
        // The deserializer puts the path it followed in front of the message.
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

/// The error text that means "found" (any other error means the path is not there).
const HERE: &str = "\u{0}here";

struct Find<'p>(&'p [Step]);

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((step, rest)) = self.0.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let wanted = match step {
            Step::Value(k) | Step::Key(k) => k.as_str(),
            Step::Item(_) => return drain_map(map),
        };
        let key_wanted = matches!(step, Step::Key(_));
        while let Some(matched) = map.next_key_seed(KeyIs {
            wanted,
            fail_on_match: key_wanted,
        })? {
            if matched {
                return map.next_value_seed(Find(rest));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((step, rest)) = self.0.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let Step::Item(wanted) = step else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(());
        };
        let mut i = 0;
        loop {
            if i == *wanted {
                return seq.next_element_seed(Find(rest)).map(|_| ());
            }
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
}

impl Find<'_> {
    /// A scalar is the entry when the path ends here; nothing lies below it.
    fn scalar<E: de::Error>(&self) -> Result<(), E> {
        if self.0.is_empty() {
            Err(E::custom(HERE))
        } else {
            Ok(())
        }
    }
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads a map's key: whether it is `wanted` (compared as text, as the loader reads keys);
/// with `fail_on_match`, a match is the entry sought and fails right there, at the key.
struct KeyIs<'w> {
    wanted: &'w str,
    fail_on_match: bool,
}

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_str<E: de::Error>(self, k: &str) -> Result<bool, E> {
        self.compare(k)
    }
    fn visit_bool<E: de::Error>(self, k: bool) -> Result<bool, E> {
        self.compare(&k.to_string())
    }
    fn visit_i64<E: de::Error>(self, k: i64) -> Result<bool, E> {
        self.compare(&k.to_string())
    }
    fn visit_u64<E: de::Error>(self, k: u64) -> Result<bool, E> {
        self.compare(&k.to_string())
    }
    fn visit_f64<E: de::Error>(self, k: f64) -> Result<bool, E> {
        self.compare(&k.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        self.compare("null")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        drain_map(map).map(|()| false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

impl KeyIs<'_> {
    fn compare<E: de::Error>(&self, k: &str) -> Result<bool, E> {
        let matched = k == self.wanted;
        if matched && self.fail_on_match {
            return Err(E::custom(HERE));
        }
        Ok(matched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n  - key: j\n    ratelimit: {}\n";

    #[test]
    fn finds_values_keys_and_items() {
        let v = |s: &str| Step::Value(s.to_string());
        assert_eq!(locate(DOC, &[v("domain")]), Some((1, 9)));
        assert_eq!(
            locate(
                DOC,
                &[v("descriptors"), Step::Item(0), v("rate_limit"), v("unit")]
            ),
            Some((5, 13))
        );
        assert_eq!(
            locate(
                DOC,
                &[
                    v("descriptors"),
                    Step::Item(1),
                    Step::Key("ratelimit".into())
                ]
            ),
            Some((7, 5))
        );
        assert_eq!(
            locate(DOC, &[v("descriptors"), Step::Item(1)]),
            Some((6, 5))
        );
        assert_eq!(locate(DOC, &[v("nothing")]), None);
        assert_eq!(locate(DOC, &[v("descriptors"), Step::Item(5)]), None);
        assert_eq!(
            locate("0.25: d\n", &[Step::Key("0.25".into())]),
            Some((1, 1))
        );
    }
}
