//! One request as the load saw it: a line of the records file.

use std::fmt;
use std::str::FromStr;

/// Status of a request that got no HTTP answer (refused connection, reset, timeout).
pub const STATUS_ERROR: u16 = 0;
/// Status of a request not sent because `--max-inflight` requests were already waiting.
pub const STATUS_NOT_SENT: u16 = 1;
/// `key` of a request sent straight to the upstream (no API key dimension involved).
pub const NO_KEY: u32 = u32::MAX;

/// The dimension a refusal named (the problem+json `dimension`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    None,
    ApiKey,
    Ip,
    Endpoint,
    Global,
    Other,
}

impl Dim {
    pub const ALL: [Dim; 4] = [Dim::ApiKey, Dim::Ip, Dim::Endpoint, Dim::Global];

    pub fn name(self) -> &'static str {
        match self {
            Dim::None => "-",
            Dim::ApiKey => "api_key",
            Dim::Ip => "ip",
            Dim::Endpoint => "endpoint",
            Dim::Global => "global",
            Dim::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Dim {
        match s {
            "-" | "" => Dim::None,
            "api_key" => Dim::ApiKey,
            "ip" => Dim::Ip,
            "endpoint" => Dim::Endpoint,
            "global" => Dim::Global,
            _ => Dim::Other,
        }
    }

    /// The dimension named in a refusal's problem+json body (`"dimension":"ip"`).
    pub fn from_body(body: &[u8]) -> Dim {
        let text = String::from_utf8_lossy(body);
        let Some(start) = text.find("\"dimension\":\"") else {
            return Dim::Other;
        };
        let rest = &text[start + 13..];
        Dim::parse(rest.split('"').next().unwrap_or(""))
    }
}

/// One request: when it was sent (Unix microseconds), how long it took, to which gateway,
/// for which key, IP and endpoint, and what came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    pub t_us: u64,
    pub lat_us: u32,
    pub gw: u16,
    pub key: u32,
    pub ip: u32,
    pub route: u8,
    pub status: u16,
    pub dim: Dim,
}

impl Rec {
    pub fn admitted(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

impl fmt::Display for Rec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {} {}",
            self.t_us,
            self.lat_us,
            self.gw,
            self.key,
            self.ip,
            self.route,
            self.status,
            self.dim.name()
        )
    }
}

impl FromStr for Rec {
    type Err = String;

    fn from_str(line: &str) -> Result<Rec, String> {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [t, lat, gw, key, ip, route, status, dim] = f[..] else {
            return Err(format!("expected 8 fields: {line:?}"));
        };
        let n = |s: &str| s.parse::<u64>().map_err(|_| format!("{s:?} in {line:?}"));
        let small = |s: &str| n(s).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
        Ok(Rec {
            t_us: n(t)?,
            lat_us: small(lat)?,
            gw: u16::try_from(n(gw)?).map_err(|e| e.to_string())?,
            key: small(key)?,
            ip: small(ip)?,
            route: u8::try_from(n(route)?).map_err(|e| e.to_string())?,
            status: u16::try_from(n(status)?).map_err(|e| e.to_string())?,
            dim: Dim::parse(dim),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_body() {
        let r = Rec {
            t_us: 1_700_000_000_000_000,
            lat_us: 1234,
            gw: 3,
            key: 17,
            ip: 99,
            route: 2,
            status: 429,
            dim: Dim::Global,
        };
        assert_eq!(r.to_string().parse::<Rec>().unwrap(), r);
        assert_eq!(
            Dim::from_body(br#"{"type":"about:blank","dimension":"endpoint","x":1}"#),
            Dim::Endpoint
        );
        assert_eq!(Dim::from_body(b"bad gateway"), Dim::Other);
    }
}
