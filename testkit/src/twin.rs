//! The Lua twin's assembly: `lua/rl.lua` is built from `lua/src/*.lua` and tables generated
//! from the core's registry (algorithms, tags, names, parameter ranges, options, UPTO), so
//! the twin cannot drift from the module on any of them.
//!
//! `lua/src/frame.lua` is the shipped file's skeleton (header, `build()`, the entry point);
//! its line `-- @SECTIONS@` becomes the generated tables, then every shared section in
//! [`SHARED`] order, then one section per algorithm of the registry, named after its label
//! (`token bucket` -> `lua/src/token_bucket.lua`), then `lua/src/commands.lua` and
//! `lua/src/force.lua` (every rate limiter's `FORCE`). Adding an algorithm is its registry
//! line plus its Lua file (and its `force` in `force.lua`). `cargo run -p redis-rl-testkit --bin
//! rl-lua` (`make lua`) rewrites `lua/rl.lua`; a test fails while it is stale.

use redis_rl_core::algorithm::Opt;
use redis_rl_core::limits::{Range, COST, MAX_COUNT, MAX_DURATION_MS};
use redis_rl_core::{concurrency, throttle, Kind};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Sections every command needs, in load order.
pub const SHARED: &[&str] = &["args", "storage", "bignum", "varint", "fast"];

/// The repository's `lua/` directory.
pub fn lua_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("lua")
}

/// The file an algorithm's section is in (its label in snake case).
pub fn section_name(kind: Kind) -> String {
    kind.name().to_ascii_lowercase().replace(' ', "_")
}

fn range(r: &Range) -> String {
    format!("{{ {:?}, {}, {} }}", r.name, r.min, r.max)
}

fn option(o: &Opt) -> String {
    let r = &o.range;
    format!(
        "{{ token = {:?}, value = {:?}, {:?}, {}, {} }}",
        o.token, o.value, r.name, r.min, r.max
    )
}

/// `A, B or C`, as the module's error texts list alternatives.
fn listed(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.to_string(),
        None => String::new(),
    }
}

/// The generated tables (Lua, not indented).
pub fn tables() -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "-- Generated from core/src/registry.rs by `make lua`: edit the registry, not this."
    );
    let _ = writeln!(w, "M.MAX_COUNT = {MAX_COUNT}");
    let _ = writeln!(w, "M.MAX_DURATION_MS = {MAX_DURATION_MS}");
    let _ = writeln!(w, "M.COST = {}", range(&COST));
    let _ = writeln!(
        w,
        "M.THROTTLE = {{ {}, {}, {}, {} }}",
        range(&throttle::MAX_BURST),
        range(&throttle::COUNT),
        range(&throttle::PERIOD_S),
        range(&throttle::QUANTITY)
    );
    let _ = writeln!(w, "M.MAX_ID_LEN = {}", concurrency::MAX_ID_LEN);
    let _ = writeln!(
        w,
        "-- Every algorithm by its tag byte: name in texts, spec word, section, ranges."
    );
    let _ = writeln!(w, "M.KINDS = {{");
    for &kind in Kind::ALL {
        let tag = char::from(kind.tag());
        let params: Vec<String> = kind.params().iter().map(range).collect();
        let options: Vec<String> = kind.options().iter().map(option).collect();
        let _ = writeln!(
            w,
            "  {tag} = {{ tag = {tag:?}, name = {:?}, spec = {:?}, section = {:?}, limiter = {}, upto = {},\n    params = {{ {} }},\n    options = {{ {} }} }},",
            kind.name(),
            kind.spec_name(),
            section_name(kind),
            Kind::LIMITERS.contains(&kind),
            kind.upto(),
            params.join(", "),
            options.join(", "),
        );
    }
    let _ = writeln!(w, "}}");
    let limiters: Vec<String> = Kind::LIMITERS
        .iter()
        .map(|k| format!("{:?}", char::from(k.tag()).to_string()))
        .collect();
    let _ = writeln!(
        w,
        "-- The rate limiters (RL.ALL and RL.REFUND specs), in the order texts list them."
    );
    let _ = writeln!(w, "M.LIMITERS = {{ {} }}", limiters.join(", "));
    let words: Vec<&str> = Kind::LIMITERS.iter().map(|k| k.spec_name()).collect();
    let _ = writeln!(w, "M.ALGORITHMS = {:?}", listed(&words));
    out
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("  {l}\n")
            }
        })
        .collect()
}

fn read(dir: &Path, name: &str) -> String {
    let path = dir.join("src").join(format!("{name}.lua"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `lua/rl.lua` as it should be, from `lua/src` and the registry.
pub fn assemble() -> String {
    let dir = lua_dir();
    let frame = read(&dir, "frame");
    let mut body = indent(&tables());
    let sections = SHARED
        .iter()
        .map(|s| s.to_string())
        .chain(Kind::ALL.iter().map(|&k| section_name(k)))
        .chain(["commands", "force"].map(String::from));
    for name in sections {
        let text = read(&dir, &name);
        let _ = write!(body, "\n  -- {}\n", "-".repeat(90));
        let _ = writeln!(body, "  -- lua/src/{name}.lua");
        body.push_str(&indent(&text));
    }
    let marker = "  -- @SECTIONS@\n";
    assert!(
        frame.contains(marker),
        "lua/src/frame.lua has no `{}` line",
        marker.trim()
    );
    frame.replacen(marker, &body, 1)
}
