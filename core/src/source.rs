//! Who made a limiter's decision: the one list every front end and binding names
//! (metrics' `source` label, the flow's answers, the Python and Node bindings' names).
//! It lives here, in the crate every other depends on, so that a new layer added to the
//! client cannot be forgotten by a binding that only reads names.

/// Who made a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The server.
    Redis,
    /// The local deny cache: Redis denied this key recently and the wait has not passed.
    DenyCache,
    /// The in-process fallback limiter (Redis unavailable, failure mode local).
    Local,
    /// A lease in hand: units Redis granted earlier to this instance (a hot key).
    Lease,
    /// Redis unavailable, failure mode open: allowed without a decision.
    FailOpen,
    /// Redis unavailable, failure mode closed: denied without a decision.
    FailClosed,
    /// Not checked: another key of the same multi-key check decided first (a denial in an
    /// earlier hash slot), so nothing is known of this key's count.
    Unchecked,
}

impl Source {
    /// Every source, in the order of [`Source::NAMES`] (bindings pass a source as its
    /// index there).
    pub const ALL: [Source; 7] = [
        Source::Redis,
        Source::DenyCache,
        Source::Local,
        Source::Lease,
        Source::FailOpen,
        Source::FailClosed,
        Source::Unchecked,
    ];

    /// Every source's name, in the order of [`Source::ALL`].
    pub const NAMES: [&'static str; 7] = [
        Source::Redis.name(),
        Source::DenyCache.name(),
        Source::Local.name(),
        Source::Lease.name(),
        Source::FailOpen.name(),
        Source::FailClosed.name(),
        Source::Unchecked.name(),
    ];

    /// The name in metrics and logs (`redis`, `deny_cache`, ...).
    pub const fn name(&self) -> &'static str {
        match self {
            Source::Redis => "redis",
            Source::DenyCache => "deny_cache",
            Source::Local => "local",
            Source::Lease => "lease",
            Source::FailOpen => "fail_open",
            Source::FailClosed => "fail_closed",
            Source::Unchecked => "unchecked",
        }
    }

    /// The source of a name (for bindings that pass names).
    pub fn from_name(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Its index in [`Source::ALL`] and [`Source::NAMES`].
    pub const fn index(&self) -> usize {
        *self as usize
    }

    /// True when Redis did not make the decision because it was unavailable.
    pub const fn is_fallback(&self) -> bool {
        matches!(self, Source::Local | Source::FailOpen | Source::FailClosed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_indexes_follow_the_one_list() {
        for (i, s) in Source::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
            assert_eq!(Source::NAMES[i], s.name());
            assert_eq!(Source::from_name(s.name()), Some(s));
        }
        assert_eq!(Source::from_name("nope"), None);
    }
}
