//! The argument lists of the conformance suite, from the registry: a call of any kind that
//! admits a budget and refills nothing during a test, every refused argument list with its
//! text, and the options each command accepts.

use crate::checks::NOT_DECIMAL_INTEGERS;
use crate::cmd::ints;
use redis_rl_core::limits::{Range, Spelling, COST, MAX_DURATION_MS};
use redis_rl_core::Kind;

/// The budget of [`call`]'s parameters in the checks that do not choose one.
pub const BUDGET: u64 = 10;

/// A call of `kind` on `key` that admits `budget` units and refills none during a test:
/// every count parameter is `budget`, every duration the longest allowed, a word parameter
/// (a calendar period) its last word, an offset zero; `extra` (options) follows.
/// RL.CONCURRENCY acquires a lease named `id` (the rate limiters ignore it).
pub fn call(kind: Kind, key: &str, budget: u64, id: &str, extra: &[&str]) -> Vec<String> {
    let params: Vec<String> = kind.params().iter().map(|r| typical(r, budget)).collect();
    call_with(kind, key, &params, id, extra)
}

/// A call of `kind` on `key` with these positional parameters, then the operation words
/// the command needs (RL.CONCURRENCY's `ACQUIRE id`), then `extra`.
pub fn call_with(
    kind: Kind,
    key: &str,
    params: &[String],
    id: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut args = vec![kind.command().to_string(), key.to_string()];
    args.extend(params.iter().cloned());
    args.extend(operation(kind, id));
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The words between the parameters and the options: RL.CONCURRENCY names what it does
/// with a lease; the rate limiters need none.
pub(crate) fn operation(kind: Kind, id: &str) -> Vec<String> {
    match kind {
        Kind::Concurrency => vec!["ACQUIRE".into(), id.into()],
        _ => Vec::new(),
    }
}

/// The value [`call`] gives a parameter.
pub(crate) fn typical(range: &Range, budget: u64) -> String {
    match range.spelling {
        Spelling::Integer if range.max == MAX_DURATION_MS => range.max.to_string(),
        Spelling::Integer => budget.clamp(range.min, range.max).to_string(),
        Spelling::Offset(bias) => range.show(bias),
        Spelling::Words(words) => words.last().copied().unwrap_or_default().to_string(),
    }
}

pub(crate) fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Runs a call and returns its reply.
pub fn run(c: &mut redis::Connection, args: &[String]) -> Vec<i64> {
    ints(c, &strs(args))
}

/// Values of `range` that are refused with its range error, as the user could write them.
pub fn bad_values(range: &Range) -> Vec<String> {
    let mut bad: Vec<String> = match range.spelling {
        Spelling::Integer => {
            let mut v: Vec<String> = NOT_DECIMAL_INTEGERS.iter().map(|s| s.to_string()).collect();
            if range.min > 0 {
                v.push((range.min - 1).to_string());
            }
            v
        }
        Spelling::Offset(bias) => {
            let below = i128::from(range.min) - 1 - i128::from(bias);
            ["", "abc", "1.5", "+5", "--5", "-", "99999999999999999999"]
                .iter()
                .map(|s| s.to_string())
                .chain([below.to_string()])
                .collect()
        }
        Spelling::Words(words) => {
            let first = words.first().copied().unwrap_or("X");
            vec!["".into(), "x".into(), "1".into(), format!("{first}S")]
        }
    };
    if range.max < u64::MAX {
        bad.push(range.show(range.max + 1));
    }
    bad
}

/// What the command's unknown-option error lists: the algorithm's options, `COST n`,
/// `UPTO` where partial grants exist, `FORCE`, and `PEEK` (RL.CONCURRENCY: only `PEEK`).
pub fn accepted(kind: Kind) -> String {
    let mut words: Vec<String> = kind
        .options()
        .iter()
        .map(|o| format!("{} {}", o.token, o.value))
        .collect();
    if kind.is_limiter() {
        words.push("COST n".into());
        if kind.upto() {
            words.push("UPTO".into());
        }
        words.push("FORCE".into());
    }
    let last = "PEEK".to_string();
    if words.is_empty() {
        return last;
    }
    format!("{} or {last}", words.join(", "))
}

pub(crate) fn unknown(kind: Kind, shown: &str) -> String {
    format!("ERR unknown option '{shown}', expected {}", accepted(kind))
}

/// Every refused argument list of `kind` after the key, with its error text.
pub fn bad_argument_table(kind: Kind) -> Vec<(Vec<String>, String)> {
    let params = kind.params();
    let good: Vec<String> = params.iter().map(|r| typical(r, BUDGET)).collect();
    let with = |i: usize, v: &str| {
        let mut p = good.clone();
        p[i] = v.to_string();
        p
    };
    let tail = |p: Vec<String>, extra: &[&str]| {
        let mut args = p;
        args.extend(operation(kind, "id"));
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let mut table = Vec::new();
    for (i, range) in params.iter().enumerate() {
        for bad in bad_values(range) {
            table.push((tail(with(i, &bad), &[]), format!("ERR {}", range.error())));
        }
    }
    // Arguments are checked in order: the first bad one is reported.
    let all_bad: Vec<String> = params.iter().map(|r| bad_values(r)[1].clone()).collect();
    if let Some(first) = params.first() {
        table.push((tail(all_bad, &["FOO"]), format!("ERR {}", first.error())));
    }
    let mut options: Vec<(&str, Range)> =
        kind.options().iter().map(|o| (o.token, o.range)).collect();
    if kind.is_limiter() {
        options.push(("COST", COST));
    }
    for (token, range) in &options {
        let lower = token.to_ascii_lowercase();
        let err = format!("ERR {}", range.error());
        for bad in bad_values(range) {
            table.push((tail(good.clone(), &[token, &bad]), err.clone()));
        }
        let missing = format!("ERR option {token} needs a value: {}", range.error());
        let v = range.show(range.min);
        for (extra, text) in [
            (vec![*token], missing.clone()),
            (vec!["PEEK", &lower], missing),
            (vec![*token, "PEEK"], err),
            (
                vec![*token, &v, &lower, &v],
                format!("ERR option {token} given more than once"),
            ),
        ] {
            table.push((tail(good.clone(), &extra), text));
        }
        let plural = format!("{token}S");
        table.push((tail(good.clone(), &[&plural, "1"]), unknown(kind, &plural)));
        table.push((
            tail(good.clone(), &[token, &v, "PEEK", "EXTRA"]),
            unknown(kind, "EXTRA"),
        ));
    }
    for (extra, text) in option_table(kind) {
        table.push((tail(good.clone(), &strs(&extra)), text));
    }
    if !kind.upto() {
        table.push((tail(good.clone(), &["UPTO"]), unknown(kind, "UPTO")));
    }
    if kind.is_limiter() {
        // Another command's operation words are options this one does not have.
        table.push((
            tail(good.clone(), &["ACQUIRE", "id"]),
            unknown(kind, "ACQUIRE"),
        ));
    } else {
        table.push((tail(good.clone(), &["COST", "1"]), unknown(kind, "COST")));
    }
    table
}

/// Unknown, repeated, incomplete and misordered options after valid parameters, and their
/// texts: those of every command, then of the rate limiters (`COST`, `FORCE`), then of
/// those with `UPTO`.
pub(crate) fn option_table(kind: Kind) -> Vec<(Vec<String>, String)> {
    let unknown = |shown: &str| unknown(kind, shown);
    let peek_twice = "ERR option PEEK given more than once".to_string();
    let forty = "X".repeat(40);
    let long = "X".repeat(41);
    let mut rows: Vec<(Vec<&str>, String)> = vec![
        (vec!["FOO"], unknown("FOO")),
        (vec!["PEEKS"], unknown("PEEKS")),
        (vec![""], unknown("")),
        (vec!["1"], unknown("1")),
        (vec![&forty], unknown(&forty)),
        (vec![&long], unknown(&format!("{forty}..."))),
        (vec!["PEEK", "PEEK"], peek_twice.clone()),
        (vec!["peek", "PEEK"], peek_twice.clone()),
        (vec!["PEEK", "FOO"], unknown("FOO")),
    ];
    let cost_missing = format!("ERR option COST needs a value: {}", COST.error());
    let cost = format!("ERR {}", COST.error());
    let cost_twice = "ERR option COST given more than once".to_string();
    let force_twice = "ERR option FORCE given more than once".to_string();
    let upto_twice = "ERR option UPTO given more than once".to_string();
    let exclusive = "ERR options UPTO and FORCE cannot be combined".to_string();
    if kind.is_limiter() {
        rows.extend([
            (vec!["COSTS", "1"], unknown("COSTS")),
            (vec!["cost"], cost_missing.clone()),
            (vec!["COST", "1", "cost", "2"], cost_twice.clone()),
            (vec!["COST", "1", "PEEK", "COST"], cost_twice),
            (vec!["PEEK", "COST", "1", "PEEK"], peek_twice),
            (vec!["FOO", "COST"], unknown("FOO")),
            (vec!["COST", "x", "FOO"], cost.clone()),
            (vec!["FORCES"], unknown("FORCES")),
            (vec!["FORCE", "1"], unknown("1")),
            (vec!["FORCE", "FORCE"], force_twice.clone()),
            (vec!["force", "COST", "2", "Force"], force_twice),
            (vec!["FORCE", "COST", "x"], cost.clone()),
        ]);
    }
    if kind.upto() {
        rows.extend([
            (vec!["UPTOS"], unknown("UPTOS")),
            (vec!["UP", "TO"], unknown("UP")),
            (vec!["UPTO", "5"], unknown("5")),
            (vec!["COST", "UPTO"], cost.clone()),
            (vec!["UPTO", "COST"], cost_missing),
            (vec!["UPTO", "UPTO"], upto_twice.clone()),
            (vec!["upto", "COST", "2", "Upto"], upto_twice.clone()),
            (vec!["UPTO", "PEEK", "UPTO"], upto_twice),
            (vec!["UPTO", "COST", "1000000000000001"], cost),
            (vec!["FORCE", "UPTO"], exclusive.clone()),
            (vec!["UPTO", "COST", "3", "FORCE"], exclusive),
        ]);
    }
    rows.into_iter()
        .map(|(extra, text)| (extra.iter().map(|s| s.to_string()).collect(), text))
        .collect()
}

/// Options a command accepts in any order and case (each call made a PEEK): its own
/// options at their smallest value, then `COST`, `FORCE` and `UPTO` where it has them.
pub(crate) fn accepted_options(kind: Kind) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = vec![vec!["PEEK".into()], vec!["peek".into()]];
    for opt in kind.options() {
        let v = opt.range.show(opt.range.min);
        rows.push(vec![
            opt.token.to_ascii_lowercase(),
            v.clone(),
            "Peek".into(),
        ]);
        rows.push(vec!["PEEK".into(), opt.token.into(), v]);
    }
    let mut words: Vec<&[&str]> = Vec::new();
    if kind.is_limiter() {
        words.extend([
            &["PEEK", "COST", "2"][..],
            &["Cost", "2", "pEeK"],
            &["COST", "0", "PEEK"],
            &["FORCE", "PEEK"],
            &["COST", "1000000000000000", "force", "PEEK"],
        ]);
    }
    if kind.upto() {
        words.extend([
            &["UPTO", "PEEK"][..],
            &["COST", "5", "UPTO", "PEEK"],
            &["upto", "peek", "cost", "0"],
            &["UPTO", "COST", "1000000000000000", "PEEK"],
        ]);
    }
    rows.extend(
        words
            .iter()
            .map(|w| w.iter().map(|s| s.to_string()).collect()),
    );
    rows
}
