mod common;
use common::*;

#[test]
fn module_loads_and_answers() {
    let server = Server::start();
    let mut c = server.client();
    assert_eq!(
        ints(&mut c, &["RL.TOKENBUCKET", "k", "10", "10", "1000"]),
        vec![1, 10, 9, 0, 100]
    );
    assert_eq!(
        error(&mut c, &["RL.SLIDING", "k", "10", "1000"]),
        "ERR key holds a token bucket limiter, not a sliding window limiter"
    );
}
