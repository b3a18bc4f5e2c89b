//! The traffic model, shared by the load (what to send) and the analysis (which limits a
//! request met): API keys ranked by popularity (Zipf) with a tier each, client IPs (Zipf),
//! endpoints (fixed weights).

/// The tiers of the gateway's configuration, as `rl:tiers` names them.
pub const TIERS: [&str; 3] = ["free", "pro", "enterprise"];

/// The endpoints: (route pattern as the gateway's `--route` names it, weight, path prefix).
/// The path is the prefix plus a number, so `{id}` routes see many paths.
pub const ROUTES: [(&str, u32, &str); 3] = [
    ("/api/items/{id}", 6, "/api/items/"),
    ("/api/search", 3, "/api/search?q="),
    ("/api/users/{id}", 1, "/api/users/"),
];

/// The API key of rank `i` (0 is the most popular).
pub fn api_key(i: u32) -> String {
    format!("fleet-key-{i}")
}

/// The tier of the key of rank `i`: one in ten enterprise (the heaviest user is one), three
/// in ten pro, the rest free.
pub fn tier(i: u32) -> &'static str {
    match i % 10 {
        0 => TIERS[2],
        1..=3 => TIERS[1],
        _ => TIERS[0],
    }
}

/// The client IP of rank `j`: 10.x.y.z, distinct for every `j` below 2^24.
pub fn ip(j: u32) -> String {
    format!("10.{}.{}.{}", (j >> 16) & 255, (j >> 8) & 255, j & 255)
}

/// The workspace's seeded generator (splitmix64), so a run can be replayed.
pub use redis_rl_testkit::Rng;

/// A discrete distribution over `0..n` by cumulative weights (Zipf ranks, route weights).
pub struct Discrete {
    cdf: Vec<f64>,
}

impl Discrete {
    /// Zipf over ranks `0..n`: P(i) proportional to 1 / (i + 1)^s.
    pub fn zipf(n: u32, s: f64) -> Discrete {
        Discrete::weights((0..n.max(1)).map(|i| 1.0 / f64::from(i + 1).powf(s)))
    }

    pub fn weights(weights: impl IntoIterator<Item = f64>) -> Discrete {
        let mut total = 0.0;
        let mut cdf: Vec<f64> = weights
            .into_iter()
            .map(|w| {
                total += w;
                total
            })
            .collect();
        for c in &mut cdf {
            *c /= total;
        }
        Discrete { cdf }
    }

    /// P(i).
    pub fn p(&self, i: u32) -> f64 {
        let i = i as usize;
        let below = if i == 0 { 0.0 } else { self.cdf[i - 1] };
        self.cdf.get(i).map_or(0.0, |c| c - below)
    }

    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.unit();
        let i = self.cdf.partition_point(|&c| c <= u);
        u32::try_from(i.min(self.cdf.len() - 1)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_ranks_are_ordered_and_sum_to_one() {
        let z = Discrete::zipf(100, 1.0);
        let total: f64 = (0..100).map(|i| z.p(i)).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!(z.p(0) > z.p(1) && z.p(1) > z.p(50));
        assert!((z.p(0) / z.p(1) - 2.0).abs() < 1e-9);
        let mut rng = Rng::new(7);
        let mut counts = [0u32; 100];
        for _ in 0..20_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        assert!(counts[0] > counts[1] && counts[1] > counts[9]);
    }

    #[test]
    fn tiers_and_names() {
        assert_eq!(tier(0), "enterprise");
        assert_eq!(tier(2), "pro");
        assert_eq!(tier(7), "free");
        assert_eq!(ip(0x01_02_03), "10.1.2.3");
        assert_eq!(api_key(3), "fleet-key-3");
    }
}
