//! Paths: the normal form every front end matches and forwards, and route templates
//! (`/items/{id}`, `/admin/**`).

/// The normal form of a request path: duplicate slashes collapsed, `.` and `..` segments
/// resolved (never above the root), no trailing slash (except the root itself). Case and
/// percent-escapes are kept as sent: `/API/Items` and `/api/items` are different paths, as
/// they are to most servers.
///
/// ```
/// use redis_rl_policy::normalize_path;
/// assert_eq!(normalize_path("/api//search/"), "/api/search");
/// assert_eq!(normalize_path("/api/./x/../search"), "/api/search");
/// assert_eq!(normalize_path("/../.."), "/");
/// ```
pub fn normalize_path(path: &str) -> String {
    // Most paths are sent in their normal form: copied, without a list of segments.
    if is_normal(path) {
        return path.to_owned();
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// Whether `path` is its own normal form: the root, or `/` and segments none of which is
/// empty, `.` or `..`.
fn is_normal(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|s| !matches!(s, "" | "." | "..")))
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `{name}`: any one non-empty segment.
    Param,
    /// `**` (or `{*name}`): every remaining segment, none included.
    Rest,
}

/// A route template: literal segments, `{name}` for one segment, `**` (or axum's
/// `{*name}`) as the last segment for any rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    text: String,
    segments: Vec<Segment>,
}

impl Template {
    /// Parses a template; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("path {text:?} must start with /"));
        }
        if normalize_path(text) != text {
            return Err(format!(
                "path {text:?} is not in normal form (expected {:?}: no empty, . or .. segment, no trailing slash)",
                normalize_path(text)
            ));
        }
        let parts: Vec<&str> = text.split('/').skip(1).filter(|s| !s.is_empty()).collect();
        let mut segments = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let segment = if *part == "**" || (part.starts_with("{*") && part.ends_with('}')) {
                if !last {
                    return Err(format!("path {text:?}: `**` must be the last segment"));
                }
                Segment::Rest
            } else if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(format!("path {text:?}: bad parameter {part:?}"));
                }
                Segment::Param
            } else if part.contains(['{', '}', '*']) {
                return Err(format!(
                    "path {text:?}: {part:?} (a segment is a literal, {{name}} or **)"
                ));
            } else {
                Segment::Literal((*part).to_string())
            };
            segments.push(segment);
        }
        Ok(Self {
            text: text.to_string(),
            segments,
        })
    }

    /// The template as written (the route name of the endpoint dimension).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the template ends in `**` (matches any rest).
    pub fn has_rest(&self) -> bool {
        self.segments.last() == Some(&Segment::Rest)
    }

    /// Whether the normalised `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let mut parts = path.split('/').skip(1).filter(|s| !s.is_empty());
        for segment in &self.segments {
            match segment {
                Segment::Rest => return true,
                Segment::Param => {
                    if parts.next().is_none() {
                        return false;
                    }
                }
                Segment::Literal(l) => {
                    if parts.next() != Some(l.as_str()) {
                        return false;
                    }
                }
            }
        }
        parts.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_form() {
        for (path, expected) in [
            ("/", "/"),
            ("", "/"),
            ("//", "/"),
            ("/api/search", "/api/search"),
            ("/api//search", "/api/search"),
            ("/api/search/", "/api/search"),
            ("/api/./search", "/api/search"),
            ("/api/x/../search", "/api/search"),
            ("/../api/search", "/api/search"),
            ("/Api/Search", "/Api/Search"),
            ("/a/%2e%2e/b", "/a/%2e%2e/b"),
            ("/a/..", "/"),
            ("/a/.", "/a"),
            ("a/b", "/a/b"),
            ("/a/b../.c", "/a/b../.c"),
        ] {
            assert_eq!(normalize_path(path), expected, "{path}");
            // The normal form is its own (the copy taken for a path sent normal).
            assert!(is_normal(expected), "{expected}");
            assert_eq!(is_normal(path), path == expected, "{path}");
        }
    }

    #[test]
    fn templates_match_segments() {
        let t = |s: &str| Template::parse(s).unwrap();
        assert!(t("/login").matches("/login"));
        assert!(!t("/login").matches("/login/x"));
        assert!(!t("/login").matches("/Login"));
        assert!(t("/api/items/{id}").matches("/api/items/7"));
        assert!(!t("/api/items/{id}").matches("/api/items"));
        assert!(!t("/api/items/{id}").matches("/api/items/7/x"));
        assert!(t("/admin/**").matches("/admin"));
        assert!(t("/admin/**").matches("/admin/a/b/c"));
        assert!(!t("/admin/**").matches("/administrator"));
        assert!(t("/{*rest}").matches("/anything/at/all"));
        assert!(t("/").matches("/"));
        assert!(!t("/").matches("/x"));
        for (bad, why) in [
            ("login", "must start with /"),
            ("/a//b", "normal form"),
            ("/a/", "normal form"),
            ("/**/x", "last segment"),
            ("/a/{}", "bad parameter"),
            ("/a/b*", "a segment is"),
        ] {
            let err = Template::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
