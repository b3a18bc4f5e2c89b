//! Prints the registry as data ([`redis_rl_core::export`]): a Lua table (`lua`, the
//! default) for the Lua twin, or JSON (`json`).
//!
//! ```text
//! cargo run -q -p redis-rl-core --example registry -- lua
//! ```

fn main() {
    let format = std::env::args().nth(1).unwrap_or_else(|| "lua".to_string());
    match format.as_str() {
        "lua" => print!("{}", redis_rl_core::export::lua()),
        "json" => println!("{}", redis_rl_core::export::json()),
        other => {
            eprintln!("usage: registry [lua|json] (not {other:?})");
            std::process::exit(2);
        }
    }
}
