use super::*;
use crate::engine::Admission;
use crate::schema::Config;

const TOML: &str = r#"
dimensions = ["ip"]
[[rules]]
name = "tokens"
paths = ["/v1/chat"]
key = ["ip"]
limits = ["100000/minute", "5000000/month"]
cost = "header:X-Max-Tokens"
settle = "response-header:X-Tokens-Used"
"#;

fn booking(toml: &str, headers: &[(&str, &str)]) -> Result<Booking, Response> {
    let engine = Engine::new(Config::from_toml(toml).unwrap(), &[]).unwrap();
    let headers: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
    let req = Request {
        method: "POST",
        path: "/v1/chat",
        host: None,
        headers: &headers,
        peer: Some("192.0.2.1".parse().unwrap()),
        route: None,
    };
    let Admission::Limit(id) = engine.admit(&req, "rid") else {
        panic!()
    };
    let plan = engine.plan(&req, &id, None);
    engine.booking(&req, &plan, "rid")
}

#[test]
fn a_rule_reserves_its_header_and_the_dimensions_one_unit() {
    let b = booking(TOML, &[("x-max-tokens", " 4096 ")]).unwrap();
    assert_eq!(b.units, [1, 4096, 4096]);
    let h = Some("x-tokens-used".to_string());
    assert_eq!(b.settle, [None, h.clone(), h]);
    assert!(b.settles());
    assert_eq!(b.uniform(), None);
    // Without the header: one unit.
    let b = booking(TOML, &[]).unwrap();
    assert_eq!(b.units, [1, 1, 1]);
    assert_eq!(b.uniform(), Some(1));
}

#[test]
fn a_bad_cost_header_is_a_400_naming_it() {
    for bad in [
        "0",
        "-3",
        "1e3",
        "12a",
        "",
        "1000000000000001",
        "99999999999999999999",
    ] {
        let r = booking(TOML, &[("x-max-tokens", bad)]).unwrap_err();
        assert_eq!(r.status, 400, "{bad:?}");
        assert!(
            r.body.contains(
                "header x-max-tokens must be one positive integer up to 1000000000000000"
            ),
            "{}",
            r.body
        );
    }
    let two = booking(TOML, &[("x-max-tokens", "5"), ("x-max-tokens", "6")]).unwrap_err();
    assert_eq!(two.status, 400);
    let same = booking(TOML, &[("x-max-tokens", "5"), ("x-max-tokens", "5")]).unwrap();
    assert_eq!(same.units[1], 5);
}

#[test]
fn the_response_header_settles_either_way_and_a_missing_one_keeps_the_reservation() {
    let b = booking(TOML, &[("x-max-tokens", "100")]).unwrap();
    let of = |v: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
        v.iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    };
    let used = |v: &str| b.settlement(&of(&[("X-Tokens-Used", v)]));
    let r = Adjust::Refund(60);
    assert_eq!(
        used("40"),
        (
            vec![Adjust::Keep, r, r],
            vec![("x-tokens-used".to_string(), SettleOutcome::Refund)]
        )
    );
    assert_eq!(
        used("0").0,
        [Adjust::Keep, Adjust::Refund(100), Adjust::Refund(100)]
    );
    assert_eq!(
        used("130").0,
        [Adjust::Keep, Adjust::Charge(30), Adjust::Charge(30)]
    );
    assert_eq!(used("100").1[0].1, SettleOutcome::Exact);
    for garbage in ["lots", "-1", "4.5", "1000000000000001"] {
        let (adjust, outcomes) = used(garbage);
        assert_eq!(adjust, [Adjust::Keep; 3], "{garbage}");
        assert_eq!(outcomes[0].1, SettleOutcome::Invalid);
    }
    let (adjust, outcomes) = b.settlement(&of(&[]));
    assert_eq!(adjust, [Adjust::Keep; 3]);
    assert_eq!(outcomes[0].1, SettleOutcome::Missing);
}

#[test]
fn cost_and_settle_name_a_header() {
    for (field, expected) in [
        ("cost = \"x-max\"", "cost: expected \"header:<name>\""),
        (
            "cost = \"header:a b\"",
            "cost: \"a b\" is not a valid header name",
        ),
        (
            "settle = \"header:x\"",
            "settle: expected \"response-header:<name>\"",
        ),
        (
            "settle = \"response-header:\"",
            "settle: \"\" is not a valid header name",
        ),
    ] {
        let text = format!("[[rules]]\nname = \"a\"\nkey = [\"ip\"]\nlimit = 1\n{field}");
        let err = Config::from_toml(&text).unwrap_err().to_string();
        assert!(err.contains(expected), "{field}: {err}");
    }
}
