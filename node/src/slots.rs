//! Keys by cluster hash slot: on a cluster, `checkAll` sends one `RL.ALL` per slot (a
//! multi-key command must stay in one slot, even on a node holding every slot), as the Rust
//! and Python clients do.

use napi_derive::napi;

/// The indexes of `keys` grouped by hash slot (each key's `{tag}` when it has one), slots in
/// the order of their first key.
#[napi]
pub fn slot_groups(keys: Vec<String>) -> Vec<Vec<u32>> {
    let mut groups: Vec<(u16, Vec<u32>)> = Vec::new();
    for (i, key) in (0u32..).zip(&keys) {
        let slot = redis::cluster_routing::get_slot(key.as_bytes());
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, members)) => members.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}
